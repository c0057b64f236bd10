// Test support for tests/api: two fabq FI_EP_MSG endpoints of one process, connected over
// 127.0.0.1 through the public API (passive endpoint, fi_connect, FI_CONNREQ, fi_accept,
// FI_CONNECTED on both sides). Each side has its own EQ and CQ (FI_WAIT_UNSPEC, FORMAT_TAGGED).
// Every wait has a timeout; a step that fails fails the test, never hangs it.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>

#include <string>

#include "fabq_fixture.h"

namespace fabq::testing {

inline constexpr int kWaitMs = 5000;

class MsgPair : public FabqTest {
 protected:
  void SetUp() override {
    FabqTest::SetUp();
    if (HasFatalFailure()) return;
    fi_eq_attr eq_attr{};
    eq_attr.wait_obj = FI_WAIT_UNSPEC;
    server_eq_ = open_eq(eq_attr);
    client_eq_ = open_eq(eq_attr);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    server_cq_ = open_cq(cq_attr);
    client_cq_ = open_cq(cq_attr);
    ASSERT_NE(server_cq_, nullptr);
    ASSERT_NE(client_cq_, nullptr);
    ASSERT_EQ(fi_passive_ep(fabric_, info_, &pep_, nullptr), 0);
    ASSERT_EQ(fi_pep_bind(pep_, &server_eq_->fid, 0), 0);
    ASSERT_EQ(fi_listen(pep_), 0);
    size_t len = sizeof(addr_);
    ASSERT_EQ(fi_getname(&pep_->fid, &addr_, &len), 0);
    ASSERT_NE(addr_.sin_port, 0) << "fi_getname on a listening passive endpoint gives its port";
  }

  void TearDown() override {
    for (fid* f : {client_ ? &client_->fid : nullptr, server_ ? &server_->fid : nullptr,
                   pep_ ? &pep_->fid : nullptr, client_cq_ ? &client_cq_->fid : nullptr,
                   server_cq_ ? &server_cq_->fid : nullptr, client_eq_ ? &client_eq_->fid : nullptr,
                   server_eq_ ? &server_eq_->fid : nullptr}) {
      if (f != nullptr) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    FabqTest::TearDown();
  }

  fid_ep* open_ep(fi_info* info, fid_eq* eq, fid_cq* cq) {
    fid_ep* ep = nullptr;
    EXPECT_EQ(fi_endpoint(domain_, info, &ep, nullptr), 0);
    if (ep == nullptr) return nullptr;
    EXPECT_EQ(fi_ep_bind(ep, &eq->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    EXPECT_EQ(fi_enable(ep), 0);
    return ep;
  }

  // The client endpoint, enabled, not connected yet.
  void open_client() { client_ = open_ep(info_, client_eq_, client_cq_); }

  // Reads one CM event from `eq` into buf; returns the event or -1 (and fails the test).
  int read_cm(fid_eq* eq, fi_eq_cm_entry* entry, size_t size) {
    uint32_t event = 0;
    const ssize_t n = fi_eq_sread(eq, &event, entry, size, kWaitMs, 0);
    if (n < 0) {
      ADD_FAILURE() << "fi_eq_sread: " << fi_strerror(static_cast<int>(-n));
      return -1;
    }
    return static_cast<int>(event);
  }

  // Connects client and server; both see FI_CONNECTED.
  void connect() {
    if (client_ == nullptr) open_client();
    ASSERT_NE(client_, nullptr);
    ASSERT_EQ(fi_connect(client_, &addr_, nullptr, 0), 0);
    fi_eq_cm_entry entry{};
    ASSERT_EQ(read_cm(server_eq_, &entry, sizeof(entry)), FI_CONNREQ);
    ASSERT_NE(entry.info, nullptr);
    server_ = open_ep(entry.info, server_eq_, server_cq_);
    fi_freeinfo(entry.info);
    ASSERT_NE(server_, nullptr);
    ASSERT_EQ(fi_accept(server_, nullptr, 0), 0);
    ASSERT_EQ(read_cm(client_eq_, &entry, sizeof(entry)), FI_CONNECTED);
    EXPECT_EQ(entry.fid, &client_->fid);
    ASSERT_EQ(read_cm(server_eq_, &entry, sizeof(entry)), FI_CONNECTED);
    EXPECT_EQ(entry.fid, &server_->fid);
  }

  // One completion from `cq` within kWaitMs: ok (1), or the -FI_EAVAIL error in *err.
  ssize_t wait_cq(fid_cq* cq, fi_cq_tagged_entry* entry, fi_cq_err_entry* err = nullptr) {
    const ssize_t n = fi_cq_sread(cq, entry, 1, nullptr, kWaitMs);
    if (n == -FI_EAVAIL && err != nullptr) {
      EXPECT_EQ(fi_cq_readerr(cq, err, 0), 1);
    }
    return n;
  }

  fid_eq* server_eq_ = nullptr;
  fid_eq* client_eq_ = nullptr;
  fid_cq* server_cq_ = nullptr;
  fid_cq* client_cq_ = nullptr;
  fid_pep* pep_ = nullptr;
  fid_ep* server_ = nullptr;
  fid_ep* client_ = nullptr;
  sockaddr_in addr_{};
};

}  // namespace fabq::testing
