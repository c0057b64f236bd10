// fi_trywait(3) with the wait objects an application waits on itself (FI_WAIT_FD with epoll,
// FI_WAIT_POLLFD with poll, FI_WAIT_MUTEX_COND with pthread_cond_timedwait), through libfabric:
//   - fi_trywait returns -FI_EAGAIN while anything is queued, else 0; after 0 the fd stays quiet
//     until the next event, which makes it readable (or broadcasts the condition);
//   - FI_PEEK never quiets the fd;
//   - no wake-up is lost when another thread writes right after fi_trywait;
//   - objects without a wait object: -FI_ENOSYS.
#include <poll.h>
#include <pthread.h>
#include <rdma/fi_domain.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fabq_fixture.h"
#include "support/striker.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kLoops = 500;

// Readiness of a set of pollfds right now (timeout 0) or within `timeout_ms`.
bool pollable(std::vector<pollfd> fds, int timeout_ms) {
  for (pollfd& p : fds) p.revents = 0;
  const int n = poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return false;
  for (const pollfd& p : fds) {
    if ((p.revents & POLLIN) != 0) return true;
  }
  return false;
}

// An epoll instance watching one fd for readability.
class Epoll {
 public:
  explicit Epoll(int fd) : ep_(epoll_create1(EPOLL_CLOEXEC)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ok_ = ep_ >= 0 && epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) == 0;
  }
  ~Epoll() {
    if (ep_ >= 0) close(ep_);
  }
  Epoll(const Epoll&) = delete;
  Epoll& operator=(const Epoll&) = delete;
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

fi_eq_entry entry_with(uint64_t data) {
  fi_eq_entry e{};
  e.data = data;
  return e;
}

class TryWait : public FabqTest {
 protected:
  fid_eq* open_write_eq(fi_wait_obj wait, size_t size = 0) {
    fi_eq_attr attr{};
    attr.flags = FI_WRITE;
    attr.wait_obj = wait;
    attr.size = size;
    return open_eq(attr);
  }
  int trywait(fid* f) { return fi_trywait(fabric_, &f, 1); }
  int trywait(fid_eq* eq) { return trywait(&eq->fid); }

  static ssize_t write(fid_eq* eq, uint64_t data) {
    const fi_eq_entry e = entry_with(data);
    return fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
  }
  // Reads one event and returns its data, or a negative error.
  static int64_t read(fid_eq* eq, uint64_t flags = 0) {
    uint32_t event = 0;
    fi_eq_entry e{};
    const ssize_t rc = fi_eq_read(eq, &event, &e, sizeof(e), flags);
    if (rc < 0) return rc;
    if (rc != static_cast<ssize_t>(sizeof(e)) || event != FI_NOTIFY) return -FI_EOTHER;
    return static_cast<int64_t>(e.data);
  }

  // The pollfds an application would watch for `f`: the FD, or the POLLFD array.
  std::vector<pollfd> pollfds(fid* f) {
    fi_wait_obj kind{};
    EXPECT_EQ(fi_control(f, FI_GETWAITOBJ, &kind), 0);
    if (kind == FI_WAIT_FD) {
      int fd = -1;
      EXPECT_EQ(fi_control(f, FI_GETWAIT, &fd), 0);
      return {{fd, POLLIN, 0}};
    }
    fi_wait_pollfd set{};
    set.nfds = 0;
    EXPECT_EQ(fi_control(f, FI_GETWAIT, &set), -FI_ETOOSMALL);
    std::vector<pollfd> fds(set.nfds);
    set.fd = fds.data();
    EXPECT_EQ(fi_control(f, FI_GETWAIT, &set), 0);
    fds.resize(set.nfds);
    return fds;
  }
  int fd_of(fid* f) {
    int fd = -1;
    EXPECT_EQ(fi_control(f, FI_GETWAIT, &fd), 0);
    return fd;
  }
};

// ---------------------------------------------------------------------------------------------
// Objects without a wait object.

TEST_F(TryWait, NoneEqIsNoSys) {
  fid_eq* eq = open_write_eq(FI_WAIT_NONE);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(trywait(eq), -FI_ENOSYS);
  ASSERT_EQ(write(eq, 1), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_EQ(trywait(eq), -FI_ENOSYS);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(TryWait, NoneCqAndCounterAreNoSys) {
  fi_cq_attr cq_attr{};
  cq_attr.wait_obj = FI_WAIT_NONE;
  fid_cq* cq = open_cq(cq_attr);
  ASSERT_NE(cq, nullptr);
  fi_cntr_attr cntr_attr{};
  cntr_attr.wait_obj = FI_WAIT_NONE;
  fid_cntr* cntr = open_cntr(cntr_attr);
  ASSERT_NE(cntr, nullptr);
  EXPECT_EQ(trywait(&cq->fid), -FI_ENOSYS);
  EXPECT_EQ(trywait(&cntr->fid), -FI_ENOSYS);
  EXPECT_EQ(fi_close(&cntr->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// EQs with FI_WAIT_FD and FI_WAIT_POLLFD: the same contract, watched with poll().

class TryWaitFd : public TryWait, public ::testing::WithParamInterface<fi_wait_obj> {};

TEST_P(TryWaitFd, EmptyEqGivesZeroAndAQuietFd) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  ASSERT_FALSE(fds.empty());
  EXPECT_EQ(trywait(eq), 0);
  EXPECT_FALSE(pollable(fds, 0)) << "fd readable right after fi_trywait returned 0";
  EXPECT_EQ(trywait(eq), 0) << "repeating fi_trywait on an empty EQ";
  EXPECT_FALSE(pollable(fds, 0));
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, QueuedEventGivesEagainUntilRead) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  ASSERT_EQ(write(eq, 7), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  ASSERT_EQ(write(eq, 8), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_EQ(trywait(eq), -FI_EAGAIN);
  EXPECT_EQ(trywait(eq), -FI_EAGAIN);
  EXPECT_EQ(read(eq), 7);
  EXPECT_EQ(trywait(eq), -FI_EAGAIN) << "one event is still queued";
  EXPECT_EQ(read(eq), 8);
  EXPECT_EQ(trywait(eq), 0);
  EXPECT_FALSE(pollable(fds, 0)) << "fi_trywait returned 0 but the fd is still readable";
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, FdStaysQuietUntilTheNextEvent) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    ASSERT_EQ(trywait(eq), 0);
    EXPECT_FALSE(pollable(fds, 0));
    EXPECT_FALSE(pollable(fds, 20)) << "readable with nothing written";
    ASSERT_EQ(write(eq, round), static_cast<ssize_t>(sizeof(fi_eq_entry)));
    EXPECT_TRUE(pollable(fds, 0)) << "the event after fi_trywait did not make the fd readable";
    EXPECT_EQ(read(eq), round);
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, WriteFromAnotherThreadMakesTheFdReadable) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  ASSERT_EQ(trywait(eq), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(write(eq, 42), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  EXPECT_TRUE(pollable(fds, 5000)) << "the write from another thread was lost";
  writer.join();
  EXPECT_EQ(read(eq), 42);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, PeekNeverQuietsTheFd) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  ASSERT_EQ(trywait(eq), 0);
  ASSERT_EQ(write(eq, 5), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  ASSERT_TRUE(pollable(fds, 0));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(read(eq, FI_PEEK), 5);
    EXPECT_TRUE(pollable(fds, 0)) << "FI_PEEK quieted the fd while the event is still queued";
  }
  EXPECT_EQ(trywait(eq), -FI_EAGAIN) << "the peeked event is still queued";
  // (What the fd shows after -FI_EAGAIN is not specified: the application reads instead.)
  EXPECT_EQ(read(eq), 5);
  EXPECT_EQ(trywait(eq), 0);
  EXPECT_FALSE(pollable(fds, 0));
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, OverrunEntryCountsAsQueued) {
  fid_eq* eq = open_write_eq(GetParam(), 4);
  ASSERT_NE(eq, nullptr);
  int written = 0;
  ssize_t rc;
  while ((rc = write(eq, written)) == static_cast<ssize_t>(sizeof(fi_eq_entry))) {
    ++written;
    ASSERT_LT(written, 1 << 16) << "the EQ never overran";
  }
  ASSERT_EQ(rc, -FI_EOVERRUN);
  for (int i = 0; i < written; ++i) {
    ASSERT_EQ(read(eq), i);
  }
  EXPECT_EQ(read(eq), -FI_EAVAIL) << "the overrun entry follows the stored events";
  EXPECT_EQ(trywait(eq), -FI_EAGAIN) << "the overrun entry is still to be read";
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_P(TryWaitFd, AnyQueuedObjectInTheListGivesEagain) {
  fid_eq* a = open_write_eq(GetParam());
  fid_eq* b = open_write_eq(GetParam());
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  fid* both[] = {&a->fid, &b->fid};
  EXPECT_EQ(fi_trywait(fabric_, both, 2), 0);
  ASSERT_EQ(write(b, 1), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_EQ(fi_trywait(fabric_, both, 2), -FI_EAGAIN);
  EXPECT_EQ(read(b), 1);
  EXPECT_EQ(fi_trywait(fabric_, both, 2), 0);
  EXPECT_EQ(fi_close(&b->fid), 0);
  EXPECT_EQ(fi_close(&a->fid), 0);
}

// trywait == 0, then another thread writes after a random 0-50 us delay: the fd must become
// readable every time.
TEST_P(TryWaitFd, NoLostWakeUpOverManyIterations) {
  fid_eq* eq = open_write_eq(GetParam());
  ASSERT_NE(eq, nullptr);
  const auto fds = pollfds(&eq->fid);
  {
    Striker writer(kLoops, 12345, [eq](int i) {
      EXPECT_EQ(write(eq, i), static_cast<ssize_t>(sizeof(fi_eq_entry)));
    });
    for (int i = 0; i < kLoops; ++i) {
      ASSERT_EQ(trywait(eq), 0) << "iteration " << i;
      writer.arm(i);
      ASSERT_TRUE(pollable(fds, 5000)) << "lost wake-up in iteration " << i;
      ASSERT_EQ(read(eq), i);
    }
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(Eq, TryWaitFd, ::testing::Values(FI_WAIT_FD, FI_WAIT_POLLFD),
                         [](const auto& info) {
                           return std::string(info.param == FI_WAIT_FD ? "Fd" : "PollFd");
                         });

// ---------------------------------------------------------------------------------------------
// FI_WAIT_FD with epoll, as fi_trywait(3) shows it.

TEST_F(TryWait, EpollOnFdEqIsWokenByAnotherThread) {
  fid_eq* eq = open_write_eq(FI_WAIT_FD);
  ASSERT_NE(eq, nullptr);
  Epoll ep(fd_of(&eq->fid));
  ASSERT_TRUE(ep.ok());
  ASSERT_EQ(trywait(eq), 0);
  EXPECT_EQ(ep.wait(0), 0) << "readable right after fi_trywait returned 0";
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(write(eq, 3), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  EXPECT_EQ(ep.wait(5000), 1);
  writer.join();
  EXPECT_EQ(read(eq), 3);
  EXPECT_EQ(trywait(eq), 0);
  EXPECT_EQ(ep.wait(0), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST_F(TryWait, EpollNoLostWakeUpOverManyIterations) {
  fid_eq* eq = open_write_eq(FI_WAIT_FD);
  ASSERT_NE(eq, nullptr);
  Epoll ep(fd_of(&eq->fid));
  ASSERT_TRUE(ep.ok());
  {
    Striker writer(kLoops, 777, [eq](int i) {
      EXPECT_EQ(write(eq, i), static_cast<ssize_t>(sizeof(fi_eq_entry)));
    });
    for (int i = 0; i < kLoops; ++i) {
      ASSERT_EQ(trywait(eq), 0) << "iteration " << i;
      writer.arm(i);
      ASSERT_EQ(ep.wait(5000), 1) << "lost wake-up in iteration " << i;
      ASSERT_EQ(read(eq), i);
    }
  }
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// FI_WAIT_MUTEX_COND: lock, fi_trywait, pthread_cond_timedwait.

timespec realtime_in(int ms) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += static_cast<long>(ms % 1000) * 1'000'000;
  if (ts.tv_nsec >= 1'000'000'000) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1'000'000'000;
  }
  return ts;
}

class TryWaitMutexCond : public TryWait {
 protected:
  void SetUp() override {
    TryWait::SetUp();
    if (HasFatalFailure()) return;
    eq_ = open_write_eq(FI_WAIT_MUTEX_COND);
    ASSERT_NE(eq_, nullptr);
    ASSERT_EQ(fi_control(&eq_->fid, FI_GETWAIT, &mc_), 0);
    ASSERT_NE(mc_.mutex, nullptr);
    ASSERT_NE(mc_.cond, nullptr);
  }
  void TearDown() override {
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    TryWait::TearDown();
  }

  // With the mutex held and fi_trywait == 0: waits (up to 5 s) until the condition is broadcast
  // and the EQ holds an event. Spurious wake-ups are retried. Returns false at the timeout.
  bool wait_for_event_locked() {
    const timespec abstime = realtime_in(5000);
    for (;;) {
      const int rc = pthread_cond_timedwait(mc_.cond, mc_.mutex, &abstime);
      if (rc == ETIMEDOUT) return false;
      EXPECT_EQ(rc, 0);
      uint32_t event;
      fi_eq_entry e{};
      if (fi_eq_read(eq_, &event, &e, sizeof(e), FI_PEEK) > 0) return true;
    }
  }

  fid_eq* eq_ = nullptr;
  fi_mutex_cond mc_{nullptr, nullptr};
};

TEST_F(TryWaitMutexCond, QueuedEventGivesEagainUntilRead) {
  ASSERT_EQ(write(eq_, 1), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  ASSERT_EQ(pthread_mutex_lock(mc_.mutex), 0);
  EXPECT_EQ(trywait(eq_), -FI_EAGAIN);
  ASSERT_EQ(pthread_mutex_unlock(mc_.mutex), 0);
  EXPECT_EQ(read(eq_, FI_PEEK), 1);
  EXPECT_EQ(trywait(eq_), -FI_EAGAIN);
  EXPECT_EQ(read(eq_), 1);
  EXPECT_EQ(trywait(eq_), 0);
}

TEST_F(TryWaitMutexCond, WriterThreadBroadcastsTheCondition) {
  ASSERT_EQ(pthread_mutex_lock(mc_.mutex), 0);
  ASSERT_EQ(trywait(eq_), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(write(eq_, 9), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  const bool woke = wait_for_event_locked();
  ASSERT_EQ(pthread_mutex_unlock(mc_.mutex), 0);
  writer.join();
  EXPECT_TRUE(woke) << "pthread_cond_timedwait timed out: the write did not broadcast";
  EXPECT_EQ(read(eq_), 9);
}

TEST_F(TryWaitMutexCond, NoLostWakeUpOverManyIterations) {
  fid_eq* eq = eq_;
  Striker writer(kLoops, 4242, [eq](int i) {
    // Blocks on the mutex until the reader sleeps in pthread_cond_timedwait, if the provider
    // takes it to broadcast.
    EXPECT_EQ(write(eq, i), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  for (int i = 0; i < kLoops; ++i) {
    ASSERT_EQ(pthread_mutex_lock(mc_.mutex), 0);
    const int tw = trywait(eq_);
    if (tw != 0) {
      pthread_mutex_unlock(mc_.mutex);
      FAIL() << "fi_trywait returned " << tw << " on an empty EQ in iteration " << i;
    }
    writer.arm(i);
    const bool woke = wait_for_event_locked();
    ASSERT_EQ(pthread_mutex_unlock(mc_.mutex), 0);
    ASSERT_TRUE(woke) << "lost wake-up in iteration " << i;
    ASSERT_EQ(read(eq_), i);
  }
}

// ---------------------------------------------------------------------------------------------
// CQs and counters.

class TryWaitCq : public TryWait, public ::testing::WithParamInterface<fi_wait_obj> {};

TEST_P(TryWaitCq, EmptyCqGivesZeroAndSignalMayWakeIt) {
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_CONTEXT;
  attr.wait_obj = GetParam();
  fid_cq* cq = open_cq(attr);
  ASSERT_NE(cq, nullptr);
  const auto fds = pollfds(&cq->fid);
  EXPECT_EQ(trywait(&cq->fid), 0);
  EXPECT_FALSE(pollable(fds, 0)) << "fd readable right after fi_trywait returned 0";
  // fi_cq_signal may make the fd readable (nothing to read, though): either is fine.
  EXPECT_EQ(fi_cq_signal(cq), 0);
  (void)pollable(fds, 0);
  fi_cq_entry e{};
  EXPECT_EQ(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
  EXPECT_EQ(trywait(&cq->fid), 0) << "a signal queues nothing";
  EXPECT_FALSE(pollable(fds, 0));
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(Cq, TryWaitCq, ::testing::Values(FI_WAIT_FD, FI_WAIT_POLLFD),
                         [](const auto& info) {
                           return std::string(info.param == FI_WAIT_FD ? "Fd" : "PollFd");
                         });

TEST_F(TryWait, MutexCondCqGivesZeroWhenEmpty) {
  fi_cq_attr attr{};
  attr.wait_obj = FI_WAIT_MUTEX_COND;
  fid_cq* cq = open_cq(attr);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(trywait(&cq->fid), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

class TryWaitCntr : public TryWait, public ::testing::WithParamInterface<fi_wait_obj> {};

TEST_P(TryWaitCntr, AddFromAnotherThreadMakesTheFdReadable) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = GetParam();
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  const auto fds = pollfds(&cntr->fid);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    ASSERT_EQ(trywait(&cntr->fid), 0);
    EXPECT_FALSE(pollable(fds, 0)) << "fd readable right after fi_trywait returned 0";
    std::thread adder([&] {
      std::this_thread::sleep_for(milliseconds(20));
      EXPECT_EQ(fi_cntr_add(cntr, 1), 0);
    });
    EXPECT_TRUE(pollable(fds, 5000)) << "fi_cntr_add after fi_trywait did not wake the fd";
    adder.join();
    EXPECT_EQ(fi_cntr_read(cntr), static_cast<uint64_t>(round + 1));
  }
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

INSTANTIATE_TEST_SUITE_P(Cntr, TryWaitCntr, ::testing::Values(FI_WAIT_FD, FI_WAIT_POLLFD),
                         [](const auto& info) {
                           return std::string(info.param == FI_WAIT_FD ? "Fd" : "PollFd");
                         });

TEST_F(TryWait, EpollOnFdCounterIsWokenByAdd) {
  fi_cntr_attr attr{};
  attr.wait_obj = FI_WAIT_FD;
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  Epoll ep(fd_of(&cntr->fid));
  ASSERT_TRUE(ep.ok());
  ASSERT_EQ(trywait(&cntr->fid), 0);
  EXPECT_EQ(ep.wait(0), 0);
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_add(cntr, 2), 0);
  });
  EXPECT_EQ(ep.wait(5000), 1);
  adder.join();
  EXPECT_EQ(fi_cntr_read(cntr), 2u);
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

TEST_F(TryWait, MutexCondCounterIsBroadcastByAdd) {
  fi_cntr_attr attr{};
  attr.wait_obj = FI_WAIT_MUTEX_COND;
  fid_cntr* cntr = open_cntr(attr);
  ASSERT_NE(cntr, nullptr);
  fi_mutex_cond mc{nullptr, nullptr};
  ASSERT_EQ(fi_control(&cntr->fid, FI_GETWAIT, &mc), 0);
  ASSERT_NE(mc.mutex, nullptr);
  ASSERT_NE(mc.cond, nullptr);
  ASSERT_EQ(pthread_mutex_lock(mc.mutex), 0);
  ASSERT_EQ(trywait(&cntr->fid), 0);
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_add(cntr, 1), 0);
  });
  const timespec abstime = realtime_in(5000);
  int rc = 0;
  while (fi_cntr_read(cntr) == 0 && rc == 0) {
    rc = pthread_cond_timedwait(mc.cond, mc.mutex, &abstime);
  }
  ASSERT_EQ(pthread_mutex_unlock(mc.mutex), 0);
  adder.join();
  EXPECT_EQ(rc, 0) << "pthread_cond_timedwait timed out: fi_cntr_add did not broadcast";
  EXPECT_EQ(fi_cntr_read(cntr), 1u);
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
