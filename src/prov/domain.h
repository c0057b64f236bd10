// fabq provider: the domain object (fi_domain(3)).
//
// A domain is one network interface (its name, e.g. "lo") of a fabric. It opens completion
// queues, counters and poll sets, counting CQs and counters against the cq_cnt and cntr_cnt
// it advertises. fi_domain_bind() attaches an EQ (flags 0 or FI_REG_MR) for the domain's
// asynchronous events; the EQ then cannot be closed before the domain (-FI_EBUSY). It opens
// address vectors (prov/av.h) of its av_type; memory registration returns -FI_ENOSYS.
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
#include <mutex>
#include <string>
#include <vector>

#include "core/async_channel.h"
#include "core/fault_spec.h"
#include "prov/events.h"
#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

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
  // The EQ bound with fi_domain_bind, or null.
  Eq* eq();
  // domain_attr->av_type of the fi_info it was opened with: the only AV type it opens, unless
  // FI_AV_UNSPEC (prov/av.h).
  int av_type() const { return av_type_; }

  // DEVICE_FATAL: the domain opens nothing more.
  void fail() { failed_.store(true, std::memory_order_release); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Fault targets: register when an endpoint, CQ or SRX is fully open (rules that name it
  // fire or arm now); unregister at its close, holding mu_ (see close_target()).
  void register_target(AsyncTarget* t);
  void unregister_target_locked(AsyncTarget* t);
  // Installs rules; those with a matching open target arm or fire at once.
  void add_rules(const std::vector<core::FaultRule>& rules);
  int set_target_name(AsyncTarget* t, const char* name);
  // An object was opened on the domain: the domain's operation for ops=/prob= rules.
  void note_operation();
  // Called by the registry's timer with its lock held.
  void fire_timed(uint64_t serial, const std::shared_ptr<const core::FaultRule>& rule);

  bool acquire_cq_slot();
  void release_cq_slot() { cqs_.fetch_sub(1, std::memory_order_relaxed); }
  bool acquire_cntr_slot();
  void release_cntr_slot() { cntrs_.fetch_sub(1, std::memory_order_relaxed); }

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
  // Arms `rule` on `t` if it names it; kNow and kMs rules are queued in `later`, to be fired
  // or scheduled once mu_ is released (the registry's lock comes first).
  void arm_locked(AsyncTarget* t, const std::shared_ptr<const core::FaultRule>& rule,
                  std::vector<Pending>* later);
  void run_pending(const std::vector<Pending>& later);
  AsyncTarget* find_target_locked(uint64_t serial);
  void fire_locked(AsyncTarget* t, const core::FaultRule& rule);

  FidBox<fid_domain> box_;
  Fabric* const fabric_;
  std::string name_;
  const int av_type_;
  std::unique_ptr<core::AsyncChannel> channel_;
  std::atomic<size_t> cqs_{0};
  std::atomic<size_t> cntrs_{0};
  std::atomic<bool> failed_{false};
  uint64_t id_ = 0;  // set by Registry::attach
  std::recursive_mutex mu_;
  Eq* eq_ = nullptr;  // bound EQ; guarded by mu_
  uint64_t eq_flags_ = 0;
  // Guarded by mu_:
  std::vector<std::shared_ptr<const core::FaultRule>> rules_;
  std::vector<AsyncTarget*> targets_;
  int64_t opened_[4] = {};  // per core::FaultTargetKind: how many were opened
  uint64_t next_serial_ = 1;
  xport::Transport* auto_progress_ = nullptr;  // FI_PROGRESS_AUTO: the transport kept running
};

int open_domain(fid_fabric* fabric, fi_info* info, fid_domain** domain, void* context);

// fi_close for an endpoint, CQ or SRX of a domain: -FI_EBUSY while something depends on it or
// while events read about it are unacknowledged; otherwise its unread events leave the
// channel and it is destroyed.
template <class T>
int close_target(T* o) {
  if (o == nullptr) return -FI_EINVAL;
  Domain* d = o->domain();
  std::lock_guard lock(d->mu_);
  core::Status s = d->channel().retire(o->tracker(), [&]() -> core::Status {
    if (o->busy()) return core::Code::kBusy;
    d->unregister_target_locked(o);
    return core::OkStatus();
  });
  if (!s.ok()) return s.to_fi();
  delete o;
  return 0;
}

}  // namespace fabq::prov
