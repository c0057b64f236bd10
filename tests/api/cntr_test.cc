// Counters (fi_cntr(3)) through libfabric: open validation and limits, the value and error
// value operations, and fi_cntr_wait (threshold, timeout, error change, FI_WAIT_NONE).
#include <rdma/fi_domain.h>

#include <atomic>
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

fi_cntr_attr cntr_attr(fi_wait_obj wait = FI_WAIT_NONE) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  attr.wait_obj = wait;
  return attr;
}

class Cntr : public FabqTest {};

// ---------------------------------------------------------------------------------------------
// Open.

TEST_F(Cntr, OpensWithEveryWaitObjectExceptSetWithoutASet) {
  for (fi_wait_obj w : {FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                        FI_WAIT_MUTEX_COND, FI_WAIT_YIELD}) {
    SCOPED_TRACE(w);
    fid_cntr* c = open_cntr(cntr_attr(w));
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(fi_close(&c->fid), 0);
  }
  fi_cntr_attr attr = cntr_attr(FI_WAIT_SET);
  attr.wait_set = nullptr;
  fid_cntr* c = reinterpret_cast<fid_cntr*>(0x1);
  EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EINVAL);
  EXPECT_EQ(c, nullptr);
}

TEST_F(Cntr, EventsOtherThanCompAreInvalid) {
  for (int events : {1, 2, 0x100}) {
    SCOPED_TRACE(events);
    fi_cntr_attr attr = cntr_attr();
    attr.events = static_cast<fi_cntr_events>(events);
    fid_cntr* c = reinterpret_cast<fid_cntr*>(0x1);
    EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EINVAL);
    EXPECT_EQ(c, nullptr) << "a failed open leaves the output pointer NULL";
  }
}

TEST_F(Cntr, NonZeroFlagsAreBadFlags) {
  for (uint64_t flags : {uint64_t{1}, uint64_t{FI_WRITE}, uint64_t{FI_AFFINITY}}) {
    SCOPED_TRACE(flags);
    fi_cntr_attr attr = cntr_attr();
    attr.flags = flags;
    fid_cntr* c = reinterpret_cast<fid_cntr*>(0x1);
    EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(c, nullptr);
  }
}

TEST_F(Cntr, UnknownWaitObjectIsInvalid) {
  fi_cntr_attr attr = cntr_attr(static_cast<fi_wait_obj>(77));
  fid_cntr* c = nullptr;
  EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), -FI_EINVAL);
  EXPECT_EQ(c, nullptr);
}

TEST_F(Cntr, CntrCntCountersThenNoSpace) {
  const size_t limit = info_->domain_attr->cntr_cnt;
  ASSERT_GT(limit, 0u);
  ASSERT_LE(limit, 100'000u) << "cntr_cnt too large to test";
  fi_cntr_attr attr = cntr_attr();
  std::vector<fid_cntr*> open;
  open.reserve(limit);
  for (size_t i = 0; i < limit; ++i) {
    fid_cntr* c = nullptr;
    const int rc = fi_cntr_open(domain_, &attr, &c, nullptr);
    if (rc != 0) {
      ADD_FAILURE() << "counter " << i << " of " << limit << ": " << fi_strerror(-rc);
      break;
    }
    open.push_back(c);
  }
  if (open.size() == limit) {
    fid_cntr* extra = reinterpret_cast<fid_cntr*>(0x1);
    EXPECT_EQ(fi_cntr_open(domain_, &attr, &extra, nullptr), -FI_ENOSPC);
    EXPECT_EQ(extra, nullptr);
    // Closing one frees its slot.
    EXPECT_EQ(fi_close(&open.back()->fid), 0);
    open.pop_back();
    fid_cntr* again = nullptr;
    EXPECT_EQ(fi_cntr_open(domain_, &attr, &again, nullptr), 0);
    if (again != nullptr) open.push_back(again);
  }
  for (fid_cntr* c : open) EXPECT_EQ(fi_close(&c->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// Values.

TEST_F(Cntr, StartsAtZero) {
  fid_cntr* c = open_cntr(cntr_attr());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(fi_cntr_read(c), 0u);
  EXPECT_EQ(fi_cntr_readerr(c), 0u);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

TEST_F(Cntr, AddSetAddErrSetErr) {
  fid_cntr* c = open_cntr(cntr_attr());
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(fi_cntr_add(c, 5), 0);
  EXPECT_EQ(fi_cntr_read(c), 5u);
  EXPECT_EQ(fi_cntr_add(c, 7), 0);
  EXPECT_EQ(fi_cntr_read(c), 12u);
  EXPECT_EQ(fi_cntr_readerr(c), 0u) << "fi_cntr_add touched the error value";

  EXPECT_EQ(fi_cntr_set(c, 3), 0);
  EXPECT_EQ(fi_cntr_read(c), 3u) << "fi_cntr_set may lower the value";
  EXPECT_EQ(fi_cntr_set(c, 1'000'000'000'000ull), 0);
  EXPECT_EQ(fi_cntr_read(c), 1'000'000'000'000ull);

  EXPECT_EQ(fi_cntr_adderr(c, 2), 0);
  EXPECT_EQ(fi_cntr_readerr(c), 2u);
  EXPECT_EQ(fi_cntr_adderr(c, 3), 0);
  EXPECT_EQ(fi_cntr_readerr(c), 5u);
  EXPECT_EQ(fi_cntr_seterr(c, 1), 0);
  EXPECT_EQ(fi_cntr_readerr(c), 1u);
  EXPECT_EQ(fi_cntr_read(c), 1'000'000'000'000ull) << "error operations touched the value";

  EXPECT_EQ(fi_cntr_set(c, 0), 0);
  EXPECT_EQ(fi_cntr_seterr(c, 0), 0);
  EXPECT_EQ(fi_cntr_read(c), 0u);
  EXPECT_EQ(fi_cntr_readerr(c), 0u);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

TEST_F(Cntr, ConcurrentAddsAreAllCounted) {
  fid_cntr* c = open_cntr(cntr_attr(FI_WAIT_UNSPEC));
  ASSERT_NE(c, nullptr);
  constexpr int kThreads = 4;
  constexpr int kAdds = 20'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([c] {
      for (int i = 0; i < kAdds; ++i) {
        fi_cntr_add(c, 1);
        if (i % 100 == 0) fi_cntr_adderr(c, 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(fi_cntr_read(c), uint64_t{kThreads} * kAdds);
  EXPECT_EQ(fi_cntr_readerr(c), uint64_t{kThreads} * (kAdds / 100));
  EXPECT_EQ(fi_close(&c->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// fi_cntr_wait, with every wait object that can block.

class CntrWait : public FabqTest, public ::testing::WithParamInterface<fi_wait_obj> {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    c_ = open_cntr(cntr_attr(GetParam()));
    ASSERT_NE(c_, nullptr);
  }
  void TearDown() override {
    if (c_ != nullptr) {
      EXPECT_EQ(fi_close(&c_->fid), 0);
    }
    FabqTest::TearDown();
  }
  fid_cntr* c_ = nullptr;
};

TEST_P(CntrWait, ThresholdAlreadyReachedReturnsAtOnce) {
  ASSERT_EQ(fi_cntr_add(c_, 3), 0);
  for (int timeout : {0, 50, -1}) {
    SCOPED_TRACE(timeout);
    const auto t0 = Clock::now();
    EXPECT_EQ(fi_cntr_wait(c_, 3, timeout), 0);
    EXPECT_EQ(fi_cntr_wait(c_, 1, timeout), 0);
    EXPECT_EQ(fi_cntr_wait(c_, 0, timeout), 0);
    EXPECT_LT(ms_since(t0), 1000);
  }
}

TEST_P(CntrWait, ReturnsOnceAnotherThreadReachesTheThreshold) {
  std::thread adder([&] {
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(milliseconds(2));
      EXPECT_EQ(fi_cntr_add(c_, 1), 0);
    }
  });
  const auto t0 = Clock::now();
  const int rc = fi_cntr_wait(c_, 10, 5000);
  const int64_t elapsed = ms_since(t0);
  adder.join();
  EXPECT_EQ(rc, 0);
  EXPECT_LT(elapsed, 4000) << "slept to its timeout";
  EXPECT_EQ(fi_cntr_read(c_), 10u);
}

TEST_P(CntrWait, NegativeTimeoutWaitsForTheThreshold) {
  std::atomic<bool> returned{false};
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_set(c_, 4), 0);
    // Keep adding (a lost wake-up fails the test below instead of hanging it).
    const auto t0 = Clock::now();
    while (!returned.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(milliseconds(10));
      if (ms_since(t0) > 10'000) fi_cntr_add(c_, 1);
    }
  });
  const int rc = fi_cntr_wait(c_, 4, -1);
  const uint64_t value = fi_cntr_read(c_);
  returned.store(true, std::memory_order_release);
  adder.join();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(value, 4u) << "the fi_cntr_set wake-up was lost";
}

TEST_P(CntrWait, IncrementsBelowTheThresholdDoNotEndTheWait) {
  std::thread adder([&] {
    std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(fi_cntr_add(c_, 1), 0);
    EXPECT_EQ(fi_cntr_add(c_, 1), 0);
  });
  const auto t0 = Clock::now();
  const int rc = fi_cntr_wait(c_, 5, 200);
  const int64_t elapsed = ms_since(t0);
  adder.join();
  EXPECT_EQ(rc, -FI_ETIMEDOUT);
  EXPECT_GE(elapsed, 200);
  EXPECT_EQ(fi_cntr_read(c_), 2u);
}

TEST_P(CntrWait, TimesOutWithTheErrorValueUnchanged) {
  ASSERT_EQ(fi_cntr_adderr(c_, 3), 0);  // errors before the wait do not end it
  ASSERT_EQ(fi_cntr_add(c_, 1), 0);
  for (int timeout : {0, 50}) {
    SCOPED_TRACE(timeout);
    const auto t0 = Clock::now();
    EXPECT_EQ(fi_cntr_wait(c_, 2, timeout), -FI_ETIMEDOUT);
    const int64_t elapsed = ms_since(t0);
    EXPECT_GE(elapsed, timeout);
    EXPECT_LT(elapsed, 5000);
    EXPECT_EQ(fi_cntr_readerr(c_), 3u) << "a timeout must leave the error value unchanged";
    EXPECT_EQ(fi_cntr_read(c_), 1u);
  }
}

TEST_P(CntrWait, ErrorAddedDuringTheWaitGivesEavail) {
  ASSERT_EQ(fi_cntr_adderr(c_, 1), 0);
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_adderr(c_, 1), 0);
  });
  const auto t0 = Clock::now();
  const int rc = fi_cntr_wait(c_, 100, 5000);
  const int64_t elapsed = ms_since(t0);
  failer.join();
  EXPECT_EQ(rc, -FI_EAVAIL);
  EXPECT_LT(elapsed, 4000) << "the error did not wake the waiter";
  EXPECT_EQ(fi_cntr_readerr(c_), 2u);
  EXPECT_EQ(fi_cntr_read(c_), 0u);
}

TEST_P(CntrWait, ErrorSetDuringTheWaitGivesEavail) {
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_EQ(fi_cntr_seterr(c_, 9), 0);
  });
  const auto t0 = Clock::now();
  const int rc = fi_cntr_wait(c_, 100, 5000);
  const int64_t elapsed = ms_since(t0);
  failer.join();
  EXPECT_EQ(rc, -FI_EAVAIL);
  EXPECT_LT(elapsed, 4000);
  EXPECT_EQ(fi_cntr_readerr(c_), 9u);
}

INSTANTIATE_TEST_SUITE_P(All, CntrWait,
                         ::testing::Values(FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_POLLFD,
                                           FI_WAIT_MUTEX_COND, FI_WAIT_YIELD),
                         [](const auto& info) {
                           switch (info.param) {
                             case FI_WAIT_UNSPEC:
                               return std::string("Unspec");
                             case FI_WAIT_FD:
                               return std::string("Fd");
                             case FI_WAIT_POLLFD:
                               return std::string("PollFd");
                             case FI_WAIT_MUTEX_COND:
                               return std::string("MutexCond");
                             case FI_WAIT_YIELD:
                               return std::string("Yield");
                             default:
                               return std::string("Other");
                           }
                         });

TEST_F(Cntr, WaitOnNoneIsNoSys) {
  fid_cntr* c = open_cntr(cntr_attr(FI_WAIT_NONE));
  ASSERT_NE(c, nullptr);
  for (int timeout : {0, 50, -1}) {
    const auto t0 = Clock::now();
    EXPECT_EQ(fi_cntr_wait(c, 1, timeout), -FI_ENOSYS);
    EXPECT_LT(ms_since(t0), 1000);
  }
  // Even when the threshold is reached: waiting is not supported at all.
  ASSERT_EQ(fi_cntr_add(c, 1), 0);
  EXPECT_EQ(fi_cntr_wait(c, 1, 0), -FI_ENOSYS);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
