#include "analysis/caching_allocator.h"

#include <cassert>
#include <cstddef>
#include <iterator>

namespace autovm {

namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kMinBlock = 512;          // kMinBlockSize
constexpr int64_t kSmallSize = kMiB;        // the small pool's largest ask
constexpr int64_t kSmallBuffer = 2 * kMiB;  // a small segment
constexpr int64_t kLargeBuffer = 20 * kMiB; // a large segment for asks under kMinLargeAlloc
constexpr int64_t kMinLargeAlloc = 10 * kMiB;
constexpr int64_t kRoundLarge = 2 * kMiB;   // larger segments round to this

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

int CachingAllocator::allocate(int64_t bytes) {
  assert(bytes > 0);
  const int64_t ask = round_up(bytes < kMinBlock ? kMinBlock : bytes, kMinBlock);
  const bool small = ask <= kSmallSize;
  auto fit = free_.lower_bound({small, ask, INT64_MIN});
  int64_t address;
  if (fit != free_.end() && std::get<0>(*fit) == small) {
    address = std::get<2>(*fit);
    free_.erase(fit);
  } else {  // a new segment
    const int64_t size = small ? kSmallBuffer
                         : ask < kMinLargeAlloc ? kLargeBuffer
                                                : round_up(ask, kRoundLarge);
    address = segment_end_;
    segment_end_ += size;
    blocks_[address] = Block{size, address, address + size, small, true};
  }
  Block& b = blocks_.at(address);
  const int64_t rest = b.size - ask;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    blocks_[address + ask] = Block{rest, b.segment_begin, b.segment_end, small, true};
    insert_free(address + ask);
    b.size = ask;
  }
  b.free = false;
  allocated_ += b.size;
  handles_.push_back(address);
  return static_cast<int>(handles_.size()) - 1;
}

int64_t CachingAllocator::block_bytes(int handle) const {
  return blocks_.at(handles_.at(static_cast<size_t>(handle))).size;
}

void CachingAllocator::free(int handle) {
  int64_t address = handles_.at(static_cast<size_t>(handle));
  assert(address >= 0);
  handles_[static_cast<size_t>(handle)] = -1;
  auto it = blocks_.find(address);
  allocated_ -= it->second.size;
  it->second.free = true;
  // Merge with the free blocks beside it in the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free && next->first < it->second.segment_end) {
    erase_free(next->first);
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free && prev->first >= it->second.segment_begin) {
      erase_free(prev->first);
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  insert_free(it->first);
}

void CachingAllocator::free_all() {
  for (size_t h = 0; h < handles_.size(); ++h)
    if (handles_[h] >= 0) free(static_cast<int>(h));
}

void CachingAllocator::insert_free(int64_t address) {
  const Block& b = blocks_.at(address);
  free_.insert({b.small, b.size, address});
}

void CachingAllocator::erase_free(int64_t address) {
  const Block& b = blocks_.at(address);
  free_.erase({b.small, b.size, address});
}

}  // namespace autovm
