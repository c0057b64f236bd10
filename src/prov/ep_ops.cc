// The op tables libfabric calls on endpoints and shared receive contexts (fi_ops, fi_ops_ep,
// fi_ops_cm, fi_ops_msg, fi_ops_tagged), and fi_endpoint and fi_srx_context, which open them.
// An entry point turns its fid back into its object (any other fid: -FI_EINVAL), checks its
// arguments and calls into Endpoint or Srx; bindings, the CM calls and the size queries are
// done here, under the endpoint's lock.
#include <rdma/fi_cm.h>
#include <rdma/fi_tagged.h>

#include <cstring>
#include <optional>
#include <type_traits>

#include "core/cm_data.h"
#include "core/sockaddr.h"
#include "prov/av.h"
#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/noop.h"
#include "prov/pep.h"
#include "prov/rma_ops.h"
#include "prov/sep.h"
#include "prov/srx.h"
#include "prov/stx.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kCqBindFlags = FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION;
constexpr uint64_t kCntrBindFlags =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

// Fills `r`'s buffers from an iov list; false when it has more entries than `limit`, none with
// a count, or lengths whose sum wraps. A null buffer holds no bytes, whatever length it names:
// nothing is ever written there, and a longer message is truncated (FI_ETRUNC). fabtests post
// such receives for zero-byte messages, and libfabric's own providers take them.
bool take_iov(PostedRecv* r, const iovec* iov, size_t count, size_t limit) {
  if (count > limit || count > kMaxIov || (count > 0 && iov == nullptr)) return false;
  r->iov_count = count;
  for (size_t i = 0; i < count; ++i) {
    r->iov[i] = iov[i].iov_base != nullptr ? iov[i] : iovec{nullptr, 0};
  }
  return iov_total(r->iov, count, &r->len);
}

}  // namespace

// What endpoints and SRX contexts share: closing, posting receives and cancelling them. `T`
// is Endpoint or Srx.
template <class T>
struct Receives {
  static T* of(fid_ep* f) { return T::from_fid(f ? &f->fid : nullptr); }

  static int close(fid* f) {
    T* t = T::from_fid(f);
    if (t == nullptr) return -FI_EINVAL;
    // Giving shared receives back, or a connection closing inside a message, may queue events.
    Fabric* fabric = t->domain()->fabric();
    const int rc = close_target(t);
    fabric->outbox().publish();
    return rc;
  }

  static ssize_t cancel(fid* f, void* context) {
    T* t = T::from_fid(f);
    if (t == nullptr) return -FI_EINVAL;
    return t->cancel(context);
  }

  // One receive as fi_recv, fi_trecv and the rest of fi_msg(3) and fi_tagged(3) ask for it.
  // explicit_flags: the call took flags (the *msg forms); else the endpoint's rx op_flags apply.
  struct RecvRequest {
    const iovec* iov = nullptr;
    size_t iov_count = 0;
    void* context = nullptr;
    uint64_t flags = 0;
    bool explicit_flags = false;
    bool tagged = false;
    uint64_t tag = 0;
    uint64_t ignore = 0;
    fi_addr_t src = FI_ADDR_UNSPEC;  // the sender, where FI_DIRECTED_RECV makes it count
  };

  static ssize_t post(fid_ep* f, const RecvRequest& req) {
    T* t = of(f);
    if (t == nullptr) return -FI_EINVAL;
    PostedRecv r;
    r.context = req.context;
    r.flags = req.flags;
    r.default_flags = !req.explicit_flags;
    r.tagged = req.tagged;
    r.tag = req.tag;
    r.ignore = req.ignore;
    if (!take_iov(&r, req.iov, req.iov_count, t->iov_limit_)) return -FI_EINVAL;
    if constexpr (std::is_same_v<T, Endpoint>) {
      // FI_MSG_PREFIX: the prefix is the first bytes of iov[0]; the message goes after it.
      if (t->prefix_ != 0) {
        if (r.iov_count == 0 || !skip_prefix(&r.iov[0], t->prefix_)) return -FI_EINVAL;
        r.len -= t->prefix_;
        r.prefix = t->prefix_;
      }
    }
    return t->post_recv(r, req.src);
  }

  static ssize_t recv(fid_ep* f, void* buf, size_t len, void*, fi_addr_t src, void* context) {
    const iovec iov{buf, len};
    return post(f, {.iov = &iov, .iov_count = 1, .context = context, .src = src});
  }
  static ssize_t recvv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t src,
                       void* context) {
    return post(f, {.iov = iov, .iov_count = count, .context = context, .src = src});
  }
  static ssize_t recvmsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
    if (msg == nullptr) return -FI_EINVAL;
    if (flags & (FI_PEEK | FI_CLAIM)) return -FI_EBADFLAGS;
    return post(f, {.iov = msg->msg_iov,
                    .iov_count = msg->iov_count,
                    .context = msg->context,
                    .flags = flags,
                    .explicit_flags = true,
                    .src = msg->addr});
  }
  static ssize_t trecv(fid_ep* f, void* buf, size_t len, void*, fi_addr_t src, uint64_t tag,
                       uint64_t ignore, void* context) {
    const iovec iov{buf, len};
    return post(f, {.iov = &iov,
                    .iov_count = 1,
                    .context = context,
                    .tagged = true,
                    .tag = tag,
                    .ignore = ignore,
                    .src = src});
  }
  static ssize_t trecvv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t src,
                        uint64_t tag, uint64_t ignore, void* context) {
    return post(f, {.iov = iov,
                    .iov_count = count,
                    .context = context,
                    .tagged = true,
                    .tag = tag,
                    .ignore = ignore,
                    .src = src});
  }
  static ssize_t trecvmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags) {
    if (msg == nullptr) return -FI_EINVAL;
    if (flags & FI_MULTI_RECV) return -FI_EBADFLAGS;  // fi_tagged(3) has no multi-receive
    return post(f, {.iov = msg->msg_iov,
                    .iov_count = msg->iov_count,
                    .context = msg->context,
                    .flags = flags,
                    .explicit_flags = true,
                    .tagged = true,
                    .tag = msg->tag,
                    .ignore = msg->ignore,
                    .src = msg->addr});
  }

  // FI_OPT_MIN_MULTI_RECV (size_t), the one option receives have: applies to multi-receive
  // buffers posted after it is set. Other options: -FI_ENOPROTOOPT.
  static int getopt(fid* f, int level, int name, void* val, size_t* len) {
    T* t = T::from_fid(f);
    if (t == nullptr || val == nullptr || len == nullptr) return -FI_EINVAL;
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
    if (*len < sizeof(size_t)) return -FI_ETOOSMALL;
    core::MutexLock lock(t->mu_);
    *static_cast<size_t*>(val) = t->min_multi_recv_;
    *len = sizeof(size_t);
    return 0;
  }
  static int setopt(fid* f, int level, int name, const void* val, size_t len) {
    T* t = T::from_fid(f);
    if (t == nullptr) return -FI_EINVAL;
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_MIN_MULTI_RECV) return -FI_ENOPROTOOPT;
    if (val == nullptr || len != sizeof(size_t)) return -FI_EINVAL;
    core::MutexLock lock(t->mu_);
    t->min_multi_recv_ = *static_cast<const size_t*>(val);
    return 0;
  }

  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = cancel,
      .getopt = getopt,
      .setopt = setopt,
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
    core::MutexLock lock(e->mu_);
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
        const bool selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
        if (flags & FI_TRANSMIT) {
          cq->hold();
          e->tx_cq_ = cq;
          e->tx_selective_ = selective;
        }
        if (flags & FI_RECV) {
          cq->hold();
          cq->takes_receives();
          e->rx_cq_.store(cq, std::memory_order_release);
          e->rx_selective_ = selective;
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
        for (auto [flag, slot] :
             {std::pair{FI_WRITE, &e->write_cntr_}, std::pair{FI_READ, &e->read_cntr_},
              std::pair{FI_REMOTE_WRITE, &e->rem_write_cntr_},
              std::pair{FI_REMOTE_READ, &e->rem_read_cntr_}}) {
          if ((flags & flag) && *slot == nullptr) {
            c->hold();
            *slot = c;
          }
        }
        return 0;
      }
      case FI_CLASS_AV: {
        Av* av = Av::from_fid(bfid);
        if (av == nullptr || av->domain() != e->domain_ || !(e->rdm_ || e->dgram_)) {
          return -FI_EINVAL;
        }
        if (flags != 0) return -FI_EBADFLAGS;
        if (e->av_ != nullptr) return -FI_EBUSY;
        av->hold();
        e->av_ = av;
        return 0;
      }
      case FI_CLASS_STX_CTX: {
        Stx* stx = Stx::from_fid(bfid);
        // A datagram endpoint's sends take no transmit slot; its receives are its own.
        if (stx == nullptr || stx->domain() != e->domain_ || e->dgram_) return -FI_EINVAL;
        if (flags != 0) return -FI_EBADFLAGS;
        if (e->stx_ != nullptr) return -FI_EBUSY;
        stx->hold();
        e->stx_ = stx;
        e->tx_ring_.share(&stx->credits());
        return 0;
      }
      case FI_CLASS_SRX_CTX: {
        Srx* srx = Srx::from_fid(bfid);
        if (srx == nullptr || srx->domain() != e->domain_ || e->dgram_) return -FI_EINVAL;
        if (flags != 0) return -FI_EBADFLAGS;
        if (e->srx_ != nullptr || e->queue_.posted() != 0) return -FI_EBUSY;
        srx->hold();
        srx->attach(e);
        e->srx_ = srx;
        return 0;
      }
      default:
        return -FI_EINVAL;
    }
  }

  static int control(fid* f, int command, void* arg) {
    Endpoint* e = Endpoint::from_fid(f);
    if (e == nullptr) return -FI_EINVAL;
    if (command == FI_GETOPSFLAG || command == FI_SETOPSFLAG) {
      return arg == nullptr ? -FI_EINVAL : -FI_ENOSYS;
    }
    if (command != FI_ENABLE) return -FI_ENOSYS;
    return e->enable();
  }

  // FI_OPT_MAX_*_SIZE and FI_OPT_INJECT_*_SIZE, for applications of API 1.22 and later: the
  // limit `name` sets, and whether it is an inject size. nullopt: not one of them.
  struct SizeOption {
    OpLimits::Kind kind;
    bool inject;
  };
  static std::optional<SizeOption> size_option(const Endpoint* e, int level, int name) {
    if (level != FI_OPT_ENDPOINT || !e->domain()->fabric()->api().size_options()) {
      return std::nullopt;
    }
    using K = OpLimits::Kind;
    switch (name) {
      case abi2::kOptMaxMsgSize:
        return SizeOption{K::kMsg, false};
      case abi2::kOptMaxTaggedSize:
        return SizeOption{K::kTagged, false};
      case abi2::kOptMaxRmaSize:
        return SizeOption{K::kRma, false};
      case abi2::kOptMaxAtomicSize:
        return SizeOption{K::kAtomic, false};
      case abi2::kOptInjectMsgSize:
        return SizeOption{K::kMsg, true};
      case abi2::kOptInjectTaggedSize:
        return SizeOption{K::kTagged, true};
      case abi2::kOptInjectRmaSize:
        return SizeOption{K::kRma, true};
      case abi2::kOptInjectAtomicSize:
        return SizeOption{K::kAtomic, true};
      default:
        return std::nullopt;
    }
  }

  // FI_OPT_CM_DATA_SIZE (read only), the size options, and the receive options (Receives).
  static int getopt(fid* f, int level, int name, void* val, size_t* len) {
    Endpoint* e = Endpoint::from_fid(f);
    const bool cm_data = level == FI_OPT_ENDPOINT && name == FI_OPT_CM_DATA_SIZE;
    const auto size = e != nullptr ? size_option(e, level, name) : std::nullopt;
    if (!cm_data && !size) return R::getopt(f, level, name, val, len);
    if (e == nullptr || val == nullptr || len == nullptr) return -FI_EINVAL;
    if (*len < sizeof(size_t)) return -FI_ETOOSMALL;
    size_t v = core::kCmDataSize;
    if (size) v = size->inject ? e->limits().inject(size->kind) : e->limits().max(size->kind);
    *static_cast<size_t*>(val) = v;
    *len = sizeof(size_t);
    return 0;
  }

  // The size options: at most what the endpoint had at open (larger: -FI_EINVAL); and the
  // receive options (Receives).
  static int setopt(fid* f, int level, int name, const void* val, size_t len) {
    Endpoint* e = Endpoint::from_fid(f);
    const auto size = e != nullptr ? size_option(e, level, name) : std::nullopt;
    if (!size) return R::setopt(f, level, name, val, len);
    if (val == nullptr || len != sizeof(size_t)) return -FI_EINVAL;
    const size_t bytes = *static_cast<const size_t*>(val);
    const bool ok = size->inject ? e->limits().set_inject(size->kind, bytes)
                                 : e->limits().set_max(size->kind, bytes);
    return ok ? 0 : -FI_EINVAL;
  }

  // --- connection management (fi_cm(3))

  static int connect(fid_ep* f, const void* addr, const void* param, size_t paramlen) {
    Endpoint* e = R::of(f);
    if (e == nullptr || paramlen > core::kCmDataSize || (paramlen > 0 && param == nullptr)) {
      return -FI_EINVAL;
    }
    sockaddr_in peer{};
    Connection* conn = nullptr;
    {
      core::MutexLock lock(e->mu_);
      if (!e->enabled_ || e->failed_ || e->conn_handle_ != nullptr) return -FI_EOPBADSTATE;
      if (e->conn_ != nullptr) return -FI_EISCONN;
      if (addr != nullptr) {
        std::memcpy(&peer, addr, sizeof(peer));
      } else if (e->dest_) {
        peer = *e->dest_;
      } else {
        return -FI_EINVAL;
      }
      if (peer.sin_family != AF_INET) return -FI_EINVAL;
      e->conn_ = e->domain_->fabric()->transport()->make_connection(e, e->conn_params_locked());
      conn = e->conn_.get();
    }
    const int rc = conn->connect(peer, param, paramlen);
    e->outbox().publish();  // a refusal known at once fails what it must in an upcall
    return rc;
  }

  static int accept(fid_ep* f, const void* param, size_t paramlen) {
    Endpoint* e = R::of(f);
    if (e == nullptr || paramlen > core::kCmDataSize || (paramlen > 0 && param == nullptr)) {
      return -FI_EINVAL;
    }
    Connection* conn = e->connection();
    if (conn == nullptr || e->conn_handle_ == nullptr) return -FI_EOPBADSTATE;
    {
      core::MutexLock lock(e->mu_);
      if (!e->enabled_) return -FI_EOPBADSTATE;
    }
    const int rc = conn->accept(param, paramlen);
    e->outbox().publish();
    return rc;
  }

  static int shutdown(fid_ep* f, uint64_t flags) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    if (flags != 0) return -FI_EBADFLAGS;
    Connection* conn = e->connection();
    if (conn == nullptr) return -FI_ENOTCONN;
    const int rc = conn->shutdown();
    e->outbox().publish();  // SQ_DRAINED, when nothing was left to send
    return rc;
  }

  static int getname(fid* f, void* addr, size_t* addrlen) {
    Endpoint* e = Endpoint::from_fid(f);
    if (e == nullptr || addrlen == nullptr) return -FI_EINVAL;
    if (Connection* conn = e->connection(); conn != nullptr) return conn->getname(addr, addrlen);
    sockaddr_in name;
    // A scalable endpoint's context has its endpoint's name.
    if (e->ctx_.sep != nullptr && e->ctx_.sep->name(&name)) {
      return core::copy_sockaddr(name, addr, addrlen);
    }
    {
      core::MutexLock lock(e->mu_);
      name = e->enabled_ && (e->rdm_ || e->dgram_) ? e->rdm_name_ : e->src_;
    }
    return core::copy_sockaddr(name, addr, addrlen);
  }

  // RDM: the address the listener takes at fi_enable; DGRAM: its socket's.
  static int setname(fid* f, void* addr, size_t addrlen) {
    Endpoint* e = Endpoint::from_fid(f);
    if (e == nullptr || addr == nullptr || addrlen < sizeof(sockaddr_in)) return -FI_EINVAL;
    sockaddr_in a;
    std::memcpy(&a, addr, sizeof(a));
    if (a.sin_family != AF_INET) return -FI_EINVAL;
    core::MutexLock lock(e->mu_);
    if (e->enabled_) return -FI_EOPBADSTATE;
    e->src_ = a;
    return 0;
  }

  static int getpeer(fid_ep* f, void* addr, size_t* addrlen) {
    Endpoint* e = R::of(f);
    if (e == nullptr || addrlen == nullptr) return -FI_EINVAL;
    Connection* conn = e->connection();
    if (conn == nullptr) return -FI_ENOTCONN;
    return conn->getpeer(addr, addrlen);
  }

  // --- data transfer (fi_msg(3), fi_tagged(3)). The destination fi_addr_t matters to RDM
  // endpoints only; MSG endpoints ignore it (fi_msg(3)).

  static ssize_t send(fid_ep* f, const void* buf, size_t len, void*, fi_addr_t dest,
                      void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send(
        {.iov = &iov, .iov_count = 1, .dest = dest, .context = context, .flags = e->tx_op_flags_});
  }
  static ssize_t sendv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t dest,
                       void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    return e->post_send({.iov = iov,
                         .iov_count = count,
                         .dest = dest,
                         .context = context,
                         .flags = e->tx_op_flags_});
  }
  static ssize_t sendmsg(fid_ep* f, const fi_msg* msg, uint64_t flags) {
    Endpoint* e = R::of(f);
    if (e == nullptr || msg == nullptr) return -FI_EINVAL;
    return e->post_send({.iov = msg->msg_iov,
                         .iov_count = msg->iov_count,
                         .dest = msg->addr,
                         .context = msg->context,
                         .flags = flags,
                         .has_data = (flags & FI_REMOTE_CQ_DATA) != 0,
                         .data = msg->data});
  }
  static ssize_t inject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send(
        {.iov = &iov, .iov_count = 1, .dest = dest, .flags = FI_INJECT, .inject_call = true});
  }
  static ssize_t senddata(fid_ep* f, const void* buf, size_t len, void*, uint64_t data,
                          fi_addr_t dest, void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .context = context,
                         .flags = e->tx_op_flags_,
                         .has_data = true,
                         .data = data});
  }
  static ssize_t injectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .flags = FI_INJECT,
                         .has_data = true,
                         .data = data,
                         .inject_call = true});
  }
  static ssize_t tsend(fid_ep* f, const void* buf, size_t len, void*, fi_addr_t dest, uint64_t tag,
                       void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .context = context,
                         .flags = e->tx_op_flags_,
                         .tagged = true,
                         .tag = tag});
  }
  static ssize_t tsendv(fid_ep* f, const iovec* iov, void**, size_t count, fi_addr_t dest,
                        uint64_t tag, void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    return e->post_send({.iov = iov,
                         .iov_count = count,
                         .dest = dest,
                         .context = context,
                         .flags = e->tx_op_flags_,
                         .tagged = true,
                         .tag = tag});
  }
  static ssize_t tsendmsg(fid_ep* f, const fi_msg_tagged* msg, uint64_t flags) {
    Endpoint* e = R::of(f);
    if (e == nullptr || msg == nullptr) return -FI_EINVAL;
    return e->post_send({.iov = msg->msg_iov,
                         .iov_count = msg->iov_count,
                         .dest = msg->addr,
                         .context = msg->context,
                         .flags = flags,
                         .tagged = true,
                         .tag = msg->tag,
                         .has_data = (flags & FI_REMOTE_CQ_DATA) != 0,
                         .data = msg->data});
  }
  static ssize_t tinject(fid_ep* f, const void* buf, size_t len, fi_addr_t dest, uint64_t tag) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .flags = FI_INJECT,
                         .tagged = true,
                         .tag = tag,
                         .inject_call = true});
  }
  static ssize_t tsenddata(fid_ep* f, const void* buf, size_t len, void*, uint64_t data,
                           fi_addr_t dest, uint64_t tag, void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .context = context,
                         .flags = e->tx_op_flags_,
                         .tagged = true,
                         .tag = tag,
                         .has_data = true,
                         .data = data});
  }
  static ssize_t tinjectdata(fid_ep* f, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                             uint64_t tag) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    const iovec iov{const_cast<void*>(buf), len};
    return e->post_send({.iov = &iov,
                         .iov_count = 1,
                         .dest = dest,
                         .flags = FI_INJECT,
                         .tagged = true,
                         .tag = tag,
                         .has_data = true,
                         .data = data,
                         .inject_call = true});
  }

  static ssize_t tx_size_left(fid_ep* f) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    core::MutexLock lock(e->mu_);
    if (!e->enabled_) return -FI_EOPBADSTATE;
    return static_cast<ssize_t>(e->tx_ring_.free_count());
  }
  static ssize_t rx_size_left(fid_ep* f) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    core::MutexLock lock(e->mu_);
    if (!e->enabled_) return -FI_EOPBADSTATE;
    return static_cast<ssize_t>(e->rx_size_ - e->queue_.posted());
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
  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = R::cancel,
      .getopt = getopt,
      .setopt = setopt,
      .tx_ctx = enosys<fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
      .rx_ctx = enosys<fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
      .rx_size_left = rx_size_left,
      .tx_size_left = tx_size_left,
  };
  static inline fi_ops_cm cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = enosys<fid*, void*, size_t>,
      .getname = getname,
      .getpeer = getpeer,
      .connect = connect,
      .listen = enosys<fid_pep*>,
      .accept = accept,
      .reject = enosys<fid_pep*, fid_t, const void*, size_t>,
      .shutdown = shutdown,
      .join = enosys<fid_ep*, const void*, uint64_t, fid_mc**, void*>,
  };
  // An RDM endpoint has a name and nothing to connect (fi_cm(3)).
  static inline fi_ops_cm rdm_cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = setname,
      .getname = getname,
      .getpeer = enosys<fid_ep*, void*, size_t*>,
      .connect = enosys<fid_ep*, const void*, const void*, size_t>,
      .listen = enosys<fid_pep*>,
      .accept = enosys<fid_ep*, const void*, size_t>,
      .reject = enosys<fid_pep*, fid_t, const void*, size_t>,
      .shutdown = enosys<fid_ep*, uint64_t>,
      .join = enosys<fid_ep*, const void*, uint64_t, fid_mc**, void*>,
  };
  // A datagram endpoint has a name, and joins multicast groups (prov/mc.h).
  static int join(fid_ep* f, const void* addr, uint64_t flags, fid_mc** mc, void* context) {
    Endpoint* e = R::of(f);
    if (e == nullptr) return -FI_EINVAL;
    return e->join(addr, flags, mc, context);
  }
  static inline fi_ops_cm dgram_cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = setname,
      .getname = getname,
      .getpeer = enosys<fid_ep*, void*, size_t*>,
      .connect = enosys<fid_ep*, const void*, const void*, size_t>,
      .listen = enosys<fid_pep*>,
      .accept = enosys<fid_ep*, const void*, size_t>,
      .reject = enosys<fid_pep*, fid_t, const void*, size_t>,
      .shutdown = enosys<fid_ep*, uint64_t>,
      .join = join,
  };
  static inline fi_ops_msg msg_ops_ = {
      .size = sizeof(fi_ops_msg),
      .recv = R::recv,
      .recvv = R::recvv,
      .recvmsg = R::recvmsg,
      .send = send,
      .sendv = sendv,
      .sendmsg = sendmsg,
      .inject = inject,
      .senddata = senddata,
      .injectdata = injectdata,
  };
  static inline fi_ops_tagged tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = R::trecv,
      .recvv = R::trecvv,
      .recvmsg = R::trecvmsg,
      .send = tsend,
      .sendv = tsendv,
      .sendmsg = tsendmsg,
      .inject = tinject,
      .senddata = tsenddata,
      .injectdata = tinjectdata,
  };
  // A scalable endpoint's contexts (prov/sep.h).
  static inline fi_ops_msg tx_msg_ops_ = {
      .size = sizeof(fi_ops_msg),
      .recv = enosys_ssize<fid_ep*, void*, size_t, void*, fi_addr_t, void*>,
      .recvv = enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, void*>,
      .recvmsg = enosys_ssize<fid_ep*, const fi_msg*, uint64_t>,
      .send = send,
      .sendv = sendv,
      .sendmsg = sendmsg,
      .inject = inject,
      .senddata = senddata,
      .injectdata = injectdata,
  };
  static inline fi_ops_msg rx_msg_ops_ = {
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
  static inline fi_ops_tagged tx_tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = enosys_ssize<fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*>,
      .recvv =
          enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*>,
      .recvmsg = enosys_ssize<fid_ep*, const fi_msg_tagged*, uint64_t>,
      .send = tsend,
      .sendv = tsendv,
      .sendmsg = tsendmsg,
      .inject = tinject,
      .senddata = tsenddata,
      .injectdata = tinjectdata,
  };
  // A datagram endpoint carries no tagged messages (fi_getinfo offers no FI_TAGGED on DGRAM).
  static inline fi_ops_tagged no_tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = enosys_ssize<fid_ep*, void*, size_t, void*, fi_addr_t, uint64_t, uint64_t, void*>,
      .recvv =
          enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, uint64_t, void*>,
      .recvmsg = enosys_ssize<fid_ep*, const fi_msg_tagged*, uint64_t>,
      .send = enosys_ssize<fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*>,
      .sendv = enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*>,
      .sendmsg = enosys_ssize<fid_ep*, const fi_msg_tagged*, uint64_t>,
      .inject = enosys_ssize<fid_ep*, const void*, size_t, fi_addr_t, uint64_t>,
      .senddata =
          enosys_ssize<fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t, void*>,
      .injectdata = enosys_ssize<fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t>,
  };
  static inline fi_ops_tagged rx_tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = R::trecv,
      .recvv = R::trecvv,
      .recvmsg = R::trecvmsg,
      .send = enosys_ssize<fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*>,
      .sendv = enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*>,
      .sendmsg = enosys_ssize<fid_ep*, const fi_msg_tagged*, uint64_t>,
      .inject = enosys_ssize<fid_ep*, const void*, size_t, fi_addr_t, uint64_t>,
      .senddata =
          enosys_ssize<fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t, void*>,
      .injectdata = enosys_ssize<fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t>,
  };
};

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
  static inline fi_ops_tagged tagged_ops_ = {
      .size = sizeof(fi_ops_tagged),
      .recv = R::trecv,
      .recvv = R::trecvv,
      .recvmsg = R::trecvmsg,
      .send = enosys_ssize<fid_ep*, const void*, size_t, void*, fi_addr_t, uint64_t, void*>,
      .sendv = enosys_ssize<fid_ep*, const iovec*, void**, size_t, fi_addr_t, uint64_t, void*>,
      .sendmsg = enosys_ssize<fid_ep*, const fi_msg_tagged*, uint64_t>,
      .inject = enosys_ssize<fid_ep*, const void*, size_t, fi_addr_t, uint64_t>,
      .senddata =
          enosys_ssize<fid_ep*, const void*, size_t, void*, uint64_t, fi_addr_t, uint64_t, void*>,
      .injectdata = enosys_ssize<fid_ep*, const void*, size_t, uint64_t, fi_addr_t, uint64_t>,
  };
};

// --- the descriptors: a fid is an endpoint's or an SRX's when it carries these tables

// A scalable endpoint's contexts are endpoints too (prov/sep.h), of their own fid classes.
Endpoint* Endpoint::from_fid(const fid* f) {
  if (f == nullptr) return nullptr;
  const size_t fclass = f->fclass;
  if (fclass != FI_CLASS_EP && fclass != FI_CLASS_TX_CTX && fclass != FI_CLASS_RX_CTX) {
    return nullptr;
  }
  return Object::from<Endpoint, fid_ep>(f, fclass, &EpOps::fi_ops_);
}

void Endpoint::init_box(void* context) {
  const size_t fclass = ctx_.role == EpRole::kTxContext   ? FI_CLASS_TX_CTX
                        : ctx_.role == EpRole::kRxContext ? FI_CLASS_RX_CTX
                                                          : FI_CLASS_EP;
  init_fid(&box_.fid.fid, fclass, context, &EpOps::fi_ops_);
  box_.fid.ops = &EpOps::ep_ops_;
  box_.fid.cm = rdm_ ? &EpOps::rdm_cm_ops_ : dgram_ ? &EpOps::dgram_cm_ops_ : &EpOps::cm_ops_;
  // A transmit context receives nothing, a receive context sends nothing.
  box_.fid.msg = ctx_.role == EpRole::kTxContext   ? &EpOps::tx_msg_ops_
                 : ctx_.role == EpRole::kRxContext ? &EpOps::rx_msg_ops_
                                                   : &EpOps::msg_ops_;
  box_.fid.tagged = dgram_                            ? &EpOps::no_tagged_ops_
                    : ctx_.role == EpRole::kTxContext ? &EpOps::tx_tagged_ops_
                    : ctx_.role == EpRole::kRxContext ? &EpOps::rx_tagged_ops_
                                                      : &EpOps::tagged_ops_;
  box_.fid.rma = rma_ops();
  box_.fid.atomic = atomic_ops();
  box_.owner = this;
}

Srx* Srx::from_fid(const fid* f) {
  return Object::from<Srx, fid_ep>(f, FI_CLASS_SRX_CTX, &SrxOps::fi_ops_);
}

void Srx::init_box(void* context) {
  init_fid(&box_.fid.fid, FI_CLASS_SRX_CTX, context, &SrxOps::fi_ops_);
  box_.fid.ops = &Receives<Srx>::ep_ops_;
  box_.fid.cm = &EpOps::cm_ops_;
  box_.fid.msg = &SrxOps::msg_ops_;
  box_.fid.tagged = &SrxOps::tagged_ops_;
  box_.owner = this;
}

// --- fi_endpoint, fi_srx_context

int open_endpoint(fid_domain* domain_fid, fi_info* info, fid_ep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG &&
      info->ep_attr->type != FI_EP_RDM && info->ep_attr->type != FI_EP_DGRAM &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  // More than one context of a kind is a scalable endpoint's (fi_scalable_ep, prov/sep.h).
  if (info->ep_attr != nullptr) {
    for (const size_t n : {info->ep_attr->tx_ctx_cnt, info->ep_attr->rx_ctx_cnt}) {
      if (n > 1 && n != static_cast<size_t>(FI_SHARED_CONTEXT)) return -FI_EINVAL;
    }
  }
  if (domain->failed()) return -FI_EOPBADSTATE;
  // The handle is looked up, not read: it may name an object the application closed.
  sockaddr_in pep_name{};
  const HandleKind kind = classify_handle(info->handle, &pep_name);
  if (kind == HandleKind::kUnknown) return -FI_EINVAL;
  Endpoint* e = make_object<Endpoint>(domain, *info, context);
  if (e == nullptr) return -FI_ENOMEM;
  // Nobody else knows the endpoint yet, so its lock (what guards its address) is free; it is
  // released before the request is taken: the requests' pool and the transport come first.
  xport::ConnParams params;
  {
    core::MutexLock lock(e->mu_);
    // fi_endpoint(3): an active endpoint may take over a passive endpoint's address.
    if (kind == HandleKind::kPassiveEp && pep_name.sin_family == AF_INET) e->src_ = pep_name;
    params = e->conn_params_locked();
  }
  if (kind == HandleKind::kConnReq) {
    // Opened from an FI_CONNREQ: the endpoint takes over the pending connection.
    e->conn_handle_ = info->handle;
    int err = 0;
    std::unique_ptr<Connection> conn =
        take_request(domain->fabric(), info->handle, e, params, &err);
    if (conn == nullptr) {
      delete e;
      return err != 0 ? err : -FI_EINVAL;
    }
    core::MutexLock lock(e->mu_);
    e->conn_ = std::move(conn);
  }
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
