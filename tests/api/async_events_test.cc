// fi_fabq(7) ASYNCHRONOUS EVENTS: the domain's event channel, through fi_open_ops and the
// libfabric API only.
#include <chrono>
#include <thread>
#include <vector>

#include "async_fixture.h"

extern "C" int fabq_header_compiles_as_c(void);

namespace fabq::testing {
namespace {

using Clock = std::chrono::steady_clock;

class AsyncEvents : public AsyncTest {};

TEST(FabqHeader, CompilesAsC) {
  EXPECT_EQ(fabq_header_compiles_as_c(), 1);
}

TEST_F(AsyncEvents, OpenOpsGivesTheTableByNameOnly) {
  EXPECT_EQ(ops_->size, sizeof(fi_fabq_async_ops));
  void* other = nullptr;
  EXPECT_EQ(fi_open_ops(&domain_->fid, "no_such_ops", 0, &other, nullptr), -FI_ENOSYS);
  EXPECT_EQ(fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 1, &other, nullptr), -FI_EBADFLAGS);
  EXPECT_EQ(fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 0, nullptr, nullptr), -FI_EINVAL);
}

TEST_F(AsyncEvents, GetOnAnEmptyChannelReturnsEagainAtOnceOrAfterTheTimeout) {
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
  const auto start = Clock::now();
  EXPECT_EQ(ops_->get_event(domain_, &ev, 50), -FI_EAGAIN);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(45));
}

TEST_F(AsyncEvents, EventsAreReadOneAtATimeOldestFirst) {
  inject("event=port_err; event=port_active; event=sm_change");
  const uint32_t want[] = {FI_FABQ_EVENT_PORT_ERR, FI_FABQ_EVENT_PORT_ACTIVE,
                           FI_FABQ_EVENT_SM_CHANGE};
  uint64_t last_seq = 0;
  uint64_t last_time = 0;
  for (uint32_t type : want) {
    fi_fabq_async_event ev = get(0);
    EXPECT_EQ(ev.type, type) << ops_->event_type_str(ev.type);
    EXPECT_EQ(ev.port_num, 1u) << "port events name port 1";
    EXPECT_EQ(ev.fid, &domain_->fid) << "port events are read as the domain's";
    EXPECT_GT(ev.seq, last_seq);
    EXPECT_GE(ev.time_ns, last_time);
    last_seq = ev.seq;
    last_time = ev.time_ns;
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  EXPECT_LE(last_time, static_cast<uint64_t>(
                           std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  fi_fabq_async_event ev;
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
}

TEST_F(AsyncEvents, ABlockedGetWakesWhenAnEventIsRaised) {
  fi_fabq_async_event ev{};
  int rc = 1;
  std::thread reader([&] { rc = ops_->get_event(domain_, &ev, 5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = Clock::now();
  inject("event=client_reregister");
  reader.join();
  EXPECT_EQ(rc, 0);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_CLIENT_REREGISTER));
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

TEST_F(AsyncEvents, TheFdIsReadableExactlyWhileAnEventWaits) {
  EXPECT_FALSE(fd_readable());
  inject("event=gid_change; event=key_table_change");
  EXPECT_TRUE(fd_readable());
  fi_fabq_async_event a = get(0);
  EXPECT_TRUE(fd_readable()) << "one event still waits";
  fi_fabq_async_event b = get(0);
  EXPECT_FALSE(fd_readable());
  EXPECT_EQ(ops_->ack_event(domain_, &a), 0);
  EXPECT_EQ(ops_->ack_event(domain_, &b), 0);
}

TEST_F(AsyncEvents, EpollWaitWakesOnTheFd) {
  int fd = -1;
  ASSERT_EQ(ops_->get_fd(domain_, &fd), 0);
  std::thread raiser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    inject("event=addr_change");
  });
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 5000), 1);
  raiser.join();
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_ADDR_CHANGE));
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

TEST_F(AsyncEvents, EveryEventKindCanBeRaisedAndReadAboutItsObject) {
  open_endpoint(/*with_srx=*/true);
  for (uint32_t type = FI_FABQ_EVENT_FIRST; type <= FI_FABQ_EVENT_LAST; ++type) {
    SCOPED_TRACE(ops_->event_type_str(type));
    std::string name = ops_->event_type_str(type);
    std::string kind = name.substr(std::string("FI_FABQ_EVENT_").size());
    const char* target = "domain";
    fid* object = &domain_->fid;
    if (type <= FI_FABQ_EVENT_PATH_MIG_ERR) {
      target = "ep:0";
      object = &ep_->fid;
    } else if (type == FI_FABQ_EVENT_CQ_ERR) {
      target = "cq:0";
      object = &cq_->fid;
    } else if (type <= FI_FABQ_EVENT_SRX_ERR) {
      target = "srx:0";
      object = &srx_ep_->fid;
    }
    inject("event=" + kind + ",on=" + target);
    fi_fabq_async_event ev = get(0);
    EXPECT_EQ(ev.type, type) << "got " << ops_->event_type_str(ev.type);
    EXPECT_EQ(ev.fid, object);
    EXPECT_EQ(ev.context, object->context);
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
    // Side events (LAST_WQE_REACHED after a failure, EP_FATAL after SRX_ERR) are drained.
    while (ops_->get_event(domain_, &ev, 0) == 0) EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
}

TEST_F(AsyncEvents, AnEventIsAcknowledgedExactlyOnce) {
  inject("event=sm_change");
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), -FI_EINVAL);
  fi_fabq_async_event never{.type = FI_FABQ_EVENT_SM_CHANGE, .seq = 999};
  EXPECT_EQ(ops_->ack_event(domain_, &never), -FI_EINVAL);
  EXPECT_EQ(ops_->ack_event(domain_, nullptr), -FI_EINVAL);
}

TEST_F(AsyncEvents, ClosingACqWithAnUnacknowledgedEventIsBusyUntilItIsAcknowledged) {
  cq_ = open_cq({.size = 8});
  inject("event=cq_err,on=cq:0");
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(fi_close(&cq_->fid), -FI_EBUSY);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
}

TEST_F(AsyncEvents, ClosingAnEndpointWithAnUnacknowledgedEventIsBusy) {
  open_endpoint();
  inject("event=comm_est,on=ep:0");
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(fi_close(&ep_->fid), -FI_EBUSY);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

TEST_F(AsyncEvents, ClosingTheDomainWithAnUnacknowledgedPortEventIsBusy) {
  inject("event=port_active");
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(fi_close(&domain_->fid), -FI_EBUSY);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
}

TEST_F(AsyncEvents, UnreadEventsLeaveTheChannelWithTheirObject) {
  cq_ = open_cq({.size = 8});
  inject("event=cq_err,on=cq:0; event=sm_change");
  EXPECT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_SM_CHANGE)) << "the CQ's event went";
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN);
}

// A second fabric and domain on the same interface, as a second part of the application.
class TwoDomains : public AsyncTest {
 protected:
  void SetUp() override {
    AsyncTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric2_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric2_, info_, &domain2_, nullptr), 0);
    ASSERT_EQ(fi_open_ops(&domain2_->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops2_),
                          nullptr),
              0);
  }
  void TearDown() override {
    fi_fabq_async_event ev;
    while (ops2_ != nullptr && ops2_->get_event(domain2_, &ev, 0) == 0) {
      ops2_->ack_event(domain2_, &ev);
    }
    if (domain2_ != nullptr) {
      EXPECT_EQ(fi_close(&domain2_->fid), 0);
    }
    if (fabric2_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric2_->fid), 0);
    }
    AsyncTest::TearDown();
  }
  fid_fabric* fabric2_ = nullptr;
  fid_domain* domain2_ = nullptr;
  fi_fabq_async_ops* ops2_ = nullptr;
};

TEST_F(TwoDomains, PortAndDeviceEventsReachEveryDomainOnTheInterface) {
  inject("event=port_err");
  fi_fabq_async_event mine = get(0);
  fi_fabq_async_event theirs{};
  ASSERT_EQ(ops2_->get_event(domain2_, &theirs, 0), 0);
  EXPECT_EQ(mine.type, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(theirs.type, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
  EXPECT_EQ(theirs.fid, &domain2_->fid);
  EXPECT_EQ(ops2_->port_state(domain2_), FI_FABQ_PORT_DOWN);
  EXPECT_EQ(ops_->ack_event(domain_, &mine), 0);
  EXPECT_EQ(ops2_->ack_event(domain2_, &theirs), 0);
  EXPECT_EQ(ops2_->ack_event(domain2_, &mine), -FI_EINVAL) << "acks go to the reading domain";
  inject("event=port_active");
  EXPECT_EQ(ops2_->port_state(domain2_), FI_FABQ_PORT_ACTIVE);
}

TEST_F(TwoDomains, AffiliatedEventsReachOnlyTheDomainThatOwnsTheObject) {
  cq_ = open_cq({.size = 8});
  inject("event=cq_err,on=cq:0");
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ev.fid, &cq_->fid);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  EXPECT_EQ(ops2_->get_event(domain2_, &ev, 0), -FI_EAGAIN);
}

TEST_F(AsyncEvents, EventTypeStrNamesEveryKind) {
  EXPECT_STREQ(ops_->event_type_str(FI_FABQ_EVENT_COMM_EST), "FI_FABQ_EVENT_COMM_EST");
  EXPECT_STREQ(ops_->event_type_str(FI_FABQ_EVENT_DEVICE_FATAL), "FI_FABQ_EVENT_DEVICE_FATAL");
  for (uint32_t t = FI_FABQ_EVENT_FIRST; t <= FI_FABQ_EVENT_LAST; ++t) {
    EXPECT_EQ(std::string(ops_->event_type_str(t)).rfind("FI_FABQ_EVENT_", 0), 0u);
  }
  EXPECT_STREQ(ops_->event_type_str(0), "unknown");
  EXPECT_STREQ(ops_->event_type_str(FI_FABQ_EVENT_LAST + 1), "unknown");
}

TEST_F(AsyncEvents, TheLoopbackPortIsActive) {
  EXPECT_EQ(ops_->port_state(domain_), FI_FABQ_PORT_ACTIVE);
  EXPECT_EQ(ops_->port_state(nullptr), -FI_EINVAL);
}

TEST_F(AsyncEvents, MisuseGetsInvalid) {
  fi_fabq_async_event ev;
  int fd;
  EXPECT_EQ(ops_->get_event(nullptr, &ev, 0), -FI_EINVAL);
  EXPECT_EQ(ops_->get_event(domain_, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(ops_->get_fd(domain_, nullptr), -FI_EINVAL);
  EXPECT_EQ(ops_->get_fd(reinterpret_cast<fid_domain*>(domain_eq_), &fd), -FI_EINVAL);
  EXPECT_EQ(ops_->inject(domain_, nullptr), -FI_EINVAL);
  EXPECT_EQ(ops_->set_name(&domain_eq_->fid, "x"), -FI_EINVAL);
  EXPECT_EQ(ops_->srx_arm_limit(nullptr, 1), -FI_EINVAL);
}

}  // namespace
}  // namespace fabq::testing
