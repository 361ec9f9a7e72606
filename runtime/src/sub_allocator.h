// Contract: the bookkeeping of a stream-ordered memory pool, with no CUDA in it (host-only, so
// it is tested without a GPU). The owner adds regions [base, base + bytes) of memory it got in
// bulk; allocations are carved best-fit out of free blocks, aligned to kAlignment, and never
// span two regions. find() says which live allocation an address lies in.
//
// Stream order. A freed block keeps as its tag the stream it was freed on. That stream may reuse
// it at once: its later work runs after the work that used the block. Another stream may take it
// only once it is ordered after the tag's stream; allocate() then returns the block's tag in
// Taken::after, and the owner makes the allocating stream wait for the tag's stream (an event
// recorded there now, so the wait covers every use enqueued before the free). kAnyStream tags
// memory no queued work can touch: never used, or free when the owner synchronised the device
// (retag_free). Free neighbours merge when they share a tag, and kAnyStream memory merges into a
// neighbour of any tag (the merged block takes that tag: fewer, larger blocks for the stream
// that freed it, at the price of a wait for another stream that takes the untouched part).
//
//   region  [ a: in use | free, tag s | b: in use |        free, kAnyStream        ]
//   allocate(n, t): the smallest free block of n or more bytes tagged t, else tagged kAnyStream,
//   else tagged any other stream (lowest address among equals); its head is taken, the tail
//   stays free with the block's tag.
//
// Misuse (a free of an address that is not a live allocation, overlapping regions) throws
// rt::Error(AUTOVM_ERR_INVALID_ARGUMENT) naming the address.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace autovm::rt {

class SubAllocator {
 public:
  using Tag = uint64_t;  // a stream's handle as an integer
  static constexpr Tag kAnyStream = ~Tag{0};
  static constexpr uint64_t kAlignment = 512;

  struct Taken {
    uintptr_t address;
    uint64_t bytes;  // the block: the request rounded up to kAlignment
    Tag after;       // the tag the block had: the caller orders its stream after this one
                     // unless it is the caller's own stream or kAnyStream
  };
  struct Allocation {
    uintptr_t address;
    uint64_t requested;  // the bytes asked for
    uint64_t bytes;      // the block
  };
  struct Region {
    uintptr_t base;
    uint64_t bytes;
  };

  // [base, base + bytes): free, tagged kAnyStream. bytes and base multiples of kAlignment.
  void add_region(uintptr_t base, uint64_t bytes);
  // Removes a region in which nothing is allocated (what unused_regions() lists).
  void remove_region(uintptr_t base);
  // Regions holding no allocation.
  std::vector<Region> unused_regions() const;

  // A block for `bytes` (at least 1) used from stream `stream`; nullopt when no free block fits.
  std::optional<Taken> allocate(uint64_t bytes, Tag stream);
  // Frees the allocation at `address`, reusable at once from `stream`. Returns it.
  Allocation free(uintptr_t address, Tag stream);
  // The live allocation holding `address` in [address, address + requested); nullopt if none.
  std::optional<Allocation> find(uintptr_t address) const;
  // Every free block becomes kAnyStream, and neighbours merge: call when no queued work can
  // touch freed memory (after a device synchronisation).
  void retag_free();

  uint64_t allocated_bytes() const { return allocated_bytes_; }    // SUM: blocks in use
  uint64_t requested_bytes() const { return requested_bytes_; }    // SUM: bytes asked for
  uint64_t allocation_count() const { return allocation_count_; }  // COUNT: live allocations
  uint64_t region_bytes() const { return region_bytes_; }          // SUM: regions added
  uint64_t largest_free_block() const;

 private:
  struct Block {
    uint64_t bytes = 0;
    uint64_t requested = 0;  // in use: the bytes asked for
    uintptr_t region = 0;    // the base of the region it lies in
    bool used = false;
    Tag tag = kAnyStream;    // free: the stream that may reuse it at once
  };
  using FreeSet = std::set<std::pair<uint64_t, uintptr_t>>;  // (bytes, address)

  void insert_free(uintptr_t address, Block block);
  void erase_free(std::map<uintptr_t, Block>::iterator it);
  // Merges the free block at `it` with free neighbours of its region and tag.
  void coalesce(std::map<uintptr_t, Block>::iterator it);
  std::optional<std::pair<uint64_t, uintptr_t>> best_in(Tag tag, uint64_t bytes) const;

  std::map<uintptr_t, Block> blocks_;   // every block, free or in use, by address
  std::map<Tag, FreeSet> free_by_tag_;  // free blocks by tag
  std::map<uintptr_t, uint64_t> regions_;         // base -> bytes
  std::map<uintptr_t, uint64_t> used_in_region_;  // base -> live allocations in it
  uint64_t allocated_bytes_ = 0;
  uint64_t requested_bytes_ = 0;
  uint64_t allocation_count_ = 0;
  uint64_t region_bytes_ = 0;
};

}  // namespace autovm::rt
