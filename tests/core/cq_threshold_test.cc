// CompletionQueue sread with a threshold (fi_cq_sread with FI_CQ_COND_THRESHOLD): it returns
// when at least `threshold` entries are ready (clamped to count and capacity), when an error
// entry reaches the head of the wait, or at the timeout with whatever is there.
//
// Timing is never a pass condition here except as a generous hang detector: long waits use a
// 10 s timeout and are expected to end well within 5 s; the only short timeout (50 ms) checks
// what is returned at the timeout, not when. Entries a test needs to be present before sread
// starts are written before it; a second thread writes the ones that must arrive during it.
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/cq.h"
#include "core/wait.h"
#include "core/wait_set.h"

namespace fabq::core {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kLongTimeoutMs = 10000;  // an sread that uses it all is a bug...
constexpr auto kHangBound = 5s;        // ...detected by this bound on its duration
constexpr int kShortTimeoutMs = 50;    // for "returns at the timeout with what is there"
constexpr auto kWriterDelay = 20ms;    // lets the reader get into its wait first (usually)

std::unique_ptr<CompletionQueue> make_cq(WaitKind wait, size_t size = 64) {
  CqConfig config;
  config.size = size;
  config.format = CqFormat::kData;
  config.wait = wait;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Completion completion(uint64_t i) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(0x3000 + i * 16);
  c.flags = FI_RECV | FI_MSG;
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

void write_range(CompletionQueue& cq, uint64_t first, uint64_t n) {
  for (uint64_t i = first; i < first + n; ++i) EXPECT_TRUE(cq.write(completion(i)).ok()) << i;
}

// Writes entries [first, first + n) from another thread, each after `gap`.
std::jthread write_later(CompletionQueue& cq, uint64_t first, uint64_t n,
                         std::chrono::milliseconds gap = kWriterDelay) {
  return std::jthread([&cq, first, n, gap] {
    for (uint64_t i = first; i < first + n; ++i) {
      std::this_thread::sleep_for(gap);
      EXPECT_TRUE(cq.write(completion(i)).ok()) << i;
    }
  });
}

std::jthread write_error_later(CompletionQueue& cq, uint64_t i) {
  return std::jthread([&cq, i] {
    std::this_thread::sleep_for(kWriterDelay);
    EXPECT_TRUE(cq.write_error(error_entry(i)).ok());
  });
}

// Guards sreads that may wait forever (or would, if timeouts were broken): once the test body
// has run for `after`, signals the queue every 100 ms until the body is done, so that a stuck
// sread returns (kAgain or a short count, which fails the test) instead of hanging. Always
// joined by its destructor.
class HangGuard {
 public:
  HangGuard(CompletionQueue& cq, std::chrono::milliseconds after)
      : thread_([this, &cq, after] {
          std::unique_lock lock(mu_);
          if (cv_.wait_for(lock, after, [this] { return done_; })) return;
          fired_ = true;
          do {
            (void)cq.signal();
          } while (!cv_.wait_for(lock, 100ms, [this] { return done_; }));
        }) {}
  ~HangGuard() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool fired() {
    std::lock_guard lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

struct Timed {
  Result<size_t> result;
  Clock::duration elapsed;
};

Timed timed_sread(CompletionQueue& cq, fi_cq_data_entry* buf, size_t count, size_t threshold,
                  int timeout_ms, fi_addr_t* src = nullptr) {
  const auto start = Clock::now();
  Result<size_t> r = cq.sread(buf, count, src, threshold, timeout_ms);
  return {r, Clock::now() - start};
}

class CqThreshold : public ::testing::TestWithParam<WaitKind> {
 protected:
  void SetUp() override {
    cq_ = make_cq(GetParam());
    ASSERT_NE(cq_, nullptr);
  }
  CompletionQueue& cq() { return *cq_; }
  std::unique_ptr<CompletionQueue> cq_;
};

TEST_P(CqThreshold, ReturnsWhenAtLeastThresholdEntriesAreReady) {
  write_range(cq(), 0, 3);  // one short of the threshold
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(cq(), 3, 1);
    t = timed_sread(cq(), e, 16, 4, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok()) << static_cast<int>(t.result.status().code());
  ASSERT_EQ(*t.result, 4u) << "returned before the threshold was reached";
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(e[i].data, i);
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, DoesNotReturnWhileEntriesTrickleInBelowThreshold) {
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(cq(), 0, 5);
    t = timed_sread(cq(), e, 16, 5, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(e[i].data, i);
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, ReturnsAtOnceWhenThresholdIsAlreadyMet) {
  write_range(cq(), 0, 6);
  fi_cq_data_entry e[16];
  Timed t = timed_sread(cq(), e, 16, 4, kLongTimeoutMs);
  ASSERT_TRUE(t.result.ok());
  EXPECT_EQ(*t.result, 6u) << "returns every ready entry up to count, not just the threshold";
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, ThresholdIsClampedToCount) {
  write_range(cq(), 0, 2);
  fi_cq_data_entry e[3];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(cq(), 2, 1);
    t = timed_sread(cq(), e, 3, 100, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(e[i].data, i);
  EXPECT_LT(t.elapsed, kHangBound) << "waited for a threshold larger than count";
}

TEST_P(CqThreshold, ThresholdIsClampedToCapacity) {
  auto small = make_cq(GetParam(), 4);
  ASSERT_NE(small, nullptr);
  ASSERT_EQ(small->capacity(), 4u);
  write_range(*small, 0, 3);
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(*small, 3, 1);
    t = timed_sread(*small, e, 16, 100, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 4u);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(e[i].data, i);
  EXPECT_LT(t.elapsed, kHangBound) << "waited for more entries than the queue can hold";
}

TEST_P(CqThreshold, ThresholdZeroMeansAnyEntry) {
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(cq(), 0, 1);
    t = timed_sread(cq(), e, 16, 0, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 1u);
  EXPECT_EQ(e[0].data, 0u);
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, ThresholdOneMeansAnyEntry) {
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_later(cq(), 0, 1);
    t = timed_sread(cq(), e, 16, 1, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 1u);
  EXPECT_EQ(e[0].data, 0u);
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, ReturnsAtTimeoutWithWhatIsThere) {
  write_range(cq(), 0, 2);
  fi_cq_data_entry e[16];
  Timed t = timed_sread(cq(), e, 16, 8, kShortTimeoutMs);
  ASSERT_TRUE(t.result.ok()) << static_cast<int>(t.result.status().code());
  ASSERT_EQ(*t.result, 2u);
  EXPECT_EQ(e[0].data, 0u);
  EXPECT_EQ(e[1].data, 1u);
  EXPECT_EQ(cq().pending(), 0u) << "what was returned must have been consumed";
}

TEST_P(CqThreshold, ReturnsAgainAtTimeoutWhenNothingIsReady) {
  fi_cq_data_entry e[16];
  Timed t = timed_sread(cq(), e, 16, 4, kShortTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kAgain);
  t = timed_sread(cq(), e, 16, 0, kShortTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kAgain);
}

TEST_P(CqThreshold, ErrorEntryEndsTheWaitWithTheEntriesBeforeIt) {
  write_range(cq(), 0, 2);
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_error_later(cq(), 2);
    t = timed_sread(cq(), e, 16, 8, kLongTimeoutMs);
  }
  ASSERT_TRUE(t.result.ok()) << static_cast<int>(t.result.status().code());
  ASSERT_EQ(*t.result, 2u);
  EXPECT_EQ(e[0].data, 0u);
  EXPECT_EQ(e[1].data, 1u);
  EXPECT_LT(t.elapsed, kHangBound) << "an error entry must end a threshold wait";
  EXPECT_EQ(cq().read(e, 16, nullptr).status().code(), Code::kAvail);
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq().read_error(&err, 0).ok());
  EXPECT_EQ(err.data, 2u);
}

TEST_P(CqThreshold, ErrorEntryFirstEndsTheWaitWithAvail) {
  fi_cq_data_entry e[16];
  Timed t{Code::kOk, {}};
  {
    std::jthread writer = write_error_later(cq(), 0);
    t = timed_sread(cq(), e, 16, 8, kLongTimeoutMs);
  }
  EXPECT_EQ(t.result.status().code(), Code::kAvail);
  EXPECT_LT(t.elapsed, kHangBound) << "an error entry must end a threshold wait";
  fi_cq_err_entry err{};
  ASSERT_TRUE(cq().read_error(&err, 0).ok());
  EXPECT_EQ(err.data, 0u);
  EXPECT_EQ(err.err, FI_EIO);
}

TEST_P(CqThreshold, ErrorAlreadyWithinReachEndsTheWaitAtOnce) {
  write_range(cq(), 0, 1);
  ASSERT_TRUE(cq().write_error(error_entry(1)).ok());
  write_range(cq(), 2, 1);
  fi_cq_data_entry e[16];
  Timed t = timed_sread(cq(), e, 16, 8, kLongTimeoutMs);
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 1u);
  EXPECT_EQ(e[0].data, 0u);
  t = timed_sread(cq(), e, 16, 8, kLongTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kAvail);
  EXPECT_LT(t.elapsed, kHangBound);
}

TEST_P(CqThreshold, TimeoutZeroDoesNotBlock) {
  HangGuard guard(cq(), 20s);
  fi_cq_data_entry e[16];
  Timed t = timed_sread(cq(), e, 16, 0, 0);
  EXPECT_EQ(t.result.status().code(), Code::kAgain);
  EXPECT_LT(t.elapsed, kHangBound);
  write_range(cq(), 0, 2);
  t = timed_sread(cq(), e, 16, 8, 0);
  ASSERT_TRUE(t.result.ok());
  EXPECT_EQ(*t.result, 2u) << "timeout 0 returns what is there, below the threshold";
  EXPECT_LT(t.elapsed, kHangBound);
  EXPECT_FALSE(guard.fired());
}

TEST_P(CqThreshold, NegativeTimeoutWaitsForever) {
  fi_cq_data_entry e[16];
  Result<size_t> r = Code::kOk;
  {
    HangGuard guard(cq(), 20s);
    {
      std::jthread writer = write_later(cq(), 0, 1, 100ms);
      r = cq().sread(e, 16, nullptr, 1, -1);
    }
    EXPECT_FALSE(guard.fired()) << "sread(-1) was still blocked after the entry was written";
  }
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].data, 0u);
}

TEST_P(CqThreshold, NegativeTimeoutWaitsForTheThreshold) {
  write_range(cq(), 0, 1);
  fi_cq_data_entry e[16];
  Result<size_t> r = Code::kOk;
  {
    HangGuard guard(cq(), 20s);
    {
      std::jthread writer = write_later(cq(), 1, 2, 30ms);
      r = cq().sread(e, 16, nullptr, 3, -1);
    }
    EXPECT_FALSE(guard.fired());
  }
  ASSERT_TRUE(r.ok()) << static_cast<int>(r.status().code());
  ASSERT_EQ(*r, 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(e[i].data, i);
}

TEST_P(CqThreshold, SreadFromReportsEachEntrysSourceAddress) {
  for (uint64_t i = 0; i < 3; ++i) {
    Completion c = completion(i);
    if (i != 1) c.src_addr = 70 + i;
    ASSERT_TRUE(cq().write(c).ok());
  }
  fi_cq_data_entry e[4];
  fi_addr_t src[4] = {1234, 1234, 1234, 1234};
  Timed t = timed_sread(cq(), e, 4, 3, kLongTimeoutMs, src);
  ASSERT_TRUE(t.result.ok());
  ASSERT_EQ(*t.result, 3u);
  EXPECT_EQ(src[0], 70u);
  EXPECT_EQ(src[1], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(src[2], 72u);
}

TEST_P(CqThreshold, ZeroCountOrNullBufIsInval) {
  write_range(cq(), 0, 1);
  fi_cq_data_entry e[1];
  EXPECT_EQ(cq().sread(e, 0, nullptr, 0, 0).status().code(), Code::kInval);
  EXPECT_EQ(cq().sread(nullptr, 1, nullptr, 0, 0).status().code(), Code::kInval);
  EXPECT_EQ(cq().pending(), 1u);
}

INSTANTIATE_TEST_SUITE_P(WaitKinds, CqThreshold,
                         ::testing::Values(WaitKind::kUnspec, WaitKind::kFd, WaitKind::kMutexCond,
                                           WaitKind::kYield),
                         [](const ::testing::TestParamInfo<WaitKind>& info) {
                           return std::string(wait_kind_name(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// No wait object of its own: sread is not supported.

TEST(CqSread, IsNoSysWithoutAWaitObjectPromptly) {
  auto cq = make_cq(WaitKind::kNone);
  ASSERT_NE(cq, nullptr);
  fi_cq_data_entry e[4];
  Timed t = timed_sread(*cq, e, 4, 0, kLongTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kNoSys);
  EXPECT_LT(t.elapsed, kHangBound);
  write_range(*cq, 0, 2);
  t = timed_sread(*cq, e, 4, 2, kLongTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kNoSys);
  EXPECT_LT(t.elapsed, kHangBound);
  EXPECT_EQ(cq->pending(), 2u) << "a refused sread consumes nothing";
}

TEST(CqSread, IsNoSysOnAWaitSetPromptly) {
  auto set = WaitSet::create(WaitKind::kUnspec);  // declared first: outlives the queue
  ASSERT_TRUE(set.ok());
  CqConfig config;
  config.size = 8;
  config.format = CqFormat::kData;
  config.wait = WaitKind::kSet;
  config.wait_set = set.value().get();
  auto created = CompletionQueue::create(config);
  ASSERT_TRUE(created.ok());
  CompletionQueue& cq = *created.value();
  fi_cq_data_entry e[4];
  Timed t = timed_sread(cq, e, 4, 0, kLongTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kNoSys);
  EXPECT_LT(t.elapsed, kHangBound);
  write_range(cq, 0, 1);
  t = timed_sread(cq, e, 4, 0, kLongTimeoutMs);
  EXPECT_EQ(t.result.status().code(), Code::kNoSys);
  EXPECT_LT(t.elapsed, kHangBound);
}

}  // namespace
}  // namespace fabq::core
