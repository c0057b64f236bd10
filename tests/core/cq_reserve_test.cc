// CompletionQueue credits and back-pressure: no completion is ever silently lost.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "core/cq.h"

namespace fabq::core {
namespace {

std::unique_ptr<CompletionQueue> make_cq(size_t size) {
  CqConfig config;
  config.size = size;
  config.format = CqFormat::kData;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Completion completion(uint64_t i) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(0x1000 + i * 16);
  c.flags = FI_SEND | FI_MSG;
  c.len = i;
  c.data = i;
  return c;
}

CompletionError error_entry(uint64_t i) {
  CompletionError e;
  e.completion = completion(i);
  e.err = FI_EIO;
  return e;
}

// Reads everything stored; returns the `data` fields in order.
std::vector<uint64_t> drain(CompletionQueue& cq) {
  std::vector<uint64_t> out;
  fi_cq_data_entry e[16];
  for (;;) {
    Result<size_t> r = cq.read(e, 16, nullptr);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kAgain);
      return out;
    }
    for (size_t i = 0; i < *r; ++i) out.push_back(e[i].data);
  }
}

// Reserves until kAgain; returns how many succeeded (bounded to catch a missing limit).
size_t reserve_all(CompletionQueue& cq, size_t bound = 4096) {
  size_t n = 0;
  while (n < bound && cq.reserve().ok()) ++n;
  return n;
}

std::vector<uint64_t> iota(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

TEST(CqCapacity, IsSizeRoundedUpToAPowerOfTwo) {
  const std::pair<size_t, size_t> cases[] = {
      {1, 1}, {2, 2}, {3, 4}, {5, 8}, {8, 8}, {9, 16}, {1000, 1024}, {1024, 1024}, {1025, 2048}};
  for (const auto& [size, want] : cases) {
    auto cq = make_cq(size);
    ASSERT_NE(cq, nullptr) << size;
    EXPECT_EQ(cq->capacity(), want) << "size " << size;
  }
}

TEST(CqCapacity, EveryRoundedUpSlotCanHoldACompletion) {
  auto cq = make_cq(5);
  ASSERT_EQ(cq->capacity(), 8u);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(cq->write(completion(i)).ok()) << i;
  EXPECT_EQ(cq->write(completion(8)).code(), Code::kAgain);
  EXPECT_EQ(drain(*cq), iota(0, 8));
}

TEST(CqReserve, SucceedsUntilEverySlotIsReservedThenReturnsAgain) {
  auto cq = make_cq(8);
  EXPECT_EQ(reserve_all(*cq), 8u);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
}

TEST(CqReserve, ReturnsAgainWhenEverySlotIsStoredOrReserved) {
  auto cq = make_cq(8);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  EXPECT_EQ(reserve_all(*cq), 3u);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
}

TEST(CqReserve, ManyAtOnceReturnsAgainWithoutTakingAnyCredit) {
  auto cq = make_cq(8);
  ASSERT_TRUE(cq->reserve(6).ok());
  EXPECT_EQ(cq->reserve(3).code(), Code::kAgain);
  // The failed request took nothing: both remaining credits are still there.
  EXPECT_TRUE(cq->reserve(2).ok());
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
}

TEST(CqReserve, CompleteConsumesAReservationAndStoresTheCompletion) {
  auto cq = make_cq(8);
  ASSERT_EQ(reserve_all(*cq), 8u);
  // Every reservation completes, even though no credit is free.
  for (uint64_t i = 0; i < 8; ++i) cq->complete(completion(i));
  EXPECT_EQ(cq->pending(), 8u);
  // The completed reservations are now stored entries: still no room.
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  EXPECT_EQ(cq->write(completion(99)).code(), Code::kAgain);
  EXPECT_EQ(drain(*cq), iota(0, 8));
}

TEST(CqReserve, CompleteErrorConsumesAReservationAndStoresTheError) {
  auto cq = make_cq(2);
  ASSERT_EQ(reserve_all(*cq), 2u);
  cq->complete_error(error_entry(0));
  cq->complete(completion(1));
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(err.op_context, completion(0).op_context);
  EXPECT_EQ(drain(*cq), iota(1, 1));
}

TEST(CqReserve, CancelReservationReturnsTheCredit) {
  auto cq = make_cq(4);
  ASSERT_EQ(reserve_all(*cq), 4u);
  cq->cancel_reservation();
  EXPECT_TRUE(cq->reserve().ok());
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  cq->cancel_reservation(3);
  EXPECT_EQ(reserve_all(*cq), 3u);
}

TEST(CqReserve, CancelledReservationStoresNothing) {
  auto cq = make_cq(4);
  ASSERT_TRUE(cq->reserve(2).ok());
  cq->complete(completion(0));
  cq->cancel_reservation();
  EXPECT_EQ(cq->pending(), 1u);
  EXPECT_EQ(drain(*cq), iota(0, 1));
  EXPECT_EQ(reserve_all(*cq), 4u);
}

TEST(CqWrite, IsReservePlusCompleteAndReturnsAgainWhenFull) {
  auto cq = make_cq(4);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  EXPECT_EQ(cq->write(completion(4)).code(), Code::kAgain);
  EXPECT_EQ(cq->write_error(error_entry(5)).code(), Code::kAgain);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  // The refused completions were not stored: the transport still holds them.
  EXPECT_EQ(drain(*cq), iota(0, 4));
  fi_cq_err_entry err{};
  EXPECT_EQ(cq->read_error(&err, 0).status().code(), Code::kAgain);
}

TEST(CqWrite, ReturnsAgainWhenEveryFreeSlotIsPromisedToAPostedOperation) {
  auto cq = make_cq(4);
  ASSERT_TRUE(cq->write(completion(0)).ok());
  ASSERT_TRUE(cq->reserve(3).ok());
  // Slots are free, but all promised: an unsolicited completion must not take one.
  EXPECT_EQ(cq->write(completion(100)).code(), Code::kAgain);
  for (uint64_t i = 1; i < 4; ++i) cq->complete(completion(i));
  EXPECT_EQ(drain(*cq), iota(0, 4));
}

TEST(CqWrite, HeldBackCompletionSucceedsOnceAReaderMakesRoom) {
  auto cq = make_cq(2);
  ASSERT_TRUE(cq->write(completion(0)).ok());
  ASSERT_TRUE(cq->write(completion(1)).ok());
  ASSERT_EQ(cq->write(completion(2)).code(), Code::kAgain);
  fi_cq_data_entry e;
  Result<size_t> r = cq->read(&e, 1, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(e.data, 0u);
  ASSERT_TRUE(cq->write(completion(2)).ok());
  EXPECT_EQ(drain(*cq), iota(1, 2));
}

TEST(CqCredits, ReadingKEntriesAllowsExactlyKMoreReservations) {
  auto cq = make_cq(8);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  ASSERT_EQ(cq->reserve().code(), Code::kAgain);
  fi_cq_data_entry e[8];
  Result<size_t> r = cq->read(e, 3, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 3u);
  EXPECT_EQ(reserve_all(*cq), 3u);
  r = cq->read(e, 8, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 5u);
  EXPECT_EQ(reserve_all(*cq), 5u);
}

TEST(CqCredits, ReadErrorReturnsOneCredit) {
  auto cq = make_cq(4);
  ASSERT_TRUE(cq->write_error(error_entry(0)).ok());
  ASSERT_TRUE(cq->write_error(error_entry(1)).ok());
  for (uint64_t i = 2; i < 4; ++i) ASSERT_TRUE(cq->write(completion(i)).ok());
  ASSERT_EQ(cq->reserve().code(), Code::kAgain);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(reserve_all(*cq), 1u);
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(reserve_all(*cq), 1u);
}

TEST(CqCredits, FailedReadsReturnNoCredit) {
  auto cq = make_cq(4);
  ASSERT_TRUE(cq->write_error(error_entry(0)).ok());
  ASSERT_EQ(reserve_all(*cq), 3u);
  fi_cq_data_entry e[4];
  EXPECT_EQ(cq->read(e, 4, nullptr).status().code(), Code::kAvail);
  EXPECT_EQ(cq->read(e, 0, nullptr).status().code(), Code::kAvail);
  EXPECT_EQ(cq->reserve().code(), Code::kAgain);
  cq->cancel_reservation(3);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq->read_error(&err, 0).ok());
  EXPECT_EQ(cq->read_error(&err, 0).status().code(), Code::kAgain);  // empty now
  EXPECT_EQ(reserve_all(*cq), 4u);
}

TEST(CqCredits, CreditsCirculateOverManyFillAndDrainRounds) {
  auto cq = make_cq(4);
  uint64_t next = 0;
  for (int round = 0; round < 100; ++round) {
    ASSERT_EQ(reserve_all(*cq), 4u) << "round " << round;
    for (int i = 0; i < 4; ++i) cq->complete(completion(next + i));
    ASSERT_EQ(cq->write(completion(1000)).code(), Code::kAgain);
    ASSERT_EQ(drain(*cq), iota(next, 4)) << "round " << round;
    next += 4;
  }
}

TEST(CqCredits, NoCompletionIsLostBetweenConcurrentProducersAndAReader) {
  // Two producers (one posting with reserve/complete, one unsolicited with write) retry on
  // kAgain; the reader must see every completion exactly once, in each producer's order.
  constexpr uint64_t kPerProducer = 20000;
  auto cq = make_cq(16);
  std::atomic<bool> stop{false};    // set by the reader when it gives up: producers quit
  std::atomic<bool> failed{false};  // a producer saw something other than ok/kAgain
  auto posting = [&] {
    for (uint64_t i = 0; i < kPerProducer; ++i) {
      Status s;
      while ((s = cq->reserve()).code() == Code::kAgain) {
        if (stop) return;
        std::this_thread::yield();
      }
      if (!s.ok()) {
        failed = true;
        return;
      }
      cq->complete(completion(i));
    }
  };
  auto unsolicited = [&] {
    for (uint64_t i = 0; i < kPerProducer; ++i) {
      Status s;
      while ((s = cq->write(completion((uint64_t{1} << 32) + i))).code() == Code::kAgain) {
        if (stop) return;
        std::this_thread::yield();
      }
      if (!s.ok()) {
        failed = true;
        return;
      }
    }
  };
  uint64_t next[2] = {0, 0};
  bool out_of_order = false;
  bool stalled = false;
  Code bad_read = Code::kOk;
  {
    std::jthread a(posting);
    std::jthread b(unsolicited);
    uint64_t total = 0;
    fi_cq_data_entry e[8];
    // A lost credit or completion shows up as no progress at all: give up after 10 s of it.
    auto last_progress = std::chrono::steady_clock::now();
    while (total < 2 * kPerProducer && !failed && !out_of_order && bad_read == Code::kOk) {
      Result<size_t> r = cq->read(e, 8, nullptr);
      if (!r.ok()) {
        if (r.status().code() != Code::kAgain) bad_read = r.status().code();
        if (std::chrono::steady_clock::now() - last_progress > std::chrono::seconds(10)) {
          stalled = true;
          break;
        }
        std::this_thread::yield();
        continue;
      }
      last_progress = std::chrono::steady_clock::now();
      for (size_t i = 0; i < *r; ++i) {
        const uint64_t who = e[i].data >> 32;
        if (who > 1 || (e[i].data & 0xFFFFFFFFu) != next[who]) {
          out_of_order = true;
          break;
        }
        ++next[who];
      }
      total += *r;
    }
    stop = true;  // the jthreads join here, whatever happened above
  }
  EXPECT_FALSE(stalled) << "no completion arrived for 10 s after " << next[0] << " and " << next[1];
  EXPECT_EQ(bad_read, Code::kOk);
  EXPECT_FALSE(out_of_order) << "after " << next[0] << " and " << next[1];
  EXPECT_FALSE(failed);
  EXPECT_EQ(next[0], kPerProducer);
  EXPECT_EQ(next[1], kPerProducer);
  fi_cq_data_entry e;
  EXPECT_EQ(cq->read(&e, 1, nullptr).status().code(), Code::kAgain);
  EXPECT_EQ(reserve_all(*cq), 16u);
}

}  // namespace
}  // namespace fabq::core
