#include "prov/sep.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <cstring>

#include "core/sockaddr.h"
#include "prov/auth.h"
#include "prov/av.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/fabric.h"
#include "prov/noop.h"

namespace fabq::prov {
namespace {

// -FI_ENOSYS for any entry of an op table: a scalable endpoint moves no data itself.
template <class F>
struct Refuse;
template <class R, class... A>
struct Refuse<R (*)(A...)> {
  static R call(A...) { return -FI_ENOSYS; }
};
#define FABQ_REFUSE(table, member) Refuse<decltype(table::member)>::call

}  // namespace

struct SepOps {
  static int close(fid* f) { return close_object(Sep::from_fid(f)); }
  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Sep* s = Sep::from_fid(f);
    if (s == nullptr || bfid == nullptr) return -FI_EINVAL;
    return s->bind(bfid, flags);
  }
  static int control(fid* f, int command, void* arg) {
    Sep* s = Sep::from_fid(f);
    if (s == nullptr) return -FI_EINVAL;
    if (command == FI_GETOPSFLAG || command == FI_SETOPSFLAG) {
      return arg == nullptr ? -FI_EINVAL : -FI_ENOSYS;
    }
    if (command != FI_ENABLE) return -FI_ENOSYS;
    return s->enable();
  }
  static int tx_ctx(fid_ep* f, int index, fi_tx_attr* attr, fid_ep** out, void* context) {
    if (out != nullptr) *out = nullptr;
    Sep* s = Sep::from_fid(f != nullptr ? &f->fid : nullptr);
    if (s == nullptr || out == nullptr) return -FI_EINVAL;
    return s->open_context(true, index, attr, out, context);
  }
  static int rx_ctx(fid_ep* f, int index, fi_rx_attr* attr, fid_ep** out, void* context) {
    if (out != nullptr) *out = nullptr;
    Sep* s = Sep::from_fid(f != nullptr ? &f->fid : nullptr);
    if (s == nullptr || out == nullptr) return -FI_EINVAL;
    return s->open_context(false, index, attr, out, context);
  }
  static int getname(fid* f, void* addr, size_t* addrlen) {
    Sep* s = Sep::from_fid(f);
    if (s == nullptr || addrlen == nullptr) return -FI_EINVAL;
    sockaddr_in name;
    if (!s->name(&name)) {
      core::MutexLock lock(s->mu_);
      name = s->src_;
    }
    return core::copy_sockaddr(name, addr, addrlen);
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = bind,
      .control = control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = enosys_ssize<fid*, void*>,
      .getopt = [](fid*, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; },
      .setopt = [](fid*, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; },
      .tx_ctx = tx_ctx,
      .rx_ctx = rx_ctx,
      .rx_size_left = enosys_ssize<fid_ep*>,
      .tx_size_left = enosys_ssize<fid_ep*>,
  };
  static inline fi_ops_cm cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = enosys<fid*, void*, size_t>,
      .getname = getname,
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
      .recv = FABQ_REFUSE(fi_ops_msg, recv),
      .recvv = FABQ_REFUSE(fi_ops_msg, recvv),
      .recvmsg = FABQ_REFUSE(fi_ops_msg, recvmsg),
      .send = FABQ_REFUSE(fi_ops_msg, send),
      .sendv = FABQ_REFUSE(fi_ops_msg, sendv),
      .sendmsg = FABQ_REFUSE(fi_ops_msg, sendmsg),
      .inject = FABQ_REFUSE(fi_ops_msg, inject),
      .senddata = FABQ_REFUSE(fi_ops_msg, senddata),
      .injectdata = FABQ_REFUSE(fi_ops_msg, injectdata),
  };
  static inline fi_ops_tagged tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = FABQ_REFUSE(fi_ops_tagged, recv),
      .recvv = FABQ_REFUSE(fi_ops_tagged, recvv),
      .recvmsg = FABQ_REFUSE(fi_ops_tagged, recvmsg),
      .send = FABQ_REFUSE(fi_ops_tagged, send),
      .sendv = FABQ_REFUSE(fi_ops_tagged, sendv),
      .sendmsg = FABQ_REFUSE(fi_ops_tagged, sendmsg),
      .inject = FABQ_REFUSE(fi_ops_tagged, inject),
      .senddata = FABQ_REFUSE(fi_ops_tagged, senddata),
      .injectdata = FABQ_REFUSE(fi_ops_tagged, injectdata),
  };
  static inline fi_ops_rma rma_ops_ = {
      .size = sizeof(fi_ops_rma),
      .read = FABQ_REFUSE(fi_ops_rma, read),
      .readv = FABQ_REFUSE(fi_ops_rma, readv),
      .readmsg = FABQ_REFUSE(fi_ops_rma, readmsg),
      .write = FABQ_REFUSE(fi_ops_rma, write),
      .writev = FABQ_REFUSE(fi_ops_rma, writev),
      .writemsg = FABQ_REFUSE(fi_ops_rma, writemsg),
      .inject = FABQ_REFUSE(fi_ops_rma, inject),
      .writedata = FABQ_REFUSE(fi_ops_rma, writedata),
      .injectdata = FABQ_REFUSE(fi_ops_rma, injectdata),
  };
  static inline fi_ops_atomic atomic_ops_ = {
      .size = sizeof(fi_ops_atomic),
      .write = FABQ_REFUSE(fi_ops_atomic, write),
      .writev = FABQ_REFUSE(fi_ops_atomic, writev),
      .writemsg = FABQ_REFUSE(fi_ops_atomic, writemsg),
      .inject = FABQ_REFUSE(fi_ops_atomic, inject),
      .readwrite = FABQ_REFUSE(fi_ops_atomic, readwrite),
      .readwritev = FABQ_REFUSE(fi_ops_atomic, readwritev),
      .readwritemsg = FABQ_REFUSE(fi_ops_atomic, readwritemsg),
      .compwrite = FABQ_REFUSE(fi_ops_atomic, compwrite),
      .compwritev = FABQ_REFUSE(fi_ops_atomic, compwritev),
      .compwritemsg = FABQ_REFUSE(fi_ops_atomic, compwritemsg),
      .writevalid = FABQ_REFUSE(fi_ops_atomic, writevalid),
      .readwritevalid = FABQ_REFUSE(fi_ops_atomic, readwritevalid),
      .compwritevalid = FABQ_REFUSE(fi_ops_atomic, compwritevalid),
  };
};

Sep* Sep::from_fid(const fid* f) {
  return Object::from<Sep, fid_ep>(f, FI_CLASS_SEP, &SepOps::fi_ops_);
}

Sep::Sep(Domain* domain, const fi_info& info, size_t tx, size_t rx, void* context)
    : Object(FI_CLASS_SEP, domain),
      domain_(domain),
      info_(fi_dupinfo(&info)),
      auth_(auth_key_of(info, domain->auth_key())),
      tx_(tx, nullptr),
      rx_(rx, nullptr),
      rx_on_(rx, false) {
  init_fid(&box_.fid.fid, FI_CLASS_SEP, context, &SepOps::fi_ops_);
  box_.fid.ops = &SepOps::ep_ops_;
  box_.fid.cm = &SepOps::cm_ops_;
  box_.fid.msg = &SepOps::msg_ops_;
  box_.fid.tagged = &SepOps::tagged_ops_;
  box_.fid.rma = &SepOps::rma_ops_;
  box_.fid.atomic = &SepOps::atomic_ops_;
  box_.owner = this;
  if (info.src_addr != nullptr && info.src_addrlen >= sizeof(sockaddr_in)) {
    core::MutexLock lock(mu_);
    std::memcpy(&src_, info.src_addr, sizeof(src_));
  }
}

Sep::~Sep() {
  // No context is left (each held the scalable endpoint): the listener's connections are all
  // still its own, unrouted. Destroyed without mu_, a leaf, since that takes the engine lock.
  std::unique_ptr<xport::Listener> listener;
  {
    core::MutexLock lock(mu_);
    listener = std::move(listener_);
  }
  listener.reset();
  core::MutexLock lock(mu_);
  if (av_ != nullptr) av_->release();
  if (info_ != nullptr) fi_freeinfo(info_);
}

int Sep::bind(fid* bfid, uint64_t flags) {
  if (bfid->fclass != FI_CLASS_AV) return -FI_EINVAL;
  Av* av = Av::from_fid(bfid);
  if (av == nullptr || av->domain() != domain_) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  core::MutexLock lock(mu_);
  if (enabled_) return -FI_EOPBADSTATE;
  if (av_ != nullptr) return -FI_EBUSY;
  av->hold();
  av_ = av;
  return 0;
}

int Sep::enable() {
  sockaddr_in at{};
  {
    core::MutexLock lock(mu_);
    if (enabled_) return 0;
    if (av_ == nullptr) return -FI_ENOAV;
    at = src_;
  }
  const xport::ConnParams params{
      .rdm = true,
      .max_msg_size = info_->ep_attr != nullptr && info_->ep_attr->max_msg_size != 0
                          ? info_->ep_attr->max_msg_size
                          : (size_t{1} << 30),
      .src = at,
      .auth = auth_ ? &*auth_ : nullptr,
  };
  // Without mu_: the engine's lock comes first (a leaf must not be held around it).
  int err = 0;
  std::unique_ptr<xport::Listener> listener =
      domain_->fabric()->transport()->open_listener(this, params, at, &err);
  if (listener == nullptr) return err != 0 ? err : -FI_EIO;
  sockaddr_in name{};
  size_t len = sizeof(name);
  listener->getname(&name, &len);
  core::MutexLock lock(mu_);
  if (enabled_) return 0;  // another thread's fi_enable won (this listener has no connection)
  listener_ = std::move(listener);
  name_ = name;
  enabled_ = true;
  return 0;
}

Av* Sep::av() {
  core::MutexLock lock(mu_);
  return av_;
}

bool Sep::name(sockaddr_in* out) {
  core::MutexLock lock(mu_);
  if (!enabled_) return false;
  *out = name_;
  return true;
}

void Sep::context_enabled(const Endpoint* e, uint32_t index) {
  core::MutexLock lock(mu_);
  if (index < rx_.size() && rx_[index] == e) rx_on_[index] = true;
}

xport::Owner* Sep::route(uint32_t rx) {
  core::MutexLock lock(mu_);
  if (rx >= rx_.size() || rx_[rx] == nullptr || !rx_on_[rx]) return nullptr;
  return rx_[rx];
}

void Sep::detach(Endpoint* e) {
  bool receives = false;
  {
    core::MutexLock lock(mu_);
    for (auto* table : {&tx_, &rx_}) {
      for (size_t i = 0; i < table->size(); ++i) {
        if ((*table)[i] != e) continue;
        (*table)[i] = nullptr;
        if (table == &rx_) {
          rx_on_[i] = false;
          receives = true;
        }
      }
    }
  }
  // route() gives it nothing from now on; the connections it was given go (under the engine
  // lock, which the routing of a connection holds too, so none is given it meanwhile). The
  // listener lives as long as the scalable endpoint, which this context holds.
  xport::Listener* listener = nullptr;
  {
    core::MutexLock lock(mu_);
    listener = listener_.get();
  }
  if (receives && listener != nullptr) listener->release(e);
}

int Sep::open_context(bool tx, int index, const void* attr, fid_ep** out, void* context) {
  if (info_ == nullptr) return -FI_ENOMEM;
  fi_info info = *info_;
  fi_tx_attr tx_attr = info_->tx_attr != nullptr ? *info_->tx_attr : fi_tx_attr{};
  fi_rx_attr rx_attr = info_->rx_attr != nullptr ? *info_->rx_attr : fi_rx_attr{};
  if (attr != nullptr) {
    // fi_endpoint(3): a context's attributes may ask for less than the endpoint's, not more.
    if (tx) {
      const auto* a = static_cast<const fi_tx_attr*>(attr);
      if ((a->caps & ~info_->caps) != 0 || a->iov_limit > xport::kMaxIov ||
          a->inject_size > xport::kInjectSize) {
        return -FI_EINVAL;
      }
      tx_attr.caps = a->caps != 0 ? a->caps : tx_attr.caps;
      tx_attr.op_flags = a->op_flags;
      tx_attr.size = a->size != 0 ? a->size : tx_attr.size;
      tx_attr.iov_limit = a->iov_limit != 0 ? a->iov_limit : tx_attr.iov_limit;
    } else {
      const auto* a = static_cast<const fi_rx_attr*>(attr);
      if ((a->caps & ~info_->caps) != 0 || a->iov_limit > xport::kMaxIov) return -FI_EINVAL;
      rx_attr.caps = a->caps != 0 ? a->caps : rx_attr.caps;
      rx_attr.op_flags = a->op_flags;
      rx_attr.size = a->size != 0 ? a->size : rx_attr.size;
      rx_attr.iov_limit = a->iov_limit != 0 ? a->iov_limit : rx_attr.iov_limit;
    }
  }
  info.tx_attr = &tx_attr;
  info.rx_attr = &rx_attr;
  info.src_addr = nullptr;  // a context listens through the scalable endpoint
  info.src_addrlen = 0;
  info.dest_addr = nullptr;
  info.dest_addrlen = 0;
  {
    core::MutexLock lock(mu_);
    std::vector<Endpoint*>& table = tx ? tx_ : rx_;
    if (index < 0 || static_cast<size_t>(index) >= table.size() || table[index] != nullptr) {
      return -FI_EINVAL;
    }
  }
  const EpContext ctx{.sep = this,
                      .role = tx ? EpRole::kTxContext : EpRole::kRxContext,
                      .index = static_cast<uint32_t>(index)};
  Endpoint* e = make_object<Endpoint>(domain_, info, context, ctx);
  if (e == nullptr) return -FI_ENOMEM;
  hold();  // released by the context's destructor
  bool taken = false;
  {
    core::MutexLock lock(mu_);
    std::vector<Endpoint*>& table = tx ? tx_ : rx_;
    taken = table[index] != nullptr;  // another thread opened the same index meanwhile
    if (!taken) table[index] = e;
  }
  if (taken) {
    delete e;  // detach() finds it nowhere
    return -FI_EINVAL;
  }
  *out = e->handle();
  domain_->register_target(e);
  domain_->note_operation();
  return 0;
}

int open_sep(fid_domain* domain_fid, fi_info* info, fid_ep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_RDM &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  // 0 and FI_SHARED_CONTEXT: one context of that kind.
  auto count = [](const fi_ep_attr* a, size_t fi_ep_attr::*m) -> size_t {
    if (a == nullptr) return 1;
    const size_t n = a->*m;
    return n == 0 || n == static_cast<size_t>(FI_SHARED_CONTEXT) ? 1 : n;
  };
  const size_t tx = count(info->ep_attr, &fi_ep_attr::tx_ctx_cnt);
  const size_t rx = count(info->ep_attr, &fi_ep_attr::rx_ctx_cnt);
  if (tx > Sep::kMaxContexts || rx > Sep::kMaxContexts) return -FI_EINVAL;
  if (domain->failed()) return -FI_EOPBADSTATE;
  Sep* s = make_object<Sep>(domain, *info, tx, rx, context);
  if (s == nullptr) return -FI_ENOMEM;
  *out = s->handle();
  domain->note_operation();
  return 0;
}

}  // namespace fabq::prov
