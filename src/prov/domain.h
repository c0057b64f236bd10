// fabq provider: the domain object (fi_domain(3)).
//
// A domain is one network interface (its name, e.g. "lo") of a fabric. It opens completion
// queues, counters and poll sets, counting CQs and counters against the cq_cnt and cntr_cnt
// it advertises. fi_domain_bind() attaches an EQ (flags 0 or FI_REG_MR) for the domain's
// asynchronous events; the EQ then cannot be closed before the domain (-FI_EBUSY). It opens
// address vectors (prov/av.h) of its av_type, and keeps the table of its memory regions that
// peers' RMA and atomics find by key (prov/mr.h).
//
// The domain owns the asynchronous event channel of fi_fabq.h (fi_open_ops with
// FI_FABQ_ASYNC_OPS) and the fault rules installed on it (FI_FABQ_FAULTS at open, inject()
// later); see prov/events.h. After FI_FABQ_EVENT_DEVICE_FATAL it opens nothing more
// (-FI_EOPBADSTATE).
//
// fi_close() with open CQs, counters, AVs, endpoints, SRX contexts or poll sets, or with events
// read from its channel and not acknowledged: -FI_EBUSY.
#pragma once

#include <rdma/fi_domain.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/async_channel.h"
#include "core/async_event.h"
#include "core/fault_spec.h"
#include "core/hmac.h"
#include "core/mutex.h"
#include "prov/events.h"
#include "prov/mr.h"
#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

class Cq;
class Eq;
class Fabric;

class Domain final : public Object, public AsyncTarget {
 public:
  static Domain* from_fid(const fid* f);

  Domain(Fabric* fabric, const fi_info& info, std::unique_ptr<core::AsyncChannel> channel,
         void* context);
  ~Domain() override;
  fid_domain* handle() { return &box_.fid; }
  Fabric* fabric() const { return fabric_; }
  const std::string& name() const { return name_; }
  core::AsyncChannel& channel() { return *channel_; }
  uint64_t id() const { return id_; }
  // The EQ bound with fi_domain_bind, or null. Takes mu_.
  Eq* eq() FABQ_EXCLUDES(mu_);
  // domain_attr->av_type of the fi_info it was opened with: the only AV type it opens, unless
  // FI_AV_UNSPEC (prov/av.h).
  int av_type() const { return av_type_; }
  // The default secret of its endpoints (prov/auth.h): the auth_key of the fi_info's
  // domain_attr it was opened with; null when none. Fixed at open.
  const core::HmacSha256* auth_key() const { return auth_ ? &*auth_ : nullptr; }

  // DEVICE_FATAL: the domain opens nothing more.
  void fail() { failed_.store(true, std::memory_order_release); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Fault targets: register when an endpoint, CQ or SRX is fully open (rules that name it
  // fire or arm now); unregister at its close, holding mu_ (see close_target()).
  // register_target, add_rules and set_target_name take mu_, then fire or schedule what the
  // rules ask for now through the registry (whose lock comes first) once it is released: the
  // caller holds no provider lock.
  void register_target(AsyncTarget* t) FABQ_EXCLUDES(mu_);
  void unregister_target_locked(AsyncTarget* t) FABQ_REQUIRES(mu_);
  // Installs rules; those with a matching open target arm or fire at once.
  void add_rules(const std::vector<core::FaultRule>& rules) FABQ_EXCLUDES(mu_);
  int set_target_name(AsyncTarget* t, const char* name) FABQ_EXCLUDES(mu_);
  // An object was opened on the domain: the domain's operation for ops=/prob= rules. Raises
  // what they decide: the caller holds no provider lock (prov/events.h raise()).
  void note_operation();

  bool acquire_cq_slot();
  void release_cq_slot() { cqs_.fetch_sub(1, std::memory_order_relaxed); }
  bool acquire_cntr_slot();
  void release_cntr_slot() { cntrs_.fetch_sub(1, std::memory_order_relaxed); }
  // Memory regions (prov/mr.h). The mr_mode it was opened with, as its three questions:
  bool prov_key() const { return prov_key_; }
  bool virt_addr() const { return virt_addr_; }
  bool mr_endpoint() const { return mr_endpoint_; }
  // Makes `r` reachable under its key: r->key when the application chose it (false when
  // another live region holds it), a fresh random one with FI_MR_PROV_KEY. False too when
  // kMrCount regions are open.
  bool add_region(Region* r) FABQ_EXCLUDES(mr_mu_);
  // Makes `r` unreachable (its Mr closed) and lets go of the endpoint it is bound to (which may
  // close from then on); the caller drops the table's reference.
  void remove_region(Region* r) FABQ_EXCLUDES(mr_mu_);
  // A remote access of `len` bytes at `addr` of region `key`, needing `access` (FI_REMOTE_READ
  // or FI_REMOTE_WRITE), arriving at endpoint `ep`: kOk with *use holding the region (release
  // it with release_region), or why not, with nothing held.
  xport::RmaStatus acquire_region(uint64_t key, uint64_t addr, size_t len, uint64_t access,
                                  const Endpoint* ep, RegionUse* use) FABQ_EXCLUDES(mr_mu_);
  // fi_mr_bind and fi_mr_enable change a region's bindings under the region lock.
  core::Mutex& mr_mu() FABQ_RETURN_CAPABILITY(mr_mu_) { return mr_mu_; }
  // The bound EQ when it was bound with FI_REG_MR (registrations complete there), else null.
  Eq* reg_mr_eq() FABQ_EXCLUDES(mu_);
  static constexpr size_t kMrCount = 65536;  // domain_attr->mr_cnt

 private:
  friend struct DomainOps;
  friend class Registry;
  friend void raise(Domain*, AsyncTarget*, uint32_t);
  template <class T>
  friend int close_target(T* o);
  struct Pending {
    uint64_t serial;
    std::shared_ptr<const core::FaultRule> rule;
  };
  // One event to raise on one of the domain's targets.
  struct Raised {
    AsyncTarget* target;
    uint32_t type;
  };
  // Arms `rule` on `t` if it names it; kNow and kMs rules are queued in `later`, to be fired
  // or scheduled once mu_ is released (the registry's lock comes first).
  void arm_locked(AsyncTarget* t, const std::shared_ptr<const core::FaultRule>& rule,
                  std::vector<Pending>* later) FABQ_REQUIRES(mu_);
  void run_pending(const std::vector<Pending>& later) FABQ_EXCLUDES(mu_);
  AsyncTarget* find_target_locked(uint64_t serial) FABQ_REQUIRES(mu_);
  // Registry::fire, holding the registry's lock and mu_: fires `rule` on the target with this
  // serial if it is still open and the rule still armed there. Returns the port or device event
  // it raises (0: none), which the registry raises once mu_ is released (a device's events
  // reach every domain on it, each under its own lock); *again: a kMs rule to schedule again.
  uint32_t fire_timed_locked(uint64_t serial, const std::shared_ptr<const core::FaultRule>& rule,
                             bool* again) FABQ_REQUIRES(mu_);
  // Applies `rule` to `t` now; returns the port or device event it raises, as above.
  uint32_t fire_locked(AsyncTarget* t, const core::FaultRule& rule) FABQ_REQUIRES(mu_);
  // prov/events.h raise() of an event that is not a port or device event, under the caller's
  // one acquisition of mu_: delivers it and applies its effects, and theirs (events.cc).
  void raise_locked(AsyncTarget* t, uint32_t type) FABQ_REQUIRES(mu_);
  // One event of raise_locked(); the events its effects raise in turn are appended to `more`.
  void apply_locked(const Raised& e, std::vector<Raised>* more) FABQ_REQUIRES(mu_);
  // An event on a CQ: delivered on the domain's EQ; the CQ enters its overrun state.
  void apply_cq_locked(Cq* cq, const core::AsyncKind& kind) FABQ_REQUIRES(mu_);
  // Removes the unread events about `f` from the domain's EQ, if one is bound.
  void purge_eq_locked(fid_t f) FABQ_REQUIRES(mu_);

  FidBox<fid_domain> box_;
  Fabric* const fabric_;
  std::string name_;
  const int av_type_;
  const std::optional<core::HmacSha256> auth_;
  std::unique_ptr<core::AsyncChannel> channel_;
  std::atomic<size_t> cqs_{0};
  std::atomic<size_t> cntrs_{0};
  std::atomic<bool> failed_{false};
  uint64_t id_ = 0;  // set by Registry::attach, before anything can look the domain up
  // After the registry's lock and before the transport's and the endpoints' (docs/locking.md).
  // Also guards AsyncTarget::name_ of its targets, which the analysis cannot name from there.
  core::Mutex mu_;
  // A leaf: nothing is called under it. Remote accesses look regions up under it.
  core::Mutex mr_mu_;
  std::unordered_map<uint64_t, Region*> regions_ FABQ_GUARDED_BY(mr_mu_);
  bool prov_key_ = false;
  bool virt_addr_ = false;
  bool mr_endpoint_ = false;
  Eq* eq_ FABQ_GUARDED_BY(mu_) = nullptr;  // bound EQ
  uint64_t eq_flags_ FABQ_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<const core::FaultRule>> rules_ FABQ_GUARDED_BY(mu_);
  std::vector<AsyncTarget*> targets_ FABQ_GUARDED_BY(mu_);
  // Per core::FaultTargetKind: how many were opened.
  int64_t opened_[4] FABQ_GUARDED_BY(mu_) = {};
  uint64_t next_serial_ FABQ_GUARDED_BY(mu_) = 1;
  xport::Transport* auto_progress_ = nullptr;  // FI_PROGRESS_AUTO: the transport kept running
};

int open_domain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context);

// fi_close for an endpoint, CQ or SRX of a domain: -FI_EBUSY while something depends on it (an
// endpoint: also while an FI_MR_ENDPOINT region is bound to it) or while events read about it
// are unacknowledged; otherwise its unread events leave the channel and the domain's EQ, and it
// is destroyed.
template <class T>
int close_target(T* o) {
  if (o == nullptr) return -FI_EINVAL;
  Domain* d = o->domain();
  // Held until it is destroyed: an event raised under mu_ (Domain::raise_locked; an SRX's
  // failure reaches its endpoints through the SRX, not the targets) never finds it half gone.
  core::MutexLock lock(d->mu_);
  // Events on a target are raised under mu_ only: between the channel's purge of its unread
  // ones and its leaving the targets, none can come.
  core::Status s = d->channel().retire(o->tracker(), [o]() -> core::Status {
    if (o->busy()) return core::Code::kBusy;
    return core::OkStatus();
  });
  if (!s.ok()) return s.to_fi();
  d->unregister_target_locked(o);
  // A CQ's or SRX's error events went to the domain's EQ: unread, they would name a fid that
  // no longer exists, and that the next object may reuse (an endpoint purges its own EQ).
  d->purge_eq_locked(o->target_fid());
  delete o;
  return 0;
}

}  // namespace fabq::prov
