// The caching allocator's blocks (analysis/caching_allocator.h), sizes worked out by hand from
// its rules: rounding, the two pools and their segments, best fit, the split thresholds, and
// merging on free.
#include <doctest/doctest.h>

#include "analysis/caching_allocator.h"

using namespace autovm;

namespace {
constexpr int64_t kMiB = int64_t(1) << 20;
}

TEST_CASE("requests round up to 512 B; the small pool splits its 2 MiB segments") {
  CachingAllocator c;
  int a = c.allocate(1);     // 512
  int b = c.allocate(1000);  // 1024
  CHECK(c.block_bytes(a) == 512);
  CHECK(c.block_bytes(b) == 1024);
  CHECK(c.allocated_bytes() == 1536);
  CHECK(c.segment_bytes() == 2 * kMiB);  // one small segment holds both
  int d = c.allocate(kMiB);  // 1 MiB is still small: the same segment's rest
  CHECK(c.block_bytes(d) == kMiB);
  CHECK(c.segment_bytes() == 2 * kMiB);
}

TEST_CASE("the small pool keeps a rest under 512 B in the block") {
  CachingAllocator c;
  int a = c.allocate(2 * kMiB - 1024);  // large pool (over 1 MiB): a 20 MiB segment
  CHECK(c.segment_bytes() == 20 * kMiB);
  c.free(a);
  // Small segment: 2 MiB; 1 MiB taken, then 1 MiB - 512 leaves 512 B: split off (>= 512).
  int s1 = c.allocate(kMiB);
  int s2 = c.allocate(kMiB - 512);
  CHECK(c.block_bytes(s1) == kMiB);
  CHECK(c.block_bytes(s2) == kMiB - 512);
  CHECK(c.segment_bytes() == 22 * kMiB);
  int s3 = c.allocate(256);  // the 512 B rest, exactly
  CHECK(c.block_bytes(s3) == 512);
  CHECK(c.segment_bytes() == 22 * kMiB);
}

TEST_CASE("the large pool gives the whole block when the rest is 1 MiB or less") {
  CachingAllocator c;
  // 20 MiB segment: 9 MiB, then 10 MiB - 512... no: asks under 10 MiB only.
  int a = c.allocate(9 * kMiB);   // rest 11 MiB: split
  int b = c.allocate(10 * kMiB - 512);  // the 11 MiB rest: rest 1 MiB + 512 B > 1 MiB: split
  CHECK(c.block_bytes(a) == 9 * kMiB);
  CHECK(c.block_bytes(b) == 10 * kMiB - 512);
  CHECK(c.segment_bytes() == 20 * kMiB);
  int d = c.allocate(kMiB + 512);  // the rest, 1 MiB + 512 B, exactly (small pool? no: > 1 MiB)
  CHECK(c.block_bytes(d) == kMiB + 512);
  c.free(b);
  // Best fit for 9 MiB + 512 among the free blocks (only b's 10 MiB - 512): rest 1 MiB - 1024
  // is not more than 1 MiB, so the whole block counts.
  int e = c.allocate(9 * kMiB + 512);
  CHECK(c.block_bytes(e) == 10 * kMiB - 512);
  CHECK(c.allocated_bytes() == 9 * kMiB + (10 * kMiB - 512) + kMiB + 512);
}

TEST_CASE("asks of 10 MiB or more: a segment of their own, rounded up to 2 MiB") {
  CachingAllocator c;
  int a = c.allocate(11 * kMiB);  // a 12 MiB segment; the 1 MiB rest is not split off
  CHECK(c.block_bytes(a) == 12 * kMiB);
  CHECK(c.segment_bytes() == 12 * kMiB);
  int b = c.allocate(13 * kMiB - 512);  // 14 MiB segment, rest 1 MiB + 512 B: split
  CHECK(c.block_bytes(b) == 13 * kMiB - 512);
  c.free(a);
  // The freed 12 MiB block is the best fit for 10.5 MiB (rest 1.5 MiB: split).
  int d = c.allocate(10 * kMiB + kMiB / 2);
  CHECK(c.block_bytes(d) == 10 * kMiB + kMiB / 2);
  CHECK(c.segment_bytes() == 26 * kMiB);
}

TEST_CASE("best fit: the smallest free block that holds the ask, the lower address on a tie") {
  CachingAllocator c;
  int a = c.allocate(4 * kMiB);
  int gap1 = c.allocate(2 * kMiB);
  int b = c.allocate(3 * kMiB);
  int gap2 = c.allocate(2 * kMiB);
  int d = c.allocate(3 * kMiB);
  (void)gap1;
  (void)gap2;
  c.free(a);  // free: 4 MiB at 0, 3 MiB, 3 MiB, and the segment's rest (6 MiB)
  c.free(b);
  c.free(d);  // d merges with the rest: 9 MiB
  int e = c.allocate(3 * kMiB);  // the 3 MiB block (b's), not the 4 MiB one
  CHECK(c.block_bytes(e) == 3 * kMiB);
  int f = c.allocate(3 * kMiB + kMiB / 2);  // 4 MiB block, rest 0.5 MiB: the whole block
  CHECK(c.block_bytes(f) == 4 * kMiB);
  CHECK(c.segment_bytes() == 20 * kMiB);
}

TEST_CASE("freed neighbours merge, and free_all leaves whole segments for the next step") {
  CachingAllocator c;
  int a = c.allocate(6 * kMiB);
  int b = c.allocate(6 * kMiB);
  int d = c.allocate(6 * kMiB);  // rest 2 MiB
  c.free(a);
  c.free(d);
  c.free(b);  // a, b, d and the rest: one 20 MiB block again
  int e = c.allocate(19 * kMiB);  // fits only if merged; rest 1 MiB: the whole 20 MiB
  CHECK(c.block_bytes(e) == 20 * kMiB);
  CHECK(c.segment_bytes() == 20 * kMiB);
  c.allocate(kMiB);  // small pool: a segment of its own
  c.free_all();
  CHECK(c.allocated_bytes() == 0);
  int f = c.allocate(19 * kMiB);  // the cached segment, whole
  CHECK(c.block_bytes(f) == 20 * kMiB);
  CHECK(c.segment_bytes() == 22 * kMiB);
}
