// A shared-memory Ring: its bytes (round trips, the wrap-around, a full ring, iovecs, frames
// built in place), its two doorbell flags, and the checks of the indices a peer could corrupt.
#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "shm_util.h"

namespace fabq::xport::shm {
namespace {

// A ring over memory of the test's own, so that the test can also play a peer that writes
// whatever it likes into the control block. Producer and consumer use the same Ring: it keeps
// no state of its own but the two pointers and the producer's copy of the head.
class ShmRing : public testing::Test {
 protected:
  void fill() {
    const Bytes b(kRingBytes, 0x5a);
    ASSERT_EQ(write_bytes(ring_, b), kRingBytes);
    ASSERT_FALSE(ring_.writable());
  }

  RingControl ctl_{};
  Bytes data_ = Bytes(kRingBytes);
  Ring ring_{&ctl_, data_.data()};
};

// --- Ring: bytes ----------------------------------------------------------------------------

TEST_F(ShmRing, AnEmptyRingIsWritableAndHasNothingToRead) {
  EXPECT_FALSE(ring_.readable());
  EXPECT_TRUE(ring_.writable());
  EXPECT_EQ(read_all(ring_), Bytes{});
}

TEST_F(ShmRing, WriteThenPeekAndConsumeGivesTheBytesBack) {
  const Bytes msg = pattern(1000);
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, msg, &bell), msg.size());
  EXPECT_FALSE(bell);
  EXPECT_TRUE(ring_.readable());

  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, msg.size());
  EXPECT_EQ(contiguous, msg.size());
  ASSERT_EQ(p, data_.data());
  EXPECT_EQ(Bytes(p, p + contiguous), msg);

  // A partial consume leaves the rest where it was.
  EXPECT_FALSE(ring_.consume(400));
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 600u);
  EXPECT_EQ(contiguous, 600u);
  EXPECT_EQ(Bytes(p, p + contiguous), Bytes(msg.begin() + 400, msg.end()));
  EXPECT_FALSE(ring_.consume(600));
  EXPECT_FALSE(ring_.readable());
  EXPECT_EQ(ctl_.tail.load(), 1000u);
  EXPECT_EQ(ctl_.head.load(), 1000u);
}

TEST_F(ShmRing, BytesWrittenAcrossTheEndComeOutIntactAndInOrder) {
  // Both indices 100 bytes before the end of the ring.
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 100, 0xee)), kRingBytes - 100);
  ASSERT_EQ(read_all(ring_).size(), kRingBytes - 100);

  const Bytes msg = pattern(300);
  ASSERT_EQ(write_bytes(ring_, msg), msg.size());
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 300u);
  ASSERT_EQ(contiguous, 100u) << "only the bytes up to the end are contiguous";
  EXPECT_EQ(p, data_.data() + kRingBytes - 100);
  Bytes got(p, p + contiguous);
  EXPECT_FALSE(ring_.consume(contiguous));

  // The rest starts at the ring's beginning.
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, 200u);
  EXPECT_EQ(contiguous, 200u);
  EXPECT_EQ(p, data_.data());
  got.insert(got.end(), p, p + contiguous);
  EXPECT_FALSE(ring_.consume(contiguous));
  EXPECT_EQ(got, msg);
  EXPECT_FALSE(ring_.readable());
}

TEST_F(ShmRing, ManyRoundsOfOddSizesWrapAroundManyTimesWithoutLosingAByte) {
  // 7919 is prime: the wrap-around falls at every offset within a write.
  const Bytes msg = pattern(7919);
  for (int round = 0; round < 200; ++round) {
    ASSERT_EQ(write_bytes(ring_, msg), msg.size()) << "round " << round;
    ASSERT_EQ(read_all(ring_), msg) << "round " << round;
  }
  EXPECT_EQ(ctl_.tail.load(), 200u * msg.size());
}

TEST_F(ShmRing, IndicesThatPassTwoToTheSixtyFourKeepWorking) {
  // Indices count bytes ever moved; let them wrap the uint64_t in the middle of a write.
  ctl_.tail.store(UINT64_MAX - 10);
  ctl_.head.store(UINT64_MAX - 10);
  const Bytes msg = pattern(100);
  ASSERT_EQ(write_bytes(ring_, msg), msg.size());
  EXPECT_EQ(ctl_.tail.load(), 89u);
  EXPECT_TRUE(ring_.writable());
  EXPECT_EQ(read_all(ring_), msg);
  EXPECT_EQ(ctl_.head.load(), 89u);
}

TEST_F(ShmRing, AFullRingAcceptsNothingAndAPartialWriteWritesExactlyTheRoomLeft) {
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 10, 1)), kRingBytes - 10);
  EXPECT_TRUE(ring_.writable());
  const Bytes msg = pattern(100);
  EXPECT_EQ(write_bytes(ring_, msg), 10u);
  EXPECT_FALSE(ring_.writable());
  EXPECT_EQ(ctl_.tail.load(), kRingBytes);
  EXPECT_EQ(write_bytes(ring_, msg), 0u);
  EXPECT_EQ(ctl_.tail.load(), kRingBytes) << "a write of nothing leaves the tail";

  // The bytes in the ring are the first 10 of msg, not more, not later ones.
  EXPECT_EQ(Bytes(data_.end() - 10, data_.end()), Bytes(msg.begin(), msg.begin() + 10));
  const Bytes all = read_all(ring_);
  ASSERT_EQ(all.size(), kRingBytes);
  EXPECT_EQ(Bytes(all.end() - 10, all.end()), Bytes(msg.begin(), msg.begin() + 10));

  // Room again: the next write starts right after them.
  ASSERT_EQ(write_bytes(ring_, Bytes(msg.begin() + 10, msg.end())), 90u);
  EXPECT_EQ(read_all(ring_), Bytes(msg.begin() + 10, msg.end()));
}

TEST_F(ShmRing, SeveralIovecEntriesAreWrittenInOrder) {
  const std::string parts[] = {"abc", "", "defgh", "i", "jklmnop"};
  iovec iov[std::size(parts)];
  std::string all;
  for (size_t i = 0; i < std::size(parts); ++i) {
    iov[i] = {const_cast<char*>(parts[i].data()), parts[i].size()};
    all += parts[i];
  }
  size_t written = 0;
  bool bell = true;
  ASSERT_EQ(ring_.write(iov, static_cast<int>(std::size(iov)), &written, &bell), Status::kOk);
  EXPECT_EQ(written, all.size());
  EXPECT_FALSE(bell);
  const Bytes got = read_all(ring_);
  EXPECT_EQ(std::string(got.begin(), got.end()), all);
}

TEST_F(ShmRing, IovecThatDoesNotFitIsCutInsideTheEntryWhereTheRoomEnds) {
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 6, 0)), kRingBytes - 6);
  ASSERT_EQ(read_all(ring_).size(), kRingBytes - 6);  // the indices are 6 before the end
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 8, 0)), kRingBytes - 8);  // 8 bytes of room
  std::string a = "0123", b = "456789", c = "xyz";
  iovec iov[] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  size_t written = 0;
  bool bell = false;
  ASSERT_EQ(ring_.write(iov, 3, &written, &bell), Status::kOk);
  EXPECT_EQ(written, 8u);
  const Bytes got = read_all(ring_);
  ASSERT_EQ(got.size(), kRingBytes);
  EXPECT_EQ(std::string(got.end() - 8, got.end()), "01234567");
}

// The producer's view of what its consumer has not read yet (an answer goes direct only when
// little is, Conn::go_direct_locked).
TEST_F(ShmRing, UnreadAtMostComparesWhatTheConsumerHasNotTakenWithTheLimit) {
  EXPECT_TRUE(ring_.unread_at_most(0)) << "an empty ring";
  ASSERT_EQ(write_bytes(ring_, pattern(100)), 100u);
  EXPECT_FALSE(ring_.unread_at_most(99));
  EXPECT_TRUE(ring_.unread_at_most(100));
  EXPECT_FALSE(ring_.consume(68));
  EXPECT_TRUE(ring_.unread_at_most(32)) << "an acknowledgement's header is left";
  EXPECT_FALSE(ring_.unread_at_most(31));
  EXPECT_FALSE(ring_.consume(32));
  EXPECT_TRUE(ring_.unread_at_most(0));
}

// --- Ring: doorbells ------------------------------------------------------------------------

TEST_F(ShmRing, WriteRingsNoBellForAConsumerThatNeverArmed) {
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, Bytes{1}, &bell), 1u);
  EXPECT_FALSE(bell);
}

TEST_F(ShmRing, WriteRingsTheBellOnceForAConsumerThatArmedOnAnEmptyRing) {
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow) << "nothing to read: the consumer may sleep";
  bool bell = false;
  ASSERT_EQ(write_bytes(ring_, Bytes{1, 2}, &bell), 2u);
  EXPECT_TRUE(bell);
  ASSERT_EQ(write_bytes(ring_, Bytes{3}, &bell), 1u);
  EXPECT_FALSE(bell) << "the first bell cleared the request";
}

TEST_F(ShmRing, WriteOfNothingRingsNoBellAndKeepsTheRequest) {
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow);
  bool bell = true;
  ASSERT_EQ(write_bytes(ring_, Bytes{}, &bell), 0u);
  EXPECT_FALSE(bell);
  ASSERT_EQ(write_bytes(ring_, Bytes{1}, &bell), 1u);
  EXPECT_TRUE(bell) << "the sleeping consumer still gets its bell";
}

TEST_F(ShmRing, AFullRingAcceptsNothingAndRingsNoBellEvenForAnArmedConsumer) {
  ASSERT_NO_FATAL_FAILURE(fill());
  ctl_.consumer_asleep.store(1);  // as if the consumer had armed before the ring filled
  bool bell = true;
  EXPECT_EQ(write_bytes(ring_, Bytes{1}, &bell), 0u);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ctl_.consumer_asleep.load(), 1u);
}

TEST_F(ShmRing, ArmConsumerSaysBytesWhenBytesAreAlreadyThereAndWithdrawsTheRequest) {
  ASSERT_EQ(write_bytes(ring_, Bytes{1}), 1u);
  EXPECT_EQ(ring_.arm_consumer(), Armed::kBytes);
  EXPECT_EQ(ctl_.consumer_asleep.load(), 0u);
  EXPECT_EQ(read_all(ring_), Bytes{1});
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow) << "empty again";
}

TEST_F(ShmRing, ArmingAgainBeforeAnyBellSaysTheEarlierRequestStands) {
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow);
  EXPECT_EQ(ring_.arm_consumer(), Armed::kStill)
      << "the look again owed is the first arm's, not a new one";
  bool bell = false;
  ASSERT_EQ(write_bytes(ring_, Bytes{1}, &bell), 1u);
  EXPECT_TRUE(bell);
  EXPECT_EQ(read_all(ring_), Bytes{1});
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow) << "the bell took the request: this one is new";
}

TEST_F(ShmRing, ConsumeRingsNoBellForAProducerThatNeverArmed) {
  ASSERT_NO_FATAL_FAILURE(fill());
  bool bell = true;
  EXPECT_EQ(read_all(ring_, &bell).size(), kRingBytes);
  EXPECT_FALSE(bell);
}

TEST_F(ShmRing, ConsumeRingsTheBellOnceForAProducerThatArmedOnAFullRing) {
  ASSERT_NO_FATAL_FAILURE(fill());
  EXPECT_FALSE(ring_.arm_producer()) << "no room: the producer may sleep";
  EXPECT_FALSE(ring_.consume(0)) << "freeing nothing is no reason to wake it";
  EXPECT_TRUE(ring_.consume(1));
  EXPECT_FALSE(ring_.consume(1)) << "the first bell cleared the request";
  EXPECT_TRUE(ring_.writable());
}

TEST_F(ShmRing, ArmProducerReturnsTrueWhenThereIsRoomAndLeavesNoRequest) {
  EXPECT_TRUE(ring_.arm_producer());
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 1, 0)), kRingBytes - 1);
  EXPECT_TRUE(ring_.arm_producer()) << "one byte of room is room";
  ASSERT_EQ(write_bytes(ring_, Bytes{0}), 1u);
  ASSERT_FALSE(ring_.writable());
  // The producer never said it sleeps, so freeing room owes it nothing.
  EXPECT_FALSE(ring_.consume(1));
  EXPECT_EQ(ctl_.producer_blocked.load(), 0u);
}

TEST_F(ShmRing, ArmProducerThatFindsRoomAfterAConsumeNeedsNoBell) {
  ASSERT_NO_FATAL_FAILURE(fill());
  ASSERT_FALSE(ring_.arm_producer());
  ASSERT_TRUE(ring_.consume(10));
  EXPECT_TRUE(ring_.arm_producer());
  EXPECT_EQ(write_bytes(ring_, Bytes(20, 0)), 10u);
  EXPECT_FALSE(ring_.consume(10));
}

// --- RecheckTimer: when a consumer that armed looks again without a doorbell -------------------

TEST(RecheckTimer, AFreshArmSetsTheTimerForTheBoundLater) {
  RecheckTimer t;
  EXPECT_EQ(t.due(), 0) << "nothing owed before any arm";
  EXPECT_EQ(t.armed(1'000), 1'000 + kRecheckNs);
  EXPECT_EQ(t.due(), 1'000 + kRecheckNs);
  EXPECT_EQ(t.expired(1'000 + kRecheckNs), 0) << "no arm since: the look is all that was owed";
  EXPECT_EQ(t.due(), 0);
}

TEST(RecheckTimer, ArmsWhileItIsSetDoNotSetItAgain) {
  RecheckTimer t;
  ASSERT_EQ(t.armed(0), kRecheckNs);
  for (int64_t at = 10'000; at < kRecheckNs; at += 10'000) {
    EXPECT_EQ(t.armed(at), 0) << "an arm at " << at << " ns is served by the timer already set";
  }
  EXPECT_EQ(t.due(), kRecheckNs);
}

TEST(RecheckTimer, ItsExpiryOwesTheArmsSinceItWasSetALookTheBoundAfterTheLastOfThem) {
  RecheckTimer t;
  ASSERT_EQ(t.armed(0), kRecheckNs);
  t.armed(300'000);
  t.armed(kRecheckNs - 1);
  EXPECT_EQ(t.expired(kRecheckNs), 2 * kRecheckNs - 1)
      << "the arm just before the expiry gets its full bound, not the rest of this period";
  EXPECT_EQ(t.armed(kRecheckNs + 5), 0);
  EXPECT_EQ(t.expired(2 * kRecheckNs - 1), kRecheckNs + 5 + kRecheckNs);
  EXPECT_EQ(t.expired(2 * kRecheckNs + 5), 0);
}

TEST(RecheckTimer, EveryArmIsLookedAtBetweenOnceAndTwiceTheBoundLater) {
  // Arms at a varying pace against an engine that reacts to the timer at once: the first look
  // at least kRecheckNs after each arm comes less than 2 * kRecheckNs after it.
  RecheckTimer t;
  std::vector<int64_t> arms;
  std::vector<int64_t> looks;
  int64_t now = 0;
  uint32_t seed = 12345;
  while (now < 50 * kRecheckNs) {
    seed = seed * 1103515245 + 12345;
    const int64_t step = 1'000 + (seed >> 8) % (3 * kRecheckNs / 2);
    const int64_t next_arm = now + step;
    while (t.due() != 0 && t.due() <= next_arm) {
      now = t.due();
      looks.push_back(now);
      t.expired(now);
    }
    now = next_arm;
    arms.push_back(now);
    t.armed(now);
  }
  while (t.due() != 0) {
    now = t.due();
    looks.push_back(now);
    t.expired(now);
  }
  for (const int64_t a : arms) {
    const auto look = std::lower_bound(looks.begin(), looks.end(), a + kRecheckNs);
    ASSERT_NE(look, looks.end()) << "the arm at " << a << " ns was never looked at";
    EXPECT_LE(*look - a, 2 * kRecheckNs) << "the arm at " << a << " ns";
  }
  EXPECT_LT(looks.size(), arms.size()) << "one timer serves several arms";
}

// --- Ring: indices a peer corrupted ---------------------------------------------------------

TEST_F(ShmRing, TailMoreThanARingAheadOfTheHeadIsCorrupt) {
  ctl_.head.store(1000);
  ctl_.tail.store(1000 + kRingBytes + 1);
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  EXPECT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kCorrupt);
  size_t written = 1;
  bool bell = true;
  const Bytes b{1};
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  EXPECT_EQ(ring_.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ring_.arm_consumer(), Armed::kBytes)
      << "a bogus tail counts as bytes: reading it fails";
}

TEST_F(ShmRing, TailExactlyARingAheadOfTheHeadIsAFullRingNotCorruption) {
  ctl_.head.store(1000);
  ctl_.tail.store(1000 + kRingBytes);
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  ASSERT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kOk);
  EXPECT_EQ(avail, kRingBytes);
  EXPECT_EQ(contiguous, kRingBytes - 1000);
  EXPECT_EQ(write_bytes(ring_, Bytes{1}), 0u);
}

TEST_F(ShmRing, HeadPastTheTailIsCorruptAndTheWriteStoresNothing) {
  ctl_.tail.store(4);
  ctl_.head.store(5);
  Ring producer(&ctl_, data_.data());  // it reads the head when it starts
  const Bytes b = pattern(16);
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  size_t written = 1;
  bool bell = true;
  EXPECT_EQ(producer.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ctl_.tail.load(), 4u);
  EXPECT_EQ(data_, Bytes(kRingBytes)) << "not a byte copied";
  const unsigned char* p = nullptr;
  size_t contiguous = 0;
  size_t avail = 0;
  EXPECT_EQ(ring_.peek(&p, &contiguous, &avail), Status::kCorrupt);
}

TEST_F(ShmRing, AWholeWriteWritesAllOrNothing) {
  const Bytes first(kRingBytes - 100, 0x22);
  ASSERT_EQ(write_bytes(ring_, first), first.size());
  const Bytes header(40, 0x33);
  const Bytes payload(61, 0x44);  // 101 bytes in all: one more than there is room for
  iovec iov[2] = {{const_cast<unsigned char*>(header.data()), header.size()},
                  {const_cast<unsigned char*>(payload.data()), payload.size()}};
  bool written = true;
  bool bell = true;
  ASSERT_EQ(ring_.write_whole(iov, 2, &written, &bell), Status::kOk);
  EXPECT_FALSE(written);
  EXPECT_FALSE(bell);
  EXPECT_EQ(ctl_.tail.load(), first.size()) << "not a byte of it";
  iov[1].iov_len = 60;  // 100: exactly the room
  ASSERT_EQ(ring_.write_whole(iov, 2, &written, &bell), Status::kOk);
  EXPECT_TRUE(written);
  EXPECT_EQ(ctl_.tail.load(), kRingBytes);
  Bytes all = read_all(ring_);
  EXPECT_EQ(Bytes(all.end() - 100, all.end() - 60), header);
  EXPECT_EQ(Bytes(all.end() - 60, all.end()), Bytes(60, 0x44));
}

TEST_F(ShmRing, AProducerReadsTheHeadAgainOnlyWhenTheRoomItKnowsOfIsTooSmall) {
  // The head's cache line is the consumer's: reading it at every write would cost a transfer
  // between cores per message. A head the consumer corrupts meanwhile is caught at that read.
  const Bytes b = pattern(16);
  ASSERT_EQ(write_bytes(ring_, b), b.size());
  ctl_.head.store(1000);  // past the tail (16, then 32)
  ASSERT_EQ(write_bytes(ring_, b), b.size()) << "the room known before was enough: no read";
  const Bytes big(kRingBytes - 16, 0x11);
  iovec iov{const_cast<unsigned char*>(big.data()), big.size()};
  size_t written = 1;
  bool bell = true;
  EXPECT_EQ(ring_.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
  EXPECT_EQ(ctl_.tail.load(), 32u);
}

// --- Ring: frames built in place (claim, commit) --------------------------------------------

TEST_F(ShmRing, AClaimedFrameIsInvisibleUntilCommittedAndThenReadsBackWhole) {
  const Bytes first = pattern(10);
  ASSERT_EQ(write_bytes(ring_, first), first.size());
  unsigned char* at = nullptr;
  ASSERT_EQ(ring_.claim(40, &at), Status::kOk);
  ASSERT_EQ(at, data_.data() + 10) << "where the tail is";
  const Bytes frame(40, 0x7c);
  std::copy(frame.begin(), frame.end(), at);
  EXPECT_EQ(read_all(ring_), first) << "nothing claimed is published";
  bool bell = true;
  ring_.commit(40, &bell);
  EXPECT_FALSE(bell);
  EXPECT_EQ(read_all(ring_), frame);
  EXPECT_EQ(ctl_.tail.load(), 50u);
}

TEST_F(ShmRing, AClaimThatWouldWrapOrOverfillGivesNoPlaceAndChangesNothing) {
  ASSERT_EQ(write_bytes(ring_, Bytes(kRingBytes - 30, 0x01)), kRingBytes - 30);
  ASSERT_EQ(read_all(ring_).size(), kRingBytes - 30);
  unsigned char* at = data_.data();
  ASSERT_EQ(ring_.claim(31, &at), Status::kOk);
  EXPECT_EQ(at, nullptr) << "31 bytes would cross the ring's end";
  ASSERT_EQ(ring_.claim(30, &at), Status::kOk);
  EXPECT_EQ(at, data_.data() + kRingBytes - 30) << "30 end exactly at it";

  ASSERT_NO_FATAL_FAILURE(fill());
  ASSERT_EQ(ring_.claim(1, &at), Status::kOk);
  EXPECT_EQ(at, nullptr) << "a full ring has no room";
  EXPECT_EQ(ctl_.tail.load(), ctl_.head.load() + kRingBytes);
}

TEST_F(ShmRing, AClaimFindsAHeadThePeerCorruptedAndPublishesNothing) {
  ctl_.tail.store(4);
  ctl_.head.store(5);
  Ring producer(&ctl_, data_.data());
  unsigned char* at = data_.data();
  EXPECT_EQ(producer.claim(16, &at), Status::kCorrupt);
  EXPECT_EQ(at, nullptr);
  EXPECT_EQ(ctl_.tail.load(), 4u);
}

TEST_F(ShmRing, ACommitRingsTheBellOnceForAConsumerThatArmed) {
  EXPECT_EQ(ring_.arm_consumer(), Armed::kNow);
  unsigned char* at = nullptr;
  ASSERT_EQ(ring_.claim(8, &at), Status::kOk);
  ASSERT_NE(at, nullptr);
  bool bell = false;
  ring_.commit(8, &bell);
  EXPECT_TRUE(bell);
  ASSERT_EQ(ring_.claim(8, &at), Status::kOk);
  ring_.commit(8, &bell);
  EXPECT_FALSE(bell) << "the first bell cleared the request";
}

TEST(ShmSegment, IndicesAPeerCorruptedInALiveSegmentAreCaught) {
  // The same checks through a real mapping: the peer's writes come through the shared
  // control block. Here the test plays the peer by giving the consumer more than a ring.
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  Ring tx = creator.tx(true);
  Ring rx = acceptor.rx(false);
  ASSERT_EQ(write_bytes(tx, Bytes(kRingBytes, 0)), kRingBytes);
  ASSERT_EQ(read_all(rx).size(), kRingBytes);
  // The consumer gives back more than it was given: its head passes the tail.
  EXPECT_FALSE(rx.consume(1));
  size_t written = 1;
  bool bell = true;
  const Bytes b{1};
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  EXPECT_EQ(tx.write(&iov, 1, &written, &bell), Status::kCorrupt);
  EXPECT_EQ(written, 0u);
}

}  // namespace
}  // namespace fabq::xport::shm
