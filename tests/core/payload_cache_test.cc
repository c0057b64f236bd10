// core::PayloadCache (core/payload_cache.h): sizes round up to a quarter of a power of two, a
// buffer given back serves the next take() of its class, and the cache keeps at most `keep`
// bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/payload_cache.h"

namespace fabq::core {
namespace {

TEST(PayloadCache, SizesRoundUpToAQuarterOfTheirPowerOfTwo) {
  EXPECT_EQ(PayloadCache::class_size(8), 8u);
  EXPECT_EQ(PayloadCache::class_size(4097), 5120u);
  EXPECT_EQ(PayloadCache::class_size(5120), 5120u);
  EXPECT_EQ(PayloadCache::class_size(5121), 6144u);
  EXPECT_EQ(PayloadCache::class_size(7169), 8192u);
  EXPECT_EQ(PayloadCache::class_size(65536), 65536u);
  EXPECT_EQ(PayloadCache::class_size(65537), 81920u);
  EXPECT_EQ(PayloadCache::class_size((1u << 20) + 4097), 1310720u);
  for (size_t n = 8; n < (size_t{1} << 22); n += n / 7 + 1) {
    const size_t c = PayloadCache::class_size(n);
    EXPECT_GE(c, n);
    EXPECT_LT(c - n, n / 4 + 1) << n;
    EXPECT_EQ(PayloadCache::class_size(c), c) << "a class size is its own class";
  }
}

TEST(PayloadCache, ABufferGivenBackServesTheNextTakeOfItsClassAndNoOther) {
  PayloadCache cache(1 << 20);
  unsigned char* a = cache.take(60000);
  std::memset(a, 1, 60000);
  cache.give(a, 60000);
  EXPECT_EQ(cache.kept(), 65536u);
  unsigned char* other = cache.take(70000);  // 81920: another class
  EXPECT_NE(other, a);
  EXPECT_EQ(cache.kept(), 65536u);
  unsigned char* b = cache.take(65536);  // 65536: a's class
  EXPECT_EQ(b, a);
  EXPECT_EQ(cache.kept(), 0u);
  std::memset(b, 2, 65536);  // the whole class size is the taker's
  cache.give(b, 65536);
  cache.give(other, 70000);
  EXPECT_EQ(cache.kept(), 65536u + 81920u);
}

TEST(PayloadCache, ItKeepsAtMostItsLimitAndFreesTheRest) {
  PayloadCache cache(3 * 8192);
  std::vector<unsigned char*> taken;
  for (int i = 0; i < 5; ++i) taken.push_back(cache.take(8192));
  for (unsigned char* p : taken) cache.give(p, 8192);
  EXPECT_EQ(cache.kept(), 3u * 8192u);
  // The three kept come back; the next ones are new.
  std::vector<unsigned char*> again;
  for (int i = 0; i < 3; ++i) again.push_back(cache.take(8000));
  EXPECT_EQ(cache.kept(), 0u);
  for (unsigned char* p : again) {
    EXPECT_NE(std::find(taken.begin(), taken.end(), p), taken.end());
  }
  for (unsigned char* p : again) cache.give(p, 8000);
  // Another size given back takes the room of kept ones, which are freed.
  unsigned char* big = cache.take(2 * 8192);
  EXPECT_EQ(cache.kept(), 3u * 8192u);
  cache.give(big, 2 * 8192);
  EXPECT_EQ(cache.kept(), 3u * 8192u) << "one 16 KiB buffer and one of 8 KiB";
  EXPECT_EQ(cache.take(2 * 8192), big);
  EXPECT_EQ(cache.kept(), 8192u);
  cache.give(big, 2 * 8192);
  // Larger than the limit: freed.
  cache.give(cache.take(4 * 8192), 4 * 8192);
  EXPECT_EQ(cache.kept(), 3u * 8192u);
  PayloadCache none(0);
  unsigned char* p = none.take(10000);
  none.give(p, 10000);
  EXPECT_EQ(none.kept(), 0u);
}

}  // namespace
}  // namespace fabq::core
