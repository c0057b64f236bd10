// Test support for the asynchronous event channel (include/fabq/fi_fabq.h), through libfabric
// only: AsyncTest opens fabq on "lo" (FabqTest), binds an EQ to the domain, opens the async
// ops, and offers endpoints, CQs and SRX contexts wired the way an application wires them.
#pragma once

#include <poll.h>
#include <rdma/fi_endpoint.h>

#include <string>

#include "fabq/fi_fabq.h"
#include "fabq_fixture.h"

namespace fabq::testing {

class AsyncTest : public FabqTest {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(
        fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops_), nullptr),
        0);
    ASSERT_NE(ops_, nullptr);
    domain_eq_ = open_eq({.size = 64, .wait_obj = FI_WAIT_NONE});
    ASSERT_NE(domain_eq_, nullptr);
    ASSERT_EQ(fi_domain_bind(domain_, &domain_eq_->fid, 0), 0);
  }

  void TearDown() override {
    // Whatever a test left unacknowledged would keep the domain open.
    fi_fabq_async_event ev;
    while (ops_ != nullptr && ops_->get_event(domain_, &ev, 0) == 0) ops_->ack_event(domain_, &ev);
    for (fid* f : {&ep_->fid, &srx_ep_->fid}) {
      if (f != &null_ep_.fid) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    if (cq_ != nullptr) {
      EXPECT_EQ(fi_close(&cq_->fid), 0);
    }
    if (ep_eq_ != nullptr) {
      EXPECT_EQ(fi_close(&ep_eq_->fid), 0);
    }
    // The domain holds its EQ, and the fabric every EQ: domain, EQ, then fabric.
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    domain_ = nullptr;
    if (domain_eq_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_eq_->fid), 0);
    }
    FabqTest::TearDown();
  }

  // An enabled endpoint with its own EQ and one CQ for both directions (opens cq_ if needed).
  void open_endpoint(bool with_srx = false) {
    if (cq_ == nullptr) cq_ = open_cq({.size = 64, .format = FI_CQ_FORMAT_CONTEXT});
    ep_eq_ = open_eq({.size = 64, .wait_obj = FI_WAIT_NONE});
    fid_ep* ep = nullptr;
    ASSERT_EQ(fi_endpoint(domain_, info_, &ep, this), 0);
    ep_ = ep;
    ASSERT_EQ(fi_ep_bind(ep_, &ep_eq_->fid, 0), 0);
    ASSERT_EQ(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), 0);
    if (with_srx) {
      fi_rx_attr attr{.size = 16};
      fid_ep* srx = nullptr;
      ASSERT_EQ(fi_srx_context(domain_, &attr, &srx, nullptr), 0);
      srx_ep_ = srx;
      ASSERT_EQ(fi_ep_bind(ep_, &srx_ep_->fid, 0), 0);
    }
    ASSERT_EQ(fi_enable(ep_), 0);
  }

  fi_fabq_async_event get(int timeout_ms = 2000) {
    fi_fabq_async_event ev{};
    EXPECT_EQ(ops_->get_event(domain_, &ev, timeout_ms), 0) << "no event within " << timeout_ms;
    return ev;
  }
  void inject(const std::string& spec) {
    ASSERT_EQ(ops_->inject(domain_, spec.c_str()), 0) << spec;
  }
  bool fd_readable() {
    int fd = -1;
    EXPECT_EQ(ops_->get_fd(domain_, &fd), 0);
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
  }
  // The error entry at the head of `eq` (fails the test if there is none).
  fi_eq_err_entry eq_error(fid_eq* eq) {
    uint32_t event;
    fi_eq_entry entry;
    EXPECT_EQ(fi_eq_read(eq, &event, &entry, sizeof(entry), 0), -FI_EAVAIL);
    fi_eq_err_entry err{};
    EXPECT_GT(fi_eq_readerr(eq, &err, 0), 0);
    return err;
  }

  fi_fabq_async_ops* ops_ = nullptr;
  fid_eq* domain_eq_ = nullptr;
  fid_eq* ep_eq_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep null_ep_{};
  fid_ep* ep_ = &null_ep_;
  fid_ep* srx_ep_ = &null_ep_;
};

}  // namespace fabq::testing
