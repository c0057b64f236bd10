// Test support for the FI_EP_RDM system tests: one process's RDM endpoint through the
// libfabric API (Rdm), the peer process and pipes of msg_fixture.h.
#pragma once

#include <netinet/in.h>

#include <vector>

#include "msg_fixture.h"

namespace fabq::systest {

// One process's RDM endpoint: fabric, domain, AV (FI_AV_TABLE), one CQ (FORMAT_TAGGED) for
// both directions, the endpoint listening on 127.0.0.1 at a port the system picks.
class Rdm {
 public:
  // `auth_key`: the hints' domain_attr->auth_key (its bytes), when set.
  explicit Rdm(const char* auth_key = nullptr) {
    fi_info* hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup(provider());
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_TAGGED | FI_MSG | FI_SOURCE;
    hints->addr_format = FI_SOCKADDR_IN;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    if (auth_key != nullptr) {
      hints->domain_attr->auth_key = reinterpret_cast<uint8_t*>(strdup(auth_key));
      hints->domain_attr->auth_key_size = std::strlen(auth_key);
    }
    const int rc = fi_getinfo(kVersion, "127.0.0.1", "0", FI_SOURCE, hints, &info_);
    fi_freeinfo(hints);
    if (!check(rc, "fi_getinfo(FI_EP_RDM)")) return;
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_cq_attr cq_attr{};
    cq_attr.size = 1024;
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;
    ok_ = check(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric") &&
          check(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain") &&
          check(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open") &&
          check(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open") &&
          check(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint") &&
          check(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)") &&
          check(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)") &&
          check(fi_enable(ep_), "fi_enable");
    if (ok_) {
      size_t len = sizeof(name_);
      ok_ = check(fi_getname(&ep_->fid, &name_, &len), "fi_getname");
    }
  }
  ~Rdm() {
    for (fid_t f : {ep_ ? &ep_->fid : nullptr, cq_ ? &cq_->fid : nullptr, av_ ? &av_->fid : nullptr,
                    domain_ ? &domain_->fid : nullptr, fabric_ ? &fabric_->fid : nullptr}) {
      if (f != nullptr) {
        EXPECT_EQ(fi_close(f), 0);
      }
    }
    fi_freeinfo(info_);
  }

  bool ok() const { return ok_; }
  fid_ep* ep() const { return ep_; }
  const sockaddr_in& name() const { return name_; }

  fi_addr_t insert(const sockaddr_in& a) {
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    EXPECT_EQ(fi_av_insert(av_, &a, 1, &addr, 0, nullptr), 1);
    return addr;
  }
  // Sends this endpoint's name over the pipe / inserts the one that comes.
  bool tell(Link& link) { return link.put(&name_, sizeof(name_)); }
  fi_addr_t learn(Link& link) {
    sockaddr_in a{};
    if (!link.get(&a, sizeof(a))) return FI_ADDR_NOTAVAIL;
    return insert(a);
  }

  // Retries -FI_EAGAIN while reading the CQ (completions read meanwhile are kept).
  template <class Op>
  ssize_t retry(Op op) {
    const auto t0 = Clock::now();
    ssize_t rc;
    while ((rc = op()) == -FI_EAGAIN && ms_since(t0) < kTimeoutMs) poll_one();
    return rc;
  }
  ssize_t tsend(const void* buf, size_t len, fi_addr_t to, uint64_t tag, void* ctx) {
    return retry([&] { return fi_tsend(ep_, buf, len, nullptr, to, tag, ctx); });
  }
  ssize_t trecv(void* buf, size_t len, uint64_t tag, void* ctx) {
    return retry([&] { return fi_trecv(ep_, buf, len, nullptr, FI_ADDR_UNSPEC, tag, 0, ctx); });
  }

  struct Got {
    ssize_t rc = -FI_ETIMEDOUT;
    fi_cq_tagged_entry entry{};
    fi_cq_err_entry err{};
    fi_addr_t src = FI_ADDR_NOTAVAIL;
  };
  // One look at the CQ (it progresses the endpoint); what it finds is kept for next().
  void progress() { poll_one(); }
  // The next completion (or error entry) within timeout_ms.
  Got next(int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    while (kept_.empty() && ms_since(t0) < timeout_ms) poll_one();
    if (kept_.empty()) return {};
    Got g = kept_.front();
    kept_.erase(kept_.begin());
    return g;
  }
  // The next completion with this context, keeping the others in order.
  Got next_for(void* ctx, int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    for (;;) {
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        const void* c = it->rc == 1 ? it->entry.op_context : it->err.op_context;
        if (c == ctx) {
          Got g = *it;
          kept_.erase(it);
          return g;
        }
      }
      if (ms_since(t0) > timeout_ms) return {};
      poll_one();
    }
  }

 private:
  bool check(int rc, const char* what) {
    if (rc == 0) return true;
    ADD_FAILURE() << what << ": " << fi_strerror(-rc) << " (provider " << provider() << ")";
    return false;
  }
  void poll_one() {
    Got g;
    g.rc = fi_cq_readfrom(cq_, &g.entry, 1, &g.src);
    if (g.rc == -FI_EAVAIL) {
      g.rc = fi_cq_readerr(cq_, &g.err, 0) == 1 ? -FI_EAVAIL : -FI_EIO;
    }
    if (g.rc == 1 || g.rc == -FI_EAVAIL) {
      kept_.push_back(g);
    } else {
      usleep(50);
    }
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  sockaddr_in name_{};
  bool ok_ = false;
  std::vector<Got> kept_;
};

}  // namespace fabq::systest
