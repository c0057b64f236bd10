// BoundedRing: capacity, claim/publish/peek/consume, ordering, tag bit, wrap-around.
#include "core/ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace fabq::core {
namespace {

struct alignas(kCacheLine) TestSlot {
  std::atomic<uint64_t> seq{0};
  uint64_t value = 0;
};

using Ring = BoundedRing<TestSlot>;

// Claims one slot, stores `value` in it and publishes it with `tag`. Returns its position.
uint64_t put(Ring& ring, uint64_t value, bool tag = false) {
  const std::optional<uint64_t> pos = ring.claim();
  EXPECT_TRUE(pos.has_value());
  if (!pos) return ~uint64_t{0};
  ring.at(*pos).value = value;
  ring.publish(*pos, tag);
  return *pos;
}

// Peeks the head slot and consumes it; returns its value (or nullopt if it is not readable).
std::optional<uint64_t> take(Ring& ring, bool* tag_out = nullptr) {
  bool tag = false;
  const TestSlot* s = ring.peek(ring.head(), &tag);
  if (s == nullptr) return std::nullopt;
  const uint64_t v = s->value;
  ring.consume(1);
  if (tag_out != nullptr) *tag_out = tag;
  return v;
}

TEST(RingCapacity, RoundUpPow2IsSmallestPowerOfTwoAtLeastN) {
  EXPECT_EQ(round_up_pow2(0), 1u);
  EXPECT_EQ(round_up_pow2(1), 1u);
  EXPECT_EQ(round_up_pow2(2), 2u);
  EXPECT_EQ(round_up_pow2(3), 4u);
  EXPECT_EQ(round_up_pow2(5), 8u);
  EXPECT_EQ(round_up_pow2(8), 8u);
  EXPECT_EQ(round_up_pow2(9), 16u);
  EXPECT_EQ(round_up_pow2(1000), 1024u);
  EXPECT_EQ(round_up_pow2(1024), 1024u);
  EXPECT_EQ(round_up_pow2(1025), 2048u);
}

TEST(RingCapacity, CapacityIsMinimumRoundedUpToPowerOfTwo) {
  EXPECT_EQ(Ring(1).capacity(), 1u);
  EXPECT_EQ(Ring(3).capacity(), 4u);
  EXPECT_EQ(Ring(4).capacity(), 4u);
  EXPECT_EQ(Ring(5).capacity(), 8u);
  EXPECT_EQ(Ring(100).capacity(), 128u);
}

TEST(RingCapacity, RoundedCapacityIsUsableInFull) {
  Ring ring(5);  // rounded up to 8: all eight slots can be claimed
  for (uint64_t i = 0; i < 8; ++i) {
    const std::optional<uint64_t> pos = ring.claim();
    ASSERT_TRUE(pos.has_value()) << "claim " << i;
  }
  EXPECT_FALSE(ring.claim().has_value());
}

TEST(RingClaim, ClaimsSequentialPositionsUntilFullThenNullopt) {
  Ring ring(4);
  for (uint64_t i = 0; i < 4; ++i) {
    const std::optional<uint64_t> pos = ring.claim();
    ASSERT_TRUE(pos.has_value());
    EXPECT_EQ(*pos, i);
  }
  EXPECT_EQ(ring.claimed(), 4u);
  EXPECT_FALSE(ring.claim().has_value());
  // Still full: a failed claim reserves nothing, so repeated attempts fail the same way.
  EXPECT_FALSE(ring.claim().has_value());
  EXPECT_EQ(ring.claimed(), 4u);
}

TEST(RingClaim, FullEvenWhenNothingIsPublished) {
  Ring ring(2);
  ASSERT_TRUE(ring.claim().has_value());
  ASSERT_TRUE(ring.claim().has_value());
  EXPECT_FALSE(ring.claim().has_value());
}

TEST(RingClaim, ClaimedCountsClaimedAndUnconsumedSlots) {
  Ring ring(8);
  EXPECT_EQ(ring.claimed(), 0u);
  const std::optional<uint64_t> a = ring.claim();  // claimed, not published
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(ring.claimed(), 1u);
  put(ring, 7);
  EXPECT_EQ(ring.claimed(), 2u);
  ring.at(*a).value = 5;
  ring.publish(*a, false);
  EXPECT_EQ(ring.claimed(), 2u);
  ASSERT_EQ(take(ring), std::optional<uint64_t>(5));
  EXPECT_EQ(ring.claimed(), 1u);
  ASSERT_EQ(take(ring), std::optional<uint64_t>(7));
  EXPECT_EQ(ring.claimed(), 0u);
}

TEST(RingOrder, ConsumerSeesSlotsInClaimOrder) {
  Ring ring(8);
  for (uint64_t v = 100; v < 108; ++v) put(ring, v);
  for (uint64_t v = 100; v < 108; ++v) {
    EXPECT_EQ(take(ring), std::optional<uint64_t>(v));
  }
  EXPECT_EQ(take(ring), std::nullopt);
}

TEST(RingOrder, SlotsPublishedOutOfOrderAreConsumedInClaimOrder) {
  Ring ring(4);
  std::vector<uint64_t> pos;
  for (int i = 0; i < 4; ++i) {
    const std::optional<uint64_t> p = ring.claim();
    ASSERT_TRUE(p.has_value());
    pos.push_back(*p);
    ring.at(*p).value = 10 + static_cast<uint64_t>(i);
  }
  for (int i : {3, 1, 0, 2}) ring.publish(pos[static_cast<size_t>(i)], false);
  for (uint64_t v = 10; v < 14; ++v) EXPECT_EQ(take(ring), std::optional<uint64_t>(v));
}

TEST(RingPeek, EmptyRingPeekReturnsNull) {
  Ring ring(4);
  bool tag = false;
  EXPECT_EQ(ring.peek(ring.head(), &tag), nullptr);
}

TEST(RingPeek, ClaimedButUnpublishedSlotReturnsNull) {
  Ring ring(4);
  const std::optional<uint64_t> pos = ring.claim();
  ASSERT_TRUE(pos.has_value());
  ring.at(*pos).value = 42;
  bool tag = false;
  EXPECT_EQ(ring.peek(*pos, &tag), nullptr);
  ring.publish(*pos, false);
  const TestSlot* s = ring.peek(*pos, &tag);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, 42u);
}

TEST(RingPeek, UnpublishedHeadBlocksLaterPublishedSlotsFromBeingConsumedOutOfOrder) {
  Ring ring(4);
  const std::optional<uint64_t> first = ring.claim();
  ASSERT_TRUE(first.has_value());
  put(ring, 2);  // second slot: published
  put(ring, 3);  // third slot: published
  // The head is claimed but not published: an in-order consumer gets nothing yet.
  bool tag = false;
  EXPECT_EQ(ring.peek(ring.head(), &tag), nullptr);
  EXPECT_EQ(take(ring), std::nullopt);
  EXPECT_EQ(ring.head(), 0u);
  EXPECT_EQ(ring.claimed(), 3u);
  // Once the head is published, all three come out in claim order.
  ring.at(*first).value = 1;
  ring.publish(*first, false);
  EXPECT_EQ(take(ring), std::optional<uint64_t>(1));
  EXPECT_EQ(take(ring), std::optional<uint64_t>(2));
  EXPECT_EQ(take(ring), std::optional<uint64_t>(3));
  EXPECT_EQ(take(ring), std::nullopt);
}

TEST(RingPeek, ClaimedSlotReusedFromPreviousLapReturnsNullUntilPublished) {
  Ring ring(2);
  put(ring, 1);
  put(ring, 2);
  ASSERT_EQ(take(ring), std::optional<uint64_t>(1));
  ASSERT_EQ(take(ring), std::optional<uint64_t>(2));
  // Position 2 maps to the slot that held position 0: its old seq must not make it readable.
  const std::optional<uint64_t> pos = ring.claim();
  ASSERT_TRUE(pos.has_value());
  EXPECT_EQ(*pos, 2u);
  EXPECT_EQ(&ring.at(*pos), &ring.at(0));
  bool tag = false;
  EXPECT_EQ(ring.peek(*pos, &tag), nullptr);
  ring.at(*pos).value = 3;
  ring.publish(*pos, true);
  EXPECT_EQ(take(ring, &tag), std::optional<uint64_t>(3));
  EXPECT_TRUE(tag);
}

TEST(RingConsume, ConsumeFreesRoomForProducers) {
  Ring ring(4);
  for (uint64_t v = 0; v < 4; ++v) put(ring, v);
  ASSERT_FALSE(ring.claim().has_value());
  ASSERT_EQ(take(ring), std::optional<uint64_t>(0));
  EXPECT_EQ(ring.head(), 1u);
  const std::optional<uint64_t> pos = ring.claim();
  ASSERT_TRUE(pos.has_value());
  EXPECT_EQ(*pos, 4u);
  EXPECT_FALSE(ring.claim().has_value());  // exactly one slot was freed
}

TEST(RingConsume, ConsumeManyAdvancesHeadByN) {
  Ring ring(8);
  for (uint64_t v = 0; v < 5; ++v) put(ring, v);
  bool tag = false;
  for (uint64_t i = 0; i < 3; ++i) ASSERT_NE(ring.peek(ring.head() + i, &tag), nullptr);
  ring.consume(3);
  EXPECT_EQ(ring.head(), 3u);
  EXPECT_EQ(ring.claimed(), 2u);
  EXPECT_EQ(take(ring), std::optional<uint64_t>(3));
  EXPECT_EQ(take(ring), std::optional<uint64_t>(4));
}

TEST(RingTag, TagBitGivenToPublishIsReturnedByPeek) {
  Ring ring(8);
  const bool tags[] = {true, false, false, true, true, false};
  for (size_t i = 0; i < std::size(tags); ++i) put(ring, i, tags[i]);
  for (size_t i = 0; i < std::size(tags); ++i) {
    bool tag = !tags[i];  // start from the opposite value: peek must overwrite it
    const TestSlot* s = ring.peek(ring.head(), &tag);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->value, i);
    EXPECT_EQ(tag, tags[i]) << "slot " << i;
    ring.consume(1);
  }
}

TEST(RingWrap, WrapsAroundManyTimesKeepingOrderAndValues) {
  Ring ring(4);
  uint64_t next_put = 0;
  uint64_t next_take = 0;
  // Batches of 1..4 keep the producer and consumer at varying distances across many laps.
  for (int round = 0; round < 5000; ++round) {
    const int batch = 1 + round % 4;
    for (int i = 0; i < batch; ++i) {
      const uint64_t pos = put(ring, next_put * 3 + 1, (next_put & 1) != 0);
      ASSERT_EQ(pos, next_put);
      ++next_put;
    }
    if (batch == 4) {
      ASSERT_FALSE(ring.claim().has_value());
    }
    for (int i = 0; i < batch; ++i) {
      bool tag = false;
      const std::optional<uint64_t> v = take(ring, &tag);
      ASSERT_TRUE(v.has_value()) << "round " << round;
      EXPECT_EQ(*v, next_take * 3 + 1);
      EXPECT_EQ(tag, (next_take & 1) != 0);
      ++next_take;
    }
    ASSERT_EQ(take(ring), std::nullopt);
    ASSERT_EQ(ring.claimed(), 0u);
  }
  EXPECT_EQ(ring.head(), next_put);
  EXPECT_GT(next_put, 4u * 1000u);  // well over a thousand laps
}

TEST(RingWrap, PartiallyFullRingWrapsWithoutLosingEntries) {
  Ring ring(4);
  uint64_t next_put = 0;
  uint64_t next_take = 0;
  // Keep two or three entries in flight at all times.
  put(ring, next_put++);
  put(ring, next_put++);
  for (int i = 0; i < 3000; ++i) {
    put(ring, next_put++);
    ASSERT_EQ(take(ring), std::optional<uint64_t>(next_take));
    ++next_take;
    ASSERT_EQ(ring.claimed(), 2u);
  }
  ASSERT_EQ(take(ring), std::optional<uint64_t>(next_take++));
  ASSERT_EQ(take(ring), std::optional<uint64_t>(next_take++));
  EXPECT_EQ(take(ring), std::nullopt);
}

}  // namespace
}  // namespace fabq::core
