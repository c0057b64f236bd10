// Wait sets and poll sets (fi_poll(3)) through libfabric.
//
// Wait sets (fi_wait_open on the fabric): which kinds open, members (an EQ, a CQ and a counter
// opened with FI_WAIT_SET), fi_wait timeouts and wake-ups, fi_trywait on the set, its fd, and
// the close rules. Poll sets (fi_poll_open on the domain): membership rules, what fi_poll
// reports, and the close rules. Both with traffic: RDM endpoints over 127.0.0.1 whose counters
// and CQs belong to a set, and an application that only calls fi_poll or fi_wait, as fabtests'
// fi_poll does. Every wait is bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

std::string wait_name(fi_wait_obj w) {
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

constexpr fi_wait_obj kSetKinds[] = {FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD, FI_WAIT_MUTEX_COND,
                                     FI_WAIT_YIELD};

fi_eq_entry entry_with(uint64_t data) {
  fi_eq_entry e{};
  e.data = data;
  return e;
}

ssize_t write_event(fid_eq* eq, uint64_t data) {
  const fi_eq_entry e = entry_with(data);
  return fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
}

int64_t read_event(fid_eq* eq) {
  uint32_t event = 0;
  fi_eq_entry e{};
  const ssize_t rc = fi_eq_read(eq, &event, &e, sizeof(e), 0);
  if (rc < 0) return rc;
  return static_cast<int64_t>(e.data);
}

// ---------------------------------------------------------------------------------------------
// Opening wait sets.

class WaitSetOpen : public FabqTest {};

TEST_F(WaitSetOpen, AcceptsUnspecFdPollFdMutexCondYield) {
  for (fi_wait_obj w : kSetKinds) {
    SCOPED_TRACE(wait_name(w));
    fi_wait_attr attr{};
    attr.wait_obj = w;
    fid_wait* set = nullptr;
    ASSERT_EQ(fi_wait_open(fabric_, &attr, &set), 0);
    ASSERT_NE(set, nullptr);
    fi_wait_obj got = FI_WAIT_NONE;
    EXPECT_EQ(fi_control(&set->fid, FI_GETWAITOBJ, &got), 0);
    EXPECT_EQ(got, w);
    EXPECT_EQ(fi_close(&set->fid), 0);
  }
}

TEST_F(WaitSetOpen, NoneAndSetAreInvalid) {
  for (fi_wait_obj w : {FI_WAIT_NONE, FI_WAIT_SET}) {
    SCOPED_TRACE(wait_name(w));
    fi_wait_attr attr{};
    attr.wait_obj = w;
    fid_wait* set = reinterpret_cast<fid_wait*>(0x1);
    EXPECT_EQ(fi_wait_open(fabric_, &attr, &set), -FI_EINVAL);
    EXPECT_EQ(set, nullptr);
  }
}

TEST_F(WaitSetOpen, NonZeroFlagsAreBadFlags) {
  fi_wait_attr attr{};
  attr.wait_obj = FI_WAIT_UNSPEC;
  attr.flags = 1;
  fid_wait* set = reinterpret_cast<fid_wait*>(0x1);
  EXPECT_EQ(fi_wait_open(fabric_, &attr, &set), -FI_EBADFLAGS);
  EXPECT_EQ(set, nullptr);
}

// ---------------------------------------------------------------------------------------------
// A wait set with three members: an EQ (FI_WRITE), a CQ and a counter.

class WaitSetTest : public FabqTest, public ::testing::WithParamInterface<fi_wait_obj> {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    fi_wait_attr attr{};
    attr.wait_obj = GetParam();
    ASSERT_EQ(fi_wait_open(fabric_, &attr, &set_), 0);
    ASSERT_NE(set_, nullptr);

    fi_eq_attr eq_attr{};
    eq_attr.flags = FI_WRITE;
    eq_attr.wait_obj = FI_WAIT_SET;
    eq_attr.wait_set = set_;
    eq_ = open_eq(eq_attr);
    ASSERT_NE(eq_, nullptr);

    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_SET;
    cq_attr.wait_set = set_;
    cq_ = open_cq(cq_attr);
    ASSERT_NE(cq_, nullptr);

    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_SET;
    cntr_attr.wait_set = set_;
    cntr_ = open_cntr(cntr_attr);
    ASSERT_NE(cntr_, nullptr);
  }
  void TearDown() override {
    close_members();
    if (set_ != nullptr) {
      EXPECT_EQ(fi_close(&set_->fid), 0);
    }
    FabqTest::TearDown();
  }
  void close_members() {
    if (cntr_ != nullptr) {
      EXPECT_EQ(fi_close(&cntr_->fid), 0);
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(fi_close(&cq_->fid), 0);
    }
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    cntr_ = nullptr;
    cq_ = nullptr;
    eq_ = nullptr;
  }
  int trywait_set() {
    fid* f = &set_->fid;
    return fi_trywait(fabric_, &f, 1);
  }

  fid_wait* set_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_cntr* cntr_ = nullptr;
};

TEST_P(WaitSetTest, MembersReportWaitSet) {
  for (fid* f : {&eq_->fid, &cq_->fid, &cntr_->fid}) {
    fi_wait_obj got = FI_WAIT_NONE;
    EXPECT_EQ(fi_control(f, FI_GETWAITOBJ, &got), 0);
    EXPECT_EQ(got, FI_WAIT_SET);
  }
}

TEST_P(WaitSetTest, WaitOnNothingTimesOutWithEagain) {
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_wait(set_, 50), -FI_EAGAIN);
  const int64_t elapsed = ms_since(t0);
  EXPECT_GE(elapsed, 50) << "returned before its timeout";
  EXPECT_LT(elapsed, 5000);

  const auto t1 = Clock::now();
  EXPECT_EQ(fi_wait(set_, 0), -FI_EAGAIN);
  EXPECT_LT(ms_since(t1), 1000);
}

TEST_P(WaitSetTest, EqEventFromAnotherThreadEndsTheWait) {
  const auto t0 = Clock::now();
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));  // let fi_wait block first
    EXPECT_EQ(write_event(eq_, 11), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  const int rc = fi_wait(set_, 5000);
  const int64_t elapsed = ms_since(t0);
  writer.join();
  EXPECT_EQ(rc, 0);
  EXPECT_GE(elapsed, 50) << "fi_wait returned before the member had anything";
  EXPECT_LT(elapsed, 4000) << "the member's event did not wake the set";
  EXPECT_EQ(read_event(eq_), 11);
}

TEST_P(WaitSetTest, QueuedEqEventEndsTheWaitAtOnce) {
  ASSERT_EQ(write_event(eq_, 1), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  const auto t0 = Clock::now();
  EXPECT_EQ(fi_wait(set_, 5000), 0);
  EXPECT_LT(ms_since(t0), 4000);
  EXPECT_EQ(read_event(eq_), 1);
}

TEST_P(WaitSetTest, CounterAddFromAnotherThreadEndsTheWait) {
  const auto t0 = Clock::now();
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_EQ(fi_cntr_add(cntr_, 1), 0);
  });
  const int rc = fi_wait(set_, 5000);
  const int64_t elapsed = ms_since(t0);
  adder.join();
  EXPECT_EQ(rc, 0);
  EXPECT_GE(elapsed, 50);
  EXPECT_LT(elapsed, 4000) << "the counter add did not wake the set";
  EXPECT_EQ(fi_cntr_read(cntr_), 1u);
}

TEST_P(WaitSetTest, BlockingCallsOnMembersAreNoSys) {
  uint32_t event = 0;
  fi_eq_entry e{};
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 0, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), 50, 0), -FI_ENOSYS);
  fi_cq_entry ce{};
  EXPECT_EQ(fi_cq_sread(cq_, &ce, 1, nullptr, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_cq_sread(cq_, &ce, 1, nullptr, 50), -FI_ENOSYS);
  EXPECT_EQ(fi_cntr_wait(cntr_, 1, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_cntr_wait(cntr_, 1, 50), -FI_ENOSYS);
  // Even with something to read: the member cannot block on its own.
  ASSERT_EQ(write_event(eq_, 2), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_EQ(fi_eq_sread(eq_, &event, &e, sizeof(e), -1, 0), -FI_ENOSYS);
  EXPECT_EQ(read_event(eq_), 2) << "fi_eq_read works on a member";
}

TEST_P(WaitSetTest, CloseWithMembersIsBusyThenSucceeds) {
  EXPECT_EQ(fi_close(&set_->fid), -FI_EBUSY);
  ASSERT_EQ(fi_close(&eq_->fid), 0);
  eq_ = nullptr;
  EXPECT_EQ(fi_close(&set_->fid), -FI_EBUSY) << "a CQ and a counter are still members";
  ASSERT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  EXPECT_EQ(fi_close(&set_->fid), -FI_EBUSY) << "a counter is still a member";
  ASSERT_EQ(fi_close(&cntr_->fid), 0);
  cntr_ = nullptr;
  EXPECT_EQ(fi_close(&set_->fid), 0);
  set_ = nullptr;
}

TEST_P(WaitSetTest, FabricCannotCloseBeforeTheSet) {
  close_members();
  ASSERT_EQ(fi_close(&domain_->fid), 0);
  domain_ = nullptr;
  EXPECT_EQ(fi_close(&fabric_->fid), -FI_EBUSY) << "only the wait set is left open";
}

TEST_P(WaitSetTest, TrywaitIsEagainWhileAMemberHasAnEvent) {
  EXPECT_EQ(trywait_set(), 0);
  ASSERT_EQ(write_event(eq_, 4), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_EQ(trywait_set(), -FI_EAGAIN);
  EXPECT_EQ(trywait_set(), -FI_EAGAIN);
  EXPECT_EQ(read_event(eq_), 4);
  EXPECT_EQ(trywait_set(), 0);
}

// A counter has nothing queued: once the application has seen an update (fi_trywait may say
// -FI_EAGAIN once for it, and the application reads the counter), fi_trywait on the set must
// let it block again. Otherwise an application that waits on the set's fd (fi_trywait + poll)
// spins forever after the first counter update; only fi_wait would clear it.
TEST_P(WaitSetTest, TrywaitSettlesAfterACounterUpdate) {
  ASSERT_EQ(trywait_set(), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  for (int update = 0; update < 3; ++update) {
    SCOPED_TRACE(update);
    EXPECT_EQ(fi_cntr_read(cntr_), static_cast<uint64_t>(update + 1));
    int rc = trywait_set();
    if (rc == -FI_EAGAIN) rc = trywait_set();  // the update may be reported once
    EXPECT_EQ(rc, 0) << "fi_trywait on the set never lets the application block again after "
                        "a counter update (without fi_wait)";
    fid* member = &cntr_->fid;
    EXPECT_EQ(fi_trywait(fabric_, &member, 1), 0) << "the counter itself has nothing queued";
    ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(All, WaitSetTest, ::testing::ValuesIn(kSetKinds),
                         [](const auto& info) { return wait_name(info.param); });

// The set's fd (FI_WAIT_FD): fi_trywait(set) == 0 quiets it, a member's next event or update
// makes it readable.
class FdWaitSet : public WaitSetTest {};

TEST_P(FdWaitSet, FdBecomesReadableOnAMemberWrite) {
  int fd = -1;
  ASSERT_EQ(fi_control(&set_->fid, FI_GETWAIT, &fd), 0);
  ASSERT_GE(fd, 0);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);

  ASSERT_EQ(trywait_set(), 0);
  EXPECT_FALSE(readable(fd, 0)) << "readable right after fi_trywait returned 0";
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(write_event(eq_, 5), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  });
  epoll_event out{};
  EXPECT_EQ(epoll_wait(ep, &out, 1, 5000), 1) << "the member's event did not wake the set's fd";
  writer.join();
  close(ep);
  EXPECT_EQ(read_event(eq_), 5);
  EXPECT_EQ(trywait_set(), 0);
  EXPECT_FALSE(readable(fd, 0));
}

TEST_P(FdWaitSet, FdBecomesReadableOnACounterAdd) {
  int fd = -1;
  ASSERT_EQ(fi_control(&set_->fid, FI_GETWAIT, &fd), 0);
  ASSERT_EQ(trywait_set(), 0);
  EXPECT_FALSE(readable(fd, 0));
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_add(cntr_, 1), 0);
  });
  EXPECT_TRUE(readable(fd, 5000)) << "the counter add did not wake the set's fd";
  adder.join();
}

TEST_P(FdWaitSet, TrywaitOnAMemberArmsTheSetsFd) {
  int fd = -1;
  ASSERT_EQ(fi_control(&set_->fid, FI_GETWAIT, &fd), 0);
  fid* member = &eq_->fid;
  ASSERT_EQ(fi_trywait(fabric_, &member, 1), 0);
  EXPECT_FALSE(readable(fd, 0));
  ASSERT_EQ(write_event(eq_, 6), static_cast<ssize_t>(sizeof(fi_eq_entry)));
  EXPECT_TRUE(readable(fd, 0));
  EXPECT_EQ(fi_trywait(fabric_, &member, 1), -FI_EAGAIN);
  EXPECT_EQ(read_event(eq_), 6);
}

INSTANTIATE_TEST_SUITE_P(Fd, FdWaitSet, ::testing::Values(FI_WAIT_FD),
                         [](const auto& info) { return wait_name(info.param); });

// ---------------------------------------------------------------------------------------------
// Poll sets.

class PollSetTest : public FabqTest {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    fi_poll_attr attr{};
    ASSERT_EQ(fi_poll_open(domain_, &attr, &poll_), 0);
    ASSERT_NE(poll_, nullptr);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;  // so that fi_cq_signal is allowed
    cq_ = open_cq(cq_attr, &cq_context_);
    ASSERT_NE(cq_, nullptr);
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_ = open_cntr(cntr_attr, &cntr_context_);
    ASSERT_NE(cntr_, nullptr);
  }
  void TearDown() override {
    if (poll_ != nullptr) {
      EXPECT_EQ(fi_close(&poll_->fid), 0);
    }
    if (cntr_ != nullptr) {
      EXPECT_EQ(fi_close(&cntr_->fid), 0);
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(fi_close(&cq_->fid), 0);
    }
    FabqTest::TearDown();
  }
  int poll_now(std::vector<void*>* out, int count = 8) {
    out->assign(static_cast<size_t>(count), nullptr);
    const int n = fi_poll(poll_, out->data(), count);
    if (n >= 0) out->resize(static_cast<size_t>(n));
    return n;
  }

  fid_poll* poll_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_cntr* cntr_ = nullptr;
  int cq_context_ = 0;
  int cntr_context_ = 0;
};

TEST_F(PollSetTest, OpenWithFlagsIsBadFlags) {
  fi_poll_attr attr{};
  attr.flags = 1;
  fid_poll* p = reinterpret_cast<fid_poll*>(0x1);
  EXPECT_EQ(fi_poll_open(domain_, &attr, &p), -FI_EBADFLAGS);
  EXPECT_EQ(p, nullptr);
}

TEST_F(PollSetTest, AddsACqAndACounter) {
  EXPECT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_poll_del(poll_, &cntr_->fid, 0), 0);
}

TEST_F(PollSetTest, AddingTwiceIsBusy) {
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_poll_add(poll_, &cq_->fid, 0), -FI_EBUSY);
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), -FI_EBUSY);
  // One fi_poll_del undoes the one successful add.
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_del(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_close(&cq_->fid), 0) << "a refused second add left a reference behind";
  cq_ = nullptr;
}

TEST_F(PollSetTest, AddingAnEqOrTheDomainIsInvalid) {
  fi_eq_attr eq_attr{};
  fid_eq* eq = open_eq(eq_attr);
  ASSERT_NE(eq, nullptr);
  EXPECT_EQ(fi_poll_add(poll_, &eq->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_add(poll_, &domain_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_add(poll_, &fabric_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&eq->fid), 0) << "a refused add left a reference behind";
}

TEST_F(PollSetTest, DeletingANonMemberIsInvalid) {
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_del(poll_, &cntr_->fid, 0), -FI_EINVAL);
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_poll_del(poll_, &cntr_->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), 0);
}

TEST_F(PollSetTest, NothingReadyPollsZero) {
  std::vector<void*> out;
  EXPECT_EQ(poll_now(&out), 0) << "empty poll set";
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(poll_now(&out), 0);
  EXPECT_EQ(poll_now(&out), 0);
}

TEST_F(PollSetTest, EmptyCqIsNotReported) {
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  std::vector<void*> out;
  EXPECT_EQ(poll_now(&out), 0);
  EXPECT_EQ(fi_cq_signal(cq_), 0) << "a signal queues no completion";
  EXPECT_EQ(poll_now(&out), 0);
}

TEST_F(PollSetTest, CounterChangedByTheApplicationIsNotReported) {
  // fi_poll(3): a counter is reported if its value or error value changed since the last
  // fi_poll, fi_cntr_set or fi_cntr_add call, so the application's own add/set are not news.
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  std::vector<void*> out;
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(poll_now(&out), 0) << "reported a counter right after fi_cntr_add";
  ASSERT_EQ(fi_cntr_add(cntr_, 5), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 5), 0);
  EXPECT_EQ(poll_now(&out), 0);
  ASSERT_EQ(fi_cntr_set(cntr_, 100), 0);
  EXPECT_EQ(poll_now(&out), 0) << "reported a counter right after fi_cntr_set";
  EXPECT_EQ(fi_cntr_read(cntr_), 100u);
}

TEST_F(PollSetTest, CounterErrorChangedByTheApplicationIsReported) {
  // fi_poll(3): only fi_poll, fi_cntr_set and fi_cntr_add reset what counts as a change; an
  // error value changed by fi_cntr_adderr or fi_cntr_seterr since the last fi_poll is news.
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  std::vector<void*> out;
  ASSERT_EQ(poll_now(&out), 0);

  ASSERT_EQ(fi_cntr_adderr(cntr_, 1), 0);
  ASSERT_EQ(poll_now(&out), 1) << "error value changed by fi_cntr_adderr since the last fi_poll";
  EXPECT_EQ(out[0], &cntr_context_) << "fi_poll returns the counter's context";
  EXPECT_EQ(poll_now(&out), 0) << "nothing changed since the last fi_poll";

  ASSERT_EQ(fi_cntr_seterr(cntr_, 5), 0);
  ASSERT_EQ(poll_now(&out), 1) << "error value changed by fi_cntr_seterr since the last fi_poll";
  EXPECT_EQ(out[0], &cntr_context_);
  EXPECT_EQ(poll_now(&out), 0);

  // A later fi_cntr_add resets the reference point: the earlier error change is no news.
  ASSERT_EQ(fi_cntr_adderr(cntr_, 1), 0);
  ASSERT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(poll_now(&out), 0);
}

TEST_F(PollSetTest, MemberCannotBeClosedUntilDeleted) {
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_close(&cq_->fid), -FI_EBUSY);
  EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY);
  // Still usable after the refused close.
  EXPECT_EQ(fi_cntr_add(cntr_, 1), 0);
  EXPECT_EQ(fi_cntr_read(cntr_), 1u);
  ASSERT_EQ(fi_poll_del(poll_, &cq_->fid, 0), 0);
  EXPECT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  EXPECT_EQ(fi_close(&cntr_->fid), -FI_EBUSY);
  ASSERT_EQ(fi_poll_del(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_close(&cntr_->fid), 0);
  cntr_ = nullptr;
}

TEST_F(PollSetTest, ClosingThePollSetReleasesItsMembers) {
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  ASSERT_EQ(fi_poll_add(poll_, &cntr_->fid, 0), 0);
  EXPECT_EQ(fi_close(&poll_->fid), 0);
  poll_ = nullptr;
  EXPECT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  EXPECT_EQ(fi_close(&cntr_->fid), 0);
  cntr_ = nullptr;
}

TEST_F(PollSetTest, DomainCannotCloseBeforeThePollSet) {
  ASSERT_EQ(fi_close(&cntr_->fid), 0);
  cntr_ = nullptr;
  ASSERT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY) << "only the poll set is left open";
}

TEST_F(PollSetTest, ZeroCountOrNullArrayIsInvalid) {
  ASSERT_EQ(fi_poll_add(poll_, &cq_->fid, 0), 0);
  void* ctx[4] = {};
  EXPECT_EQ(fi_poll(poll_, ctx, 0), -FI_EINVAL);
  EXPECT_EQ(fi_poll(poll_, ctx, -1), -FI_EINVAL);
  EXPECT_EQ(fi_poll(poll_, nullptr, 4), -FI_EINVAL);
  EXPECT_EQ(fi_poll(poll_, ctx, 4), 0);
  EXPECT_EQ(fi_poll_del(poll_, &cq_->fid, 0), 0);
}

// ---------------------------------------------------------------------------------------------
// Poll sets and wait sets with traffic, as fabtests' fi_poll uses them. Each side is an RDM
// endpoint in a fabric and domain of its own, as in a process of its own, so that nothing but
// that side's own calls moves its bytes. Its send counter (bound FI_SEND) and receive counter
// (FI_RECV) belong to its poll set; its CQ is bound with FI_SELECTIVE_COMPLETION and stays out
// of the set (fi_poll -t counter), or is bound plainly and joins the set (fi_poll -t queue).

constexpr int kTrafficMs = 5000;

struct Side {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_wait* set = nullptr;  // the counters' wait set, for sides opened with one
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_cntr* tx = nullptr;
  fid_cntr* rx = nullptr;
  fid_poll* poll = nullptr;
  fid_ep* ep = nullptr;
  sockaddr_in name{};
  fi_addr_t peer = FI_ADDR_UNSPEC;  // the other side, in this side's AV
  // Contexts of the members, which fi_poll reports.
  int cq_context = 0;
  int tx_context = 0;
  int rx_context = 0;
  char in[4][64] = {};  // receive buffers
};

struct SideOptions {
  bool cq_in_poll_set = false;  // fi_poll -t queue: a plain CQ, in the poll set
  bool wait_set = false;        // counters opened with FI_WAIT_SET on a set of the side's fabric
};

// The contexts one fi_poll on `s`'s set reports (none for a side not opened).
std::vector<void*> poll_once(Side* s) {
  if (s->poll == nullptr) return {};
  void* contexts[8] = {};
  const int n = fi_poll(s->poll, contexts, 8);
  EXPECT_GE(n, 0) << fi_strerror(-n);
  return std::vector<void*>(contexts, contexts + std::max(n, 0));
}

bool reports(const std::vector<void*>& contexts, const void* context) {
  return std::find(contexts.begin(), contexts.end(), context) != contexts.end();
}

class PollSetTraffic : public ::testing::Test {
 protected:
  void TearDown() override {
    close_side(&b_);
    close_side(&a_);
  }

  void open_side(Side* s, SideOptions options = {}) {
    fi_info* hints = fabq_hints();
    ASSERT_NE(hints, nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG;
    const int rc = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &s->info);
    fi_freeinfo(hints);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    ASSERT_EQ(fi_fabric(s->info->fabric_attr, &s->fabric, nullptr), 0);
    ASSERT_EQ(fi_domain(s->fabric, s->info, &s->domain, nullptr), 0);
    if (options.wait_set) {
      fi_wait_attr wait_attr{};
      wait_attr.wait_obj = FI_WAIT_UNSPEC;
      ASSERT_EQ(fi_wait_open(s->fabric, &wait_attr, &s->set), 0);
    }
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(s->domain, &av_attr, &s->av, nullptr), 0);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    ASSERT_EQ(fi_cq_open(s->domain, &cq_attr, &s->cq, &s->cq_context), 0);
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = options.wait_set ? FI_WAIT_SET : FI_WAIT_NONE;
    cntr_attr.wait_set = s->set;
    ASSERT_EQ(fi_cntr_open(s->domain, &cntr_attr, &s->tx, &s->tx_context), 0);
    ASSERT_EQ(fi_cntr_open(s->domain, &cntr_attr, &s->rx, &s->rx_context), 0);
    fi_poll_attr poll_attr{};
    ASSERT_EQ(fi_poll_open(s->domain, &poll_attr, &s->poll), 0);
    if (options.cq_in_poll_set) {
      ASSERT_EQ(fi_poll_add(s->poll, &s->cq->fid, 0), 0);
    }
    ASSERT_EQ(fi_poll_add(s->poll, &s->tx->fid, 0), 0);
    ASSERT_EQ(fi_poll_add(s->poll, &s->rx->fid, 0), 0);

    ASSERT_EQ(fi_endpoint(s->domain, s->info, &s->ep, nullptr), 0);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->av->fid, 0), 0);
    const uint64_t cq_flags =
        FI_TRANSMIT | FI_RECV | (options.cq_in_poll_set ? 0 : FI_SELECTIVE_COMPLETION);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->cq->fid, cq_flags), 0);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->tx->fid, FI_SEND), 0);
    ASSERT_EQ(fi_ep_bind(s->ep, &s->rx->fid, FI_RECV), 0);
    ASSERT_EQ(fi_enable(s->ep), 0);
    size_t len = sizeof(s->name);
    ASSERT_EQ(fi_getname(&s->ep->fid, &s->name, &len), 0);
  }

  // Both sides, each knowing the other.
  void open_pair(SideOptions options = {}) {
    ASSERT_NO_FATAL_FAILURE(open_side(&a_, options));
    ASSERT_NO_FATAL_FAILURE(open_side(&b_, options));
    ASSERT_EQ(fi_av_insert(a_.av, &b_.name, 1, &a_.peer, 0, nullptr), 1);
    ASSERT_EQ(fi_av_insert(b_.av, &a_.name, 1, &b_.peer, 0, nullptr), 1);
  }

  static void close_side(Side* s) {
    for (fid* f : {s->ep ? &s->ep->fid : nullptr, s->poll ? &s->poll->fid : nullptr,
                   s->rx ? &s->rx->fid : nullptr, s->tx ? &s->tx->fid : nullptr,
                   s->cq ? &s->cq->fid : nullptr, s->av ? &s->av->fid : nullptr,
                   s->set ? &s->set->fid : nullptr, s->domain ? &s->domain->fid : nullptr,
                   s->fabric ? &s->fabric->fid : nullptr}) {
      if (f != nullptr) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    fi_freeinfo(s->info);
    *s = Side{};
  }

  // `to` posts a receive into its buffer `slot`; `from` sends it a message without asking for
  // a completion (the counters count it).
  static void send(Side* from, Side* to, int slot = 0) {
    ASSERT_EQ(
        fi_recv(to->ep, to->in[slot], sizeof(to->in[slot]), nullptr, FI_ADDR_UNSPEC, to->in[slot]),
        0);
    static const char kMessage[] = "polled";
    ASSERT_EQ(fi_send(from->ep, kMessage, sizeof(kMessage), nullptr, from->peer, nullptr), 0);
  }

  // Calls fi_poll on both sides, and nothing else, until every (side, context) pair in `wanted`
  // has been reported by its side's set, or kTrafficMs pass. Returns the pairs never reported.
  std::vector<std::pair<Side*, void*>> poll_until_reported(
      std::vector<std::pair<Side*, void*>> wanted) {
    const auto end = Clock::now() + milliseconds(kTrafficMs);
    while (!wanted.empty() && Clock::now() < end) {
      for (Side* s : {&a_, &b_}) {
        const std::vector<void*> got = poll_once(s);
        std::erase_if(wanted,
                      [&](const auto& w) { return w.first == s && reports(got, w.second); });
      }
    }
    return wanted;
  }

  // Calls fi_poll on both sides for `ms`; whether `side`'s set ever reported `context`.
  bool reported_within(Side* side, void* context, int ms) {
    const auto end = Clock::now() + milliseconds(ms);
    bool seen = false;
    while (Clock::now() < end) {
      for (Side* s : {&a_, &b_}) {
        if (reports(poll_once(s), context) && s == side) seen = true;
      }
    }
    return seen;
  }

  Side a_;
  Side b_;
};

// fi_poll(3): "The context associated with a counter will be returned if the counter's success
// value or error value have changed since the last time fi_poll, fi_cntr_set, or fi_cntr_add
// were called." A send and its receive change the two counters; fi_poll, the only call made,
// must move the bytes and report both.
TEST_F(PollSetTraffic, SendAndReceiveCountersAreReportedByFiPollAlone) {
  ASSERT_NO_FATAL_FAILURE(open_pair());
  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_));
  const auto missing = poll_until_reported({{&a_, &a_.tx_context}, {&b_, &b_.rx_context}});
  EXPECT_TRUE(missing.empty()) << missing.size()
                               << " counter(s) changed by the message were never reported";
  EXPECT_EQ(fi_cntr_read(a_.tx), 1u);
  EXPECT_EQ(fi_cntr_read(b_.rx), 1u);
  EXPECT_STREQ(b_.in[0], "polled");
}

// What fi_poll -t counter does: each side, in a thread of its own, posts a receive and a send
// to the other and then only calls fi_poll on its own set until its send and receive counters
// have been reported.
TEST_F(PollSetTraffic, EachSidePollingOnlyItsOwnSetSeesItsSendAndReceiveCounted) {
  ASSERT_NO_FATAL_FAILURE(open_pair());
  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_));
  ASSERT_NO_FATAL_FAILURE(send(&b_, &a_));
  auto run = [](Side* s, std::atomic<bool>* done) {
    // fabtests reads a counter's value when it is reported and polls again until the value
    // reaches what it sent and received: a report whose value it cannot yet see would hang it.
    const auto end = Clock::now() + milliseconds(kTrafficMs);
    uint64_t tx = 0, rx = 0;
    while ((tx < 1 || rx < 1) && Clock::now() < end) {
      const std::vector<void*> got = poll_once(s);
      if (reports(got, &s->tx_context)) tx = fi_cntr_read(s->tx);
      if (reports(got, &s->rx_context)) rx = fi_cntr_read(s->rx);
    }
    done->store(tx == 1 && rx == 1);
  };
  std::atomic<bool> a_done{false}, b_done{false};
  std::thread other(run, &b_, &b_done);
  run(&a_, &a_done);
  other.join();
  EXPECT_TRUE(a_done.load()) << "the first side never saw both its counters count";
  EXPECT_TRUE(b_done.load()) << "the second side never saw both its counters count";
}

// "since the last time fi_poll ... [was] called": once reported, a counter is not reported by
// the next fi_poll calls, until a new completion changes it again.
TEST_F(PollSetTraffic, CounterIsNotReportedAgainUntilItChangesAgain) {
  ASSERT_NO_FATAL_FAILURE(open_pair());
  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_, 0));
  ASSERT_TRUE(poll_until_reported({{&a_, &a_.tx_context}, {&b_, &b_.rx_context}}).empty());
  EXPECT_FALSE(reported_within(&b_, &b_.rx_context, 100)) << "reported with no new change";
  EXPECT_FALSE(reported_within(&a_, &a_.tx_context, 10));

  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_, 1));
  EXPECT_TRUE(poll_until_reported({{&a_, &a_.tx_context}, {&b_, &b_.rx_context}}).empty())
      << "a second message was not reported";
  EXPECT_EQ(fi_cntr_read(b_.rx), 2u);
}

// fi_cntr_add resets what counts as a change (fi_poll(3)); it does not hide a completion that
// comes after it.
TEST_F(PollSetTraffic, ReceiveAfterTheApplicationsFiCntrAddIsReported) {
  ASSERT_NO_FATAL_FAILURE(open_pair());
  ASSERT_EQ(fi_cntr_add(b_.rx, 10), 0);
  EXPECT_FALSE(reports(poll_once(&b_), &b_.rx_context));
  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_));
  EXPECT_TRUE(poll_until_reported({{&b_, &b_.rx_context}}).empty());
  EXPECT_EQ(fi_cntr_read(b_.rx), 11u);
}

// fi_poll -t queue: "Completion queues will return their context if they are not empty."
TEST_F(PollSetTraffic, CqHoldingAReceiveIsReportedUntilItIsRead) {
  ASSERT_NO_FATAL_FAILURE(open_pair({.cq_in_poll_set = true}));
  ASSERT_NO_FATAL_FAILURE(send(&a_, &b_));
  ASSERT_TRUE(poll_until_reported({{&b_, &b_.cq_context}}).empty())
      << "the receive's completion was never reported";
  EXPECT_TRUE(reports(poll_once(&b_), &b_.cq_context)) << "not empty, yet not reported";
  fi_cq_entry entry{};
  ASSERT_EQ(fi_cq_read(b_.cq, &entry, 1), 1);
  EXPECT_EQ(entry.op_context, b_.in[0]);
  EXPECT_FALSE(reports(poll_once(&b_), &b_.cq_context)) << "reported once empty";
}

// A send that fails changes the send counter's error value: reported as well.
TEST_F(PollSetTraffic, FailedSendChangesTheErrorValueAndIsReported) {
  ASSERT_NO_FATAL_FAILURE(open_side(&a_));
  // A port nobody listens on, on 127.0.0.2 where no test listens.
  sockaddr_in dead{};
  dead.sin_family = AF_INET;
  dead.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  socklen_t len = sizeof(dead);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&dead), sizeof(dead)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&dead), &len), 0);
  close(fd);
  ASSERT_EQ(fi_av_insert(a_.av, &dead, 1, &a_.peer, 0, nullptr), 1);
  ASSERT_EQ(fi_send(a_.ep, "x", 1, nullptr, a_.peer, nullptr), 0);
  EXPECT_TRUE(poll_until_reported({{&a_, &a_.tx_context}}).empty());
  EXPECT_EQ(fi_cntr_readerr(a_.tx), 1u);
  EXPECT_EQ(fi_cntr_read(a_.tx), 0u);
}

// The wait-set sibling: fi_wait returns 0 when a member counter changed since the set last
// reported it. A thread blocked in fi_wait must see a message arrive (its bytes moved while it
// waits), and the same change must not end the next fi_wait.
TEST_F(PollSetTraffic, FiWaitOnTheReceiveCountersSetReturnsWhenAMessageArrives) {
  ASSERT_NO_FATAL_FAILURE(open_pair({.wait_set = true}));
  EXPECT_EQ(fi_wait(b_.set, 0), -FI_EAGAIN) << "nothing has changed yet";
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(30));  // let fi_wait block first
    send(&a_, &b_);
    // The sender's own side moves only when it calls fabq.
    const auto end = Clock::now() + milliseconds(kTrafficMs);
    while (!reports(poll_once(&a_), &a_.tx_context) && Clock::now() < end) {
    }
    sent.store(fi_cntr_read(a_.tx) == 1);
  });
  const auto t0 = Clock::now();
  const int rc = fi_wait(b_.set, kTrafficMs);
  const int64_t elapsed = ms_since(t0);
  sender.join();
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(rc, 0) << "the receive never ended the wait";
  EXPECT_LT(elapsed, kTrafficMs - 1000);
  EXPECT_EQ(fi_cntr_read(b_.rx), 1u);
  EXPECT_EQ(fi_wait(b_.set, 50), -FI_EAGAIN) << "the same change ended a second wait";
}

}  // namespace
}  // namespace fabq::testing
