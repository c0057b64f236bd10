// fabq provider: shared receive contexts (fi_endpoint(3) fi_srx_context, FI_CLASS_SRX_CTX).
//
// An SRX is one receive queue (prov/recv_queue.h) for every endpoint bound to it: their
// messages take its posted receives, and those that come before a receive are buffered in it.
// A shared receive completes on the receive CQ of the endpoint whose message it took, and takes
// its slot on that CQ when a message picks it, not when it is posted.
//
// Calls: fi_recv, recvv, recvmsg, trecv, trecvv, trecvmsg (FI_PEEK, FI_CLAIM: -FI_EBADFLAGS;
// its queue full, or no room on the CQ of the buffered message a receive takes: -FI_EAGAIN),
// multi-receive buffers (FI_MULTI_RECV, in the call's flags or the SRX's rx op_flags;
// FI_OPT_MIN_MULTI_RECV through fi_setopt on the SRX) whose slices complete on the CQ of the
// endpoint each message came through,
// and fi_cancel, whose FI_ECANCELED completion goes to the receive CQ of the first bound
// endpoint that has one (none: -FI_ENOCQ; full: -FI_EAGAIN, the receive stays posted). Sends:
// -FI_ENOSYS. The op tables are in ep_ops.cc.
//
// Asynchronous events (fi_fabq.h): after SRX_ERR it refuses posts with -FI_EOPBADSTATE. An
// armed limit raises SRX_LIMIT_REACHED once, when its posted receives drop below it.
//
// Threads: every call may come from any thread. One mutex, taken after an endpoint's (lock
// order: docs/locking.md).
#pragma once

#include <rdma/fi_endpoint.h>

#include <cstddef>
#include <vector>

#include "core/mutex.h"
#include "prov/events.h"
#include "prov/object.h"
#include "prov/recv_queue.h"

namespace fabq::prov {

class Domain;
class Endpoint;

class Srx final : public Object, public AsyncTarget {
 public:
  // The SRX whose descriptor `f` is; null for any other fid.
  static Srx* from_fid(const fid* f);
  Srx(Domain* domain, const fi_rx_attr& attr, void* context);
  static constexpr size_t kDefaultMinMultiRecv = 16384;  // as an endpoint's
  fid_ep* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  // The endpoints bound to it now (a copy, taken under its lock).
  std::vector<Endpoint*> endpoints() FABQ_EXCLUDES(mu_);
  // SRX_ERR: refuses posts from now on. True the first time.
  bool fail() FABQ_EXCLUDES(mu_);
  // Raises SRX_LIMIT_REACHED once its posted receives drop below `limit` (0: never).
  void arm_limit(size_t limit) FABQ_EXCLUDES(mu_);
  // fi_ep_bind of `ep` to it, holding ep's lock. The endpoint leaves in its destructor.
  void attach(Endpoint* ep) FABQ_EXCLUDES(mu_);

 private:
  friend struct SrxOps;
  friend class Endpoint;
  template <class T>
  friend struct Receives;
  // Fills box_: the fid's common part, its op tables (ep_ops.cc) and its owner.
  void init_box(void* context);
  // Where the SRX's rx_attr caps direct the receive (DirectedRecv), `src` other than
  // FI_ADDR_UNSPEC selects that sender, named in the AV of the first bound endpoint that has
  // one (none, or an fi_addr_t it does not hold: -FI_EINVAL), and FI_ADDR_UNSPEC under
  // FI_EXACT_DIRECTED_RECV is -FI_EINVAL; else `src` is not read. `r` is the caller's
  // scratch: it is changed on the way.
  ssize_t post_recv(PostedRecv& r, fi_addr_t src) FABQ_EXCLUDES(mu_);
  // A multi-receive buffer: takes the buffered messages it can hold, then posts what is left.
  // Each slice takes its slot on the CQ of the endpoint its message came through, and its
  // completion goes there (outbox).
  void post_multi_locked(PostedRecv& r) FABQ_REQUIRES(mu_);
  ssize_t cancel(void* context) FABQ_EXCLUDES(mu_);
  // Whether the posted count fell below the armed limit (disarms it).
  bool limit_crossed_locked() FABQ_REQUIRES(mu_) {
    if (limit_ == 0 || queue_.posted() >= limit_) return false;
    limit_ = 0;
    return true;
  }

  FidBox<fid_ep> box_;
  Domain* const domain_;
  const size_t size_;
  const size_t iov_limit_;
  const uint64_t op_flags_;      // rx_attr->op_flags: what fi_recv & co. post with
  const DirectedRecv directed_;  // from rx_attr->caps
  // After its endpoints' locks (docs/locking.md); an endpoint bound to it takes it to place
  // messages in its queue.
  core::Mutex mu_;
  bool failed_ FABQ_GUARDED_BY(mu_) = false;
  size_t limit_ FABQ_GUARDED_BY(mu_) = 0;
  size_t min_multi_recv_ FABQ_GUARDED_BY(mu_) = kDefaultMinMultiRecv;
  RecvQueue queue_ FABQ_GUARDED_BY(mu_);
  std::vector<Endpoint*> endpoints_ FABQ_GUARDED_BY(mu_);
};

// fi_srx_context: 0 with *srx set, or -FI_EINVAL (a null argument, a domain not fabq's),
// -FI_EOPBADSTATE (the domain failed), -FI_ENOMEM. The SRX belongs to the application until
// fi_close.
int open_srx(fid_domain* domain, fi_rx_attr* attr, fid_ep** srx, void* context);

}  // namespace fabq::prov
