#include "sub_allocator.h"

#include <cstdio>
#include <string>

#include "plan.h"

namespace autovm::rt {
namespace {

std::string hex(uintptr_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

[[noreturn]] void misuse(const std::string& message) {
  throw Error(AUTOVM_ERR_INVALID_ARGUMENT, message);
}

}  // namespace

void SubAllocator::add_region(uintptr_t base, uint64_t bytes) {
  if (bytes == 0 || base % kAlignment != 0 || bytes % kAlignment != 0)
    misuse("pool region " + hex(base) + " of " + std::to_string(bytes) +
           " B: base and size must be non-zero multiples of " + std::to_string(kAlignment));
  auto next = regions_.lower_bound(base);
  if (next != regions_.end() && next->first < base + bytes)
    misuse("pool region " + hex(base) + " overlaps the region at " + hex(next->first));
  if (next != regions_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > base)
      misuse("pool region " + hex(base) + " overlaps the region at " + hex(prev->first));
  }
  regions_.emplace(base, bytes);
  used_in_region_[base] = 0;
  region_bytes_ += bytes;
  Block b;
  b.bytes = bytes;
  b.region = base;
  insert_free(base, b);
}

void SubAllocator::remove_region(uintptr_t base) {
  auto r = regions_.find(base);
  if (r == regions_.end()) misuse("no pool region at " + hex(base));
  if (used_in_region_[base] != 0)
    misuse("pool region " + hex(base) + " still holds allocations");
  auto it = blocks_.lower_bound(base);
  while (it != blocks_.end() && it->first < base + r->second) {
    auto next = std::next(it);
    erase_free(it);
    it = next;
  }
  region_bytes_ -= r->second;
  used_in_region_.erase(base);
  regions_.erase(r);
}

std::vector<SubAllocator::Region> SubAllocator::unused_regions() const {
  std::vector<Region> out;
  for (const auto& [base, bytes] : regions_)
    if (used_in_region_.at(base) == 0) out.push_back({base, bytes});
  return out;
}

std::optional<std::pair<uint64_t, uintptr_t>> SubAllocator::best_in(Tag tag,
                                                                    uint64_t bytes) const {
  auto set = free_by_tag_.find(tag);
  if (set == free_by_tag_.end()) return std::nullopt;
  auto it = set->second.lower_bound({bytes, 0});
  if (it == set->second.end()) return std::nullopt;
  return *it;
}

std::optional<SubAllocator::Taken> SubAllocator::allocate(uint64_t bytes, Tag stream) {
  if (bytes == 0) bytes = 1;
  const uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) return std::nullopt;  // overflow: no block is that large
  auto found = best_in(stream, rounded);
  if (!found && stream != kAnyStream) found = best_in(kAnyStream, rounded);
  if (!found) {
    for (const auto& [tag, set] : free_by_tag_) {
      if (tag == stream || tag == kAnyStream) continue;
      auto candidate = best_in(tag, rounded);
      if (candidate && (!found || *candidate < *found)) found = candidate;
    }
  }
  if (!found) return std::nullopt;

  auto it = blocks_.find(found->second);
  const Block free_block = it->second;
  erase_free(it);
  if (free_block.bytes > rounded) {
    Block tail = free_block;
    tail.bytes = free_block.bytes - rounded;
    insert_free(found->second + rounded, tail);
  }
  Block used;
  used.bytes = rounded;
  used.requested = bytes;
  used.region = free_block.region;
  used.used = true;
  blocks_.emplace(found->second, used);
  ++used_in_region_[free_block.region];
  allocated_bytes_ += rounded;
  requested_bytes_ += bytes;
  ++allocation_count_;
  return Taken{found->second, rounded, free_block.tag};
}

SubAllocator::Allocation SubAllocator::free(uintptr_t address, Tag stream) {
  auto it = blocks_.find(address);
  if (it == blocks_.end() || !it->second.used)
    misuse("free of " + hex(address) + ", which is not a live allocation of this pool");
  Block b = it->second;
  const Allocation freed{address, b.requested, b.bytes};
  blocks_.erase(it);
  --used_in_region_[b.region];
  allocated_bytes_ -= b.bytes;
  requested_bytes_ -= b.requested;
  --allocation_count_;
  b.used = false;
  b.requested = 0;
  b.tag = stream;
  insert_free(address, b);
  coalesce(blocks_.find(address));
  return freed;
}

std::optional<SubAllocator::Allocation> SubAllocator::find(uintptr_t address) const {
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) return std::nullopt;
  --it;
  const Block& b = it->second;
  if (!b.used || address >= it->first + b.requested) return std::nullopt;
  return Allocation{it->first, b.requested, b.bytes};
}

void SubAllocator::retag_free() {
  std::vector<uintptr_t> free_blocks;
  for (const auto& [address, b] : blocks_)
    if (!b.used) free_blocks.push_back(address);
  for (uintptr_t address : free_blocks) {  // all retagged first: a merge keeps no old tag
    auto it = blocks_.find(address);
    Block b = it->second;
    erase_free(it);
    b.tag = kAnyStream;
    insert_free(address, b);
  }
  for (uintptr_t address : free_blocks) {
    auto it = blocks_.find(address);
    if (it != blocks_.end()) coalesce(it);  // else merged into its predecessor already
  }
}

uint64_t SubAllocator::largest_free_block() const {
  uint64_t largest = 0;
  for (const auto& [tag, set] : free_by_tag_)
    if (!set.empty()) largest = std::max(largest, set.rbegin()->first);
  return largest;
}

void SubAllocator::insert_free(uintptr_t address, Block block) {
  block.used = false;
  free_by_tag_[block.tag].insert({block.bytes, address});
  blocks_[address] = block;
}

void SubAllocator::erase_free(std::map<uintptr_t, Block>::iterator it) {
  auto set = free_by_tag_.find(it->second.tag);
  set->second.erase({it->second.bytes, it->first});
  if (set->second.empty()) free_by_tag_.erase(set);
  blocks_.erase(it);
}

void SubAllocator::coalesce(std::map<uintptr_t, Block>::iterator it) {
  // Untouched memory (kAnyStream) joins a stream's block: the stream may use both at once, and
  // another stream waiting for the tag's stream waits a little more than it must.
  auto mergeable = [](const Block& a, const Block& b) {
    return !a.used && !b.used && a.region == b.region &&
           (a.tag == b.tag || a.tag == kAnyStream || b.tag == kAnyStream);
  };
  auto merged_tag = [](const Block& a, const Block& b) { return a.tag == kAnyStream ? b.tag : a.tag; };
  // With the next block.
  auto next = std::next(it);
  if (next != blocks_.end() && next->first == it->first + it->second.bytes &&
      mergeable(it->second, next->second)) {
    Block merged = it->second;
    merged.bytes += next->second.bytes;
    merged.tag = merged_tag(it->second, next->second);
    const uintptr_t address = it->first;
    erase_free(next);
    erase_free(blocks_.find(address));
    insert_free(address, merged);
    it = blocks_.find(address);
  }
  // With the previous one.
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.bytes == it->first && mergeable(prev->second, it->second)) {
      Block merged = prev->second;
      merged.bytes += it->second.bytes;
      merged.tag = merged_tag(prev->second, it->second);
      const uintptr_t address = prev->first;
      erase_free(it);
      erase_free(blocks_.find(address));
      insert_free(address, merged);
    }
  }
}

}  // namespace autovm::rt
