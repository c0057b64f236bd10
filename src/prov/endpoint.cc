#include "prov/endpoint.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>

#include <algorithm>

#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/noop.h"
#include "prov/provider.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kCqBindFlags = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION;
constexpr uint64_t kCntrBindFlags =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// The single buffer of an iov list the endpoint can take now: fabq posts contiguous receives
// until the transport scatters; more than one element with data is -FI_EINVAL.
bool single_buffer(const iovec* iov, size_t count, size_t limit, void** buf, size_t* len) {
  if (count > limit || (count > 0 && iov == nullptr)) return false;
  *buf = nullptr;
  *len = 0;
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_len == 0) continue;
    if (*len != 0) return false;
    *buf = iov[i].iov_base;
    *len = iov[i].iov_len;
  }
  return true;
}

core::CompletionError recv_error(const PostedRecv& r, int err, int prov_errno) {
  return {.completion = {.op_context = r.context, .flags = FI_RECV | FI_MSG, .buf = r.buf},
          .olen = 0,
          .err = err,
          .prov_errno = prov_errno};
}

}  // namespace

// What endpoints and SRX contexts share: closing, posting receives and cancelling them. `T`
// is Endpoint or Srx.
template <class T>
struct Receives {
  static T* of(fid_ep* f) { return T::from_fid(f ? &f->fid : nullptr); }

  static int close(fid* f) { return close_target(T::from_fid(f)); }

  static ssize_t cancel(fid* f, void* context) {
    T* t = T::from_fid(f);
    if (t == nullptr) return -FI_EINVAL;
    return t->cancel(context);
  }

  static ssize_t recv(fid_ep* f, void* buf, size_t len, void*, fi_addr_t, void* context) {
    T* t = of(f);
    if (t == nullptr) return -FI_EINVAL;
    return t->post_recv(buf, len, context);
  }

  static ssize_t recvv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t,
                       void* context) {
    T* t = of(f);
    if (t == nullptr) return -FI_EINVAL;
    void* buf;
    size_t len;
    if (!single_buffer(iov, count, t->iov_limit_, &buf, &len)) return -FI_EINVAL;
    return t->post_recv(buf, len, context);
  }

  static ssize_t recvmsg(fid_ep* f, const fi_msg* msg, uint64_t) {
    T* t = of(f);
    if (t == nullptr || msg == nullptr) return -FI_EINVAL;
    void* buf;
    size_t len;
    if (!single_buffer(msg->msg_iov, msg->iov_count, t->iov_limit_, &buf, &len)) {
      return -FI_EINVAL;
    }
    return t->post_recv(buf, len, msg->context);
  }

  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = cancel,
      .getopt = enosys<fid*, int, int, void*, size_t*>,
      .setopt = enosys<fid*, int, int, const void*, size_t>,
      .tx_ctx = enosys<fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
      .rx_ctx = enosys<fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
      .rx_size_left = enosys_ssize<fid_ep*>,
      .tx_size_left = enosys_ssize<fid_ep*>,
  };
};

struct EpOps {
  using R = Receives<Endpoint>;

  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Endpoint* e = Endpoint::from_fid(f);
    if (e == nullptr || bfid == nullptr) return -FI_EINVAL;
    std::lock_guard lock(e->mu_);
    if (e->enabled_) return -FI_EOPBADSTATE;
    switch (bfid->fclass) {
      case FI_CLASS_EQ: {
        Eq* eq = Eq::from_fid(bfid);
        if (eq == nullptr) return -FI_EINVAL;
        if (flags != 0) return -FI_EBADFLAGS;
        if (e->eq_ != nullptr) return -FI_EBUSY;
        eq->hold();
        e->eq_ = eq;
        return 0;
      }
      case FI_CLASS_CQ: {
        Cq* cq = Cq::from_fid(bfid);
        if (cq == nullptr || cq->domain() != e->domain_) return -FI_EINVAL;
        if ((flags & ~kCqBindFlags) != 0 || (flags & (FI_TRANSMIT | FI_RECV)) == 0) {
          return -FI_EBADFLAGS;
        }
        if (((flags & FI_TRANSMIT) && e->tx_cq_) || ((flags & FI_RECV) && e->rx_cq())) {
          return -FI_EBUSY;
        }
        if (flags & FI_TRANSMIT) {
          cq->hold();
          e->tx_cq_ = cq;
        }
        if (flags & FI_RECV) {
          cq->hold();
          e->rx_cq_.store(cq, std::memory_order_release);
        }
        return 0;
      }
      case FI_CLASS_CNTR: {
        Cntr* c = Cntr::from_fid(bfid);
        if (c == nullptr) return -FI_EINVAL;
        if ((flags & ~kCntrBindFlags) != 0 || flags == 0) return -FI_EBADFLAGS;
        if ((flags & FI_SEND) && e->tx_cntr_ == nullptr) {
          c->hold();
          e->tx_cntr_ = c;
        }
        if ((flags & FI_RECV) && e->rx_cntr_ == nullptr) {
          c->hold();
          e->rx_cntr_ = c;
        }
        return 0;
      }
      case FI_CLASS_SRX_CTX: {
        Srx* srx = Srx::from_fid(bfid);
        if (srx == nullptr || srx->domain() != e->domain_) return -FI_EINVAL;
        if (flags != 0) return -FI_EBADFLAGS;
        if (e->srx_ != nullptr || !e->posted_.empty()) return -FI_EBUSY;
        srx->hold();
        srx->attach(e);
        e->srx_ = srx;
        return 0;
      }
      default:
        return -FI_EINVAL;
    }
  }

  static int control(fid* f, int command, void*) {
    Endpoint* e = Endpoint::from_fid(f);
    if (e == nullptr) return -FI_EINVAL;
    if (command != FI_ENABLE) return -FI_ENOSYS;
    std::lock_guard lock(e->mu_);
    if (e->eq_ == nullptr) return -FI_ENOEQ;
    if (e->rx_cq() == nullptr && e->rx_cntr_ == nullptr && e->srx_ == nullptr) return -FI_ENOCQ;
    e->enabled_ = true;
    return 0;
  }

  // Until the transport connects endpoints, there is no peer to send to.
  template <class... Args>
  static ssize_t not_connected(fid_ep* f, Args...) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    std::lock_guard lock(e->mu_);
    if (e->failed_ || !e->enabled_) return -FI_EOPBADSTATE;
    return -FI_ENOTCONN;
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = R::close,
      .bind = bind,
      .control = control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_cm cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = enosys<fid*, void*, size_t>,
      .getname = enosys<fid*, void*, size_t*>,
      .getpeer = enosys<fid_ep*, void*, size_t*>,
      .connect = enosys<fid_ep*, const void*, const void*, size_t>,
      .listen = enosys<fid_pep*>,
      .accept = enosys<fid_ep*, const void*, size_t>,
      .reject = enosys<fid_pep*, fid_t, const void*, size_t>,
      .shutdown = enosys<fid_ep*, uint64_t>,
      .join = enosys<fid_ep*, const void*, uint64_t, fid_mc**, void*>,
  };
  static inline fi_ops_msg msg_ops_ = {
      .size = sizeof(fi_ops_msg),
      .recv = R::recv,
      .recvv = R::recvv,
      .recvmsg = R::recvmsg,
      .send = not_connected<const void*, size_t, void*, fi_addr_t, void*>,
      .sendv = not_connected<const iovec*, void**, size_t, fi_addr_t, void*>,
      .sendmsg = not_connected<const fi_msg*, uint64_t>,
      .inject = not_connected<const void*, size_t, fi_addr_t>,
      .senddata = not_connected<const void*, size_t, void*, uint64_t, fi_addr_t, void*>,
      .injectdata = not_connected<const void*, size_t, uint64_t, fi_addr_t>,
  };
};

Endpoint* Endpoint::from_fid(const fid* f) {
  return Object::from<Endpoint, fid_ep>(f, FI_CLASS_EP, &EpOps::fi_ops_);
}

Endpoint::Endpoint(Domain* domain, const fi_info& info, void* context)
    : Object(FI_CLASS_EP, domain),
      AsyncTarget(core::FaultTargetKind::kEndpoint, &box_.fid.fid),
      domain_(domain),
      rx_size_(info.rx_attr && info.rx_attr->size ? info.rx_attr->size : 1024),
      iov_limit_(info.rx_attr && info.rx_attr->iov_limit ? info.rx_attr->iov_limit : 4) {
  init_fid(&box_.fid.fid, FI_CLASS_EP, context, &EpOps::fi_ops_);
  box_.fid.ops = &Receives<Endpoint>::ep_ops_;
  box_.fid.cm = &EpOps::cm_ops_;
  box_.fid.msg = &EpOps::msg_ops_;
  box_.owner = this;
  posted_.reserve(rx_size_);
}

Endpoint::~Endpoint() {
  // Receives still posted are dropped with the endpoint (fi_endpoint(3)); their CQ slots return.
  if (Cq* cq = rx_cq(); cq != nullptr && !posted_.empty()) {
    cq->queue().cancel_reservation(posted_.size());
  }
  if (srx_ != nullptr) {
    srx_->detach(this);
    srx_->release();
  }
  for (Object* o :
       {static_cast<Object*>(eq_), static_cast<Object*>(tx_cq_), static_cast<Object*>(rx_cq()),
        static_cast<Object*>(tx_cntr_), static_cast<Object*>(rx_cntr_)}) {
    if (o != nullptr) o->release();
  }
}

Eq* Endpoint::eq() {
  std::lock_guard lock(mu_);
  return eq_;
}

Srx* Endpoint::srx() {
  std::lock_guard lock(mu_);
  return srx_;
}

ssize_t Endpoint::post_recv(void* buf, size_t len, void* context) {
  FaultAction action;
  std::vector<uint32_t> cq_events;
  Cq* cq = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!enabled_ || failed_ || srx_ != nullptr) return -FI_EOPBADSTATE;
    if (posted_.size() >= rx_size_) return -FI_EAGAIN;
    cq = rx_cq();
    if (cq != nullptr) {
      if (core::Status s = cq->queue().reserve(1); !s.ok()) return s.to_fi();
    }
    action = count_operation();
    PostedRecv r{context, buf, len};
    if (action.err != 0) {
      if (cq != nullptr) {
        cq_events = cq->complete_error(recv_error(r, action.err, action.prov_errno));
      }
      if (rx_cntr_ != nullptr) rx_cntr_->counter().add_error(1);
    } else {
      posted_.push_back(r);
    }
  }
  raise(domain_, this, action.events);
  raise(domain_, cq, cq_events);
  return 0;
}

ssize_t Endpoint::cancel(void* context) {
  std::vector<uint32_t> cq_events;
  Cq* cq = nullptr;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(posted_.begin(), posted_.end(),
                           [context](const PostedRecv& r) { return r.context == context; });
    if (it == posted_.end()) return -FI_ENOENT;
    const PostedRecv r = *it;
    posted_.erase(it);
    if ((cq = rx_cq()) != nullptr) cq_events = cq->complete_error(recv_error(r, FI_ECANCELED, 0));
    if (rx_cntr_ != nullptr) rx_cntr_->counter().add_error(1);
  }
  raise(domain_, cq, cq_events);
  return 0;
}

bool Endpoint::fail(uint32_t type) {
  std::vector<uint32_t> cq_events;
  Cq* cq = nullptr;
  {
    std::lock_guard lock(mu_);
    if (failed_) return false;
    failed_ = true;
    cq = rx_cq();
    for (const PostedRecv& r : posted_) {
      if (cq != nullptr) {
        auto more = cq->complete_error(recv_error(r, FI_EIO, static_cast<int>(type)));
        cq_events.insert(cq_events.end(), more.begin(), more.end());
      }
      if (rx_cntr_ != nullptr) rx_cntr_->counter().add_error(1);
    }
    posted_.clear();
  }
  // The caller holds the domain's lock (raise), never ours: CQ events can go out now.
  raise(domain_, cq, cq_events);
  return true;
}

// --- shared receive contexts

struct SrxOps {
  using R = Receives<Srx>;

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = R::close,
      .bind = no_bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_msg msg_ops_ = {
      .size = sizeof(fi_ops_msg),
      .recv = R::recv,
      .recvv = R::recvv,
      .recvmsg = R::recvmsg,
      .send = enosys_ssize<fid_ep*, const void*, size_t, void*, fi_addr_t, void*>,
      .sendv = enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, void*>,
      .sendmsg = enosys_ssize<fid_ep*, const fi_msg*, uint64_t>,
      .inject = enosys_ssize<fid_ep*, const void*, size_t, fi_addr_t>,
      .senddata = enosys_ssize<fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, void*>,
      .injectdata = enosys_ssize<fid_ep*, const void*, size_t, uint64_t, fi_addr_t>,
  };
};

Srx* Srx::from_fid(const fid* f) {
  return Object::from<Srx, fid_ep>(f, FI_CLASS_SRX_CTX, &SrxOps::fi_ops_);
}

Srx::Srx(Domain* domain, const fi_rx_attr& attr, void* context)
    : Object(FI_CLASS_SRX_CTX, domain),
      AsyncTarget(core::FaultTargetKind::kSrx, &box_.fid.fid),
      domain_(domain),
      size_(attr.size ? attr.size : 1024),
      iov_limit_(attr.iov_limit ? attr.iov_limit : 4) {
  init_fid(&box_.fid.fid, FI_CLASS_SRX_CTX, context, &SrxOps::fi_ops_);
  box_.fid.ops = &Receives<Srx>::ep_ops_;
  box_.fid.cm = &EpOps::cm_ops_;
  box_.fid.msg = &SrxOps::msg_ops_;
  box_.owner = this;
  posted_.reserve(size_);
}

std::vector<Endpoint*> Srx::endpoints() {
  std::lock_guard lock(mu_);
  return endpoints_;
}

bool Srx::fail() {
  std::lock_guard lock(mu_);
  return !std::exchange(failed_, true);
}

void Srx::arm_limit(size_t limit) {
  std::lock_guard lock(mu_);
  limit_ = limit;
}

void Srx::attach(Endpoint* ep) {
  std::lock_guard lock(mu_);
  endpoints_.push_back(ep);
}

void Srx::detach(Endpoint* ep) {
  std::lock_guard lock(mu_);
  std::erase(endpoints_, ep);
}

ssize_t Srx::post_recv(void* buf, size_t len, void* context) {
  FaultAction action;
  {
    std::lock_guard lock(mu_);
    if (failed_) return -FI_EOPBADSTATE;
    if (posted_.size() >= size_) return -FI_EAGAIN;
    action = count_operation();
    posted_.push_back({context, buf, len});
  }
  raise(domain_, this, action.events);
  return 0;
}

// A cancelled shared receive is reported on the receive CQ of an endpoint using the SRX:
// fi_endpoint(3) sends an SRX's completions to the CQ of the endpoint that consumed it.
ssize_t Srx::cancel(void* context) {
  bool limit_reached = false;
  {
    std::lock_guard lock(mu_);
    auto it = std::find_if(posted_.begin(), posted_.end(),
                           [context](const PostedRecv& r) { return r.context == context; });
    if (it == posted_.end()) return -FI_ENOENT;
    Cq* cq = nullptr;
    for (Endpoint* ep : endpoints_) {
      if ((cq = ep->rx_cq()) != nullptr) break;
    }
    if (cq == nullptr) return -FI_ENOCQ;
    if (core::Status s = cq->queue().write_error(recv_error(*it, FI_ECANCELED, 0)); !s.ok()) {
      return s.to_fi();  // full: the receive stays posted, nothing is lost
    }
    posted_.erase(it);
    if (limit_ != 0 && posted_.size() < limit_) {
      limit_ = 0;
      limit_reached = true;
    }
  }
  if (limit_reached) raise(domain_, this, FI_FABQ_EVENT_SRX_LIMIT_REACHED);
  return 0;
}

int open_endpoint(fid_domain* domain_fid, fi_info* info, fid_ep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  if (domain->failed()) return -FI_EOPBADSTATE;
  Endpoint* e = make_object<Endpoint>(domain, *info, context);
  if (e == nullptr) return -FI_ENOMEM;
  *out = e->handle();
  domain->register_target(e);
  domain->note_operation();
  return 0;
}

int open_srx(fid_domain* domain_fid, fi_rx_attr* attr, fid_ep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (domain->failed()) return -FI_EOPBADSTATE;
  Srx* s = make_object<Srx>(domain, *attr, context);
  if (s == nullptr) return -FI_ENOMEM;
  *out = s->handle();
  domain->register_target(s);
  domain->note_operation();
  return 0;
}

}  // namespace fabq::prov
