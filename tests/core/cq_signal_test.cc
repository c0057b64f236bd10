// CompletionQueue signal (fi_cq_signal): every thread blocked in sread returns -FI_EAGAIN; a
// signal nobody is waiting for makes the next sread, and only the next one, return at once;
// without a wait object it is not supported.
//
// Blocked readers use a 10 s timeout so that a lost wake-up fails the test (the reader returns
// kAgain only at its timeout, which the 5 s bound on its duration catches) instead of hanging.
// Before signalling, the test makes sure every reader is really inside sread: sleeping in the
// futex for the sleeping kinds, or burning CPU in the sched_yield loop for kYield.
#include <gtest/gtest.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cq.h"
#include "core/wait.h"

namespace fabq::core {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kLongTimeoutMs = 10000;
constexpr auto kHangBound = 5s;
constexpr int kShortTimeoutMs = 50;
constexpr int kReaders = 4;

std::unique_ptr<CompletionQueue> make_cq(WaitKind wait, size_t size = 64) {
  CqConfig config;
  config.size = size;
  config.format = CqFormat::kContext;
  config.wait = wait;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

Completion completion(uint64_t i) {
  Completion c;
  c.op_context = reinterpret_cast<void*>(0x6000 + i * 16);
  return c;
}

int64_t thread_cpu_ns(clockid_t clock) {
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// True when the thread is blocked in the futex system call (how fabq's sleepers sleep);
// nullopt when /proc cannot tell.
std::optional<bool> in_futex(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  std::string first;
  if (!(f >> first)) return std::nullopt;
  return first == std::to_string(SYS_futex);
}

// One thread blocked in sread on an empty queue.
struct Reader {
  std::atomic<pid_t> tid{0};
  std::atomic<int64_t> cpu_at_start{-1};  // its CPU clock just before it called sread
  std::atomic<bool> returned{false};
  Code code = Code::kOk;  // read after join
  size_t n = 0;
  Clock::duration elapsed{};
  std::jthread thread;

  void start(CompletionQueue& cq, size_t threshold) {
    thread = std::jthread([this, &cq, threshold] {
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      cpu_at_start = thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
      fi_cq_entry e[8];
      const auto begin = Clock::now();
      Result<size_t> r = cq.sread(e, 8, nullptr, threshold, kLongTimeoutMs);
      elapsed = Clock::now() - begin;
      code = r.status().code();
      n = r.ok() ? *r : 0;
      returned = true;
    });
  }
};

// Waits (bounded) until every reader is inside sread and blocked there.
void wait_until_blocked(std::array<Reader, kReaders>& readers, WaitKind kind) {
  const auto give_up = Clock::now() + 3s;
  for (Reader& r : readers) {
    while (r.cpu_at_start.load() < 0 && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
  }
  auto blocked = [&](Reader& r) -> bool {
    if (r.returned) return true;  // nothing to wait for; the test will report it
    if (kind == WaitKind::kYield) {
      // The sched_yield loop burns CPU; the few instructions before sread do not.
      clockid_t clock;
      if (pthread_getcpuclockid(r.thread.native_handle(), &clock) != 0) return true;
      const int64_t now = thread_cpu_ns(clock);
      return now < 0 || now - r.cpu_at_start.load() >= 20'000'000;
    }
    // Stable twice in a row, so that a transient futex elsewhere does not count.
    std::optional<bool> a = in_futex(r.tid);
    if (!a) return true;
    if (!*a) return false;
    std::this_thread::sleep_for(2ms);
    std::optional<bool> b = in_futex(r.tid);
    return !b || *b;
  };
  for (Reader& r : readers) {
    while (!blocked(r) && Clock::now() < give_up) std::this_thread::sleep_for(2ms);
  }
  if (kind != WaitKind::kYield) std::this_thread::sleep_for(10ms);
}

class CqSignal : public ::testing::TestWithParam<WaitKind> {
 protected:
  void SetUp() override {
    cq_ = make_cq(GetParam());
    ASSERT_NE(cq_, nullptr);
  }
  CompletionQueue& cq() { return *cq_; }

  // Blocks kReaders threads in sread with the given thresholds, signals once, joins them.
  void block_readers_and_signal(std::array<Reader, kReaders>& readers,
                                const std::array<size_t, kReaders>& thresholds) {
    for (int i = 0; i < kReaders; ++i) readers[i].start(cq(), thresholds[i]);
    wait_until_blocked(readers, GetParam());
    for (Reader& r : readers) EXPECT_FALSE(r.returned) << "returned before the signal";
    EXPECT_TRUE(cq().signal().ok());
    for (Reader& r : readers) r.thread.join();
  }

  std::unique_ptr<CompletionQueue> cq_;
};

TEST_P(CqSignal, WakesEveryThreadBlockedInSread) {
  std::array<Reader, kReaders> readers;
  block_readers_and_signal(readers, {0, 0, 0, 0});
  for (int i = 0; i < kReaders; ++i) {
    EXPECT_EQ(readers[i].code, Code::kAgain) << "reader " << i;
    EXPECT_LT(readers[i].elapsed, kHangBound) << "reader " << i << " was not woken";
  }
}

TEST_P(CqSignal, WakesThreadsBlockedInThresholdWaits) {
  std::array<Reader, kReaders> readers;
  block_readers_and_signal(readers, {1, 2, 4, 8});
  for (int i = 0; i < kReaders; ++i) {
    EXPECT_EQ(readers[i].code, Code::kAgain) << "reader " << i;
    EXPECT_LT(readers[i].elapsed, kHangBound) << "reader " << i << " was not woken";
  }
}

TEST_P(CqSignal, SignalAnsweredByBlockedThreadsDoesNotCutTheNextSreadShort) {
  std::array<Reader, kReaders> readers;
  block_readers_and_signal(readers, {0, 0, 0, 0});
  for (int i = 0; i < kReaders; ++i) ASSERT_EQ(readers[i].code, Code::kAgain) << i;
  // The signal was consumed by the readers it woke: this sread waits for the entry.
  fi_cq_entry e[4];
  Result<size_t> r = Code::kOk;
  {
    std::jthread writer([this] {
      std::this_thread::sleep_for(50ms);
      EXPECT_TRUE(cq().write(completion(1)).ok());
    });
    r = cq().sread(e, 4, nullptr, 1, kLongTimeoutMs);
  }
  ASSERT_TRUE(r.ok()) << "returned " << static_cast<int>(r.status().code())
                      << " instead of waiting for the entry";
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(1).op_context);
}

TEST_P(CqSignal, WithNobodyWaitingMakesTheNextSreadReturnAtOnce) {
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[4];
  const auto start = Clock::now();
  Result<size_t> r = cq().sread(e, 4, nullptr, 0, kLongTimeoutMs);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_LT(Clock::now() - start, kHangBound) << "the pending signal was lost";
}

TEST_P(CqSignal, WithNobodyWaitingMakesTheNextThresholdSreadReturnAtOnce) {
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[4];
  const auto start = Clock::now();
  Result<size_t> r = cq().sread(e, 4, nullptr, 4, kLongTimeoutMs);
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_LT(Clock::now() - start, kHangBound);
}

TEST_P(CqSignal, PendingSignalStillReturnsTheEntriesThatAreReady) {
  ASSERT_TRUE(cq().write(completion(0)).ok());
  ASSERT_TRUE(cq().write(completion(1)).ok());
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[8];
  const auto start = Clock::now();
  Result<size_t> r = cq().sread(e, 8, nullptr, 8, kLongTimeoutMs);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 2u);
  EXPECT_EQ(e[0].op_context, completion(0).op_context);
  EXPECT_EQ(e[1].op_context, completion(1).op_context);
  EXPECT_LT(Clock::now() - start, kHangBound);
}

TEST_P(CqSignal, WithNobodyWaitingIsAnsweredByOnlyTheNextSread) {
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[4];
  EXPECT_EQ(cq().sread(e, 4, nullptr, 0, kLongTimeoutMs).status().code(), Code::kAgain);
  // The following sread times out normally: it cannot return before its deadline.
  const auto start = Clock::now();
  Result<size_t> r = cq().sread(e, 4, nullptr, 0, kShortTimeoutMs);
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(r.status().code(), Code::kAgain);
  EXPECT_GE(elapsed, std::chrono::milliseconds(kShortTimeoutMs)) << "the signal was answered twice";
}

TEST_P(CqSignal, AfterTheSignalIsAnsweredALaterSreadWaitsForEntries) {
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[4];
  EXPECT_EQ(cq().sread(e, 4, nullptr, 0, kLongTimeoutMs).status().code(), Code::kAgain);
  Result<size_t> r = Code::kOk;
  {
    std::jthread writer([this] {
      std::this_thread::sleep_for(50ms);
      EXPECT_TRUE(cq().write(completion(7)).ok());
    });
    r = cq().sread(e, 4, nullptr, 1, kLongTimeoutMs);
  }
  ASSERT_TRUE(r.ok()) << "returned " << static_cast<int>(r.status().code())
                      << " instead of waiting for the entry";
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(7).op_context);
}

TEST_P(CqSignal, DoesNotDisturbPlainReads) {
  ASSERT_TRUE(cq().write(completion(0)).ok());
  ASSERT_TRUE(cq().signal().ok());
  fi_cq_entry e[4];
  Result<size_t> r = cq().read(e, 4, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(e[0].op_context, completion(0).op_context);
}

INSTANTIATE_TEST_SUITE_P(WaitKinds, CqSignal,
                         ::testing::Values(WaitKind::kUnspec, WaitKind::kFd, WaitKind::kPollFd,
                                           WaitKind::kMutexCond, WaitKind::kYield),
                         [](const ::testing::TestParamInfo<WaitKind>& info) {
                           return std::string(wait_kind_name(info.param));
                         });

TEST(CqSignalNone, IsNoSysWithoutAWaitObject) {
  auto cq = make_cq(WaitKind::kNone);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(cq->signal().code(), Code::kNoSys);
  // And it left nothing behind: the queue still reads normally.
  ASSERT_TRUE(cq->write(completion(0)).ok());
  fi_cq_entry e[2];
  Result<size_t> r = cq->read(e, 2, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
}

}  // namespace
}  // namespace fabq::core
