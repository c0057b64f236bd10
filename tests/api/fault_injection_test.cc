// fi_fabq(7) FAULT INJECTION: FI_FABQ_FAULTS and inject(), through the libfabric API.
#include <stdlib.h>

#include <chrono>
#include <vector>

#include "async_fixture.h"

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;

class FaultInjection : public AsyncTest {
 protected:
  // Posts receives 1..n on ep_; returns which of them completed in error at once.
  std::vector<int> failing_posts(int n, fid_cq* cq) {
    std::vector<int> failed;
    for (int i = 1; i <= n; ++i) {
      EXPECT_EQ(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, &ctx_[i]), 0);
      fi_cq_entry entry;
      if (fi_cq_read(cq, &entry, 1) == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        EXPECT_EQ(fi_cq_readerr(cq, &err, 0), 1);
        EXPECT_EQ(err.op_context, &ctx_[i]);
        failed.push_back(i);
      }
    }
    return failed;
  }
  char buf_[16];
  int ctx_[256];
};

TEST_F(FaultInjection, AnOpsRuleFailsExactlyTheNthOperation) {
  open_endpoint();
  inject("error=FI_EIO:77,on=ep:0,ops=3");
  for (int i = 1; i <= 4; ++i) {
    ASSERT_EQ(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, &ctx_[i]), 0);
  }
  fi_cq_entry entry;
  ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.op_context, &ctx_[3]);
  EXPECT_EQ(err.err, FI_EIO);
  EXPECT_EQ(err.prov_errno, 77);
  EXPECT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAGAIN) << "the other receives stay posted";
}

TEST_F(FaultInjection, AnEventRuleOnTheNthOperationRaisesIt) {
  open_endpoint();
  inject("event=ep_fatal,on=ep:0,ops=2");
  ASSERT_EQ(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, &ctx_[1]), 0);
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  ASSERT_EQ(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, &ctx_[2]), 0);
  ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_EP_FATAL));
  EXPECT_EQ(ev.fid, &ep_->fid);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

// Waiting receives hold no CQ slot (fi_fabq(7) COMPLETION QUEUES): when more of them end at
// once than the CQ has room for, the CQ overruns (CQ_ERR), as fi_cq(3) says, and no
// completion is dropped silently.
TEST_F(FaultInjection, AFatalEndpointWithMoreWaitingReceivesThanItsCqHoldsOverrunsTheCq) {
  cq_ = open_cq({.size = 4, .format = FI_CQ_FORMAT_CONTEXT});
  open_endpoint();
  for (int i = 1; i <= 8; ++i) {
    ASSERT_EQ(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, &ctx_[i]), 0) << i;
  }
  inject("event=ep_fatal,on=ep:0");
  bool overrun_event = false;
  for (int n = 0; n < 3 && !overrun_event; ++n) {
    const fi_fabq_async_event ev = get();
    overrun_event = ev.type == FI_FABQ_EVENT_CQ_ERR && ev.fid == &cq_->fid;
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  EXPECT_TRUE(overrun_event) << "CQ_ERR on the receive CQ";
  fi_cq_err_entry err{};
  for (int i = 1; i <= 4; ++i) {
    ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
    EXPECT_EQ(err.op_context, &ctx_[i]);
    EXPECT_EQ(err.err, FI_EIO);
  }
  fi_cq_entry entry;
  EXPECT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.err, FI_EOVERRUN) << "the four that found no room";
}

TEST_F(FaultInjection, ADomainsOperationsAreTheObjectsOpenedOnIt) {
  inject("event=port_err,ops=2");
  cq_ = open_cq({.size = 4});
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  fid_cntr* cntr = open_cntr({.events = FI_CNTR_EVENTS_COMP});
  ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(fi_close(&cntr->fid), 0);
}

TEST_F(FaultInjection, AnOpsRuleWithACountFiresOnEveryNthOperation) {
  open_endpoint();
  inject("error=FI_EIO,on=ep:0,ops=2,count=0");
  EXPECT_EQ(failing_posts(7, cq_), (std::vector<int>{2, 4, 6}));
}

TEST_F(FaultInjection, AMsRuleFiresAfterItsDelayAndRepeatsUpToCount) {
  const auto start = Clock::now();
  inject("event=sm_change,ms=100,count=2");
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  for (int i = 1; i <= 2; ++i) {
    ev = get(3000);
    EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_SM_CHANGE));
    EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(95 * i));
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  EXPECT_EQ(ops_->get_event(domain_, &ev, 300), -FI_EAGAIN) << "count=2 fires twice";
}

TEST_F(FaultInjection, AProbabilityRuleIsDeterministicUnderItsSeed) {
  open_endpoint();
  inject("error=FI_EIO,on=ep:0,prob=0.25,seed=5,count=0");
  const std::vector<int> first = failing_posts(40, cq_);
  EXPECT_GT(first.size(), 0u);
  EXPECT_LT(first.size(), 40u);
  // The same rule on a fresh endpoint sees the same sequence of operations: same failures.
  ASSERT_EQ(fi_close(&ep_->fid), 0);
  ep_ = &null_ep_;
  ASSERT_EQ(fi_close(&ep_eq_->fid), 0);
  ep_eq_ = nullptr;
  fid_cq* cq = cq_;
  cq_ = nullptr;
  ASSERT_EQ(fi_close(&cq->fid), 0);
  open_endpoint();
  inject("error=FI_EIO,on=ep:1,prob=0.25,seed=5,count=0");
  EXPECT_EQ(failing_posts(40, cq_), first);
}

TEST_F(FaultInjection, ANamedTargetIsFoundByTheNameGivenWithSetName) {
  cq_ = open_cq({.size = 8});
  inject("event=cq_err,on=cq:hot");
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  ASSERT_EQ(ops_->set_name(&cq_->fid, "hot"), 0);
  ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_CQ_ERR));
  EXPECT_EQ(ev.fid, &cq_->fid);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(ops_->set_name(&cq_->fid, ""), -FI_EINVAL);
}

TEST_F(FaultInjection, AnErrorRuleOnACqWritesAnErrorCompletion) {
  cq_ = open_cq({.size = 8});
  inject("error=ECONNRESET:9,on=cq:0");
  fi_cq_entry entry;
  ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  fi_cq_err_entry err{};
  ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.err, FI_ECONNRESET);
  EXPECT_EQ(err.prov_errno, 9);
  EXPECT_EQ(err.op_context, nullptr);
}

TEST_F(FaultInjection, ARuleForAnObjectNotYetOpenFiresWhenItOpens) {
  inject("event=comm_est,on=ep:0");
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  open_endpoint();
  ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_COMM_EST));
  EXPECT_EQ(ev.fid, &ep_->fid);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

TEST_F(FaultInjection, AnInvalidSpecIsRejected) {
  for (const char* bad : {"event=nonsense", "event=cq_err,on=ep:0", "error=FI_EIO,on=srx:0",
                          "event=sm_change,ops=0", "event=sm_change,ms=1,ops=2", "bogus=1",
                          "error=FI_NOPE,on=cq:0", "event=sm_change,prob=2"}) {
    EXPECT_EQ(ops_->inject(domain_, bad), -FI_EINVAL) << bad;
  }
}

TEST_F(FaultInjection, TheEnvironmentVariableAppliesToDomainsOpenedWhileItIsSet) {
  ASSERT_EQ(setenv("FI_FABQ_FAULTS", "event=key_table_change", 1), 0);
  fid_domain* d2 = nullptr;
  const int rc = fi_domain(fabric_, info_, &d2, nullptr);
  unsetenv("FI_FABQ_FAULTS");
  ASSERT_EQ(rc, 0);
  // Port events reach every domain on "lo": this one too, and the new one.
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_KEY_TABLE_CHANGE));
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  ASSERT_EQ(ops_->get_event(d2, &ev, 0), 0);
  EXPECT_EQ(ev.fid, &d2->fid);
  EXPECT_EQ(ops_->ack_event(d2, &ev), 0);
  EXPECT_EQ(fi_close(&d2->fid), 0);
}

TEST_F(FaultInjection, AnInvalidEnvironmentVariableFailsTheDomainOpen) {
  ASSERT_EQ(setenv("FI_FABQ_FAULTS", "event=sm_change,when=never", 1), 0);
  fid_domain* d2 = nullptr;
  const int rc = fi_domain(fabric_, info_, &d2, nullptr);
  unsetenv("FI_FABQ_FAULTS");
  EXPECT_EQ(rc, -FI_EINVAL);
  EXPECT_EQ(d2, nullptr);
}

}  // namespace
}  // namespace fabq::testing
