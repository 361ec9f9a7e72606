// The pool's host-only bookkeeping (runtime/src/sub_allocator.h): best fit, splitting and
// merging, the stream tags that order reuse, regions, and address lookup. Addresses are plain
// integers: no memory is touched.
#include <doctest/doctest.h>

#include "plan.h"
#include "sub_allocator.h"

using autovm::rt::Error;
using autovm::rt::SubAllocator;

namespace {
constexpr SubAllocator::Tag kStreamA = 0x1000;
constexpr SubAllocator::Tag kStreamB = 0x2000;
constexpr uintptr_t kBase = 0x100000;
}  // namespace

TEST_CASE("sizes round up to 512 bytes; 1 byte and 0 bytes take one unit") {
  SubAllocator pool;
  pool.add_region(kBase, 8192);
  auto a = pool.allocate(1, kStreamA);
  auto b = pool.allocate(0, kStreamA);
  auto c = pool.allocate(513, kStreamA);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(a->address == kBase);
  CHECK(a->bytes == 512);
  CHECK(b->address == kBase + 512);
  CHECK(c->address == kBase + 1024);
  CHECK(c->bytes == 1024);
  CHECK(pool.allocated_bytes() == 2048);
  CHECK(pool.requested_bytes() == 1 + 1 + 513);
  CHECK(pool.allocation_count() == 3);
  CHECK_FALSE(pool.allocate(8192, kStreamA));  // 6144 left
  CHECK_FALSE(pool.allocate(~uint64_t{0} - 10, kStreamA));
}

TEST_CASE("best fit takes the smallest free block that holds the request") {
  SubAllocator pool;
  pool.add_region(kBase, 10 * 512);
  // | a 2 | b 1 | c 3 | d 1 | rest 3 |, then free a and c: holes of 2 and 3 units.
  auto a = pool.allocate(2 * 512, kStreamA);
  auto b = pool.allocate(512, kStreamA);
  auto c = pool.allocate(3 * 512, kStreamA);
  auto d = pool.allocate(512, kStreamA);
  REQUIRE((a && b && c && d));
  pool.free(a->address, kStreamA);
  pool.free(c->address, kStreamA);
  auto e = pool.allocate(3 * 512, kStreamA);  // fits c's hole (3) and the rest (3): lower address
  REQUIRE(e);
  CHECK(e->address == c->address);
  auto f = pool.allocate(2 * 512, kStreamA);  // a's hole exactly
  REQUIRE(f);
  CHECK(f->address == a->address);
  CHECK(pool.largest_free_block() == 3 * 512);
}

TEST_CASE("freed neighbours merge; a block in use between them keeps them apart") {
  SubAllocator pool;
  pool.add_region(kBase, 4 * 512);
  auto a = pool.allocate(512, kStreamA);
  auto b = pool.allocate(512, kStreamA);
  auto c = pool.allocate(512, kStreamA);
  auto d = pool.allocate(512, kStreamA);
  REQUIRE((a && b && c && d));
  pool.free(a->address, kStreamA);
  pool.free(c->address, kStreamA);
  CHECK(pool.largest_free_block() == 512);
  pool.free(b->address, kStreamA);  // a, b, c merge
  CHECK(pool.largest_free_block() == 3 * 512);
  pool.free(d->address, kStreamA);
  CHECK(pool.largest_free_block() == 4 * 512);
  auto whole = pool.allocate(4 * 512, kStreamA);
  REQUIRE(whole);
  CHECK(whole->address == kBase);
}

TEST_CASE("a block freed on one stream is reused by that stream first, by others after a wait") {
  SubAllocator pool;
  pool.add_region(kBase, 4 * 512);
  auto a = pool.allocate(2 * 512, kStreamA);
  REQUIRE(a);
  CHECK(a->after == SubAllocator::kAnyStream);  // fresh memory: no wait
  pool.free(a->address, kStreamA);

  SUBCASE("the same stream: no wait, and its own block before untouched memory") {
    auto again = pool.allocate(512, kStreamA);
    REQUIRE(again);
    CHECK(again->address == kBase);
    CHECK(again->after == kStreamA);
  }
  SUBCASE("another stream: A's block, merged with the untouched rest, after a wait on A") {
    auto b = pool.allocate(4 * 512, kStreamB);
    REQUIRE(b);
    CHECK(b->address == kBase);
    CHECK(b->after == kStreamA);
  }
  SUBCASE("blocks of different tags do not merge until retag_free") {
    auto b = pool.allocate(2 * 512, kStreamB);  // the head of A's block, after a wait on A
    REQUIRE(b);
    auto a2 = pool.allocate(2 * 512, kStreamA);  // the tail, still A's
    REQUIRE(a2);
    CHECK(a2->after == kStreamA);
    pool.free(b->address, kStreamB);
    pool.free(a2->address, kStreamA);
    CHECK(pool.largest_free_block() == 2 * 512);
    CHECK_FALSE(pool.allocate(4 * 512, kStreamA));
    pool.retag_free();
    CHECK(pool.largest_free_block() == 4 * 512);
    auto whole = pool.allocate(4 * 512, kStreamB);
    REQUIRE(whole);
    CHECK(whole->after == SubAllocator::kAnyStream);
  }
}

TEST_CASE("allocations never span regions; unused regions can be removed") {
  SubAllocator pool;
  pool.add_region(kBase, 2 * 512);
  pool.add_region(kBase + 2 * 512, 2 * 512);  // adjacent, still separate
  auto a = pool.allocate(512, kStreamA);
  REQUIRE(a);
  CHECK_FALSE(pool.allocate(3 * 512, kStreamA));
  CHECK(pool.unused_regions().size() == 1);
  CHECK(pool.unused_regions()[0].base == kBase + 2 * 512);
  CHECK_THROWS_AS(pool.remove_region(kBase), Error);
  pool.remove_region(kBase + 2 * 512);
  CHECK(pool.region_bytes() == 2 * 512);
  CHECK_FALSE(pool.allocate(2 * 512, kStreamA));
  pool.free(a->address, kStreamA);
  CHECK(pool.allocate(2 * 512, kStreamA));
}

TEST_CASE("find gives the allocation an address lies in, by the bytes asked for") {
  SubAllocator pool;
  pool.add_region(kBase, 8 * 512);
  auto a = pool.allocate(1000, kStreamA);  // block of 1024
  auto b = pool.allocate(512, kStreamA);
  REQUIRE((a && b));
  auto in_a = pool.find(kBase + 999);
  REQUIRE(in_a);
  CHECK(in_a->address == kBase);
  CHECK(in_a->requested == 1000);
  CHECK(in_a->bytes == 1024);
  CHECK_FALSE(pool.find(kBase + 1000));  // padding after the request
  auto in_b = pool.find(kBase + 1024);
  REQUIRE(in_b);
  CHECK(in_b->address == kBase + 1024);
  CHECK_FALSE(pool.find(kBase - 1));
  CHECK_FALSE(pool.find(kBase + 4096));  // free
  pool.free(a->address, kStreamA);
  CHECK_FALSE(pool.find(kBase));
}

TEST_CASE("misuse is reported, naming the address") {
  SubAllocator pool;
  CHECK_THROWS_AS(pool.add_region(kBase + 1, 512), Error);
  pool.add_region(kBase, 4 * 512);
  CHECK_THROWS_WITH_AS(pool.add_region(kBase + 512, 512), doctest::Contains("overlaps"), Error);
  auto a = pool.allocate(512, kStreamA);
  REQUIRE(a);
  CHECK_THROWS_WITH_AS(pool.free(kBase + 512, kStreamA), doctest::Contains("0x100200"), Error);
  pool.free(a->address, kStreamA);
  CHECK_THROWS_AS(pool.free(a->address, kStreamA), Error);  // twice
}
