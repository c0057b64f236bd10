#include "prov/endpoint.h"

#include <rdma/fi_eq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/atomic_op.h"
#include "core/eq.h"
#include "fabq/fi_fabq.h"
#include "prov/auth.h"
#include "prov/av.h"
#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/mc.h"
#include "prov/provider.h"
#include "prov/sep.h"
#include "prov/srx.h"
#include "prov/stx.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kCompletionLevels =
    FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;

uint64_t recv_flags(bool tagged) {
  return FI_RECV | (tagged ? FI_TAGGED : FI_MSG);
}

bool is_dgram(const fi_info& info) {
  return info.ep_attr != nullptr && info.ep_attr->type == FI_EP_DGRAM;
}

// ep_attr->max_msg_size, at most a datagram's payload on DGRAM (less its authentication with
// a secret, the info's or `domain`'s); 1 GiB when not given.
size_t max_msg_of(const fi_info& info, const Domain* domain) {
  const size_t asked =
      info.ep_attr && info.ep_attr->max_msg_size ? info.ep_attr->max_msg_size : (size_t{1} << 30);
  if (!is_dgram(info)) return asked;
  return std::min(asked, has_auth_key(info, domain->auth_key()) ? xport::kMaxAuthDgramPayload
                                                                : xport::kMaxDgramPayload);
}

size_t scatter(const iovec* iov, size_t count, const unsigned char* src, size_t len) {
  size_t done = 0;
  for (size_t i = 0; i < count && done < len; ++i) {
    const size_t n = std::min(iov[i].iov_len, len - done);
    if (n > 0) std::memcpy(iov[i].iov_base, src + done, n);
    done += n;
  }
  return done;
}

static_assert(static_cast<int>(xport::RmaStatus::kBadKey) == FI_FABQ_RMA_BAD_KEY &&
              static_cast<int>(xport::RmaStatus::kOutOfBounds) == FI_FABQ_RMA_OUT_OF_BOUNDS &&
              static_cast<int>(xport::RmaStatus::kNotGranted) == FI_FABQ_RMA_NOT_GRANTED &&
              static_cast<int>(xport::RmaStatus::kBadAtomic) == FI_FABQ_RMA_BAD_ATOMIC &&
              static_cast<int>(xport::RmaStatus::kTargetFailed) == FI_FABQ_RMA_TARGET_FAILED &&
              static_cast<int>(xport::RmaStatus::kCopyFailed) == FI_FABQ_RMA_COPY_FAILED);

// The error of a one-sided operation the target refused (its prov_errno is the status).
int rma_error(xport::RmaStatus s) {
  switch (s) {
    case xport::RmaStatus::kOk:
      return 0;
    case xport::RmaStatus::kBadKey:
      return FI_EKEYREJECTED;
    case xport::RmaStatus::kOutOfBounds:
    case xport::RmaStatus::kNotGranted:
      return FI_EACCES;
    case xport::RmaStatus::kBadAtomic:
      return FI_EOPNOTSUPP;
    case xport::RmaStatus::kTargetFailed:
      return FI_EREMOTEIO;
    case xport::RmaStatus::kCopyFailed:
      return FI_EIO;
  }
  return FI_EIO;
}

// Whether the answer (or piece of one, wire.h) `in` fits the read or atomic `op`: a refusal or a
// direct read's answer carries no bytes and ends it; otherwise its bytes lie inside the result,
// and the last piece ends exactly at its end. (The connection checked that pieces come in order.)
bool answer_fits(const xport::TxOp& op, const xport::Incoming& in) {
  if (in.status != xport::RmaStatus::kOk || in.direct) return in.len == 0 && !in.more;
  if (in.offset > op.result_len || in.len > op.result_len - in.offset) return false;
  return in.more || in.offset + in.len == op.result_len;
}

// The lengths' sum of buffers valid_buffers() accepted (so it does not wrap).
size_t total_len(const iovec* iov, size_t count) {
  size_t len = 0;
  (void)iov_total(iov, count, &len);
  return len;
}

TxLevel level_of(uint64_t flags) {
  if (flags & FI_DELIVERY_COMPLETE) return TxLevel::kDelivery;
  if (flags & FI_TRANSMIT_COMPLETE) return TxLevel::kTransmit;
  return TxLevel::kInject;
}

}  // namespace

core::CompletionError recv_error(const PostedRecv& r, int err, int prov_errno) {
  return {.completion = {.op_context = r.context,
                         .flags = recv_flags(r.tagged),
                         .buf = r.iov_count ? r.iov[0].iov_base : nullptr},
          .olen = 0,
          .err = err,
          .prov_errno = prov_errno};
}

OpLimits::OpLimits(size_t max_msg_size, size_t inject_size)
    : max_ceiling_{max_msg_size, max_msg_size, max_msg_size,
                   std::min(max_msg_size, xport::kMaxAtomicBytes)},
      inject_ceiling_(inject_size) {
  for (size_t k = 0; k < kKinds; ++k) {
    max_[k].store(max_ceiling_[k], std::memory_order_relaxed);
    inject_[k].store(inject_ceiling_, std::memory_order_relaxed);
  }
}

bool OpLimits::set_max(Kind k, size_t bytes) {
  if (bytes > max_ceiling_[index(k)]) return false;
  max_[index(k)].store(bytes, std::memory_order_relaxed);
  return true;
}

bool OpLimits::set_inject(Kind k, size_t bytes) {
  if (bytes > inject_ceiling_) return false;
  inject_[index(k)].store(bytes, std::memory_order_relaxed);
  return true;
}

Endpoint::Endpoint(Domain* domain, const fi_info& info, void* context, EpContext ctx)
    : Object(FI_CLASS_EP, domain),
      AsyncTarget(core::FaultTargetKind::kEndpoint, &box_.fid.fid),
      domain_(domain),
      rx_size_(info.rx_attr && info.rx_attr->size ? info.rx_attr->size : 1024),
      tx_size_(info.tx_attr && info.tx_attr->size ? std::min<size_t>(info.tx_attr->size, 1024)
                                                  : 1024),
      iov_limit_(info.rx_attr && info.rx_attr->iov_limit
                     ? std::min(info.rx_attr->iov_limit, kMaxIov)
                     : kMaxIov),
      max_msg_size_(max_msg_of(info, domain)),
      prefix_((info.mode & FI_MSG_PREFIX) != 0 && info.ep_attr != nullptr
                  ? info.ep_attr->msg_prefix_size
                  : 0),
      limits_(max_msg_size_, kInjectSize),
      tx_op_flags_(info.tx_attr ? info.tx_attr->op_flags : 0),
      rx_op_flags_(info.rx_attr ? info.rx_attr->op_flags : 0),
      rdm_(info.ep_attr != nullptr && info.ep_attr->type == FI_EP_RDM),
      dgram_(is_dgram(info)),
      source_((rdm_ || dgram_) && (info.caps & FI_SOURCE) != 0),
      source_err_(source_ && (info.caps & FI_SOURCE_ERR) != 0),
      directed_(rdm_ ? DirectedRecv::of(info.caps, domain->fabric()->api()) : DirectedRecv{}),
      caps_(info.caps),
      ctx_(ctx),
      auth_(auth_key_of(info, domain->auth_key())),
      // An MSG endpoint's one peer may take all of its queue; an RDM endpoint's many share it.
      queue_(rx_size_, params().unexpected_bytes, 4 * rx_size_,
             rdm_ ? params().unexpected_peer_bytes : params().unexpected_bytes,
             domain->fabric()->unexpected_budget()),
      tx_ring_(tx_size_) {
  init_box(context);
  // Room for a MSG endpoint's one connection (and a few of an RDM endpoint's) in both: its
  // first stalls allocate nothing either.
  stalled_.reserve(kStallRoom);
  spare_stalled_.reserve(kStallRoom);
  if (info.src_addr != nullptr && info.src_addrlen >= sizeof(sockaddr_in)) {
    std::memcpy(&src_, info.src_addr, sizeof(src_));
  }
  if (info.dest_addr != nullptr && info.dest_addrlen >= sizeof(sockaddr_in)) {
    sockaddr_in d;
    std::memcpy(&d, info.dest_addr, sizeof(d));
    dest_ = d;
  }
}

Endpoint::~Endpoint() {
  // In an order that leaves no other thread a pointer into this endpoint or its connections.
  // 1. Nothing more is placed here: a connection still reading discards what comes.
  {
    core::MutexLock lock(mu_);
    closing_ = true;
    stalled_.clear();  // its connections go in step 4: nothing may resume them after
    // A resume that took it from the fabric's waiters borrows it until done (step 3).
    domain_->fabric()->forget_room(this);
  }
  Cq* const cq = rx_cq();
  // 2. Out of the SRX's hands: no SRX post takes a message that came through here, or walks
  //    its endpoints to this one, after this.
  if (srx_ != nullptr) {
    core::MutexLock lock(srx_->mu_);
    srx_->queue_.orphan(this);
    std::erase(srx_->endpoints_, this);
  }
  // 3. Threads that borrowed it or one of its connections are done with them.
  while (borrowed_.load(std::memory_order_acquire) != 0 ||
         held_.load(std::memory_order_acquire) != 0) {
    std::this_thread::yield();
  }
  // 4. The connections go: nothing calls back into this endpoint after that. One closed inside
  //    a message gives back the receive it was filling (Endpoint::unplace). A receive
  //    context's came through its scalable endpoint's listener, which routes no more to it.
  if (ctx_.sep != nullptr) ctx_.sep->detach(this);
  listener_.reset();
  dgram_sock_.reset();
  peers_.clear();
  retired_.clear();
  conn_.reset();
  // 5. Its messages leave the SRX; a shared receive that was waiting for the rest of one goes
  //    back there.
  if (srx_ != nullptr) {
    {
      core::MutexLock lock(srx_->mu_);
      for (PostedRecv& r : srx_->queue_.drop_from(this)) {
        if (cq != nullptr) cq->queue().cancel_reservation(1);  // it took its slot here
        r.owner = nullptr;
        give_back_locked(srx_->queue_, r);
      }
    }
    srx_->release();
  }
  // 6. The shared transmit context gets back the slots of the sends dropped with it.
  if (stx_ != nullptr) {
    tx_ring_.unshare();
    stx_->release();
  }
  if (eq_ != nullptr) eq_->queue().purge(&box_.fid.fid);
  // Receives still posted are dropped with the endpoint (fi_endpoint(3)), and those waiting for
  // the rest of a message; their CQ slots return.
  // (A receive still waiting for a message holds no slot.)
  const size_t waiting = queue_.drop_from(this).size();
  queue_.take_all();
  if (cq != nullptr && waiting + placing_ != 0) {
    cq->queue().cancel_reservation(waiting + placing_);
  }
  if (tx_cq_ != nullptr) {
    const size_t held = tx_ring_.reserved_count();
    if (held != 0) tx_cq_->queue().cancel_reservation(held);
  }
  for (Object* o :
       {static_cast<Object*>(eq_), static_cast<Object*>(tx_cq_), static_cast<Object*>(rx_cq()),
        static_cast<Object*>(tx_cntr_), static_cast<Object*>(rx_cntr_), static_cast<Object*>(av_),
        static_cast<Object*>(write_cntr_), static_cast<Object*>(read_cntr_),
        static_cast<Object*>(rem_write_cntr_), static_cast<Object*>(rem_read_cntr_),
        static_cast<Object*>(ctx_.sep)}) {
    if (o != nullptr) o->release();
  }
}

Eq* Endpoint::eq() {
  core::MutexLock lock(mu_);
  return eq_;
}

Srx* Endpoint::srx() {
  core::MutexLock lock(mu_);
  return srx_;
}

Outbox& Endpoint::outbox() const {
  return domain_->fabric()->outbox();
}

Connection* Endpoint::connection() {
  core::MutexLock lock(mu_);
  return conn_.get();
}

int Endpoint::enable() {
  sockaddr_in at{};
  xport::ConnParams params;
  if (ctx_.sep != nullptr) {
    // A context listens through its scalable endpoint, whose AV it takes unless it has one.
    Av* const sep_av = ctx_.sep->av();
    core::MutexLock lock(mu_);
    if (enabled_) return 0;
    if (av_ == nullptr && sep_av != nullptr) {
      sep_av->hold();
      av_ = sep_av;
    }
    if (av_ == nullptr) return -FI_ENOAV;
    // A context needs no CQ: a receive context may serve only peers' one-sided operations (as
    // Open MPI's btl/ofi uses them), whose completions are the initiators'.
    enabled_ = true;
    // Under mu_ (the scalable endpoint's lock is a leaf): no message reaches it before this.
    if (ctx_.role == EpRole::kRxContext) ctx_.sep->context_enabled(this, ctx_.index);
    return 0;
  }
  {
    core::MutexLock lock(mu_);
    if (enabled_) return 0;
    const bool named = rdm_ || dgram_;  // unconnected: peers are fi_addr_t of an AV
    if (named ? av_ == nullptr : eq_ == nullptr) return named ? -FI_ENOAV : -FI_ENOEQ;
    if (rx_cq() == nullptr && rx_cntr_ == nullptr && srx_ == nullptr) return -FI_ENOCQ;
    if (!named) {
      enabled_ = true;
      return 0;
    }
    at = src_;
    params = conn_params_locked();
  }
  if (dgram_) {
    // Made, and on failure destroyed, without mu_ (the engine lock comes first).
    int err = 0;
    std::unique_ptr<xport::Datagram> sock =
        domain_->fabric()->transport()->open_datagram(this, at, auth_key(), &err);
    if (sock == nullptr) return err != 0 ? err : -FI_EIO;
    core::MutexLock lock(mu_);
    if (enabled_) return 0;  // another thread's fi_enable won
    rdm_name_ = sock->name();
    dgram_sock_ = std::move(sock);
    enabled_ = true;
    return 0;
  }
  // The listener is made (and, on failure, destroyed, which takes the engine lock) without
  // the endpoint's lock: the engine's lock comes first.
  int err = 0;
  std::unique_ptr<Listener> listener =
      domain_->fabric()->transport()->open_listener(this, params, at, &err);
  if (listener == nullptr) return err != 0 ? err : -FI_EIO;
  core::MutexLock lock(mu_);
  if (enabled_) return 0;  // another thread's fi_enable won; this listener closes unused
  listener_ = std::move(listener);
  size_t len = sizeof(rdm_name_);
  listener_->getname(&rdm_name_, &len);
  enabled_ = true;
  return 0;
}

bool Endpoint::can_free(const Connection* c) {
  core::MutexLock lock(mu_);
  std::erase(stalled_, c);  // closed: nothing to resume
  for (Peer& q : peers_) {
    if (q.in == c) q.in = nullptr;  // closed: the next send to that peer connects
  }
  return unreferenced_locked(c);
}

bool Endpoint::unreferenced_locked(const Connection* c) {
  // Its buffered messages stay for the receives to come, without it: a message nobody wants
  // must not hold a closed connection, and its socket, for good. borrowed_ is looked at under
  // the SRX's lock too: an SRX's post borrows under it only.
  if (srx_ == nullptr) {
    queue_.forget(c);
    return borrowed_.load(std::memory_order_acquire) == 0;
  }
  core::MutexLock slock(srx_->mu_);
  srx_->queue_.forget(c);
  return borrowed_.load(std::memory_order_acquire) == 0;
}

bool Endpoint::holds(const Connection* c) {
  core::MutexLock lock(mu_);
  if (srx_ == nullptr) return borrowed_.load(std::memory_order_acquire) != 0 || queue_.owes(c);
  core::MutexLock slock(srx_->mu_);
  return borrowed_.load(std::memory_order_acquire) != 0 || srx_->queue_.owes(c);
}

bool Endpoint::rx_slot(Cq* cq) {
  if (cq == nullptr || cq->queue().reserve(1).ok()) return true;
  // Registered before the CQ is asked, so that the room it reports finds this endpoint.
  domain_->fabric()->wait_for_room(this);
  return cq->queue().await_room() && cq->queue().reserve(1).ok();
}

Unexpected* Endpoint::buffer_locked(RecvQueue& q, const Incoming& in) {
  RecvQueue::Full full = RecvQueue::Full::kQueue;
  Unexpected* u = q.try_add(this, in, &full);
  if (u != nullptr || full != RecvQueue::Full::kBudget) return u;
  // The fabric's budget comes back when another queue's messages are taken, which no post here
  // tells this endpoint: it waits to be told (Fabric::room_given()).
  domain_->fabric()->wait_for_room(this);
  if (!domain_->fabric()->unexpected_budget()->await(RecvQueue::charge(in.len))) return nullptr;
  return q.try_add(this, in, &full);
}

void Endpoint::inbound_ready(Connection* c, const sockaddr_in& name) {
  core::MutexLock lock(mu_);
  if (closing_) return;
  // A peer's connection reaches its one receive queue: receive context 0 of a scalable one.
  Peer& same = peer_entry_locked(name, 0);
  // A connection the peer made earlier and that is still open keeps the sends it carries.
  if (same.in == nullptr || !same.in->open()) same.in = c;
}

fi_addr_t Endpoint::source_of(const Incoming& in) const {
  if (!source_ || av_ == nullptr || in.from.sin_family != AF_INET) return FI_ADDR_NOTAVAIL;
  return av_->reverse_lookup(in.from);
}

void Endpoint::write_unreserved_error_locked(Cq* cq, const core::CompletionError& e,
                                             std::vector<uint32_t>* events) {
  if (cq->queue().reserve(1).ok()) {
    auto more = cq->complete_error(e);
    events->insert(events->end(), more.begin(), more.end());
    return;
  }
  // More receives were waiting than the CQ has room for, and they end at once: the CQ overruns,
  // as fi_cq(3) says a CQ does, rather than lose one silently.
  if (!cq->queue().overrun() &&
      std::find(events->begin(), events->end(), FI_FABQ_EVENT_CQ_ERR) == events->end()) {
    events->push_back(FI_FABQ_EVENT_CQ_ERR);
  }
}

bool Endpoint::unknown_sender(const Incoming& in, fi_addr_t named) const {
  return source_err_ && named == FI_ADDR_NOTAVAIL && in.from.sin_family == AF_INET;
}

// --- receiving

void Endpoint::complete_recv(const PostedRecv& r, const Incoming& in, size_t placed,
                             std::vector<uint32_t>* events, bool release) {
  Cq* cq = rx_cq();
  core::Completion c{.op_context = r.context,
                     .flags = recv_flags(in.tagged) | (in.has_data ? FI_REMOTE_CQ_DATA : 0) |
                              (release ? FI_MULTI_RECV : 0) | (in.multicast ? FI_MULTICAST : 0),
                     .len = r.prefix + placed,
                     .buf = r.iov_count ? r.iov[0].iov_base : nullptr,
                     .data = in.has_data ? in.data : 0,
                     .tag = in.tagged ? in.tag : 0,
                     .src_addr = source_of(in)};
  if (in.len > placed) {
    if (cq != nullptr) {
      auto more = cq->complete_error(
          {.completion = c, .olen = in.len - placed, .err = FI_ETRUNC, .prov_errno = 0});
      events->insert(events->end(), more.begin(), more.end());
    }
    if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
    return;
  }
  // A multi-receive buffer's release is always reported (fi_msg(3) FI_MULTI_RECV).
  const bool report = !rx_selective_ || (r.flags & FI_COMPLETION) != 0 || release;
  if (cq != nullptr) {
    if (report && unknown_sender(in, c.src_addr)) {
      // FI_SOURCE_ERR: delivered, but named through fi_cq_readerr with the sender's raw
      // address, which fi_av_insert takes as it is (fi_cq(3)).
      auto more = cq->complete_error({.completion = c,
                                      .err = FI_EADDRNOTAVAIL,
                                      .err_data = &in.from,
                                      .err_data_size = sizeof(in.from)});
      events->insert(events->end(), more.begin(), more.end());
    } else if (report) {
      auto more = cq->complete(c);
      events->insert(events->end(), more.begin(), more.end());
    } else {
      cq->queue().cancel_reservation(1);
    }
  }
  if (rx_cntr_ != nullptr) rx_cntr_->counter().complete();
}

void Endpoint::deliver_unexpected(const PostedRecv& r, const Unexpected& u,
                                  std::vector<uint32_t>* events, bool release) {
  const size_t n = scatter(r.iov, r.iov_count, u.data, std::min(u.in.len, r.len));
  complete_recv(r, u.in, n, events, release);
}

bool Endpoint::released_here_locked(const PostedRecv& r) {
  if (r.multi == 0) return false;
  if (srx_ == nullptr) return queue_.slice_done(r.multi);
  core::MutexLock slock(srx_->mu_);
  return srx_->queue_.slice_done(r.multi);
}

void Endpoint::mark_release_locked(const PostedRecv& r, core::CompletionError* e) {
  if (r.multi != 0 && queue_.release(r.multi)) e->completion.flags |= FI_MULTI_RECV;
}

bool Endpoint::post_multi_locked(PostedRecv& r, bool slot, std::vector<uint32_t>* events,
                                 bool* resume) {
  Cq* cq = rx_cq();
  bool used_up = false;
  while (!used_up) {
    Unexpected* u = queue_.find_unexpected(r);
    if (u == nullptr) break;
    // Each slice completes into a slot of its own. With none left, the buffered messages wait
    // for the next receive posted (a full CQ stops completions anyway).
    if (!slot && cq != nullptr && !cq->queue().reserve(1).ok()) break;
    slot = false;
    PostedRecv slice = queue_.carve(&r, u->in.len, &used_up);
    if (used_up) queue_.release(r.multi);  // the slice is in flight: its completion says so
    if (!u->complete) {
      u->taker = slice;  // completes when the rest of it arrives
      continue;
    }
    deliver_unexpected(slice, *u, events, queue_.slice_done(slice.multi));
    // Its connection is not this caller's to use here: the acknowledgement goes at its next
    // progress.
    if (u->in.ack == AckWanted::kDelivered && u->in.via != nullptr) {
      u->in.via->ack_delivered_later(u->in.seq);
    }
    queue_.remove(u);
    *resume = *resume || !stalled_.empty();
  }
  if (slot && cq != nullptr) cq->queue().cancel_reservation(1);
  if (!used_up) {
    r.owner = nullptr;
    queue_.post(r);
    *resume = *resume || !stalled_.empty();
  }
  return used_up;
}

ssize_t Endpoint::post_recv(PostedRecv& r, fi_addr_t src) {
  if (r.default_flags) r.flags = rx_op_flags_ & ~(r.tagged ? FI_MULTI_RECV : 0);
  const bool multi = (r.flags & FI_MULTI_RECV) != 0;
  if (multi && (r.tagged || r.iov_count != 1)) return r.tagged ? -FI_EBADFLAGS : -FI_EINVAL;
  if (multi && r.prefix != 0) return -FI_EINVAL;  // not with FI_MSG_PREFIX (fi_fabq(7))
  const bool claim_only = (r.flags & FI_CLAIM) != 0 && (r.flags & FI_PEEK) == 0;
  if (!multi && (r.flags & (FI_PEEK | FI_CLAIM)) == 0 && !faults_armed()) {
    if (std::optional<ssize_t> rc = post_waiting(r)) return *rc;
  }
  FaultAction action;
  std::vector<uint32_t> cq_events;
  Cq* cq = nullptr;
  Connection* ack_conn = nullptr;  // borrowed (borrowed_) while not null
  uint32_t ack_seq = 0;
  bool resume = false;
  {
    core::MutexLock lock(mu_);
    if (!enabled_ || failed_ || srx_ != nullptr) return -FI_EOPBADSTATE;
    if (directed_.applies(r.tagged) && !claim_only) {
      if (src != FI_ADDR_UNSPEC) {
        sockaddr_in name{};
        // fi_rx_addr's context bits name a context of the sender's, not another sender.
        if (av_ == nullptr || !av_->lookup(av_->split(src).entry, &name)) return -FI_EINVAL;
        r.source = SourceFilter::only(name);
      } else if (directed_.exact) {
        return -FI_EINVAL;
      }
    }
    cq = rx_cq();
    if (r.flags & (FI_PEEK | FI_CLAIM)) {
      if (!r.tagged) return -FI_EBADFLAGS;
      Unexpected* u =
          (r.flags & FI_PEEK) ? queue_.find_unexpected(r) : queue_.find_claimed(r.context);
      if (u != nullptr && !u->complete) u = nullptr;
      if (r.flags & FI_PEEK) {
        if (cq == nullptr) return -FI_ENOCQ;
        if (u == nullptr) {
          if (!cq->queue().write_error(recv_error(r, FI_ENOMSG, 0)).ok()) return -FI_EAGAIN;
        } else {
          core::Completion c{.op_context = r.context,
                             .flags = recv_flags(true) | (u->in.has_data ? FI_REMOTE_CQ_DATA : 0),
                             .len = r.prefix + u->in.len,
                             .data = u->in.has_data ? u->in.data : 0,
                             .tag = u->in.tag,
                             .src_addr = source_of(u->in)};
          const core::Status s =
              unknown_sender(u->in, c.src_addr)
                  ? cq->queue().write_error({.completion = c,
                                             .err = FI_EADDRNOTAVAIL,
                                             .err_data = &u->in.from,
                                             .err_data_size = sizeof(u->in.from)})
                  : cq->queue().write(c);
          if (!s.ok()) return -FI_EAGAIN;
          if (r.flags & FI_DISCARD) {
            consumed_locked(u, &ack_conn, &ack_seq, &resume);
            queue_.remove(u);
          } else if (r.flags & FI_CLAIM) {
            u->claimed_by = r.context;
          }
        }
      } else {  // FI_CLAIM of a message an FI_PEEK | FI_CLAIM kept
        if (u == nullptr) return -FI_EINVAL;
        if (cq != nullptr && !cq->queue().reserve(1).ok()) return -FI_EAGAIN;
        if (r.flags & FI_DISCARD) {
          PostedRecv none = r;
          none.iov_count = 0;
          none.len = 0;
          Incoming in = u->in;
          in.len = 0;
          complete_recv(none, in, 0, &cq_events);
        } else {
          deliver_unexpected(r, *u, &cq_events);
        }
        consumed_locked(u, &ack_conn, &ack_seq, &resume);
        queue_.remove(u);
      }
    } else {
      if (queue_.full()) return -FI_EAGAIN;
      // A receive that waits for its message holds no CQ slot (place() takes one when the
      // message comes); one that completes now (a message already here, an injected error, the
      // end of a MSG connection) or a multi-receive takes it here, or is refused.
      const bool armed = faults_armed();
      Unexpected* u = multi && !ended_ ? nullptr : queue_.find_unexpected(r);
      const bool slot = cq != nullptr && (armed || multi || ended_ || u != nullptr);
      if (slot) {
        if (core::Status s = cq->queue().reserve(1); !s.ok()) return s.to_fi();
      } else if (cq != nullptr && cq->queue().overrun()) {
        return core::Status(core::Code::kOverrun).to_fi();
      }
      if (armed) action = count_operation();
      r.owner = this;
      if (action.err != 0) {
        if (cq != nullptr) {
          core::CompletionError e = recv_error(r, action.err, action.prov_errno);
          if (multi) e.completion.flags |= FI_MULTI_RECV;  // its whole buffer goes back
          cq_events = cq->complete_error(e);
        }
        if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
      } else if (multi && !ended_) {
        queue_.make_multi(&r, min_multi_recv_);
        post_multi_locked(r, /*slot=*/cq != nullptr, &cq_events, &resume);
      } else if (u != nullptr) {
        if (u->complete) {
          deliver_unexpected(r, *u, &cq_events);
          consumed_locked(u, &ack_conn, &ack_seq, &resume);
          queue_.remove(u);
        } else {
          u->taker = r;  // completes when the rest of it arrives
        }
      } else if (ended_) {
        // MSG: the connection is over and nothing more will come (connection_ended()).
        core::CompletionError e = recv_error(r, FI_ECANCELED, 0);
        if (multi) e.completion.flags |= FI_MULTI_RECV;
        if (cq != nullptr) cq_events = cq->complete_error(e);
        if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
      } else {
        if (slot) cq->queue().cancel_reservation(1);
        r.owner = nullptr;
        queue_.post(r);
        resume = !stalled_.empty();
      }
    }
  }
  raise(domain_, this, action.events);
  raise(domain_, cq, cq_events);
  if (ack_conn != nullptr) {
    ack_conn->ack_delivered(ack_seq);
    borrowed_.fetch_sub(1, std::memory_order_release);
  }
  if (resume) resume_if_stalled();
  outbox().publish();
  return 0;
}

std::optional<ssize_t> Endpoint::post_waiting(PostedRecv& r) {
  bool resume = false;
  {
    core::MutexLock lock(mu_);
    if (!enabled_ || failed_ || srx_ != nullptr) return -FI_EOPBADSTATE;
    if (directed_.applies(r.tagged) || ended_ || queue_.has_unexpected()) return std::nullopt;
    if (queue_.full()) return -FI_EAGAIN;
    if (Cq* cq = rx_cq(); cq != nullptr && cq->queue().overrun()) {
      return core::Status(core::Code::kOverrun).to_fi();
    }
    r.owner = nullptr;
    queue_.post(r);
    resume = !stalled_.empty();
  }
  if (resume) resume_if_stalled();
  outbox().publish();
  return 0;
}

void Endpoint::consumed_locked(const Unexpected* u, Connection** ack_conn, uint32_t* ack_seq,
                               bool* resume) {
  if (u->in.ack == AckWanted::kDelivered && u->in.via != nullptr) {
    *ack_seq = u->in.seq;
    *ack_conn = u->in.via;
    borrowed_.fetch_add(1, std::memory_order_relaxed);
  }
  *resume = *resume || !stalled_.empty();
}

void Endpoint::resume_if_stalled() {
  // A stall recorded after the swap is one this call's post did not cure: it waits for the
  // next. The connections (and the datagram socket) are borrowed until resumed; the listener
  // lives until close.
  std::vector<Connection*> conns;
  Listener* l = nullptr;
  xport::Datagram* d = nullptr;
  {
    core::MutexLock lock(mu_);
    if (!stalled_.empty()) {
      conns.swap(stalled_);
      // The spare's capacity: the next stall allocates nothing.
      stalled_.swap(spare_stalled_);
    }
    if (std::exchange(dgram_stalled_, false)) d = dgram_sock_.get();
    if (!conns.empty() || d != nullptr) borrowed_.fetch_add(1, std::memory_order_relaxed);
    l = listener_.get();
  }
  for (Connection* c : conns) c->resume();
  if (d != nullptr) d->resume();
  if (!conns.empty() || d != nullptr) {
    if (!conns.empty()) {
      conns.clear();
      core::MutexLock lock(mu_);
      if (spare_stalled_.capacity() == 0) spare_stalled_.swap(conns);
    }
    // Last: once no borrower is left, a closing endpoint may go.
    borrowed_.fetch_sub(1, std::memory_order_release);
  }
  if (l != nullptr) l->sweep();
}

ssize_t Endpoint::cancel(void* context) {
  std::vector<uint32_t> cq_events;
  Cq* cq = nullptr;
  {
    core::MutexLock lock(mu_);
    // A waiting receive holds no CQ slot: with none free it stays posted, and the application
    // reads its CQ and cancels again.
    cq = rx_cq();
    if (cq != nullptr) {
      if (core::Status s = cq->queue().reserve(1); !s.ok()) {
        return queue_.holds_context(context) ? s.to_fi() : -FI_ENOENT;
      }
    }
    std::optional<PostedRecv> r = queue_.take_context(context);
    if (!r) {
      if (cq != nullptr) cq->queue().cancel_reservation(1);
      return -FI_ENOENT;
    }
    core::CompletionError e = recv_error(*r, FI_ECANCELED, 0);
    mark_release_locked(*r, &e);
    if (cq != nullptr) cq_events = cq->complete_error(e);
    if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
  }
  raise(domain_, cq, cq_events);
  return 0;
}

Endpoint::Failure Endpoint::fail(uint32_t type) {
  Failure f;
  core::MutexLock lock(mu_);
  if (failed_) return f;
  failed_ = true;
  f.first = true;
  f.cq = rx_cq();
  for (const PostedRecv& r : queue_.take_all()) {
    if (f.cq != nullptr) {
      core::CompletionError e = recv_error(r, FI_EIO, static_cast<int>(type));
      mark_release_locked(r, &e);
      write_unreserved_error_locked(f.cq, e, &f.cq_events);
    }
    if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
  }
  return f;
}

bool Endpoint::place(const Incoming& in, Placement* p) {
  core::MutexLock lock(mu_);
  return place_locked(in, p);
}

bool Endpoint::deliver(const Incoming& in, const unsigned char* bytes) {
  // place() and placed() under one acquisition: a small message's whole path through here.
  std::vector<uint32_t> events;
  core::MutexLock lock(mu_);
  if (in.kind == xport::InKind::kMsg && srx_ == nullptr && !failed_ && !closing_) {
    // The usual case, a message whose receive is posted, straight into that receive: what
    // place_locked() and placed_locked() would do for it, without a Placement between them.
    // A multi-receive buffer gives a slice of itself: place_locked() carves it.
    PostedRecv* r = queue_.peek_match(in);
    if (r != nullptr && r->multi == 0) {
      Cq* cq = rx_cq();
      if (!rx_slot(cq)) {
        retry_ = true;  // as place_locked() refuses it: it waits for a CQ slot
        return stall_locked(in);
      }
      r->owner = this;
      const size_t n = std::min(in.len, r->len);
      scatter(r->iov, r->iov_count, bytes, n);
      complete_recv(*r, in, n, &events, /*release=*/false);
      queue_.remove_posted(r);
      outbox().add(domain_, cq, events);
      return true;
    }
  }
  Placement p;
  if (!place_locked(in, &p)) return false;
  xport::copy_into(p, bytes, std::min(in.len, p.capacity));
  placed_locked(in, &p, &events);
  return true;
}

bool Endpoint::place_locked(const Incoming& in, Placement* p) {
  PlaceRecord& rec = p->as<PlaceRecord>();
  p->iov_count = 0;
  p->capacity = 0;
  if (in.kind == xport::InKind::kWrite) return place_write_locked(in, p);
  if (in.kind != xport::InKind::kMsg) return place_answer_locked(in, p);
  if (failed_ || closing_) {
    rec.kind = PlaceRecord::Kind::kDiscard;
    return true;
  }
  Unexpected* unexpected = nullptr;
  Cq* cq = rx_cq();
  bool took = false;  // a posted receive, into rec.recv
  // A receive takes its CQ slot when a message picks it; posted, it holds none, so an
  // application may post more receives than its CQ has slots. With no slot free, the message
  // waits at its connection until the application reads the CQ (Fabric::wait_for_room()); a
  // message no receive wants is buffered regardless.
  const auto credit = [this, cq] { return rx_slot(cq); };
  bool refused = false;
  if (srx_ != nullptr) {
    core::MutexLock slock(srx_->mu_);
    took = srx_->queue_.take_match(in, credit, &refused, &rec.recv);
    if (took) {
      rec.recv.owner = this;
      if (srx_->limit_crossed_locked()) {
        outbox().add(domain_, srx_, FI_FABQ_EVENT_SRX_LIMIT_REACHED);
      }
    } else if (!refused) {
      unexpected = buffer_locked(srx_->queue_, in);
      if (unexpected == nullptr) return stall_locked(in);
    }
  } else {
    took = queue_.take_match(in, credit, &refused, &rec.recv);
    if (took) {
      rec.recv.owner = this;
    } else if (!refused) {
      unexpected = buffer_locked(queue_, in);
      if (unexpected == nullptr) return stall_locked(in);
    }
  }
  if (refused) {
    retry_ = true;
    return stall_locked(in);
  }
  if (took) {
    rec.kind = PlaceRecord::Kind::kPosted;
    ++placing_;
    for (size_t i = 0; i < rec.recv.iov_count; ++i) p->iov[i] = rec.recv.iov[i];
    p->iov_count = rec.recv.iov_count;
    p->capacity = rec.recv.len;
  } else {
    rec.kind = PlaceRecord::Kind::kUnexpected;
    rec.unexpected = unexpected;
    p->iov[0] = {unexpected->data, in.len};
    p->iov_count = 1;
    p->capacity = in.len;
  }
  return true;
}

bool Endpoint::stall_locked(const Incoming& in) {
  if (in.via != nullptr && std::find(stalled_.begin(), stalled_.end(), in.via) == stalled_.end()) {
    stalled_.push_back(in.via);
  }
  if (in.via == nullptr && dgram_) dgram_stalled_ = true;  // a datagram kept, if retry_ says so
  return false;
}

bool Endpoint::take_retry() {
  core::MutexLock lock(mu_);
  return std::exchange(retry_, false);
}

bool Endpoint::placed(const Incoming& in, Placement* p) {
  std::vector<uint32_t> events;
  core::MutexLock lock(mu_);
  return placed_locked(in, p, &events);
}

bool Endpoint::placed_locked(const Incoming& in, Placement* p, std::vector<uint32_t>* out) {
  PlaceRecord& rec = p->as<PlaceRecord>();
  std::vector<uint32_t>& events = *out;
  bool ack_now = in.ack == AckWanted::kDelivered;
  switch (std::exchange(rec.kind, PlaceRecord::Kind::kNone)) {
    case PlaceRecord::Kind::kRemoteWrite:
      if (p->status == xport::RmaStatus::kOk) {
        wrote_locked(in, rec, &events);
      } else if (p->status != xport::RmaStatus::kTargetFailed) {
        refused_locked(p->status);
      }
      ack_now = false;
      break;
    case PlaceRecord::Kind::kAnswer: {
      TxOp* op = std::exchange(rec.op, nullptr);
      if (in.more) return false;  // a piece: the read completes with its last one
      finish_send(op, rma_error(in.status), &events, in.status);
      outbox().add(domain_, tx_cq_, events);
      return false;
    }
    case PlaceRecord::Kind::kPosted:
      --placing_;
      complete_recv(rec.recv, in, std::min(in.len, p->capacity), &events,
                    released_here_locked(rec.recv));
      break;
    case PlaceRecord::Kind::kUnexpected: {
      Unexpected* u = std::exchange(rec.unexpected, nullptr);
      bool taken = false;
      if (srx_ == nullptr) {
        taken = arrived_locked(u, queue_, &events);
      } else {
        core::MutexLock slock(srx_->mu_);
        taken = arrived_locked(u, srx_->queue_, &events);
      }
      if (!taken) ack_now = false;  // acknowledged when a receive takes it
      break;
    }
    case PlaceRecord::Kind::kDiscard:  // a failed endpoint's: nothing was delivered
    case PlaceRecord::Kind::kNone:
      ack_now = false;
      break;
  }
  outbox().add(domain_, rx_cq(), events);
  return ack_now;
}

bool Endpoint::arrived_locked(Unexpected* u, RecvQueue& q, std::vector<uint32_t>* events) {
  u->complete = true;
  if (!u->taker) return false;
  // Its CQ slot was reserved when it was posted, on this endpoint's receive CQ.
  deliver_unexpected(*u->taker, *u, events, u->taker->multi != 0 && q.slice_done(u->taker->multi));
  q.remove(u);
  return true;
}

void Endpoint::unplace(Placement* p) {
  core::MutexLock lock(mu_);
  if (srx_ == nullptr) {
    unplace_locked(p, queue_, /*shared=*/false);
    return;
  }
  core::MutexLock slock(srx_->mu_);
  unplace_locked(p, srx_->queue_, /*shared=*/true);
}

void Endpoint::unplace_locked(Placement* p, RecvQueue& q, bool shared) {
  PlaceRecord& rec = p->as<PlaceRecord>();
  std::optional<PostedRecv> back;
  switch (std::exchange(rec.kind, PlaceRecord::Kind::kNone)) {
    case PlaceRecord::Kind::kRemoteWrite:
      // Cut off inside a peer's write: part of it may be in the region (as with any write
      // whose connection fails); the region is let go and its CQ slot given back.
      if (rec.use.region != nullptr) release_region(std::exchange(rec.use.region, nullptr));
      if (rec.cq_slot && rx_cq() != nullptr) rx_cq()->queue().cancel_reservation(1);
      rec.cq_slot = false;
      return;
    case PlaceRecord::Kind::kAnswer:
      rec.op = nullptr;  // the connection's end fails the read or atomic (abort_sends)
      return;
    case PlaceRecord::Kind::kPosted:
      --placing_;
      back = rec.recv;
      break;
    case PlaceRecord::Kind::kUnexpected: {
      Unexpected* u = std::exchange(rec.unexpected, nullptr);
      back = u->taker;
      q.remove(u);
      break;
    }
    default:
      return;
  }
  if (!back) return;
  if (back->multi != 0) {
    // A slice of a multi-receive buffer: later messages went on past it, so its part of the
    // buffer stays unused. Its CQ slot carries the buffer's release if it was the last slice.
    const bool last = q.slice_done(back->multi);
    std::vector<uint32_t> events;
    Cq* cq = rx_cq();
    if (failed_) {
      core::CompletionError e = recv_error(*back, FI_EIO, 0);
      if (last) e.completion.flags |= FI_MULTI_RECV;
      if (cq != nullptr) events = cq->complete_error(e);
      if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
    } else if (cq != nullptr && last && !closing_) {
      // "If other flag bits are zero, the provider is reporting that the multi-recv buffer has
      // been released" (fi_cq(3)).
      events = cq->complete({.op_context = back->context, .flags = FI_MULTI_RECV});
    } else if (cq != nullptr) {
      cq->queue().cancel_reservation(1);
    }
    outbox().add(domain_, cq, events);
    return;
  }
  if (failed_) {
    // Too late to go back: the endpoint failed its receives already; so does this one.
    std::vector<uint32_t> events;
    if (Cq* cq = rx_cq(); cq != nullptr) {
      events = cq->complete_error(recv_error(*back, FI_EIO, 0));
    }
    if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
    outbox().add(domain_, rx_cq(), events);
    return;
  }
  // Back among the waiting receives, it holds no CQ slot: it takes one when a message picks it.
  if (Cq* cq = rx_cq(); cq != nullptr) cq->queue().cancel_reservation(1);
  back->owner = nullptr;
  if (closing_) {
    // The endpoint's connections are being destroyed, one of them calling this: its own
    // receives go with it, and no other connection of it may be touched (a buffered message's
    // may be gone). A shared receive is matched only with messages of other endpoints (this
    // one's are orphaned), whose connections stay.
    if (!shared) {
      q.post_front(*back);
    } else {
      give_back_locked(q, *back);
    }
    return;
  }
  give_back_locked(q, *back);
  // A connection that stalled for want of a receive may take this one. Resuming only schedules
  // it (the engine's scheduling lock, innermost), so it is done here, under the locks.
  for (Connection* c : stalled_) c->resume();
  stalled_.clear();
}

void Endpoint::give_back_locked(RecvQueue& q, PostedRecv r) {
  Unexpected* u = q.find_unexpected(r);
  Endpoint* const from = u != nullptr ? u->from : nullptr;
  Cq* const cq = from != nullptr ? from->rx_cq() : nullptr;
  // It takes its slot on the CQ of the endpoint the message came through. With no room there it
  // goes back to the head of the queue, and the buffered message waits for a later receive (a
  // full CQ stops a receive from completing anyway).
  if (u == nullptr || (cq != nullptr && !cq->queue().reserve(1).ok())) {
    q.post_front(r);
    return;
  }
  r.owner = from;
  if (!u->complete) {
    u->taker = r;  // completes when the rest of it arrives
    return;
  }
  std::vector<uint32_t> events;
  from->deliver_unexpected(r, *u, &events);
  // Its connection is not this caller's: it sends the acknowledgement at its next progress
  // (this caller may hold another connection's lock).
  if (u->in.ack == AckWanted::kDelivered && u->in.via != nullptr) {
    u->in.via->ack_delivered_later(u->in.seq);
  }
  q.remove(u);
  from->outbox().add(from->domain_, cq, events);
}

void Endpoint::connection_ended() {
  std::vector<uint32_t> events;
  Cq* cq = nullptr;
  {
    core::MutexLock lock(mu_);
    if (rdm_ || std::exchange(ended_, true) || srx_ != nullptr) return;
    cq = rx_cq();
    for (const PostedRecv& r : queue_.take_all()) {
      if (cq != nullptr) {
        core::CompletionError e = recv_error(r, FI_ECANCELED, 0);
        mark_release_locked(r, &e);
        write_unreserved_error_locked(cq, e, &events);
      }
      if (rx_cntr_ != nullptr) rx_cntr_->counter().complete_error();
    }
  }
  outbox().add(domain_, cq, events);
}

// --- sending

ssize_t Endpoint::post_prefixed(const SendRequest& req) {
  if (req.iov_count == 0 || req.iov == nullptr || req.iov_count > kMaxIov) return -FI_EINVAL;
  iovec payload[kMaxIov];
  std::copy_n(req.iov, req.iov_count, payload);
  if (!skip_prefix(&payload[0], prefix_)) return -FI_EINVAL;
  SendRequest r = req;
  r.iov = payload;
  return post_payload(r);
}

ssize_t Endpoint::post_payload(const SendRequest& req) {
  if (req.iov_count > kMaxIov || !valid_buffers(req.iov, req.iov_count)) return -FI_EINVAL;
  const size_t len = total_len(req.iov, req.iov_count);
  if (dgram_) return send_dgram(req, len);
  const OpLimits::Kind kind = OpLimits::of(req);
  const size_t max = limits_.max(kind);
  const bool copy = req.inject_call || (req.flags & FI_INJECT) != 0;
  if (req.kind == TxKind::kSend && req.result_count == 0 && req.compare_count == 0 &&
      len <= kInlineSendMax && len <= max && (!copy || len <= limits_.inject(kind))) {
    // A message, before the checks one-sided operations need: the short path if it may.
    if (const ssize_t rc = send_inline(req, len); rc != kNotInline) return rc;
  }
  if (req.result_count > kMaxIov || !valid_buffers(req.result, req.result_count)) {
    return -FI_EINVAL;
  }
  if (req.compare_count > kMaxIov || !valid_buffers(req.compare, req.compare_count)) {
    return -FI_EINVAL;
  }
  const size_t result_len = total_len(req.result, req.result_count);
  const size_t compare_len = total_len(req.compare, req.compare_count);
  if (len > max || result_len > max) return -FI_EMSGSIZE;
  if (copy && len + compare_len > limits_.inject(kind)) return -FI_EMSGSIZE;
  switch (req.kind) {
    case TxKind::kSend:
      break;
    case TxKind::kWrite:
    case TxKind::kRead:
      if ((caps_ & FI_RMA) == 0) return -FI_EOPNOTSUPP;
      if (req.kind == TxKind::kRead && (len != 0 || copy || req.has_data)) return -FI_EINVAL;
      break;
    case TxKind::kAtomic: {
      if ((caps_ & FI_ATOMIC) == 0) return -FI_EOPNOTSUPP;
      if (!core::atomic_valid(req.atomic_kind, req.atomic_op, req.datatype)) {
        return -FI_EOPNOTSUPP;
      }
      const size_t size = core::atomic_datatype_size(req.datatype);
      if (req.count == 0) return -FI_EINVAL;
      // Before the product, which a huge count would wrap around.
      if (req.count > xport::kMaxAtomicBytes || len > xport::kMaxAtomicBytes) return -FI_EMSGSIZE;
      if (len != req.count * size) return -FI_EINVAL;
      const bool fetch = req.atomic_kind != xport::AtomicKind::kPlain;
      if (fetch && result_len != len) return -FI_EINVAL;
      if (req.atomic_kind == xport::AtomicKind::kCompare && compare_len != len) {
        return -FI_EINVAL;
      }
      break;
    }
  }
  TxOp* op = nullptr;
  Connection* conn = nullptr;  // RDM: borrowed (borrowed_) until submitted
  bool fresh = false;          // RDM: a new connection, to be connected once mu_ is released
  sockaddr_in peer{};
  std::vector<std::unique_ptr<Connection>> dead;  // freed once mu_ is released
  FaultAction action;
  std::vector<uint32_t> cq_events;
  Cq* tx_cq = nullptr;            // fixed once enabled
  xport::RdmConnectData hello{};  // RDM: what a fresh connection tells its peer
  {
    core::MutexLock lock(mu_);
    if (!enabled_ || failed_) return -FI_EOPBADSTATE;
    // FI_FENCE: a target copies a read longer than a piece as its answer leaves (xport/wire.h),
    // so what it applies meanwhile could change what that read returns. A fenced operation is
    // not posted before such reads of this endpoint have completed.
    if ((req.flags & FI_FENCE) != 0 && long_read_pending_locked()) return -FI_EAGAIN;
    tx_cq = tx_cq_;
    if (!rdm_) {
      conn = conn_.get();
      if (conn == nullptr || !conn->connected()) return -FI_ENOTCONN;
    }
    const bool reserve = tx_cq_ != nullptr && !req.inject_call;
    // A slot of the ring, and of the shared transmit context if one is bound.
    op = tx_ring_.take(reserve);
    if (op == nullptr) return -FI_EAGAIN;
    if (reserve) {
      if (core::Status s = tx_cq_->reserve_transmit(); !s.ok()) {
        tx_ring_.release(op);
        return s.to_fi();
      }
    }
    unsigned char* room = copy ? tx_ring_.inject_room(op, len + compare_len) : nullptr;
    if (copy && room == nullptr) {
      if (reserve) tx_cq_->queue().cancel_reservation(1);
      tx_ring_.release(op);
      return -FI_ENOMEM;
    }
    if (rdm_) {
      int err = 0;
      conn = peer_locked(req.dest, &fresh, &peer, &dead, &err, &hello);
      if (conn == nullptr) {
        if (reserve) tx_cq_->queue().cancel_reservation(1);
        tx_ring_.release(op);
        return err;
      }
      borrowed_.fetch_add(1, std::memory_order_relaxed);
    }
    op->kind = req.kind;
    op->context = req.context;
    op->tagged = req.tagged;
    op->tag = req.tagged ? req.tag : 0;
    op->has_data = req.has_data;
    op->data = req.has_data ? req.data : 0;
    op->report = !req.inject_call && (!tx_selective_ || (req.flags & FI_COMPLETION) != 0);
    op->level = level_of((req.flags & kCompletionLevels) ? req.flags : tx_op_flags_);
    op->conn = conn;
    size_t n = 0;
    switch (req.kind) {
      case TxKind::kSend:
        op->cq_flags = FI_SEND | (req.tagged ? FI_TAGGED : FI_MSG);
        break;
      case TxKind::kWrite:
        op->cq_flags = FI_RMA | FI_WRITE;
        if (req.has_data) {
          xport::put_prefix_u64(op, req.data);
          op->iov[n++] = {op->prefix, sizeof(op->prefix)};
        }
        break;
      case TxKind::kRead:
        op->cq_flags = FI_RMA | FI_READ;
        xport::put_prefix_u64(op, result_len);
        op->iov[n++] = {op->prefix, sizeof(op->prefix)};
        break;
      case TxKind::kAtomic:
        op->cq_flags =
            FI_ATOMIC | (req.atomic_kind == xport::AtomicKind::kPlain ? FI_WRITE : FI_READ);
        xport::put_prefix_atomic(op, static_cast<uint8_t>(req.atomic_op),
                                 static_cast<uint8_t>(req.datatype), req.atomic_kind,
                                 static_cast<uint32_t>(req.count));
        op->iov[n++] = {op->prefix, sizeof(op->prefix)};
        break;
    }
    if (req.kind != TxKind::kSend) {
      // A one-sided operation completes when the target has answered: its data is in the
      // target's memory (or read from it), whatever level was asked for.
      op->level = TxLevel::kDelivery;
      op->key = req.key;
      op->addr = req.addr;
      for (size_t i = 0; i < req.result_count; ++i) op->result[i] = req.result[i];
      op->result_count = req.result_count;
      op->result_len = result_len;
    }
    if (copy) {
      size_t off = 0;
      for (const auto& [iov, count] :
           {std::pair{req.iov, req.iov_count}, std::pair{req.compare, req.compare_count}}) {
        for (size_t i = 0; i < count; ++i) {
          if (iov[i].iov_len > 0) std::memcpy(room + off, iov[i].iov_base, iov[i].iov_len);
          off += iov[i].iov_len;
        }
      }
      if (off > 0) op->iov[n++] = {room, off};
    } else {
      for (size_t i = 0; i < req.iov_count; ++i) op->iov[n++] = req.iov[i];
      for (size_t i = 0; i < req.compare_count; ++i) op->iov[n++] = req.compare[i];
    }
    op->iov_count = n;
    op->len = total_len(op->iov, n);
    action = count_operation();
    if (action.err != 0) {
      // An injected error: the send fails as if the network had refused it.
      if (reserve) {
        cq_events = tx_cq_->complete_error(
            {.completion = {.op_context = req.context, .flags = op->cq_flags},
             .err = action.err,
             .prov_errno = action.prov_errno});
      }
      if (tx_cntr_ != nullptr) tx_cntr_->counter().complete_error();
      tx_ring_.release(op);
      op = nullptr;
    }
  }
  dead.clear();
  raise(domain_, this, action.events);
  raise(domain_, tx_cq, cq_events);
  int rc = op != nullptr ? conn->submit(op) : 0;
  // RDM: a new connection is connected after its first send is queued on it, so that a
  // refusal known at once fails that send like any later one.
  if (fresh) conn->connect(peer, hello.bytes, hello.len);
  if (rdm_) borrowed_.fetch_sub(1, std::memory_order_release);
  if (rc != 0) {
    core::MutexLock lock(mu_);
    if (tx_ring_.reserved(op)) tx_cq_->queue().cancel_reservation(1);
    tx_ring_.release(op);
    // RDM: the connection closed between lookup and submit; the next try makes a new one.
    return rdm_ && rc == -FI_ENOTCONN ? -FI_EAGAIN : rc;
  }
  outbox().publish();
  return 0;
}

ssize_t Endpoint::send_inline(const SendRequest& req, size_t len) {
  // A fault rule counts operations and may drop or damage this one: the ordinary path's.
  if (faults_armed()) return kNotInline;
  Connection* conn = nullptr;
  Cntr* cntr = nullptr;
  Cq* cq = nullptr;  // holds a slot for this send's completion (not an inject's)
  bool report = false;
  {
    core::MutexLock lock(mu_);
    // A higher completion level asks the peer for an acknowledgement, which the completion and
    // the counter wait for (fi_cq(3), fi_cntr(3)): only the default level may skip it.
    const uint64_t level_flags = (req.flags & kCompletionLevels) ? req.flags : tx_op_flags_;
    if (!enabled_ || failed_ || level_of(level_flags) != TxLevel::kInject) return kNotInline;
    cntr = tx_cntr_;
    if (!rdm_) {
      conn = conn_.get();
      if (conn == nullptr || !conn->connected()) return kNotInline;
    } else {
      // A route is made only for an fi_addr_t the AV accepted (peer_locked()); while nothing was
      // ever removed from the AV, it still names the same peer.
      if (av_ == nullptr || req.dest >= route_.size() || route_[req.dest] == 0) return kNotInline;
      sockaddr_in sa{};
      if (av_->ever_removed() && !av_->lookup(req.dest, &sa)) return kNotInline;
      const Peer& q = peers_[route_[req.dest] - 1];
      conn = q.conn != nullptr ? q.conn.get() : q.in;
      if (conn == nullptr || !conn->open()) return kNotInline;
    }
    if (!req.inject_call && tx_cq_ != nullptr) {
      // The slot the ordinary path would take; with none free, that path says so.
      if (!tx_cq_->reserve_transmit().ok()) return kNotInline;
      cq = tx_cq_;
      report = !tx_selective_ || (req.flags & FI_COMPLETION) != 0;
    }
    if (rdm_) borrowed_.fetch_add(1, std::memory_order_relaxed);
  }
  const xport::InlineResult r = conn->send_inline({.iov = req.iov,
                                                   .iov_count = req.iov_count,
                                                   .len = len,
                                                   .tagged = req.tagged,
                                                   .tag = req.tag,
                                                   .has_data = req.has_data,
                                                   .data = req.data});
  if (rdm_) borrowed_.fetch_sub(1, std::memory_order_release);
  if (r != xport::InlineResult::kSent) {
    if (cq != nullptr) cq->queue().cancel_reservation(1);
    outbox().publish();  // what the connection found wrong with its ring, if it did
    return kNotInline;
  }
  // Its bytes are in the ring, where the receiver takes them: what the default level
  // (FI_INJECT_COMPLETE) waits for, so it completes now, as the ordinary path would once the
  // ring took them.
  if (cq != nullptr) {
    if (report) {
      raise(domain_, cq,
            cq->complete(
                {.op_context = req.context, .flags = FI_SEND | (req.tagged ? FI_TAGGED : FI_MSG)}));
    } else {
      cq->queue().cancel_reservation(1);
    }
  }
  // fi_cntr(3): an inject's success is counted like any send's.
  if (cntr != nullptr) cntr->counter().complete();
  return 0;
}

ssize_t Endpoint::send_dgram(const SendRequest& req, size_t len) {
  // Datagrams carry messages: fi_getinfo offers no tags and no one-sided operations on them.
  if (req.kind != TxKind::kSend || req.tagged) return -FI_EOPNOTSUPP;
  const bool copy = req.inject_call || (req.flags & FI_INJECT) != 0;
  if (len > limits_.max(OpLimits::Kind::kMsg)) return -FI_EMSGSIZE;
  if (copy && len > limits_.inject(OpLimits::Kind::kMsg)) return -FI_EMSGSIZE;
  // Nothing acknowledges a datagram: a send completes once the kernel has it, and no completion
  // can say it was delivered.
  const uint64_t level_flags = (req.flags & kCompletionLevels) ? req.flags : tx_op_flags_;
  if (level_of(level_flags) == TxLevel::kDelivery) return -FI_EINVAL;
  xport::Datagram* sock = nullptr;
  sockaddr_in to{};
  Cq* cq = nullptr;  // holds a slot for this send's completion (not an inject's)
  Cntr* cntr = nullptr;
  bool report = false;
  {
    core::MutexLock lock(mu_);
    if (!enabled_ || failed_) return -FI_EOPBADSTATE;
    if (Mc::is_mc_addr(req.dest)) {
      auto it = std::find_if(mcs_.begin(), mcs_.end(),
                             [&](const Mc* m) { return m->addr() == req.dest; });
      if (it == mcs_.end() || !(*it)->sends()) return -FI_EINVAL;
      to = (*it)->group();
    } else if (av_ == nullptr || !av_->lookup(req.dest, &to)) {
      return -FI_EINVAL;
    }
    sock = dgram_sock_.get();
    cntr = tx_cntr_;
    if (!req.inject_call && tx_cq_ != nullptr) {
      if (core::Status st = tx_cq_->reserve_transmit(); !st.ok()) return st.to_fi();
      cq = tx_cq_;
      report = !tx_selective_ || (req.flags & FI_COMPLETION) != 0;
    }
  }
  const uint64_t cq_flags = FI_SEND | FI_MSG;
  const FaultAction action = count_operation();
  raise(domain_, this, action.events);
  if (action.err != 0) {
    // An injected error: the send fails as if the network had refused it.
    if (cq != nullptr) {
      raise(domain_, cq,
            cq->complete_error({.completion = {.op_context = req.context, .flags = cq_flags},
                                .err = action.err,
                                .prov_errno = action.prov_errno}));
    }
    if (cntr != nullptr) cntr->counter().complete_error();
    return 0;
  }
  core::NetFault fault = core::NetFault::kNone;
  if (faults_armed()) {
    if (AsyncTarget::take_net_fault(core::NetFault::kDrop)) {
      fault = core::NetFault::kDrop;
    } else if (AsyncTarget::take_net_fault(core::NetFault::kCorrupt)) {
      fault = core::NetFault::kCorrupt;
    }
  }
  const int rc = sock->send(to,
                            {.iov = req.iov,
                             .iov_count = req.iov_count,
                             .len = len,
                             .has_data = req.has_data,
                             .data = req.data},
                            fault);
  if (rc != 0) {
    if (cq != nullptr) cq->queue().cancel_reservation(1);
    return rc;
  }
  if (cq != nullptr) {
    if (report) {
      raise(domain_, cq, cq->complete({.op_context = req.context, .flags = cq_flags}));
    } else {
      cq->queue().cancel_reservation(1);
    }
  }
  if (cntr != nullptr) cntr->counter().complete();
  return 0;
}

int Endpoint::join(const void* addr, uint64_t flags, fid_mc** out, void* context) {
  if (out != nullptr) *out = nullptr;
  if (addr == nullptr || out == nullptr) return -FI_EINVAL;
  if (!dgram_ || (caps_ & FI_MULTICAST) == 0) return -FI_EOPNOTSUPP;
  if (flags != 0 && flags != FI_SEND && flags != FI_RECV) return -FI_EBADFLAGS;
  // fi_getinfo(3): an endpoint that names neither direction has both.
  const bool both = (caps_ & (FI_SEND | FI_RECV)) == 0;
  const bool sends = flags != FI_RECV && (both || (caps_ & FI_SEND) != 0);
  const bool receives = flags != FI_SEND && (both || (caps_ & FI_RECV) != 0);
  // fi_cm(3): joining for a direction the endpoint lacks is an error.
  if ((flags == FI_SEND && !sends) || (flags == FI_RECV && !receives)) return -FI_EINVAL;
  sockaddr_in group;
  std::memcpy(&group, addr, sizeof(group));
  if (group.sin_family != AF_INET || !IN_MULTICAST(ntohl(group.sin_addr.s_addr)) ||
      group.sin_port == 0) {
    return -FI_EINVAL;
  }
  xport::Datagram* sock = nullptr;
  Eq* eq = nullptr;
  uint64_t id = 0;
  {
    core::MutexLock lock(mu_);
    if (!enabled_ || failed_) return -FI_EOPBADSTATE;
    if (eq_ == nullptr) return -FI_ENOEQ;
    sock = dgram_sock_.get();
    eq = eq_;
    id = next_mc_id_++;
  }
  // An EQ with no room for the outcome fails the join before it joins anything; one that
  // fills meanwhile, below.
  if (eq->queue().overrun()) return -FI_EOVERRUN;
  if (eq->queue().pending() >= eq->queue().capacity()) return -FI_EAGAIN;
  Mc* mc = make_object<Mc>(this, group, id, sends, context);
  if (mc == nullptr) return -FI_ENOMEM;
  int err = 0;
  if (AsyncTarget::take_net_fault(core::NetFault::kReject)) {
    err = FI_ECONNREFUSED;  // injected: refused as a network that forbids the group would
  } else if (AsyncTarget::take_net_fault(core::NetFault::kTimeout)) {
    err = FI_ETIMEDOUT;  // injected: as a join that never gets its answer
  } else if (receives) {
    std::unique_ptr<xport::Membership> m = sock->join(group, &err);
    if (m != nullptr) {
      mc->set_membership(std::move(m));
    } else {
      err = -err;
    }
  }
  if (err == 0) {
    core::MutexLock lock(mu_);
    mcs_.push_back(mc);
  }
  // The outcome goes on the EQ before fi_join returns; the application reads it afterwards. An
  // EQ another producer filled since the look above gets none: the join is undone (the group
  // left) and fails as if the EQ had been found full, so the EQ never overruns for it.
  fid_t fid = &mc->handle()->fid;
  core::Status written;
  if (err == 0) {
    const fi_eq_entry entry{.fid = fid, .context = context, .data = 0};
    written = eq->queue().write_leaving(0, FI_JOIN_COMPLETE, &entry, sizeof(entry)).status();
  } else {
    core::EqError e{};
    e.fid = fid;
    e.context = context;
    e.err = err;
    written = eq->queue().write_error_leaving(0, e);
  }
  if (!written.ok()) {
    (void)fi_close(fid);
    return written.to_fi();
  }
  *out = mc->handle();
  return 0;
}

void Endpoint::leave(const Mc* mc) {
  core::MutexLock lock(mu_);
  std::erase(mcs_, mc);
}

Endpoint::Peer& Endpoint::peer_entry_locked(const sockaddr_in& sa, uint32_t rx) {
  auto same = std::find_if(peers_.begin(), peers_.end(), [&sa, rx](const Peer& q) {
    return q.to.sin_addr.s_addr == sa.sin_addr.s_addr && q.to.sin_port == sa.sin_port && q.rx == rx;
  });
  if (same != peers_.end()) return *same;
  // An entry no fi_addr_t routes to and no connection uses any more (a peer that connected to
  // this endpoint and left) is taken again: peers that announce ever new names must not grow
  // the list for good.
  auto free = std::find_if(peers_.begin(), peers_.end(), [](const Peer& q) {
    return !q.routed && q.conn == nullptr && q.in == nullptr;
  });
  if (free != peers_.end()) {
    *free = Peer{.to = sa, .rx = rx};
    return *free;
  }
  return *peers_.insert(peers_.end(), Peer{.to = sa, .rx = rx});
}

Connection* Endpoint::peer_locked(fi_addr_t dest, bool* fresh, sockaddr_in* peer,
                                  std::vector<std::unique_ptr<Connection>>* dead, int* err,
                                  xport::RdmConnectData* hello) {
  sockaddr_in sa{};
  const Av::RxAddr to = av_ != nullptr ? av_->split(dest) : Av::RxAddr{dest, 0};
  if (av_ == nullptr || !av_->lookup(to.entry, &sa)) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  Peer* found = nullptr;
  if (to.rx == 0) {
    if (dest >= route_.size()) route_.resize(dest + 1, 0);
    // First send to this fi_addr_t: the connection of another name of the same address, if any.
    if (route_[dest] == 0) {
      Peer& entry = peer_entry_locked(sa, 0);
      entry.routed = true;
      route_[dest] = static_cast<uint32_t>(&entry - peers_.data()) + 1;
    }
    found = &peers_[route_[dest] - 1];
  } else {
    found = &peer_entry_locked(sa, to.rx);  // fi_rx_addr: the few a scalable peer has
  }
  Peer& q = *found;
  if (q.conn != nullptr) {
    if (q.conn->open()) return q.conn.get();
  } else if (q.in != nullptr && q.in->open()) {
    return q.in;  // the peer's connection to this endpoint, up before this one sent to it
  }
  // The connection it sent through closed (its sends were failed then). Another thread may
  // still be submitting to one, or a buffered message that came through it owe its sender an
  // acknowledgement: it is freed once neither holds.
  if (q.in != nullptr && !q.in->open()) q.in = nullptr;  // the listener frees it
  if (q.conn != nullptr) {
    std::erase(stalled_, q.conn.get());
    retired_.push_back(std::move(q.conn));
  }
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (unreferenced_locked(it->get())) {
      dead->push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
  if (q.in != nullptr) return q.in;
  // The name a new connection carries: a context's is its scalable endpoint's, once enabled
  // (asked only here, so a send through an open connection takes no other lock).
  sockaddr_in name = rdm_name_;
  if (ctx_.sep != nullptr && !ctx_.sep->name(&name)) {
    *err = -FI_EOPBADSTATE;
    return nullptr;
  }
  q.conn = domain_->fabric()->transport()->make_connection(this, conn_params_locked());
  *peer = sa;
  *fresh = true;
  *hello = xport::rdm_connect_data(name, to.rx, ctx_.role == EpRole::kTxContext);
  return q.conn.get();
}

void Endpoint::finish_send(TxOp* op, int err, std::vector<uint32_t>* events,
                           xport::RmaStatus status) {
  const bool reserved = tx_ring_.reserved(op);
  const bool report = op->report;
  const core::Completion c{.op_context = op->context, .flags = op->cq_flags};
  // fi_ep_bind(3) counters: sends; writes and atomics; reads and fetching atomics.
  Cntr* cntr = op->kind == TxKind::kSend                                    ? tx_cntr_
               : op->kind == TxKind::kRead || (op->cq_flags & FI_READ) != 0 ? read_cntr_
                                                                            : write_cntr_;
  // The slot (and its shared transmit context's) first: a thread that reads the completion
  // or the counter, which it may do without this endpoint's lock, finds it free.
  tx_ring_.release(op);
  if (reserved) {
    std::vector<uint32_t> more;
    if (err != 0) {
      more = tx_cq_->complete_error(
          {.completion = c, .err = err, .prov_errno = static_cast<int>(status)});
    } else if (report) {
      more = tx_cq_->complete(c);
    } else {
      tx_cq_->queue().cancel_reservation(1);
    }
    events->insert(events->end(), more.begin(), more.end());
  }
  if (cntr != nullptr) {
    if (err != 0) {
      cntr->counter().complete_error();
    } else {
      cntr->counter().complete();
    }
  }
}

void Endpoint::tx_written(TxOp* op) {
  std::vector<uint32_t> events;
  {
    core::MutexLock lock(mu_);
    // A direct send's buffers are read by its receiver after this: it ends at its acknowledgement.
    if (op->level == TxLevel::kInject && op->kind == TxKind::kSend && !op->direct) {
      finish_send(op, 0, &events);
    } else {
      tx_ring_.mark_written(op);
    }
    outbox().add(domain_, tx_cq_, events);
  }
}

void Endpoint::tx_lost(TxOp* op, int err) {
  std::vector<uint32_t> events;
  {
    core::MutexLock lock(mu_);
    finish_send(op, op->level == TxLevel::kInject && op->kind == TxKind::kSend ? 0 : err, &events);
    outbox().add(domain_, tx_cq_, events);
  }
}

bool Endpoint::tx_acked(const Connection* c, uint32_t seq, bool delivered) {
  std::vector<uint32_t> events;
  {
    core::MutexLock lock(mu_);
    TxOp* op = tx_ring_.find_written(seq);
    if (op == nullptr || op->conn != c || op->kind != TxKind::kSend) return false;
    const TxLevel want = delivered ? TxLevel::kDelivery : TxLevel::kTransmit;
    const bool direct_inject = op->direct && op->level == TxLevel::kInject && !delivered;
    if (op->level != want && !direct_inject) return false;
    finish_send(op, 0, &events);
    outbox().add(domain_, tx_cq_, events);
  }
  return true;
}

bool Endpoint::rma_acked(const Connection* c, uint32_t seq, xport::RmaStatus status) {
  std::vector<uint32_t> events;
  core::MutexLock lock(mu_);
  TxOp* op = tx_ring_.find_written(seq);
  if (op == nullptr || op->conn != c || op->kind != TxKind::kWrite) return false;
  finish_send(op, rma_error(status), &events, status);
  outbox().add(domain_, tx_cq_, events);
  return true;
}

bool Endpoint::place_answer_locked(const Incoming& in, Placement* p) {
  PlaceRecord& rec = p->as<PlaceRecord>();
  TxOp* op = tx_ring_.find_written(in.seq);
  const TxKind want = in.kind == xport::InKind::kReadResp ? TxKind::kRead : TxKind::kAtomic;
  if (op == nullptr || op->conn != in.via || op->kind != want || in.direct != op->direct ||
      !answer_fits(*op, in)) {
    p->bad = true;
    return true;
  }
  rec.kind = PlaceRecord::Kind::kAnswer;
  rec.op = op;
  for (size_t i = 0; i < op->result_count; ++i) p->iov[i] = op->result[i];
  p->iov_count = op->result_count;
  p->capacity = static_cast<size_t>(in.offset) + in.len;
  return true;
}

bool Endpoint::long_read_pending_locked() {
  const size_t piece = params().rma_read_piece;
  for (size_t i = 0; i < tx_ring_.size(); ++i) {
    const TxOp* op = tx_ring_.taken(i);
    if (op != nullptr && op->kind == TxKind::kRead && op->result_len > piece) return true;
  }
  return false;
}

bool Endpoint::grants(uint64_t remote_access) const {
  constexpr uint64_t kRoles = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if ((caps_ & (FI_RMA | FI_ATOMIC)) == 0) return false;
  // fi_getinfo(3): naming none of the roles grants them all.
  return (caps_ & kRoles) == 0 || (caps_ & remote_access) == remote_access;
}

void Endpoint::refused_locked(xport::RmaStatus status) {
  if (!rdm_) {
    outbox().add(domain_, this, FI_FABQ_EVENT_EP_ACCESS_ERR);
    return;
  }
  FABQ_WARN(FI_LOG_EP_DATA, "refused a peer's one-sided request: status %d\n",
            static_cast<int>(status));
}

bool Endpoint::place_write_locked(const Incoming& in, Placement* p) {
  PlaceRecord& rec = p->as<PlaceRecord>();
  rec.kind = PlaceRecord::Kind::kRemoteWrite;
  rec.use = {};
  rec.cq_slot = false;
  rec.cq_data = 0;
  const size_t prefix = in.has_data ? sizeof(rec.cq_data) : 0;
  if (in.len < prefix) {
    p->bad = true;
    return true;
  }
  const size_t len = in.len - prefix;
  if (prefix != 0) p->iov[p->iov_count++] = {&rec.cq_data, prefix};
  p->capacity = prefix;
  xport::RmaStatus status = xport::RmaStatus::kTargetFailed;
  if (!failed_ && !closing_) {
    status = grants(FI_REMOTE_WRITE)
                 ? domain_->acquire_region(in.key, in.addr, len, FI_REMOTE_WRITE, this, &rec.use)
                 : xport::RmaStatus::kNotGranted;
  }
  p->status = status;
  if (status != xport::RmaStatus::kOk) return true;  // read and dropped, then refused
  // The completion of its CQ data on the receive CQ needs a slot: with none free the write
  // waits at its connection, as a message does.
  if (in.has_data && rx_cq() != nullptr) {
    if (!rx_slot(rx_cq())) {
      release_region(std::exchange(rec.use.region, nullptr));
      rec.kind = PlaceRecord::Kind::kNone;
      p->iov_count = 0;
      p->capacity = 0;
      retry_ = true;
      return stall_locked(in);
    }
    rec.cq_slot = true;
  }
  if (len > 0) p->iov[p->iov_count++] = {rec.use.at, len};
  p->capacity = in.len;
  return true;
}

void Endpoint::wrote_locked(const Incoming& in, PlaceRecord& rec, std::vector<uint32_t>* events) {
  const size_t len = in.len - (in.has_data ? sizeof(rec.cq_data) : 0);
  if (rec.use.cntr != nullptr) rec.use.cntr->counter().complete();
  release_region(std::exchange(rec.use.region, nullptr));
  if (rem_write_cntr_ != nullptr) rem_write_cntr_->counter().complete();
  if (!rec.cq_slot) return;
  rec.cq_slot = false;
  Cq* cq = rx_cq();
  core::Completion c{.flags = FI_RMA | FI_REMOTE_WRITE, .len = len};
  if (in.has_data) {
    c.flags |= FI_REMOTE_CQ_DATA;
    c.data = rec.cq_data;
  }
  if (source_) c.src_addr = source_of(in);
  std::vector<uint32_t> more = cq->complete(c);
  events->insert(events->end(), more.begin(), more.end());
}

xport::RmaStatus Endpoint::remote_access(const xport::RemoteAccess& a, void* out) {
  {
    core::MutexLock lock(mu_);
    if (failed_ || closing_) return xport::RmaStatus::kTargetFailed;
  }
  // The rest reads what is fixed once the endpoint is enabled, and copies without holding the
  // endpoint's lock: a large read must not stall the application's posts.
  const bool fetch = a.atomic && a.kind != xport::AtomicKind::kPlain;
  const uint64_t need = a.atomic  ? FI_REMOTE_WRITE | (fetch ? FI_REMOTE_READ : 0)
                        : a.write ? FI_REMOTE_WRITE
                                  : FI_REMOTE_READ;
  RegionUse use;
  xport::RmaStatus status = xport::RmaStatus::kNotGranted;
  if (a.atomic && !core::atomic_valid(a.kind, a.op, a.datatype)) {
    status = xport::RmaStatus::kBadAtomic;
  } else if (grants(need)) {
    status = domain_->acquire_region(a.key, a.addr, a.len, need, this, &use);
  }
  if (status != xport::RmaStatus::kOk) {
    core::MutexLock lock(mu_);
    refused_locked(status);
    return status;
  }
  if (a.part == xport::AccessPart::kCheck) {
    release_region(use.region);
    return xport::RmaStatus::kOk;
  }
  if (a.direct != nullptr) {
    if (!a.direct->copy(use.at)) {
      const int err = errno;
      release_region(use.region);
      FABQ_WARN(FI_LOG_EP_DATA, "a direct copy with the initiator failed: %s\n", strerror(err));
      return xport::RmaStatus::kCopyFailed;
    }
  } else if (!a.atomic) {
    if (a.len > 0) std::memcpy(out, use.at, a.len);
  } else {
    core::atomic_apply(a.kind, a.op, a.datatype, use.at, a.operand, a.compare,
                       fetch ? out : nullptr, a.count);
  }
  // An atomic counts as a write at the target (fetching or not), a read as a read: once, when
  // its last piece is copied.
  const bool done = a.part == xport::AccessPart::kWhole || a.part == xport::AccessPart::kLast;
  if (done && use.cntr != nullptr) use.cntr->counter().complete();
  release_region(use.region);
  Cntr* ep_cntr = a.atomic || a.write ? rem_write_cntr_ : rem_read_cntr_;
  if (done && ep_cntr != nullptr) ep_cntr->counter().complete();
  return xport::RmaStatus::kOk;
}

void Endpoint::abort_sends(Connection* c, int err) {
  std::vector<uint32_t> events;
  {
    core::MutexLock lock(mu_);
    // Only what `c` took: a send still on its way into submit() (this runs under c's lock,
    // as submit() does) fails there and is freed by its poster.
    for (size_t i = 0; i < tx_ring_.size(); ++i) {
      TxOp* op = tx_ring_.taken(i);
      if (op != nullptr && op->conn == c && op->accepted) finish_send(op, err, &events);
    }
    outbox().add(domain_, tx_cq_, events);
  }
}

// --- connection events

xport::ConnParams Endpoint::conn_params_locked() const {
  return {.rdm = rdm_, .max_msg_size = max_msg_size_, .src = src_, .auth = auth_key()};
}

void Endpoint::cm_event(const CmEvent& e) {
  if (Eq* q = eq()) {
    (void)q->write_cm(
        {.fid = &box_.fid.fid, .event = e.event, .err = e.err, .data = e.data, .len = e.len});
  }
}

void Endpoint::async_event(uint32_t type) {
  outbox().add(domain_, this, type);
}

}  // namespace fabq::prov
