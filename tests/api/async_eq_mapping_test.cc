// fi_fabq(7) ASYNCHRONOUS EVENTS ON THE EQ: error kinds also arrive as fi_eq_err_entry on the
// EQ bound to the affected object, and fatal kinds leave the object in an error state.
#include <cstring>
#include <string>

#include "async_fixture.h"

namespace fabq::testing {
namespace {

class AsyncEqMapping : public AsyncTest {
 protected:
  void ack_all() {
    fi_fabq_async_event ev;
    while (ops_->get_event(domain_, &ev, 0) == 0) EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  void expect_eq_empty(fid_eq* eq) {
    uint32_t event;
    fi_eq_entry entry;
    EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAGAIN);
  }
  int post_recv(void* context) {
    return static_cast<int>(fi_recv(ep_, buf_, sizeof(buf_), nullptr, 0, context));
  }
  char buf_[64];
};

struct ErrorKind {
  const char* name;
  uint32_t type;
  int err;
  const char* target;
};

TEST_F(AsyncEqMapping, ErrorKindsAppearOnTheEqOfTheAffectedObject) {
  open_endpoint(/*with_srx=*/true);
  const ErrorKind kinds[] = {
      {"ep_fatal", FI_FABQ_EVENT_EP_FATAL, FI_EIO, "ep:0"},
      {"ep_req_err", FI_FABQ_EVENT_EP_REQ_ERR, FI_EREMOTEIO, "ep:0"},
      {"ep_access_err", FI_FABQ_EVENT_EP_ACCESS_ERR, FI_EACCES, "ep:0"},
      {"path_mig_err", FI_FABQ_EVENT_PATH_MIG_ERR, FI_EHOSTUNREACH, "ep:0"},
      {"cq_err", FI_FABQ_EVENT_CQ_ERR, FI_EOVERRUN, "cq:0"},
      {"srx_err", FI_FABQ_EVENT_SRX_ERR, FI_EIO, "srx:0"},
      {"port_err", FI_FABQ_EVENT_PORT_ERR, FI_ENETDOWN, "domain"},
      {"device_fatal", FI_FABQ_EVENT_DEVICE_FATAL, FI_ENODEV, "domain"},
  };
  for (const ErrorKind& k : kinds) {
    SCOPED_TRACE(k.name);
    const bool on_ep = std::strncmp(k.target, "ep", 2) == 0;
    fid_eq* eq = on_ep ? ep_eq_ : domain_eq_;
    fid* object = on_ep                                   ? &ep_->fid
                  : std::strncmp(k.target, "cq", 2) == 0  ? &cq_->fid
                  : std::strncmp(k.target, "srx", 3) == 0 ? &srx_ep_->fid
                                                          : &domain_->fid;
    inject(std::string("event=") + k.name + ",on=" + k.target);
    fi_eq_err_entry err = eq_error(eq);
    EXPECT_EQ(err.fid, object);
    EXPECT_EQ(err.context, object->context);
    EXPECT_EQ(err.err, k.err) << fi_strerror(err.err);
    EXPECT_EQ(err.prov_errno, static_cast<int>(k.type));
    char text[128];
    const char* s = fi_eq_strerror(eq, err.prov_errno, err.err_data, text, sizeof(text));
    EXPECT_NE(std::string(s).find(ops_->event_type_str(k.type)), std::string::npos) << s;
    // SRX_ERR fails the bound endpoint as well: its EP_FATAL reaches the endpoint's EQ.
    if (k.type == FI_FABQ_EVENT_SRX_ERR) {
      fi_eq_err_entry ep_err = eq_error(ep_eq_);
      EXPECT_EQ(ep_err.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_FATAL));
    }
    expect_eq_empty(eq);
    ack_all();
  }
}

TEST_F(AsyncEqMapping, InfoKindsGoToTheChannelOnly) {
  open_endpoint(/*with_srx=*/true);
  inject(
      "event=comm_est,on=ep:0; event=sq_drained,on=ep:0; event=path_mig,on=ep:0;"
      "event=last_wqe_reached,on=ep:0; event=srx_limit_reached,on=srx:0; event=port_active;"
      "event=addr_change; event=key_table_change; event=gid_change; event=sm_change;"
      "event=client_reregister");
  expect_eq_empty(ep_eq_);
  expect_eq_empty(domain_eq_);
  int n = 0;
  fi_fabq_async_event ev;
  while (ops_->get_event(domain_, &ev, 0) == 0) {
    ++n;
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  EXPECT_EQ(n, 11);
}

TEST_F(AsyncEqMapping, AnEndpointFatalErrorFailsItsPostedReceivesAndLaterPosts) {
  open_endpoint();
  int a, b;
  ASSERT_EQ(post_recv(&a), 0);
  ASSERT_EQ(post_recv(&b), 0);
  inject("event=ep_fatal,on=ep:0");
  for (void* want : {static_cast<void*>(&a), static_cast<void*>(&b)}) {
    fi_cq_entry entry;
    ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
    fi_cq_err_entry err{};
    ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
    EXPECT_EQ(err.op_context, want);
    EXPECT_EQ(err.err, FI_EIO);
    EXPECT_EQ(err.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_FATAL));
    EXPECT_TRUE(err.flags & FI_RECV);
  }
  EXPECT_EQ(post_recv(&a), -FI_EOPBADSTATE);
  ack_all();
}

TEST_F(AsyncEqMapping, ACqErrorPutsTheCqInTheOverrunState) {
  cq_ = open_cq({.size = 8});
  inject("event=cq_err,on=cq:0");
  fi_cq_entry entry;
  EXPECT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
  fi_cq_err_entry err{};
  EXPECT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
  EXPECT_EQ(err.err, FI_EOVERRUN);
  ack_all();
}

// An unread error entry of a closed CQ would name a fid that no longer exists, and that the
// next CQ may reuse: it leaves the domain's EQ with the CQ, as an endpoint's events leave its.
TEST_F(AsyncEqMapping, ClosingACqPurgesItsUnreadErrorFromTheDomainsEq) {
  cq_ = open_cq({.size = 64, .format = FI_CQ_FORMAT_CONTEXT});
  inject("event=cq_err,on=cq:0");
  ack_all();
  ASSERT_EQ(fi_close(&cq_->fid), 0);
  cq_ = nullptr;
  expect_eq_empty(domain_eq_);
}

TEST_F(AsyncEqMapping, AfterDeviceFatalTheDomainOpensNothing) {
  inject("event=device_fatal");
  fid_cq* cq = nullptr;
  fi_cq_attr attr{.size = 8};
  EXPECT_EQ(fi_cq_open(domain_, &attr, &cq, nullptr), -FI_EOPBADSTATE);
  fid_ep* ep = nullptr;
  EXPECT_EQ(fi_endpoint(domain_, info_, &ep, nullptr), -FI_EOPBADSTATE);
  ack_all();
}

TEST_F(AsyncEqMapping, AnSrxErrorFailsItsEndpointsWhichReachTheirLastReceive) {
  open_endpoint(/*with_srx=*/true);
  inject("event=srx_err,on=srx:0");
  std::vector<uint32_t> got;
  fi_fabq_async_event ev;
  while (ops_->get_event(domain_, &ev, 0) == 0) {
    got.push_back(ev.type);
    EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  }
  EXPECT_EQ(got, (std::vector<uint32_t>{FI_FABQ_EVENT_SRX_ERR, FI_FABQ_EVENT_EP_FATAL,
                                        FI_FABQ_EVENT_LAST_WQE_REACHED}));
  char buf[8];
  EXPECT_EQ(fi_recv(srx_ep_, buf, sizeof(buf), nullptr, 0, nullptr), -FI_EOPBADSTATE);
}

TEST_F(AsyncEqMapping, AnSrxBelowItsArmedLimitRaisesLimitReachedOnce) {
  open_endpoint(/*with_srx=*/true);
  char buf[3][8];
  for (auto& b : buf) ASSERT_EQ(fi_recv(srx_ep_, b, sizeof(b), nullptr, 0, b), 0);
  ASSERT_EQ(ops_->srx_arm_limit(srx_ep_, 3), 0);
  ASSERT_EQ(fi_cancel(&srx_ep_->fid, buf[0]), 0);
  fi_fabq_async_event ev = get(0);
  EXPECT_EQ(ev.type, static_cast<uint32_t>(FI_FABQ_EVENT_SRX_LIMIT_REACHED));
  EXPECT_EQ(ev.fid, &srx_ep_->fid);
  EXPECT_EQ(ops_->ack_event(domain_, &ev), 0);
  ASSERT_EQ(fi_cancel(&srx_ep_->fid, buf[1]), 0);
  EXPECT_EQ(ops_->get_event(domain_, &ev, 0), -FI_EAGAIN) << "the limit disarmed itself";
  // The cancelled receives completed with FI_ECANCELED on the endpoint's CQ.
  for (int i = 0; i < 2; ++i) {
    fi_cq_err_entry err{};
    fi_cq_entry entry;
    ASSERT_EQ(fi_cq_read(cq_, &entry, 1), -FI_EAVAIL);
    ASSERT_EQ(fi_cq_readerr(cq_, &err, 0), 1);
    EXPECT_EQ(err.err, FI_ECANCELED);
    EXPECT_EQ(err.op_context, buf[i]);
  }
}

}  // namespace
}  // namespace fabq::testing
