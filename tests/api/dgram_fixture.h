// The fixture of the datagram endpoint tests (FI_EP_DGRAM, multicast): one fabric, domain, AV
// and EQ on "lo", and enabled DGRAM endpoints with their own CQs and counters, each inserted in
// the AV; with a shared secret (the hints' domain_attr->auth_key) when the test class gives one,
// and endpoints of their own secret, or of none, when a test asks. Every wait has a timeout.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fabq/fi_fabq.h"
#include "fabq_fixture.h"

namespace fabq::testing {

inline constexpr int kDgramWaitMs = 5000;

struct DgramEp {
  fid_ep* ep = nullptr;
  fid_cq* cq = nullptr;
  fid_cntr* tx_cntr = nullptr;
  fid_cntr* rx_cntr = nullptr;
  fi_addr_t addr = FI_ADDR_UNSPEC;  // in the fixture's AV
  sockaddr_in name{};
};

class Dgram : public ::testing::Test {
 protected:
  explicit Dgram(uint64_t caps = FI_MSG | FI_SOURCE | FI_MULTICAST, uint64_t mode = 0,
                 const char* auth_key = nullptr)
      : caps_(caps), mode_(mode), auth_key_(auth_key) {}

  void SetUp() override {
    fi_info* hints = fabq_hints();
    ASSERT_NE(hints, nullptr);
    hints->ep_attr->type = FI_EP_DGRAM;
    hints->caps = caps_;
    hints->mode = mode_;
    if (auth_key_ != nullptr)
      set_key(&hints->domain_attr->auth_key, &hints->domain_attr->auth_key_size, auth_key_);
    const int rc = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    ASSERT_EQ(info_->ep_attr->type, FI_EP_DGRAM);
    ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric_, nullptr), 0);
    // The domain without the secret (which would be its endpoints' default, fi_domain(3)), so
    // that an endpoint of no secret can be opened in it: the others take it from their info.
    fi_info* plain = fi_dupinfo(info_);
    ASSERT_NE(plain, nullptr);
    set_key(&plain->domain_attr->auth_key, &plain->domain_attr->auth_key_size, nullptr);
    set_key(&plain->ep_attr->auth_key, &plain->ep_attr->auth_key_size, nullptr);
    const int drc = fi_domain(fabric_, plain, &domain_, nullptr);
    fi_freeinfo(plain);
    ASSERT_EQ(drc, 0);
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    ASSERT_EQ(fi_av_open(domain_, &av_attr, &av_, nullptr), 0);
    fi_eq_attr eq_attr{};
    eq_attr.wait_obj = FI_WAIT_UNSPEC;
    ASSERT_EQ(fi_eq_open(fabric_, &eq_attr, &eq_, nullptr), 0);
  }

  void TearDown() override {
    for (fid_mc* mc : mcs_) EXPECT_EQ(fi_close(&mc->fid), 0);
    for (DgramEp* e : eps_) {
      for (fid* f :
           {e->ep ? &e->ep->fid : nullptr, e->cq ? &e->cq->fid : nullptr,
            e->tx_cntr ? &e->tx_cntr->fid : nullptr, e->rx_cntr ? &e->rx_cntr->fid : nullptr}) {
        if (f != nullptr) {
          EXPECT_EQ(fi_close(f), 0);
        }
      }
      delete e;
    }
    for (fid* f : {av_ ? &av_->fid : nullptr, eq_ ? &eq_->fid : nullptr,
                   domain_ ? &domain_->fid : nullptr, fabric_ ? &fabric_->fid : nullptr}) {
      if (f != nullptr) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    fi_freeinfo(info_);
  }

  struct EpOptions {
    uint64_t caps = 0;         // the info's by default
    uint64_t tx_op_flags = 0;  // tx_attr->op_flags
    bool counters = false;     // a transmit and a receive counter
    bool eq = true;            // bound to the fixture's EQ (fi_join needs one)
    bool selective = false;    // FI_SELECTIVE_COMPLETION on the CQ
    size_t cq_size = 0;        // the CQ's size; 0: the provider's default
    // The endpoint's own secret (ep_attr->auth_key), or none at all (neither the fixture's nor
    // its own) with `keyless`.
    const char* key = nullptr;
    bool keyless = false;
    // fi_setname before fi_enable (an address of the endpoint's choosing).
    const sockaddr_in* name = nullptr;
    bool enable = true;  // false: the caller enables it (and inserts it in the AV)
  };
  // An enabled DGRAM endpoint with its own CQ (FI_CQ_FORMAT_DATA), bound to the AV, and its
  // name inserted there.
  DgramEp* open_ep(const EpOptions& o) {
    auto* e = new DgramEp;
    eps_.push_back(e);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_DATA;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    cq_attr.size = o.cq_size;
    EXPECT_EQ(fi_cq_open(domain_, &cq_attr, &e->cq, nullptr), 0);
    fi_info* info = fi_dupinfo(info_);
    if (o.caps != 0) info->caps = o.caps;
    info->tx_attr->op_flags = o.tx_op_flags;
    if (o.keyless) {
      set_key(&info->domain_attr->auth_key, &info->domain_attr->auth_key_size, nullptr);
      set_key(&info->ep_attr->auth_key, &info->ep_attr->auth_key_size, nullptr);
    } else if (o.key != nullptr) {
      set_key(&info->ep_attr->auth_key, &info->ep_attr->auth_key_size, o.key);
    }
    EXPECT_EQ(fi_endpoint(domain_, info, &e->ep, nullptr), 0);
    fi_freeinfo(info);
    if (e->ep == nullptr || e->cq == nullptr) return e;
    EXPECT_EQ(fi_ep_bind(e->ep, &av_->fid, 0), 0);
    EXPECT_EQ(fi_ep_bind(e->ep, &e->cq->fid,
                         FI_TRANSMIT | FI_RECV | (o.selective ? FI_SELECTIVE_COMPLETION : 0)),
              0);
    if (o.eq) {
      EXPECT_EQ(fi_ep_bind(e->ep, &eq_->fid, 0), 0);
    }
    if (o.counters) {
      fi_cntr_attr attr{};
      attr.events = FI_CNTR_EVENTS_COMP;
      attr.wait_obj = FI_WAIT_UNSPEC;
      EXPECT_EQ(fi_cntr_open(domain_, &attr, &e->tx_cntr, nullptr), 0);
      EXPECT_EQ(fi_cntr_open(domain_, &attr, &e->rx_cntr, nullptr), 0);
      EXPECT_EQ(fi_ep_bind(e->ep, &e->tx_cntr->fid, FI_SEND), 0);
      EXPECT_EQ(fi_ep_bind(e->ep, &e->rx_cntr->fid, FI_RECV), 0);
    }
    if (o.name != nullptr) {
      EXPECT_EQ(fi_setname(&e->ep->fid, const_cast<sockaddr_in*>(o.name), sizeof(*o.name)), 0);
    }
    if (!o.enable) return e;
    EXPECT_EQ(fi_enable(e->ep), 0);
    size_t len = sizeof(e->name);
    EXPECT_EQ(fi_getname(&e->ep->fid, &e->name, &len), 0);
    EXPECT_EQ(fi_av_insert(av_, &e->name, 1, &e->addr, 0, nullptr), 1);
    return e;
  }
  DgramEp* open_ep() { return open_ep(EpOptions{}); }

  // Replaces the auth_key at *key (freed; fi_freeinfo frees the new one) with `bytes`, or with
  // none when null.
  static void set_key(uint8_t** key, size_t* size, const char* bytes) {
    std::free(*key);
    *key = bytes != nullptr ? reinterpret_cast<uint8_t*>(strdup(bytes)) : nullptr;
    *size = bytes != nullptr ? std::strlen(bytes) : 0;
  }

  // One completion within `ms`: 1, or -FI_EAVAIL with the error in *err, or what sread gave.
  static ssize_t wait_cq(fid_cq* cq, fi_cq_data_entry* entry, fi_cq_err_entry* err = nullptr,
                         fi_addr_t* src = nullptr, int ms = kDgramWaitMs) {
    const ssize_t n = src != nullptr ? fi_cq_sreadfrom(cq, entry, 1, src, nullptr, ms)
                                     : fi_cq_sread(cq, entry, 1, nullptr, ms);
    if (n == -FI_EAVAIL && err != nullptr) {
      EXPECT_EQ(fi_cq_readerr(cq, err, 0), 1);
    }
    return n;
  }

  // Nothing arrives at `cq` within `ms` (a lost or refused datagram): reads until then.
  static bool stays_empty(fid_cq* cq, int ms = 200) {
    fi_cq_data_entry e{};
    return fi_cq_sread(cq, &e, 1, nullptr, ms) == -FI_EAGAIN;
  }

  // The fault rule `spec` (fi_fabq.h FAULT INJECTION) armed on the domain.
  void inject(const char* spec) {
    fi_fabq_async_ops* ops = nullptr;
    ASSERT_EQ(
        fi_open_ops(&domain_->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr),
        0);
    ASSERT_EQ(ops->inject(domain_, spec), 0) << spec;
  }

  // fi_join of `group`, and the event it gives on the EQ: FI_JOIN_COMPLETE (returns 0), or
  // the error entry's err. The membership is closed in TearDown unless the test closes it
  // (forget()).
  int join(fid_ep* ep, const sockaddr_in& group, uint64_t flags, fid_mc** mc, void* ctx) {
    const int rc = fi_join(ep, &group, flags, mc, ctx);
    if (rc != 0) return rc;
    mcs_.push_back(*mc);
    fi_eq_entry entry{};
    uint32_t event = 0;
    const ssize_t n = fi_eq_sread(eq_, &event, &entry, sizeof(entry), kDgramWaitMs, 0);
    if (n == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(err)));
      EXPECT_EQ(err.fid, &(*mc)->fid);
      EXPECT_EQ(err.context, ctx);
      return err.err;
    }
    EXPECT_EQ(n, static_cast<ssize_t>(sizeof(entry)));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_JOIN_COMPLETE));
    EXPECT_EQ(entry.fid, &(*mc)->fid);
    EXPECT_EQ(entry.context, ctx);
    return n == static_cast<ssize_t>(sizeof(entry)) ? 0 : static_cast<int>(n);
  }
  void forget(fid_mc* mc) { std::erase(mcs_, mc); }

  // A group address on loopback: 239.255.x.y (organisation-local scope) and a port of this
  // process's, so that parallel test processes do not meet.
  static sockaddr_in group(uint8_t n) {
    sockaddr_in g{};
    g.sin_family = AF_INET;
    g.sin_addr.s_addr = htonl((239u << 24) | (255u << 16) | (static_cast<uint32_t>(n) << 8) |
                              (static_cast<uint32_t>(getpid()) & 0xff));
    g.sin_port = htons(static_cast<uint16_t>(20000 + getpid() % 20000));
    return g;
  }

  const uint64_t caps_;
  const uint64_t mode_;
  const char* const auth_key_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_eq* eq_ = nullptr;
  std::vector<DgramEp*> eps_;
  std::vector<fid_mc*> mcs_;
};

}  // namespace fabq::testing
