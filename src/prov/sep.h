// fabq provider: scalable endpoints (fi_endpoint(3) fi_scalable_ep, FI_CLASS_SEP), their
// transmit and receive contexts (fi_tx_context, fi_rx_context), and FI_NAMED_RX_CTX addressing
// (fi_av(3) rx_ctx_bits, fi_rx_addr).
//
// A scalable endpoint is an RDM endpoint whose transmit and receive sides are split into
// ep_attr->tx_ctx_cnt and rx_ctx_cnt contexts (each at least 1, at most kMaxContexts;
// FI_SHARED_CONTEXT or 0: 1). Each context is an fid_ep of its own (prov/endpoint.h EpRole):
// bound to its own CQs and counters, posting and completing independently of the others, as a
// plain RDM endpoint does. The scalable endpoint itself carries no data: it has one name (its
// listener's address, fi_getname, after fi_enable), one AV (fi_scalable_ep_bind, which every
// context uses unless it was bound one of its own) and the contexts.
//
// Addressing: a peer inserts the scalable endpoint's name into an AV opened with rx_ctx_bits
// and sends to fi_rx_addr(fi_addr, i, rx_ctx_bits): the message reaches receive context i (its
// connection says which, xport::rdm_connect_data). An fi_addr_t without those bits reaches
// receive context 0, so a peer that knows nothing of contexts talks to context 0. A receive
// context index that is not open and enabled refuses the connection, and the peer's sends to
// it fail (FI_ECONNREFUSED). A transmit context sends under the scalable endpoint's name, so a
// receiver's FI_SOURCE gives the scalable endpoint's fi_addr_t (without receive context bits);
// it receives nothing, so a peer answers through a connection of its own to that name.
//
// Lifetime: fi_close of the scalable endpoint while a context is open is -FI_EBUSY (fi_endpoint
// (3): contexts are closed first). Closing a receive context closes the connections that came
// to it; its peers' next sends to it are refused.
//
// Threads: any (FI_THREAD_SAFE). mu_ is a leaf (docs/locking.md): route() takes it under a
// connection's lock, name() under a context's.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_endpoint.h>

#include <memory>
#include <optional>
#include <vector>

#include "core/hmac.h"
#include "core/mutex.h"
#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

class Av;
class Domain;
class Endpoint;

class Sep final : public Object, public xport::Owner {
 public:
  static constexpr size_t kMaxContexts = 64;

  // Null unless f is one of fabq's scalable endpoints.
  static Sep* from_fid(const fid* f);
  // `info` is copied. tx and rx: the context counts, 1 to kMaxContexts.
  Sep(Domain* domain, const fi_info& info, size_t tx, size_t rx, void* context);
  ~Sep() override;
  fid_ep* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }

  // fi_tx_context / fi_rx_context: 0 with *out set; -FI_EINVAL (an index out of range, or one
  // already open; attributes above the scalable endpoint's), -FI_ENOMEM.
  int open_context(bool tx, int index, const void* attr, fid_ep** out, void* context)
      FABQ_EXCLUDES(mu_);
  // The AV bound with fi_scalable_ep_bind; null before.
  Av* av() FABQ_EXCLUDES(mu_);
  // The scalable endpoint's name once it is enabled (true), else false.
  bool name(sockaddr_in* out) FABQ_EXCLUDES(mu_);
  // A receive context was enabled: peers' connections to its index reach it from now on.
  void context_enabled(const Endpoint* e, uint32_t index) FABQ_EXCLUDES(mu_);
  // A context is being destroyed: nothing reaches it any more (a receive context's connections
  // are closed). Called without the context's lock.
  void detach(Endpoint* e) FABQ_EXCLUDES(mu_);

  // --- xport::Owner, for the connections its listener accepted until route() gives each to a
  // receive context: before its request a connection carries no message, and one whose context
  // is gone is refused; so these refuse everything, and only route() and can_free() matter.
  Owner* route(uint32_t rx) override FABQ_EXCLUDES(mu_);
  bool can_free(const xport::Connection*) override { return true; }
  bool holds(const xport::Connection*) override { return false; }
  bool place(const xport::Incoming&, xport::Placement*) override { return false; }
  bool placed(const xport::Incoming&, xport::Placement*) override { return false; }
  void unplace(xport::Placement*) override {}
  bool take_retry() override { return false; }
  void inbound_ready(xport::Connection*, const sockaddr_in&) override {}
  xport::RmaStatus remote_access(const xport::RemoteAccess&, void*) override {
    return xport::RmaStatus::kTargetFailed;
  }
  bool rma_acked(const xport::Connection*, uint32_t, xport::RmaStatus) override { return false; }
  void tx_written(xport::TxOp*) override {}
  void tx_lost(xport::TxOp*, int) override {}
  bool tx_acked(const xport::Connection*, uint32_t, bool) override { return false; }
  void abort_sends(xport::Connection*, int) override {}
  void cm_event(const CmEvent&) override {}
  void connection_ended() override {}
  void async_event(uint32_t) override {}
  core::NetFault take_net_fault() override { return core::NetFault::kNone; }

 private:
  friend struct SepOps;
  int bind(fid* bfid, uint64_t flags) FABQ_EXCLUDES(mu_);
  int enable() FABQ_EXCLUDES(mu_);

  FidBox<fid_ep> box_;
  Domain* const domain_;
  fi_info* const info_;  // fi_dupinfo's, freed with the scalable endpoint
  // The secret its listener's connections prove (prov/auth.h), as its contexts' do.
  const std::optional<core::HmacSha256> auth_;
  core::Mutex mu_;
  Av* av_ FABQ_GUARDED_BY(mu_) = nullptr;
  sockaddr_in src_ FABQ_GUARDED_BY(mu_){};
  sockaddr_in name_ FABQ_GUARDED_BY(mu_){};
  bool enabled_ FABQ_GUARDED_BY(mu_) = false;
  std::vector<Endpoint*> tx_ FABQ_GUARDED_BY(mu_);
  std::vector<Endpoint*> rx_ FABQ_GUARDED_BY(mu_);
  std::vector<bool> rx_on_ FABQ_GUARDED_BY(mu_);  // rx_[i] is enabled
  // Made by fi_enable; its accepted connections are routed to the receive contexts. Destroyed
  // last, once no context is left.
  std::unique_ptr<xport::Listener> listener_ FABQ_GUARDED_BY(mu_);
};

// fi_scalable_ep: 0 with *sep set, or -FI_EINVAL (a null argument, a domain not fabq's, an
// endpoint type other than RDM, a context count above kMaxContexts), -FI_EOPBADSTATE (the domain
// failed), -FI_ENOMEM. The scalable endpoint belongs to the application until fi_close.
int open_sep(fid_domain* domain, fi_info* info, fid_ep** sep, void* context);

}  // namespace fabq::prov
