// Lost-wake-up hunts through libfabric, one blocked reader against one writer that strikes after
// a random 0-50 us delay, many times over, with every wait object that can block:
//   - fi_eq_sread woken by fi_eq_write;
//   - fi_cntr_wait woken by fi_cntr_add;
//   - fi_trywait + epoll_wait on an FD EQ (and an FD counter) woken by another thread;
//   - four threads blocked in fi_cq_sread, all woken by one fi_cq_signal.
// Every wait is bounded by 5000 ms: a lost wake-up fails the iteration, it never hangs the test.
// Also built with ThreadSanitizer (races inside libfabric itself are suppressed by api_env.cc).
#include <rdma/fi_domain.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fabq_fixture.h"
#include "support/striker.h"

namespace fabq::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kIterations = 100;
constexpr int kSignalRounds = 20;
#else
constexpr int kIterations = 500;
constexpr int kSignalRounds = 100;
#endif
constexpr int kTimeoutMs = 5000;

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

std::string wait_name(fi_wait_obj w) {
  switch (w) {
    case FI_WAIT_UNSPEC:
      return "Unspec";
    case FI_WAIT_FD:
      return "Fd";
    case FI_WAIT_POLLFD:
      return "PollFd";
    case FI_WAIT_MUTEX_COND:
      return "MutexCond";
    case FI_WAIT_YIELD:
      return "Yield";
    default:
      return "Other";
  }
}

constexpr fi_wait_obj kBlockingWaits[] = {FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                          FI_WAIT_MUTEX_COND, FI_WAIT_YIELD};

fi_eq_entry entry_with(uint64_t data) {
  fi_eq_entry e{};
  e.data = data;
  return e;
}

class Wakeup : public FabqTest {
 protected:
  fid_eq* open_write_eq(fi_wait_obj wait) {
    fi_eq_attr attr{};
    attr.flags = FI_WRITE;
    attr.wait_obj = wait;
    return open_eq(attr);
  }
};

class WakeupPerKind : public Wakeup, public ::testing::WithParamInterface<fi_wait_obj> {};

// ---------------------------------------------------------------------------------------------
// fi_eq_sread against fi_eq_write.

TEST_P(WakeupPerKind, EqSreadIsNeverLeftAsleep) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  {
    Striker writer(kIterations, 1, [eq](int i) {
      const fi_eq_entry e = entry_with(static_cast<uint64_t>(i));
      EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
    });
    for (int i = 0; i < kIterations; ++i) {
      writer.arm(i);
      uint32_t event = 0;
      fi_eq_entry e{};
      const auto t0 = Clock::now();
      const ssize_t rc = fi_eq_sread(eq, &event, &e, sizeof(e), kTimeoutMs, 0);
      const int64_t elapsed = ms_since(t0);
      ASSERT_EQ(rc, static_cast<ssize_t>(sizeof(e)))
          << "iteration " << i << " after " << elapsed << " ms: " << fi_strerror(-rc);
      // sread takes a last look at its timeout, so a lost wake-up still returns the event:
      // only the time tells.
      ASSERT_LT(elapsed, kTimeoutMs) << "iteration " << i << ": woken by the timeout only";
      ASSERT_EQ(event, static_cast<uint32_t>(FI_NOTIFY));
      ASSERT_EQ(e.data, static_cast<uint64_t>(i));
    }
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// fi_cntr_wait against fi_cntr_add.

TEST_P(WakeupPerKind, CntrWaitIsNeverLeftAsleep) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = GetParam();
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  {
    Striker adder(kIterations, 2, [cntr](int) { EXPECT_EQ(fi_cntr_add(cntr, 1), 0); });
    for (int i = 0; i < kIterations; ++i) {
      adder.arm(i);
      const auto t0 = Clock::now();
      const int rc = fi_cntr_wait(cntr, static_cast<uint64_t>(i) + 1, kTimeoutMs);
      const int64_t elapsed = ms_since(t0);
      ASSERT_EQ(rc, 0) << "iteration " << i << " after " << elapsed << " ms: " << fi_strerror(-rc);
      ASSERT_LT(elapsed, kTimeoutMs) << "iteration " << i << ": woken by the timeout only";
      ASSERT_GE(fi_cntr_read(cntr), static_cast<uint64_t>(i) + 1);
    }
  }
  EXPECT_EQ(fi_cntr_read(cntr), static_cast<uint64_t>(kIterations));
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

// Two waiters with different thresholds on one counter; each must be woken when its own
// threshold is reached, never left behind by the other's wake-up.
TEST_P(WakeupPerKind, CntrWaitersWithDifferentThresholds) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = GetParam();
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  const int rounds = kIterations / 5;
  std::atomic<int> failures{0};
  for (int r = 0; r < rounds && failures.load() == 0; ++r) {
    const uint64_t base = fi_cntr_read(cntr);
    // A wait that only ends at its timeout (even with the threshold reached by then) failed.
    auto waiter = [&](uint64_t threshold) {
      const auto t0 = Clock::now();
      if (fi_cntr_wait(cntr, threshold, kTimeoutMs) != 0 || ms_since(t0) >= kTimeoutMs) {
        failures.fetch_add(1);
      }
    };
    std::thread far(waiter, base + 2);
    std::thread near(waiter, base + 1);
    EXPECT_EQ(fi_cntr_add(cntr, 1), 0);
    std::this_thread::yield();
    EXPECT_EQ(fi_cntr_add(cntr, 1), 0);
    near.join();
    far.join();
    EXPECT_EQ(failures.load(), 0) << "round " << r;
  }
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(All, WakeupPerKind, ::testing::ValuesIn(kBlockingWaits),
                         [](const auto& info) { return wait_name(info.param); });

// ---------------------------------------------------------------------------------------------
// fi_trywait + epoll_wait.

class EpollFd {
 public:
  explicit EpollFd(int fd) : ep_(epoll_create1(EPOLL_CLOEXEC)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ok_ = ep_ >= 0 && epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  ~EpollFd() {
    if (ep_ >= 0) close(ep_);
  }
  EpollFd(const EpollFd&) = delete;
  EpollFd& operator=(const EpollFd&) = delete;
  bool ok() const { return ok_; }
  int wait(int timeout_ms) {
    epoll_event out{};
    int n;
    do {
      n = epoll_wait(ep_, &out, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    return n;
  }

 private:
  int ep_;
  bool ok_ = false;
};

TEST_F(Wakeup, TrywaitEpollOnEqIsNeverLeftAsleep) {
  fid_eq* eq = open_write_eq(FI_WAIT_FD);
  ASSERT_NE(eq, nullptr);
  int fd = -1;
  ASSERT_EQ(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
  EpollFd ep(fd);
  ASSERT_TRUE(ep.ok());
  {
    Striker writer(kIterations, 3, [eq](int i) {
      const fi_eq_entry e = entry_with(static_cast<uint64_t>(i));
      EXPECT_EQ(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0), static_cast<ssize_t>(sizeof(e)));
    });
    fid* f = &eq->fid;
    for (int i = 0; i < kIterations; ++i) {
      ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0) << "iteration " << i << ": nothing is queued";
      writer.arm(i);
      ASSERT_EQ(ep.wait(kTimeoutMs), 1) << "lost wake-up in iteration " << i;
      uint32_t event = 0;
      fi_eq_entry e{};
      // The writer stores the event before it makes the fd readable: it is there.
      const ssize_t rc = fi_eq_read(eq, &event, &e, sizeof(e), 0);
      ASSERT_EQ(rc, static_cast<ssize_t>(sizeof(e))) << "iteration " << i;
      ASSERT_EQ(e.data, static_cast<uint64_t>(i));
    }
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(Wakeup, TrywaitEpollOnCounterIsNeverLeftAsleep) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = FI_WAIT_FD;
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  int fd = -1;
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETWAIT, &fd), 0);
  EpollFd ep(fd);
  ASSERT_TRUE(ep.ok());
  {
    Striker adder(kIterations, 4, [cntr](int) { EXPECT_EQ(fi_cntr_add(cntr, 1), 0); });
    fid* f = &cntr->fid;
    for (int i = 0; i < kIterations; ++i) {
      ASSERT_EQ(fi_trywait(fabric_, &f, 1), 0) << "iteration " << i;
      adder.arm(i);
      ASSERT_EQ(ep.wait(kTimeoutMs), 1) << "lost wake-up in iteration " << i;
      // The add changes the value before it makes the fd readable.
      ASSERT_EQ(fi_cntr_read(cntr), static_cast<uint64_t>(i) + 1) << "iteration " << i;
    }
  }
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// Four threads asleep in fi_cq_sread, one fi_cq_signal: every one of them returns.

// The scheduler state of thread `tid` of this process ('S' = asleep), or 0 if unknown.
char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return 0;
  return line[paren + 2];
}

class SignalAll : public Wakeup, public ::testing::WithParamInterface<fi_wait_obj> {};

TEST_P(SignalAll, OneSignalWakesFourSleepers) {
  constexpr int kSleepers = 4;
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.wait_obj = GetParam();
  fid_cq* cq = open_cq(attr);
  ASSERT_NE(cq, nullptr);

  std::atomic<int> round{-1};
  std::atomic<bool> stop{false};
  std::atomic<int> entered{0};
  std::atomic<int> finished{0};
  std::array<std::atomic<pid_t>, kSleepers> tids{};
  std::array<std::atomic<ssize_t>, kSleepers> results{};
  std::array<std::atomic<int64_t>, kSleepers> slept_ms{};

  std::vector<std::thread> sleepers;
  for (int k = 0; k < kSleepers; ++k) {
    sleepers.emplace_back([&, k] {
      tids[k].store(gettid(), std::memory_order_release);
      for (int r = 0; r < kSignalRounds; ++r) {
        while (round.load(std::memory_order_acquire) < r) {
          if (stop.load(std::memory_order_acquire)) return;
          std::this_thread::yield();
        }
        entered.fetch_add(1, std::memory_order_acq_rel);
        fi_cq_entry e{};
        const auto t0 = Clock::now();
        results[k].store(fi_cq_sread(cq, &e, 1, nullptr, kTimeoutMs), std::memory_order_relaxed);
        slept_ms[k].store(ms_since(t0), std::memory_order_relaxed);
        finished.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }

  int rounds_all_asleep = 0;
  for (int r = 0; r < kSignalRounds; ++r) {
    entered.store(0, std::memory_order_relaxed);
    finished.store(0, std::memory_order_relaxed);
    round.store(r, std::memory_order_release);
    // Wait until all four are inside fi_cq_sread and asleep (bounded: the check is best
    // effort, a thread that is still on its way in would see the signal as pending anyway).
    const auto t0 = Clock::now();
    bool all_asleep = false;
    while (!all_asleep && ms_since(t0) < 2000) {
      if (entered.load(std::memory_order_acquire) == kSleepers) {
        all_asleep = true;
        for (int k = 0; k < kSleepers; ++k) {
          all_asleep = all_asleep && thread_state(tids[k].load()) == 'S';
        }
      }
      if (!all_asleep) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    rounds_all_asleep += all_asleep ? 1 : 0;
    const auto signalled = Clock::now();
    ASSERT_EQ(fi_cq_signal(cq), 0);
    while (finished.load(std::memory_order_acquire) < kSleepers &&
           ms_since(signalled) < 3 * kTimeoutMs) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    const int64_t waited = ms_since(signalled);
    bool ok = finished.load(std::memory_order_acquire) == kSleepers;
    EXPECT_TRUE(ok) << "round " << r << ": sleepers stuck in fi_cq_sread";
    for (int k = 0; k < kSleepers && ok; ++k) {
      EXPECT_EQ(results[k].load(), -FI_EAGAIN) << "round " << r << " sleeper " << k;
      if (slept_ms[k].load() >= kTimeoutMs) {
        ADD_FAILURE() << "round " << r << " sleeper " << k << " (all asleep: " << all_asleep
                      << ") slept " << slept_ms[k].load()
                      << " ms: it missed the signal and ran into its timeout";
        ok = false;
      }
    }
    EXPECT_LT(waited, kTimeoutMs);
    if (!ok) break;
  }
  // The scheduler must have shown all four asleep at least sometimes, or this test tested
  // nothing (/proc/self/task/<tid>/stat unreadable?).
  EXPECT_GT(rounds_all_asleep, 0);
  RecordProperty("rounds_all_asleep", rounds_all_asleep);
  // After a failure: threads waiting for the next round leave, any still asleep are signalled
  // (or run into their timeout).
  stop.store(true, std::memory_order_release);
  fi_cq_signal(cq);
  for (auto& t : sleepers) t.join();
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(All, SignalAll,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                           FI_WAIT_MUTEX_COND),
                         [](const auto& info) { return wait_name(info.param); });

}  // namespace
}  // namespace fabq::testing
