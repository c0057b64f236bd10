#include "prov/srx.h"

#include <algorithm>
#include <optional>

#include "prov/av.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/fabric.h"
#include "prov/provider.h"

namespace fabq::prov {

Srx::Srx(Domain* domain, const fi_rx_attr& attr, void* context)
    : Object(FI_CLASS_SRX_CTX, domain),
      AsyncTarget(core::FaultTargetKind::kSrx, &box_.fid.fid),
      domain_(domain),
      size_(attr.size ? attr.size : 1024),
      iov_limit_(attr.iov_limit ? std::min(attr.iov_limit, kMaxIov) : kMaxIov),
      op_flags_(attr.op_flags),
      directed_(DirectedRecv::of(attr.caps, domain->fabric()->api())),
      queue_(size_, params().unexpected_bytes, 4 * size_, params().unexpected_peer_bytes,
             domain->fabric()->unexpected_budget()) {
  init_box(context);
}

std::vector<Endpoint*> Srx::endpoints() {
  core::MutexLock lock(mu_);
  return endpoints_;
}

bool Srx::fail() {
  core::MutexLock lock(mu_);
  return !std::exchange(failed_, true);
}

void Srx::arm_limit(size_t limit) {
  core::MutexLock lock(mu_);
  limit_ = limit;
}

void Srx::attach(Endpoint* ep) {
  core::MutexLock lock(mu_);
  endpoints_.push_back(ep);
}

void Srx::post_multi_locked(PostedRecv& r) {
  queue_.make_multi(&r, min_multi_recv_);
  bool used_up = false;
  while (!used_up) {
    Unexpected* u = queue_.find_unexpected(r);
    if (u == nullptr) break;
    Endpoint* from = u->from;
    Cq* cq = from->rx_cq();
    // With no room there, the buffered messages wait for the next receive posted.
    if (cq != nullptr && !cq->queue().reserve(1).ok()) break;
    PostedRecv slice = queue_.carve(&r, u->in.len, &used_up);
    slice.owner = from;
    if (used_up) queue_.release(r.multi);  // the slice is in flight: its completion says so
    if (!u->complete) {
      u->taker = slice;  // completes on its endpoint when the rest of it arrives
      continue;
    }
    std::vector<uint32_t> events;
    from->deliver_unexpected(slice, *u, &events, queue_.slice_done(slice.multi));
    if (u->in.ack == AckWanted::kDelivered && u->in.via != nullptr) {
      u->in.via->ack_delivered_later(u->in.seq);
    }
    queue_.remove(u);
    from->outbox().add(from->domain_, cq, events);
  }
  if (!used_up) queue_.post(r);
}

ssize_t Srx::post_recv(PostedRecv& r, fi_addr_t src) {
  if (r.default_flags) r.flags = op_flags_ & ~(r.tagged ? FI_MULTI_RECV : 0);
  const bool multi = (r.flags & FI_MULTI_RECV) != 0;
  if (multi && (r.tagged || r.iov_count != 1)) return r.tagged ? -FI_EBADFLAGS : -FI_EINVAL;
  FaultAction action;
  std::vector<uint32_t> cq_events;
  // Borrowed (borrowed_) under mu_, so that none of them can finish closing until this is done
  // with them: the endpoint a buffered message came through, and every endpoint to resume.
  Endpoint* from = nullptr;
  Cq* from_cq = nullptr;
  std::vector<Endpoint*> eps;
  uint32_t ack_seq = 0;
  Connection* ack_conn = nullptr;
  {
    core::MutexLock lock(mu_);
    if (failed_) return -FI_EOPBADSTATE;
    // Peeks and claims are the endpoints' own (fi_fabq(7)).
    if (r.flags & (FI_PEEK | FI_CLAIM)) return -FI_EBADFLAGS;
    if (directed_.applies(r.tagged) && src == FI_ADDR_UNSPEC && directed_.exact) {
      return -FI_EINVAL;
    }
    if (directed_.applies(r.tagged) && src != FI_ADDR_UNSPEC) {
      // The bound endpoints' AV (set before they were enabled) names the sender.
      auto with_av = std::find_if(endpoints_.begin(), endpoints_.end(),
                                  [](const Endpoint* ep) { return ep->av_ != nullptr; });
      sockaddr_in name{};
      if (with_av == endpoints_.end() || !(*with_av)->av_->lookup(src, &name)) {
        return -FI_EINVAL;
      }
      r.source = SourceFilter::only(name);
    }
    if (queue_.full()) return -FI_EAGAIN;
    action = count_operation();
    Unexpected* u = multi ? nullptr : queue_.find_unexpected(r);
    if (multi) {
      post_multi_locked(r);
    } else if (u != nullptr && u->complete) {
      from = u->from;
      Cq* cq = from->rx_cq();
      if (cq != nullptr && !cq->queue().reserve(1).ok()) return -FI_EAGAIN;
      r.owner = from;
      from->deliver_unexpected(r, *u, &cq_events);
      from_cq = cq;
      from->borrowed_.fetch_add(1, std::memory_order_relaxed);
      if (u->in.ack == AckWanted::kDelivered && u->in.via != nullptr) {
        ack_seq = u->in.seq;
        ack_conn = u->in.via;
      }
      queue_.remove(u);
    } else if (u != nullptr) {
      // Still arriving: it completes on its endpoint's receive CQ, so the slot is taken there.
      Cq* cq = u->from->rx_cq();
      if (cq != nullptr && !cq->queue().reserve(1).ok()) return -FI_EAGAIN;
      r.owner = u->from;
      u->taker = r;
    } else {
      queue_.post(r);
    }
    eps = endpoints_;
    for (Endpoint* ep : eps) ep->borrowed_.fetch_add(1, std::memory_order_relaxed);
  }
  raise(domain_, this, action.events);
  if (from != nullptr) {
    raise(domain_, from_cq, cq_events);
    if (ack_conn != nullptr) ack_conn->ack_delivered(ack_seq);
    from->borrowed_.fetch_sub(1, std::memory_order_release);
  }
  // A receive was posted or a buffered message consumed: a connection that stalled for want
  // of either may go on.
  for (Endpoint* ep : eps) {
    ep->resume_if_stalled();
    ep->borrowed_.fetch_sub(1, std::memory_order_release);
  }
  domain_->fabric()->outbox().publish();
  return 0;
}

// A cancelled shared receive is reported on the receive CQ of an endpoint using the SRX:
// fi_endpoint(3) sends an SRX's completions to the CQ of the endpoint that consumed it.
ssize_t Srx::cancel(void* context) {
  bool limit_reached = false;
  {
    core::MutexLock lock(mu_);
    Cq* cq = nullptr;
    for (Endpoint* ep : endpoints_) {
      if ((cq = ep->rx_cq()) != nullptr) break;
    }
    std::optional<PostedRecv> r = queue_.take_context(context);
    if (!r) return -FI_ENOENT;
    if (cq == nullptr) {
      queue_.post(*r);
      return -FI_ENOCQ;
    }
    core::CompletionError e = recv_error(*r, FI_ECANCELED, 0);
    if (core::Status s = cq->queue().reserve(1); !s.ok()) {
      queue_.post(*r);  // full: the receive stays posted, nothing is lost
      return s.to_fi();
    }
    if (r->multi != 0 && queue_.release(r->multi)) e.completion.flags |= FI_MULTI_RECV;
    cq->queue().complete_error(e);
    limit_reached = limit_crossed_locked();
  }
  if (limit_reached) raise(domain_, this, FI_FABQ_EVENT_SRX_LIMIT_REACHED);
  return 0;
}

}  // namespace fabq::prov
