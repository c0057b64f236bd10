// The fixture of the RDM endpoint tests: one fabric, domain and AV on "lo", and enabled RDM
// endpoints with their own CQs, each inserted in the AV. Every wait has a timeout.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "fabq_fixture.h"
#include "libfabric2.h"

namespace fabq::testing {

inline constexpr int kWaitMs = 5000;

struct Ep {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fi_addr_t addr = FI_ADDR_UNSPEC;  // in the fixture's AV
  sockaddr_in name{};
};

class Rdm : public ::testing::Test {
 protected:
  // The capabilities SetUp asks fi_getinfo for, and the API version. A version newer than the
  // libfabric the test runs with skips the test: that core refuses it (-FI_ENOSYS).
  explicit Rdm(uint64_t caps = FI_MSG | FI_TAGGED | FI_SOURCE, uint32_t version = kVersion)
      : caps_(caps), version_(version) {}

  void SetUp() override {
    if (FI_VERSION_LT(fi_version(), version_)) {
      GTEST_SKIP() << "libfabric " << FI_MAJOR(fi_version()) << "." << FI_MINOR(fi_version())
                   << " has no API " << FI_MAJOR(version_) << "." << FI_MINOR(version_);
    }
    fi_info* hints = fabq_hints(lf2::allocinfo_as(version_));
    ASSERT_NE(hints, nullptr);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = caps_;
    hints->mode = mode_;
    if (mr_mode_ != 0) hints->domain_attr->mr_mode = mr_mode_;
    const int rc = lf2::getinfo_as(version_, nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    ASSERT_EQ(info_->ep_attr->type, FI_EP_RDM);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    ASSERT_EQ(fi_domain(fabric_, info_, &domain_, nullptr), 0);
    av_ = open_av();
    ASSERT_NE(av_, nullptr);
  }

  void TearDown() override {
    for (Ep* e : eps_) {
      if (e->ep != nullptr) {
        EXPECT_EQ(fi_close(&e->ep->fid), 0);
      }
      if (e->cq != nullptr) {
        EXPECT_EQ(fi_close(&e->cq->fid), 0);
      }
      delete e;
    }
    for (fid_ep* srx : srxs_) EXPECT_EQ(fi_close(&srx->fid), 0);
    for (fid_stx* stx : stxs_) EXPECT_EQ(fi_close(&stx->fid), 0);
    for (fid_cntr* c : cntrs_) EXPECT_EQ(fi_close(&c->fid), 0);
    for (fid_av* av : avs_) EXPECT_EQ(fi_close(&av->fid), 0);
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(info_);
  }

  // A counter (FI_WAIT_UNSPEC), closed after the endpoints (TearDown).
  fid_cntr* open_cntr() {
    fi_cntr_attr attr{};
    attr.events = FI_CNTR_EVENTS_COMP;
    attr.wait_obj = FI_WAIT_UNSPEC;
    fid_cntr* c = nullptr;
    EXPECT_EQ(fi_cntr_open(domain_, &attr, &c, nullptr), 0);
    if (c != nullptr) cntrs_.push_back(c);
    return c;
  }

  fid_av* open_av() {
    fi_av_attr attr{};
    attr.type = FI_AV_TABLE;
    fid_av* av = nullptr;
    EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), 0);
    if (av != nullptr) avs_.push_back(av);
    return av;
  }

  struct EpOptions {
    fid_av* av = nullptr;         // the fixture's by default
    uint64_t caps = 0;            // the info's by default
    fid_ep* srx = nullptr;        // bound before fi_enable
    fid_stx* stx = nullptr;       // bound before fi_enable
    uint64_t cq_flags = 0;        // more fi_ep_bind flags for the CQ (FI_SELECTIVE_COMPLETION)
    uint64_t rx_op_flags = 0;     // rx_attr->op_flags
    fid_cntr* tx_cntr = nullptr;  // bound for FI_SEND before fi_enable
    uint64_t tx_op_flags = 0;     // tx_attr->op_flags
    size_t cq_size = 0;           // the CQ's size; 0: the provider's default
  };
  // An enabled RDM endpoint with its own CQ (FORMAT_TAGGED), bound to its AV, and its name
  // inserted there.
  Ep* open_ep(const EpOptions& o) {
    fid_av* av = o.av != nullptr ? o.av : av_;
    auto* e = new Ep;
    eps_.push_back(e);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    cq_attr.size = o.cq_size;
    EXPECT_EQ(fi_cq_open(domain_, &cq_attr, &e->cq, nullptr), 0);
    fi_info* info = fi_dupinfo(info_);
    if (o.caps != 0) info->caps = o.caps;
    info->rx_attr->op_flags = o.rx_op_flags;
    info->tx_attr->op_flags = o.tx_op_flags;
    EXPECT_EQ(fi_endpoint(domain_, info, &e->ep, nullptr), 0);
    fi_freeinfo(info);
    if (e->ep == nullptr || e->cq == nullptr) return e;
    EXPECT_EQ(fi_ep_bind(e->ep, &av->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV | o.cq_flags), 0);
    if (o.srx != nullptr) {
      EXPECT_EQ(fi_ep_bind(e->ep, &o.srx->fid, 0), 0);
    }
    if (o.stx != nullptr) {
      EXPECT_EQ(fi_ep_bind(e->ep, &o.stx->fid, 0), 0);
    }
    if (o.tx_cntr != nullptr) {
      EXPECT_EQ(fi_ep_bind(e->ep, &o.tx_cntr->fid, FI_SEND), 0);
    }
    EXPECT_EQ(fi_enable(e->ep), 0);
    size_t len = sizeof(e->name);
    EXPECT_EQ(fi_getname(&e->ep->fid, &e->name, &len), 0);
    EXPECT_EQ(fi_av_insert(av, &e->name, 1, &e->addr, 0, nullptr), 1);
    return e;
  }
  Ep* open_ep(fid_av* av = nullptr, uint64_t caps = 0) { return open_ep({.av = av, .caps = caps}); }
  // An STX of `size` transmit slots, closed after the endpoints (TearDown).
  fid_stx* open_stx(size_t size) {
    fi_tx_attr tx{};
    tx.size = size;
    fid_stx* stx = nullptr;
    EXPECT_EQ(fi_stx_context(domain_, &tx, &stx, nullptr), 0);
    if (stx != nullptr) stxs_.push_back(stx);
    return stx;
  }
  // An SRX (rx_attr caps `caps`), closed after the endpoints (TearDown).
  fid_ep* open_srx(uint64_t caps = 0) {
    fi_rx_attr rx{};
    rx.caps = caps;
    rx.size = 64;
    fid_ep* srx = nullptr;
    EXPECT_EQ(fi_srx_context(domain_, &rx, &srx, nullptr), 0);
    if (srx != nullptr) srxs_.push_back(srx);
    return srx;
  }

  // One completion within kWaitMs: 1, or -FI_EAVAIL with the error in *err, or what sread gave.
  static ssize_t wait_cq(fid_cq* cq, fi_cq_tagged_entry* entry, fi_cq_err_entry* err = nullptr,
                         fi_addr_t* src = nullptr, int ms = kWaitMs) {
    const ssize_t n = src != nullptr ? fi_cq_sreadfrom(cq, entry, 1, src, nullptr, ms)
                                     : fi_cq_sread(cq, entry, 1, nullptr, ms);
    if (n == -FI_EAVAIL && err != nullptr) {
      EXPECT_EQ(fi_cq_readerr(cq, err, 0), 1);
    }
    return n;
  }

  // fi_sendmsg of buf[0..len) from `from` to `to` with FI_DELIVERY_COMPLETE | FI_COMPLETION,
  // `buf` as its context.
  static ssize_t send_delivery_complete(const Ep* from, fi_addr_t to, char* buf, size_t len) {
    iovec iov{buf, len};
    fi_msg msg{};
    msg.msg_iov = &iov;
    msg.iov_count = 1;
    msg.addr = to;
    msg.context = buf;
    return fi_sendmsg(from->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
  }

  // The peer at `to` closed before receiving `pending` (send_delivery_complete() from `from`):
  // that send fails with FI_ECONNABORTED, and the next one to the address, where nobody
  // listens now, makes a new connection, refused.
  static void expect_sends_to_closed_peer_fail(const Ep* from, fi_addr_t to, char* pending,
                                               size_t len) {
    fi_cq_tagged_entry e{};
    fi_cq_err_entry err{};
    ASSERT_EQ(wait_cq(from->cq, &e, &err), -FI_EAVAIL);
    EXPECT_EQ(err.err, FI_ECONNABORTED);
    EXPECT_EQ(err.op_context, pending);
    ASSERT_EQ(fi_send(from->ep, pending, len, nullptr, to, pending), 0);
    ASSERT_EQ(wait_cq(from->cq, &e, &err), -FI_EAVAIL);
    EXPECT_EQ(err.err, FI_ECONNREFUSED);
  }

  // Polls `cq` (which moves bytes for the whole fabric) for `ms`: whether a completion came.
  static bool any_completion_within(fid_cq* cq, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    fi_cq_tagged_entry entry{};
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = fi_cq_read(cq, &entry, 1);
      if (n != -FI_EAGAIN) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  const uint64_t caps_;
  const uint32_t version_;
  uint64_t mode_ = 0;  // the hints' mode: what the test supports (set in its constructor)
  int mr_mode_ = 0;    // the hints' domain_attr->mr_mode, when not 0 (set in its constructor)
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  std::vector<fid_cntr*> cntrs_;
  fid_av* av_ = nullptr;
  std::vector<fid_av*> avs_;
  std::vector<fid_ep*> srxs_;
  std::vector<fid_stx*> stxs_;
  std::vector<Ep*> eps_;
};

// A port nobody listens on (bound, not listening, then closed). On 127.0.0.2, where no test
// listens (they all listen on 127.0.0.1), so that a test running at the same time cannot take
// the port over and receive what was meant for nobody.
inline sockaddr_in dead_address() {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return a;
}
}  // namespace fabq::testing
