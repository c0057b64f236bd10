#include "prov/fabric.h"

#include <algorithm>

#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/events.h"
#include "prov/getinfo.h"
#include "prov/noop.h"
#include "prov/pep.h"
#include "prov/provider.h"
#include "prov/wait_set.h"

namespace fabq::prov {

struct FabricOps {
  static int close(fid* f) { return close_object(Fabric::from_fid(f)); }

  // fi_trywait(3): 0 when every object is quiet and armed, -FI_EAGAIN as soon as one has
  // something to read. Objects without a wait object: -FI_ENOSYS; foreign fids: -FI_EINVAL.
  //
  // With a transport, it first moves what the sockets hold; once it returns 0 the transport
  // keeps moving bytes while the application sleeps on the fds, until it reads those objects
  // again (xport/transport.h).
  static int trywait(fid_fabric* f, fid** fids, int count) {
    Fabric* fabric = Fabric::from_fid(f != nullptr ? &f->fid : nullptr);
    if (fabric == nullptr) return -FI_EINVAL;
    if (count < 0 || (count > 0 && fids == nullptr)) return -FI_EINVAL;
    progress(fabric);
    for (int i = 0; i < count; ++i) {
      core::Status s;
      if (Eq* eq = Eq::from_fid(fids[i])) {
        s = eq->queue().try_wait();
      } else if (Cq* cq = Cq::from_fid(fids[i])) {
        s = cq->queue().try_wait();
      } else if (Cntr* c = Cntr::from_fid(fids[i])) {
        s = c->counter().try_wait();
      } else if (WaitSet* w = WaitSet::from_fid(fids[i])) {
        s = w->core().try_wait();
      } else {
        return -FI_EINVAL;
      }
      if (!s.ok()) return s.to_fi();
    }
    for (int i = 0; i < count; ++i) {
      if (Eq* eq = Eq::from_fid(fids[i])) {
        eq->external().arm(fabric);
      } else if (Cq* cq = Cq::from_fid(fids[i])) {
        cq->external().arm(fabric);
      } else if (Cntr* c = Cntr::from_fid(fids[i])) {
        c->external().arm(fabric);
      } else if (WaitSet* w = WaitSet::from_fid(fids[i])) {
        w->external().arm(fabric);
      }
    }
    return 0;
  }

  static int domain2(fid_fabric* f, fi_info* info, fid_domain** dom, uint64_t flags,
                     void* context) {
    if (dom != nullptr) *dom = nullptr;
    if (flags != 0) return -FI_EBADFLAGS;
    return open_domain(f, info, dom, context);
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = no_bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_fabric fabric_ops_ = {
      .size = sizeof(fi_ops_fabric),
      .domain = open_domain,
      .passive_ep = open_passive_ep,
      .eq_open = open_eq,
      .wait_open = open_wait_set,
      .trywait = trywait,
      .domain2 = domain2,
  };
};

Fabric* Fabric::from_fid(const fid* f) {
  return Object::from<Fabric, fid_fabric>(f, FI_CLASS_FABRIC, &FabricOps::fi_ops_);
}

Fabric::Fabric(const fi_fabric_attr& attr, void* context)
    : Object(FI_CLASS_FABRIC, nullptr),
      name_(attr.name),
      api_(attr.api_version),
      budget_(
          params().unexpected_total_bytes,
          [](void* fabric) { static_cast<Fabric*>(fabric)->room_given(); }, this) {
  init_fid(&box_.fid.fid, FI_CLASS_FABRIC, context, &FabricOps::fi_ops_);
  box_.fid.ops = &FabricOps::fabric_ops_;
  box_.fid.api_version = attr.api_version;
  box_.owner = this;
}

Fabric::~Fabric() {
  delete transport_.load(std::memory_order_acquire);
}

void Fabric::wait_for_room(Endpoint* ep) {
  core::MutexLock lock(room_mu_);
  if (std::find(room_waiters_.begin(), room_waiters_.end(), ep) == room_waiters_.end()) {
    room_waiters_.push_back(ep);
  }
}

void Fabric::forget_room(Endpoint* ep) {
  core::MutexLock lock(room_mu_);
  std::erase(room_waiters_, ep);
}

void Fabric::room_given() {
  room_given_.store(true, std::memory_order_seq_cst);
  // A round follows soon, and resumes them after it, if nobody reads a CQ first.
  if (Transport* t = transport_if_any()) t->wake();
}

void Fabric::resume_room_waiters_slow() {
  std::vector<Endpoint*> eps;
  {
    core::MutexLock lock(room_mu_);
    // Room given after this exchange finds the waiters registered since in the list.
    if (!room_given_.exchange(false, std::memory_order_acq_rel)) return;
    eps.swap(room_waiters_);
    // Held while resumed: a closing endpoint forgets itself under room_mu_, then waits for
    // its borrowers.
    for (Endpoint* ep : eps) ep->borrow();
  }
  for (Endpoint* ep : eps) {
    ep->resume_if_stalled();
    ep->unborrow();
  }
}

namespace {

TransportFactory g_factory = nullptr;

void log_transport(xport::LogLevel level, const char* message) {
  if (level == xport::LogLevel::kWarn) {
    FABQ_WARN(FI_LOG_EP_CTRL, "%s", message);
  } else {
    FABQ_INFO(FI_LOG_EP_CTRL, "%s", message);
  }
}

}  // namespace

void set_transport_factory(TransportFactory factory) {
  g_factory = factory;
}

Transport* Fabric::transport() {
  if (Transport* t = transport_if_any()) return t;
  core::MutexLock lock(transport_mu_);
  Transport* t = transport_.load(std::memory_order_relaxed);
  if (t == nullptr) {
    const Params& p = params();
    const xport::TransportConfig config{
        .connect_timeout_ms = p.connect_timeout_ms,
        .keepalive_ms = p.keepalive_ms,
        .shm = p.shm != 0,
        .direct_min = p.shm_direct_min,
        .direct_msg_min = p.shm_direct_msg_min,
        .direct_msg_idle_min = p.shm_direct_msg_idle_min,
        .share_min = p.shm_share_min,
        .adapt_copies = p.shm_adapt != 0,
        .cm_backlog = p.cm_backlog,
        .read_piece = p.rma_read_piece,
        .dgram_senders = p.dgram_senders,
        .inbound_max = p.inbound_max,
        // Holding none of the transport's locks, nor the provider's (xport/transport.h).
        .after_round =
            [](void* arg) {
              auto* fabric = static_cast<Fabric*>(arg);
              fabric->outbox().publish();
              fabric->resume_room_waiters();
            },
        .after_round_arg = this,
        .log = log_transport,
    };
    t = g_factory(config).release();
    transport_.store(t, std::memory_order_release);
  }
  return t;
}

void progress(Fabric* fabric) {
  if (Transport* t = fabric->transport_if_any()) t->progress();
}

BlockingScope::BlockingScope(Fabric* fabric) : transport_(fabric->transport_if_any()) {
  if (transport_ != nullptr) transport_->begin_wait();
}

BlockingScope::~BlockingScope() {
  if (transport_ != nullptr) transport_->end_wait();
}

ExternalWait::~ExternalWait() {
  disarm();
}

void ExternalWait::arm(Fabric* fabric) {
  Transport* t = fabric->transport_if_any();
  if (t == nullptr) return;
  Transport* none = nullptr;
  if (armed_.compare_exchange_strong(none, t, std::memory_order_acq_rel)) t->begin_wait();
}

void ExternalWait::disarm() {
  if (armed_.load(std::memory_order_relaxed) == nullptr) [[likely]]
    return;
  if (Transport* t = armed_.exchange(nullptr, std::memory_order_acq_rel)) t->end_wait();
}

bool Fabric::acquire_eq_slot() {
  if (eqs_.fetch_add(1, std::memory_order_relaxed) >= params().eq_max_count) {
    eqs_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

int open_fabric(fi_fabric_attr* attr, fid_fabric** out, void* context) {
  if (out != nullptr) *out = nullptr;
  if (attr == nullptr || out == nullptr || attr->name == nullptr) return -FI_EINVAL;
  if (!fabric_exists(attr->name)) {
    FABQ_WARN(FI_LOG_FABRIC, "fi_fabric: no fabric named %s\n", attr->name);
    return -FI_ENODATA;
  }
  Fabric* fabric = make_object<Fabric>(*attr, context);
  if (fabric == nullptr) return -FI_ENOMEM;
  *out = fabric->handle();
  return 0;
}

}  // namespace fabq::prov
