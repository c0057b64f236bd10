// fabq provider: shared transmit contexts (fi_endpoint(3) fi_stx_context, FI_CLASS_STX_CTX).
//
// An STX is a pool of transmit slots (tx_attr->size, 0: 1024, at most 1024) that the endpoints
// bound to it draw on together: each send an endpoint posts takes one of them besides a slot of
// its own ring, and gives it back when the send is freed (prov/tx_ring.h TxCredits), so the
// endpoints together have at most `size` sends in flight; one more is -FI_EAGAIN, and
// fi_tx_size_left says how many are left. Sends go out and complete as any endpoint's: on the
// endpoint's transmit CQ and counters, in the endpoint's connections' order. fi_inject that
// completes at once (prov/endpoint.h send_inline) holds no slot.
//
// fi_ep_bind(ep, &stx->fid, 0) before fi_enable binds one (a second: -FI_EBUSY; another
// domain's: -FI_EINVAL). fi_close of an STX with endpoints bound: -FI_EBUSY. Every operation of
// its fi_ops_ep returns -FI_ENOSYS (getopt and setopt: -FI_ENOPROTOOPT).
//
// Threads: any; the pool is one atomic.
#pragma once

#include <rdma/fi_endpoint.h>

#include <cstddef>

#include "prov/object.h"
#include "prov/tx_ring.h"

namespace fabq::prov {

class Domain;

class Stx final : public Object {
 public:
  static constexpr size_t kMaxSize = 1024;

  // The STX whose descriptor `f` is; null for any other fid.
  static Stx* from_fid(const fid* f);
  Stx(Domain* domain, size_t size, void* context);
  fid_stx* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  size_t size() const { return size_; }
  TxCredits& credits() { return credits_; }

 private:
  friend struct StxOps;
  FidBox<fid_stx> box_;
  Domain* const domain_;
  const size_t size_;
  TxCredits credits_;
};

// fi_stx_context: 0 with *stx set, or -FI_EINVAL (a null argument, a domain not fabq's, a size
// above 1024, an iov_limit above fabq's, an inject_size above 4096, capabilities other than
// transmit ones), -FI_EOPBADSTATE (the domain failed), -FI_ENOMEM. The STX belongs to the
// application until fi_close.
int open_stx(fid_domain* domain, fi_tx_attr* attr, fid_stx** stx, void* context);

}  // namespace fabq::prov
