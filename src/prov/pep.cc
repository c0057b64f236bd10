#include "prov/pep.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_eq.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <type_traits>
#include <vector>

#include "core/cm_data.h"
#include "core/lazy_global.h"
#include "core/sockaddr.h"
#include "prov/auth.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/noop.h"

namespace fabq::prov {
namespace {

// The requests' pool's lock (docs/locking.md): which requests exist and every request's state;
// taken after a passive endpoint's, and a listener's after it (ConnReq::claim). A global of its
// own, unlike the pool it guards, so that the analysis can name it in ConnReq; it has nothing
// to destroy at exit (a std::mutex's destructor is trivial where fabq builds).
constinit core::Mutex g_conn_reqs_mu;
static_assert(std::is_trivially_destructible_v<core::Mutex>);

}  // namespace

// --- ConnReq

// A connection request as an FI_CONNREQ's info->handle names it.
//
// The application may hand that info to fi_endpoint or fi_reject at any time: also after the
// request was used, refused, or its passive endpoint closed; and fi_endpoint reads the handle's
// fclass to tell a request from a passive endpoint. So a request's memory is never freed: a
// finished one is reused for a new request only once kReuseAfter others have finished after it,
// and what a handle names is decided under the pool's lock from the request's state, never from
// memory the application may have given back. (An info kept past kReuseAfter newer requests
// names a newer request of a passive endpoint: a misuse, but never a read of freed memory.)
struct ConnReq {
  enum class State : uint8_t { kPending, kTaken, kAborted };

  fid fid_{};  // first: info->handle points here; set once, when the request is made
  State state FABQ_GUARDED_BY(g_conn_reqs_mu) = State::kAborted;
  Fabric* fabric FABQ_GUARDED_BY(g_conn_reqs_mu) = nullptr;
  PassiveEp* pep FABQ_GUARDED_BY(g_conn_reqs_mu) = nullptr;
  xport::Connection* conn FABQ_GUARDED_BY(g_conn_reqs_mu) = nullptr;
  // The FI_CONNREQ's, which the application owns once read.
  const fi_info* info FABQ_GUARDED_BY(g_conn_reqs_mu) = nullptr;

  // Each takes the pool's lock.
  // The request `handle` names, or null if it is not one.
  static ConnReq* of(fid_t handle) FABQ_EXCLUDES(g_conn_reqs_mu);
  // A pending request of `pep` for `conn`, reported with `info`.
  static ConnReq* open(Fabric* fabric, PassiveEp* pep, xport::Connection* conn, const fi_info* info)
      FABQ_EXCLUDES(g_conn_reqs_mu);
  // Takes a pending request of `fabric` (and of `only`, if not null) for fi_endpoint or
  // fi_reject: its connection, taken out of the passive endpoint's listener under the pool's lock
  // (so that a closing passive endpoint either ended the request first or finds it gone). Null
  // with *err: -FI_EINVAL if it was taken already or belongs to another fabric or passive
  // endpoint; -FI_ECONNABORTED if its passive endpoint ended it or the peer left.
  static std::unique_ptr<xport::Connection> claim(ConnReq* req, const Fabric* fabric,
                                                  const PassiveEp* only, int* err)
      FABQ_EXCLUDES(g_conn_reqs_mu);
  // The pending requests of `pep` end (it closes); returns the infos they were reported with.
  static std::vector<const fi_info*> abort_all(const PassiveEp* pep) FABQ_EXCLUDES(g_conn_reqs_mu);
  // A request `pep` could not queue ends.
  static void abort(ConnReq* req) FABQ_EXCLUDES(g_conn_reqs_mu);

 private:
  void finish_locked(State why) FABQ_REQUIRES(g_conn_reqs_mu);
};

namespace {

inline constexpr size_t kReuseAfter = 256;

// fi_dupinfo as fabq binds it (FABRIC_1.3) copies 1.3's members only: the domain attributes
// added since are copied here, as far as the application's version has them.
fi_info* dup_info(const fi_info& from, ApiVersion api) {
  fi_info* to = fi_dupinfo(&from);
  if (to != nullptr && from.domain_attr != nullptr && to->domain_attr != nullptr) {
    abi2::write_tail(to->domain_attr, api, abi2::read_tail(from.domain_attr, api));
  }
  return to;
}

struct ConnReqPool {
  // Every request ever made, for the unload.
  std::vector<std::unique_ptr<ConnReq>> all FABQ_GUARDED_BY(g_conn_reqs_mu);
  std::deque<ConnReq*> finished FABQ_GUARDED_BY(g_conn_reqs_mu);  // oldest first
};

// Freed only when the provider is unloaded: handles stay readable until then.
core::LazyGlobal<ConnReqPool> g_conn_reqs;
ConnReqPool& conn_req_pool() {
  return g_conn_reqs.get();
}

fi_ops g_conn_req_ops = {
    .size = sizeof(fi_ops),
    .close = enosys<fid*>,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
    .tostr = no_tostr,
    .ops_set = no_ops_set,
};

// The open passive endpoints, so that a handle can be recognised as one without being read.
struct PassiveEps {
  core::Mutex mu;  // taken before a passive endpoint's own lock
  std::vector<PassiveEp*> all FABQ_GUARDED_BY(mu);
};
core::LazyGlobal<PassiveEps> g_peps;

}  // namespace

ConnReq* ConnReq::of(fid_t handle) {
  if (handle == nullptr) return nullptr;
  // Looked up, not read: `handle` may be anything the application passed.
  ConnReqPool* pool = g_conn_reqs.if_made();
  if (pool == nullptr) return nullptr;
  core::MutexLock lock(g_conn_reqs_mu);
  for (const auto& r : pool->all) {
    if (&r->fid_ == handle) return r.get();
  }
  return nullptr;
}

ConnReq* ConnReq::open(Fabric* fabric, PassiveEp* pep, xport::Connection* conn,
                       const fi_info* info) {
  ConnReqPool& pool = conn_req_pool();
  core::MutexLock lock(g_conn_reqs_mu);
  ConnReq* req = nullptr;
  if (pool.finished.size() > kReuseAfter) {
    req = pool.finished.front();
    pool.finished.pop_front();
  } else {
    req = pool.all.emplace_back(std::make_unique<ConnReq>()).get();
    req->fid_.fclass = FI_CLASS_CONNREQ;
    req->fid_.ops = &g_conn_req_ops;
  }
  req->state = State::kPending;
  req->fabric = fabric;
  req->pep = pep;
  req->conn = conn;
  req->info = info;
  return req;
}

void ConnReq::finish_locked(State why) {
  state = why;
  pep = nullptr;
  conn = nullptr;
  info = nullptr;
  conn_req_pool().finished.push_back(this);
}

std::unique_ptr<xport::Connection> ConnReq::claim(ConnReq* req, const Fabric* fabric,
                                                  const PassiveEp* only, int* err) {
  core::MutexLock lock(g_conn_reqs_mu);
  if (req->state == State::kAborted) {
    *err = -FI_ECONNABORTED;
    return nullptr;
  }
  if (req->state != State::kPending || req->fabric != fabric ||
      (only != nullptr && req->pep != only)) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  std::unique_ptr<xport::Connection> conn = req->pep->listener_->take(req->conn);
  req->finish_locked(State::kTaken);
  if (conn == nullptr) *err = -FI_ECONNABORTED;
  return conn;
}

std::vector<const fi_info*> ConnReq::abort_all(const PassiveEp* pep) {
  std::vector<const fi_info*> infos;
  ConnReqPool* pool = g_conn_reqs.if_made();
  if (pool == nullptr) return infos;
  core::MutexLock lock(g_conn_reqs_mu);
  for (const auto& r : pool->all) {
    if (r->state != State::kPending || r->pep != pep) continue;
    infos.push_back(r->info);
    r->finish_locked(State::kAborted);
  }
  return infos;
}

void ConnReq::abort(ConnReq* req) {
  core::MutexLock lock(g_conn_reqs_mu);
  if (req->state == State::kPending) req->finish_locked(State::kAborted);
}

// --- PassiveEp

struct PepOps {
  static PassiveEp* of(const fid* f) { return PassiveEp::from_fid(f); }
  static PassiveEp* of(const fid_pep* f) { return of(f != nullptr ? &f->fid : nullptr); }
  static int close(fid* f) { return close_object(of(f)); }
  static int bind(fid* f, fid* bfid, uint64_t flags) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->bind(bfid, flags);
  }
  static int control(fid* f, int, void*) { return of(f) == nullptr ? -FI_EINVAL : -FI_ENOSYS; }
  static int listen(fid_pep* f) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->listen();
  }
  static int getname(fid* f, void* addr, size_t* len) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->getname(addr, len);
  }
  static int setname(fid* f, void* addr, size_t len) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->setname(addr, len);
  }
  static int reject(fid_pep* f, fid_t handle, const void* data, size_t len) {
    PassiveEp* p = of(f);
    return p == nullptr ? -FI_EINVAL : p->reject(handle, data, len);
  }
  static int getopt(fid* f, int level, int name, void* val, size_t* len) {
    if (of(f) == nullptr || val == nullptr || len == nullptr) return -FI_EINVAL;
    if (level != FI_OPT_ENDPOINT || name != FI_OPT_CM_DATA_SIZE) return -FI_ENOPROTOOPT;
    if (*len < sizeof(size_t)) return -FI_ETOOSMALL;
    *static_cast<size_t*>(val) = core::kCmDataSize;
    *len = sizeof(size_t);
    return 0;
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
      .getopt = getopt,
      .setopt = enosys<fid*, int, int, const void*, size_t>,
      .tx_ctx = enosys<fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
      .rx_ctx = enosys<fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
      .rx_size_left = enosys_ssize<fid_ep*>,
      .tx_size_left = enosys_ssize<fid_ep*>,
  };
  static inline fi_ops_cm cm_ops_ = {
      .size = sizeof(fi_ops_cm),
      .setname = setname,
      .getname = getname,
      .getpeer = enosys<fid_ep*, void*, size_t*>,
      .connect = enosys<fid_ep*, const void*, const void*, size_t>,
      .listen = listen,
      .accept = enosys<fid_ep*, const void*, size_t>,
      .reject = reject,
      .shutdown = enosys<fid_ep*, uint64_t>,
      .join = enosys<fid_ep*, const void*, uint64_t, fid_mc**, void*>,
  };
};

PassiveEp* PassiveEp::from_fid(const fid* f) {
  return Object::from<PassiveEp, fid_pep>(f, FI_CLASS_PEP, &PepOps::fi_ops_);
}

PassiveEp::PassiveEp(Fabric* fabric, const fi_info& info, void* context)
    : Object(FI_CLASS_PEP, fabric),
      fabric_(fabric),
      info_(dup_info(info, fabric->api())),
      auth_(auth_key_of(info)) {
  init_fid(&box_.fid.fid, FI_CLASS_PEP, context, &PepOps::fi_ops_);
  box_.fid.ops = &PepOps::ep_ops_;
  box_.fid.cm = &PepOps::cm_ops_;
  box_.owner = this;
  addr_.sin_family = AF_INET;
  if (info.src_addr != nullptr && info.src_addrlen >= sizeof(sockaddr_in)) {
    std::memcpy(&addr_, info.src_addr, sizeof(addr_));
  }
  listener_ = fabric->transport()->open_passive(this, auth_ ? &*auth_ : nullptr);
  PassiveEps& peps = g_peps.get();
  core::MutexLock lock(peps.mu);
  peps.all.push_back(this);
}

bool PassiveEp::name_if_open(fid_t handle, sockaddr_in* name) {
  PassiveEps* peps = g_peps.if_made();
  if (peps == nullptr) return false;
  core::MutexLock lock(peps->mu);
  for (PassiveEp* p : peps->all) {
    if (&p->box_.fid.fid != handle) continue;
    core::MutexLock plock(p->mu_);
    *name = p->addr_;
    return true;
  }
  return false;
}

PassiveEp::~PassiveEp() {
  {
    PassiveEps& peps = g_peps.get();
    core::MutexLock lock(peps.mu);
    std::erase(peps.all, this);
  }
  Eq* eq = nullptr;
  {
    // From here on a request is refused: none is reported after its requests ended below.
    core::MutexLock lock(mu_);
    closing_ = true;
    eq = eq_;
  }
  // Each request is taken before this, or ended here (ConnReq::claim).
  const std::vector<const fi_info*> pending = ConnReq::abort_all(this);
  if (eq != nullptr) {
    // fi_cm(3): a closed endpoint's events are purged. An unread FI_CONNREQ owns its info.
    std::vector<const fi_info*> unread;
    eq->queue().purge(&box_.fid.fid, [&](uint32_t event, const void* payload, size_t len) {
      if (event != FI_CONNREQ || len < sizeof(fi_eq_cm_entry)) return;
      fi_eq_cm_entry e;
      std::memcpy(&e, payload, sizeof(e));
      unread.push_back(e.info);
    });
    // Only an info this endpoint reported is freed (an application may write FI_CONNREQ events
    // of its own into the EQ).
    for (const fi_info* info : pending) {
      if (std::find(unread.begin(), unread.end(), info) != unread.end()) {
        fi_freeinfo(const_cast<fi_info*>(info));
      }
    }
  }
  // Its peers see the connection close: a refusal.
  listener_.reset();
  if (eq != nullptr) eq->release();
  fi_freeinfo(info_);
}

int PassiveEp::bind(fid* bfid, uint64_t flags) {
  Eq* eq = Eq::from_fid(bfid);
  if (eq == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  core::MutexLock lock(mu_);
  if (eq_ != nullptr) return -FI_EBUSY;
  eq->hold();
  eq_ = eq;
  return 0;
}

int PassiveEp::listen() {
  sockaddr_in at{};
  {
    core::MutexLock lock(mu_);
    if (listening_) return -FI_EOPBADSTATE;
    if (eq_ == nullptr) return -FI_ENOEQ;
    at = addr_;
    listening_ = true;  // one listen at a time
  }
  sockaddr_in bound{};
  const int rc = listener_->listen(at, &bound);
  core::MutexLock lock(mu_);
  if (rc != 0) {
    listening_ = false;
    return rc;
  }
  addr_ = bound;
  return 0;
}

int PassiveEp::getname(void* addr, size_t* len) {
  core::MutexLock lock(mu_);
  return core::copy_sockaddr(addr_, addr, len);
}

int PassiveEp::setname(const void* addr, size_t len) {
  core::MutexLock lock(mu_);
  if (addr == nullptr || len < sizeof(sockaddr_in)) return -FI_EINVAL;
  if (listening_) return -FI_EOPBADSTATE;
  sockaddr_in a;
  std::memcpy(&a, addr, sizeof(a));
  if (a.sin_family != AF_INET) return -FI_EINVAL;
  addr_ = a;
  return 0;
}

bool PassiveEp::request(xport::Connection* pending, const sockaddr_in& peer, const void* data,
                        size_t len) {
  core::MutexLock lock(mu_);
  if (eq_ == nullptr || closing_) return false;
  fi_info* info = dup_info(*info_, fabric_->api());
  if (info == nullptr) return false;
  ConnReq* req = ConnReq::open(fabric_, this, pending, info);
  info->handle = &req->fid_;
  std::free(info->dest_addr);
  info->dest_addr = std::malloc(sizeof(sockaddr_in));
  if (info->dest_addr != nullptr) {
    std::memcpy(info->dest_addr, &peer, sizeof(sockaddr_in));
    info->dest_addrlen = sizeof(sockaddr_in);
  } else {
    info->dest_addrlen = 0;
  }
  // Requests may fill half of the EQ, never more: the other half stays for the events of the
  // connections already made (FI_CONNECTED, FI_SHUTDOWN, errors), which are never dropped.
  const Eq::CmEvent e{.fid = &box_.fid.fid,
                      .event = FI_CONNREQ,
                      .info = info,
                      .data = data,
                      .len = len,
                      .keep_free = eq_->queue().capacity() / 2};
  if (!eq_->write_cm(e).ok()) {
    ConnReq::abort(req);
    fi_freeinfo(info);
    return false;
  }
  return true;
}

int PassiveEp::reject(fid_t handle, const void* data, size_t len) {
  if (len > core::kCmDataSize || (len > 0 && data == nullptr)) return -FI_EINVAL;
  ConnReq* req = ConnReq::of(handle);
  if (req == nullptr) return -FI_EINVAL;
  int err = 0;
  std::unique_ptr<xport::Connection> conn = ConnReq::claim(req, fabric_, this, &err);
  if (conn == nullptr) return err;
  return conn->reject(data, len);
}

// --- Entry points

HandleKind classify_handle(fid_t handle, sockaddr_in* pep_name) {
  if (handle == nullptr) return HandleKind::kNone;
  if (ConnReq::of(handle) != nullptr) return HandleKind::kConnReq;
  if (PassiveEp::name_if_open(handle, pep_name)) return HandleKind::kPassiveEp;
  return HandleKind::kUnknown;
}

std::unique_ptr<xport::Connection> take_request(Fabric* fabric, fid_t handle, xport::Owner* owner,
                                                const xport::ConnParams& params, int* err) {
  ConnReq* req = ConnReq::of(handle);
  if (req == nullptr) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  std::unique_ptr<xport::Connection> conn = ConnReq::claim(req, fabric, nullptr, err);
  if (conn == nullptr) return nullptr;
  // Its peer gave up meanwhile: the connection closes.
  if (!conn->adopt(owner, params)) {
    *err = -FI_ECONNABORTED;
    return nullptr;
  }
  return conn;
}

int open_passive_ep(fid_fabric* fabric_fid, fi_info* info, fid_pep** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Fabric* fabric = Fabric::from_fid(fabric_fid != nullptr ? &fabric_fid->fid : nullptr);
  if (fabric == nullptr || info == nullptr || out == nullptr) return -FI_EINVAL;
  if (info->ep_attr != nullptr && info->ep_attr->type != FI_EP_MSG &&
      info->ep_attr->type != FI_EP_UNSPEC) {
    return -FI_EINVAL;
  }
  PassiveEp* pep = make_object<PassiveEp>(fabric, *info, context);
  if (pep == nullptr) return -FI_ENOMEM;
  *out = pep->handle();
  return 0;
}

void unload_passive_eps() {
  g_conn_reqs.free();
  g_peps.free();
}

}  // namespace fabq::prov
