// Wait sets and poll sets (fi_poll(3)) through libfabric.
//
// Wait sets (fi_wait_open on the fabric): which kinds open, members (an EQ, a CQ and a counter
// opened with FI_WAIT_SET), fi_wait timeouts and wake-ups, fi_trywait on the set, its fd, and
// the close rules. Poll sets (fi_poll_open on the domain): membership rules, what fi_poll
// reports, and the close rules.
#include <poll.h>
#include <rdma/fi_domain.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
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

}  // namespace
}  // namespace fabq::testing
