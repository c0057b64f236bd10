// Wait objects of EQs, CQs and counters through libfabric: FI_GETWAITOBJ reports the kind that
// was opened, FI_GETWAIT hands out what each kind promises (fi_eq(3), fi_cq(3), fi_cntr(3),
// fi_control(3)), and every blocking call (fi_eq_sread, fi_cq_sread, fi_cntr_wait) honours its
// timeout with every kind that can block: 0 returns at once, 50 ms waits at least 50 ms, a
// negative timeout waits until another thread writes (EQ), signals (CQ) or adds (counter).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fi_domain.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

enum class Kind { kEq, kCq, kCntr };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kEq:
      return "Eq";
    case Kind::kCq:
      return "Cq";
    case Kind::kCntr:
      return "Cntr";
  }
  return "?";
}

void PrintTo(Kind k, std::ostream* os) {
  *os << kind_name(k);
}

const char* wait_name(fi_wait_obj w) {
  switch (w) {
    case FI_WAIT_NONE:
      return "None";
    case FI_WAIT_UNSPEC:
      return "Unspec";
    case FI_WAIT_SET:
      return "Set";
    case FI_WAIT_FD:
      return "Fd";
    case FI_WAIT_MUTEX_COND:
      return "MutexCond";
    case FI_WAIT_YIELD:
      return "Yield";
    case FI_WAIT_POLLFD:
      return "PollFd";
  }
  return "Unknown";
}

constexpr fi_wait_obj kAllWaits[] = {FI_WAIT_NONE, FI_WAIT_UNSPEC,     FI_WAIT_FD,   FI_WAIT_POLLFD,
                                     FI_WAIT_SET,  FI_WAIT_MUTEX_COND, FI_WAIT_YIELD};
constexpr fi_wait_obj kBlockingWaits[] = {FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                          FI_WAIT_MUTEX_COND, FI_WAIT_YIELD};

// One EQ (opened with FI_WRITE), CQ or counter, seen through the calls that all three share.
struct Target {
  Kind kind;
  fid_eq* eq = nullptr;
  fid_cq* cq = nullptr;
  fid_cntr* cntr = nullptr;

  fid* f() const {
    switch (kind) {
      case Kind::kEq:
        return eq != nullptr ? &eq->fid : nullptr;
      case Kind::kCq:
        return cq != nullptr ? &cq->fid : nullptr;
      case Kind::kCntr:
        return cntr != nullptr ? &cntr->fid : nullptr;
    }
    return nullptr;
  }

  // fi_eq_sread / fi_cq_sread / fi_cntr_wait for one more than the counter holds now.
  ssize_t block(int timeout_ms) const {
    switch (kind) {
      case Kind::kEq: {
        uint32_t event = 0;
        fi_eq_entry entry{};
        return fi_eq_sread(eq, &event, &entry, sizeof(entry), timeout_ms, 0);
      }
      case Kind::kCq: {
        fi_cq_entry entry{};
        return fi_cq_sread(cq, &entry, 1, nullptr, timeout_ms);
      }
      case Kind::kCntr:
        return fi_cntr_wait(cntr, fi_cntr_read(cntr) + 1, timeout_ms);
    }
    return -FI_EOTHER;
  }

  // What ends block(): an event, a signal, an increment.
  int wake() const {
    switch (kind) {
      case Kind::kEq: {
        fi_eq_entry entry{};
        const ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &entry, sizeof(entry), 0);
        return rc == static_cast<ssize_t>(sizeof(entry)) ? 0 : static_cast<int>(rc);
      }
      case Kind::kCq:
        return fi_cq_signal(cq);
      case Kind::kCntr:
        return fi_cntr_add(cntr, 1);
    }
    return -FI_EOTHER;
  }

  // block()'s return when woken by wake(), and at its timeout.
  ssize_t woken_rc() const {
    switch (kind) {
      case Kind::kEq:
        return static_cast<ssize_t>(sizeof(fi_eq_entry));
      case Kind::kCq:
        return -FI_EAGAIN;  // fi_cq_signal: the sread returns -FI_EAGAIN
      case Kind::kCntr:
        return 0;
    }
    return 0;
  }
  ssize_t timeout_rc() const { return kind == Kind::kCntr ? -FI_ETIMEDOUT : -FI_EAGAIN; }
};

class WaitObjectTest : public FabqTest {
 protected:
  void TearDown() override {
    for (auto it = opened_.rbegin(); it != opened_.rend(); ++it) {
      EXPECT_EQ(fi_close(*it), 0);
    }
    opened_.clear();
    if (set_ != nullptr) {
      EXPECT_EQ(fi_close(&set_->fid), 0);
    }
    FabqTest::TearDown();
  }

  // Opens a `kind` object with wait object `wait`; FI_WAIT_SET attaches it to a wait set the
  // test opens on demand. Closed by TearDown.
  Target open(Kind kind, fi_wait_obj wait) {
    Target t{kind};
    fid_wait* set = nullptr;
    if (wait == FI_WAIT_SET) {
      if (set_ == nullptr) {
        fi_wait_attr wa{};
        wa.wait_obj = FI_WAIT_UNSPEC;
        EXPECT_EQ(fi_wait_open(fabric_, &wa, &set_), 0);
      }
      set = set_;
    }
    switch (kind) {
      case Kind::kEq: {
        fi_eq_attr attr{};
        attr.flags = FI_WRITE;
        attr.wait_obj = wait;
        attr.wait_set = set;
        t.eq = open_eq(attr);
        break;
      }
      case Kind::kCq: {
        fi_cq_attr attr{};
        attr.format = FI_CQ_FORMAT_CONTEXT;
        attr.wait_obj = wait;
        attr.wait_set = set;
        t.cq = open_cq(attr);
        break;
      }
      case Kind::kCntr: {
        fi_cntr_attr attr{};
        attr.events = FI_CNTR_EVENTS_COMP;
        attr.wait_obj = wait;
        attr.wait_set = set;
        t.cntr = open_cntr(attr);
        break;
      }
    }
    if (t.f() != nullptr) opened_.push_back(t.f());
    return t;
  }

  std::vector<fid*> opened_;
  fid_wait* set_ = nullptr;
};

struct Outcome {
  ssize_t rc;
  int64_t elapsed_ms;
  bool rescued;  // block() did not return after the first wake: the helper had to repeat it
};

// Calls t.block(timeout_ms) on this thread while another thread calls t.wake() `delay` after
// the start (elapsed_ms counts from before that thread starts, so it is at least `delay` when
// block() really waited for the wake).
// If block() has not returned 10 s after that, the helper keeps waking it (and says so), so a
// lost wake-up fails the test instead of hanging it.
Outcome block_until_woken(const Target& t, int timeout_ms, milliseconds delay) {
  std::atomic<bool> returned{false};
  std::atomic<bool> rescued{false};
  const auto t0 = Clock::now();
  std::thread waker([&] {
    std::this_thread::sleep_for(delay);
    EXPECT_EQ(t.wake(), 0);
    const auto woke = Clock::now();
    while (!returned.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(milliseconds(10));
      if (ms_since(woke) > 10'000) {
        rescued.store(true, std::memory_order_relaxed);
        t.wake();
      }
    }
  });
  const ssize_t rc = t.block(timeout_ms);
  const int64_t elapsed = ms_since(t0);
  returned.store(true, std::memory_order_release);
  waker.join();
  return {rc, elapsed, rescued.load(std::memory_order_relaxed)};
}

// ---------------------------------------------------------------------------------------------
// FI_GETWAITOBJ / FI_GETWAIT, per object type.

class WaitControl : public WaitObjectTest, public ::testing::WithParamInterface<Kind> {};

TEST_P(WaitControl, GetWaitObjReportsTheKindOpened) {
  for (fi_wait_obj w : kAllWaits) {
    SCOPED_TRACE(wait_name(w));
    Target t = open(GetParam(), w);
    ASSERT_NE(t.f(), nullptr);
    fi_wait_obj got = static_cast<fi_wait_obj>(-1);
    EXPECT_EQ(fi_control(t.f(), FI_GETWAITOBJ, &got), 0);
    EXPECT_EQ(got, w);
  }
}

TEST_P(WaitControl, GetWaitOnNoneIsNoSys) {
  Target t = open(GetParam(), FI_WAIT_NONE);
  ASSERT_NE(t.f(), nullptr);
  int fd = -1;
  EXPECT_EQ(fi_control(t.f(), FI_GETWAIT, &fd), -FI_ENOSYS);
}

TEST_P(WaitControl, GetWaitFdGivesAnFdUsableInPollAndEpoll) {
  Target t = open(GetParam(), FI_WAIT_FD);
  ASSERT_NE(t.f(), nullptr);
  int fd = -1;
  ASSERT_EQ(fi_control(t.f(), FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  EXPECT_NE(fcntl(fd, F_GETFD), -1) << "not an open file descriptor";

  pollfd p{fd, POLLIN, 0};
  EXPECT_GE(poll(&p, 1, 0), 0);
  EXPECT_EQ(p.revents & (POLLNVAL | POLLERR), 0);

  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0) << "fd cannot be used with epoll";
  epoll_event out{};
  EXPECT_GE(epoll_wait(ep, &out, 1, 0), 0);
  close(ep);

  int again = -1;
  EXPECT_EQ(fi_control(t.f(), FI_GETWAIT, &again), 0);
  EXPECT_EQ(again, fd) << "the object has one fd";
}

TEST_P(WaitControl, GetWaitPollFdTooSmallThenFilled) {
  Target t = open(GetParam(), FI_WAIT_POLLFD);
  ASSERT_NE(t.f(), nullptr);

  fi_wait_pollfd none{};
  none.nfds = 0;
  none.fd = nullptr;
  EXPECT_EQ(fi_control(t.f(), FI_GETWAIT, &none), -FI_ETOOSMALL);
  EXPECT_EQ(none.nfds, 1u) << "nfds tells the caller how many entries to provide";

  pollfd fds[1] = {{-1, 0, 0}};
  fi_wait_pollfd set{};
  set.nfds = 1;
  set.fd = fds;
  ASSERT_EQ(fi_control(t.f(), FI_GETWAIT, &set), 0);
  EXPECT_EQ(set.nfds, 1u);
  ASSERT_GE(fds[0].fd, 0);
  EXPECT_NE(fds[0].events & POLLIN, 0);
  EXPECT_NE(fcntl(fds[0].fd, F_GETFD), -1);
  fds[0].revents = 0;
  EXPECT_GE(poll(fds, set.nfds, 0), 0);
  EXPECT_EQ(fds[0].revents & (POLLNVAL | POLLERR), 0);

  // A larger array is fine too; only nfds entries are filled.
  pollfd big[4] = {};
  fi_wait_pollfd larger{};
  larger.nfds = 4;
  larger.fd = big;
  ASSERT_EQ(fi_control(t.f(), FI_GETWAIT, &larger), 0);
  EXPECT_EQ(larger.nfds, 1u);
  EXPECT_EQ(big[0].fd, fds[0].fd);
}

TEST_P(WaitControl, GetWaitMutexCondGivesUsablePointers) {
  Target t = open(GetParam(), FI_WAIT_MUTEX_COND);
  ASSERT_NE(t.f(), nullptr);
  fi_mutex_cond mc{nullptr, nullptr};
  ASSERT_EQ(fi_control(t.f(), FI_GETWAIT, &mc), 0);
  ASSERT_NE(mc.mutex, nullptr);
  ASSERT_NE(mc.cond, nullptr);
  EXPECT_EQ(pthread_mutex_lock(mc.mutex), 0);
  EXPECT_EQ(pthread_mutex_unlock(mc.mutex), 0);
}

INSTANTIATE_TEST_SUITE_P(All, WaitControl, ::testing::Values(Kind::kEq, Kind::kCq, Kind::kCntr),
                         [](const auto& info) { return std::string(kind_name(info.param)); });

// ---------------------------------------------------------------------------------------------
// Timeouts of the blocking calls, per object type and blocking wait object.

class Timeouts : public WaitObjectTest,
                 public ::testing::WithParamInterface<std::tuple<Kind, fi_wait_obj>> {
 protected:
  Target open_param() { return open(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(Timeouts, ZeroTimeoutReturnsAtOnce) {
  Target t = open_param();
  ASSERT_NE(t.f(), nullptr);
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    EXPECT_EQ(t.block(0), t.timeout_rc());
    EXPECT_LT(ms_since(t0), 1000) << "timeout 0 must not block";
  }
}

TEST_P(Timeouts, FiftyMsTimeoutWaitsAtLeastFiftyMs) {
  Target t = open_param();
  ASSERT_NE(t.f(), nullptr);
  const auto t0 = Clock::now();
  EXPECT_EQ(t.block(50), t.timeout_rc());
  const int64_t elapsed = ms_since(t0);
  EXPECT_GE(elapsed, 50) << "returned before its timeout";
  EXPECT_LT(elapsed, 5000);
}

TEST_P(Timeouts, NegativeTimeoutWaitsUntilAnotherThreadWakesIt) {
  Target t = open_param();
  ASSERT_NE(t.f(), nullptr);
  const Outcome o = block_until_woken(t, -1, milliseconds(50));
  EXPECT_FALSE(o.rescued) << "the first wake-up was lost";
  EXPECT_EQ(o.rc, t.woken_rc());
  EXPECT_GE(o.elapsed_ms, 50) << "returned before anybody woke it";
}

TEST_P(Timeouts, WriterWakesABoundedWait) {
  Target t = open_param();
  ASSERT_NE(t.f(), nullptr);
  const Outcome o = block_until_woken(t, 5000, milliseconds(20));
  EXPECT_FALSE(o.rescued);
  EXPECT_EQ(o.rc, t.woken_rc());
  EXPECT_LT(o.elapsed_ms, 4000) << "slept to its timeout instead of being woken";
}

TEST_P(Timeouts, AlreadyReadyReturnsAtOnce) {
  Target t = open_param();
  ASSERT_NE(t.f(), nullptr);
  ASSERT_EQ(t.wake(), 0);  // an event, a pending signal, or an increment ahead of the wait
  const auto t0 = Clock::now();
  EXPECT_EQ(t.kind == Kind::kCntr ? fi_cntr_wait(t.cntr, 1, 5000) : t.block(5000), t.woken_rc());
  EXPECT_LT(ms_since(t0), 4000);
}

INSTANTIATE_TEST_SUITE_P(All, Timeouts,
                         ::testing::Combine(::testing::Values(Kind::kEq, Kind::kCq, Kind::kCntr),
                                            ::testing::ValuesIn(kBlockingWaits)),
                         [](const auto& info) {
                           return std::string(kind_name(std::get<0>(info.param))) +
                                  wait_name(std::get<1>(info.param));
                         });

// ---------------------------------------------------------------------------------------------
// Kinds that cannot block: -FI_ENOSYS at once, whatever the timeout.

class NoBlocking : public WaitObjectTest,
                   public ::testing::WithParamInterface<std::tuple<Kind, fi_wait_obj>> {};

TEST_P(NoBlocking, BlockingCallIsNoSysAtOnce) {
  Target t = open(std::get<0>(GetParam()), std::get<1>(GetParam()));
  ASSERT_NE(t.f(), nullptr);
  for (int timeout : {0, 50, -1}) {
    SCOPED_TRACE(timeout);
    const auto t0 = Clock::now();
    EXPECT_EQ(t.block(timeout), -FI_ENOSYS);
    EXPECT_LT(ms_since(t0), 1000);
  }
}

INSTANTIATE_TEST_SUITE_P(All, NoBlocking,
                         ::testing::Combine(::testing::Values(Kind::kEq, Kind::kCq, Kind::kCntr),
                                            ::testing::Values(FI_WAIT_NONE, FI_WAIT_SET)),
                         [](const auto& info) {
                           return std::string(kind_name(std::get<0>(info.param))) +
                                  wait_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace fabq::testing
