// Contract: the blocks PyTorch's CUDA caching allocator hands out (c10/cuda/
// CUDACachingAllocator.cpp, default settings), simulated over a sequence of requests and frees.
// torch.cuda.max_memory_allocated counts each live block's size, which can exceed the request;
// by how much depends on what is free when the request comes, so the PyTorch memory model
// (pytorch_memory.h) replays its requests through this instead of rounding each alone.
//
//   rounding   a request of n bytes asks for n rounded up to a multiple of 512 (at least 512)
//   pools      small: asks up to 1 MiB, from segments of 2 MiB; large: the rest, from segments
//              of 20 MiB for asks under 10 MiB, else from a segment of the ask rounded up to
//              2 MiB
//   best fit   the free block of the ask's pool with the least size that holds it (ties: the
//              lower address); none: a new segment
//   split      the rest of that block becomes a free block of its own when it is at least
//              512 B (small pool) or more than 1 MiB (large pool); else the whole block is
//              the allocation, and counts whole
//   free       a freed block merges with the free blocks beside it in its segment; segments
//              stay cached (no empty_cache), so a later step finds the layout an earlier left
// One stream (a training step allocates on one); no expandable segments, no max_split_size.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace autovm {

class CachingAllocator {
 public:
  // A block for `bytes` (> 0); returns its handle.
  int allocate(int64_t bytes);
  // The size of live block `handle`: what max_memory_allocated counts for it.
  int64_t block_bytes(int handle) const;
  void free(int handle);
  // Frees every live block (a training step's end: every tensor of the step released).
  void free_all();
  int64_t allocated_bytes() const { return allocated_; }  // SUM: live blocks' sizes
  int64_t segment_bytes() const { return segment_end_; }  // SUM: segments made (reserved)

 private:
  struct Block {
    int64_t size = 0;
    int64_t segment_begin = 0, segment_end = 0;  // its segment: [begin, end)
    bool small = false;
    bool free = true;
  };
  using FreeKey = std::tuple<bool, int64_t, int64_t>;  // small pool, size, address
  void insert_free(int64_t address);
  void erase_free(int64_t address);

  std::map<int64_t, Block> blocks_;  // by address: every block, live or free
  std::set<FreeKey> free_;           // the free blocks, best fit first
  std::vector<int64_t> handles_;     // [handle] its block's address; -1 once freed
  int64_t allocated_ = 0;
  int64_t segment_end_ = 0;          // the next segment's address
};

}  // namespace autovm
