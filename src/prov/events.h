// fabq provider: asynchronous events and fault injection (include/fabq/fi_fabq.h).
//
// Who does what:
//   - AsyncTarget is embedded in every object an event can be about (domain, endpoint, CQ,
//     SRX): the channel's accounting for it, its index and name for fault targets, and the
//     fault triggers armed on it.
//   - Each Domain owns a core::AsyncChannel. raise() puts an event in it and, for error kinds,
//     an fi_eq_err_entry on the EQ bound to the object, and applies the event's effect
//     (endpoint failure, CQ overrun, SRX failure, domain failure, port state).
//   - Devices (one per interface name) are process-wide: port and device events reach every
//     domain opened on that interface. The registry starts the link monitor (netlink) and the
//     fault timer thread with the first domain and stops them with the last.
//   - Code holding a lock under which raise() may not be called (an endpoint's, an SRX's, the
//     transport's) queues its events in its fabric's outbox instead (prov/outbox.h).
//
// Locks (docs/locking.md): the registry's mutex, then a domain's (Domain::mu_), each taken once
// per call chain. An event's effects that raise more events (an endpoint's failure completes its
// receives in error, which may overrun its CQ; an SRX's failure fails each endpoint on it) are
// applied under the one acquisition of the domain's lock the first event made
// (Domain::raise_locked). Port and device events reach every domain of the device, under the
// registry's lock and each domain's in turn: they are raised with no domain's lock held.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/async_channel.h"
#include "core/fault_spec.h"
#include "core/lazy_global.h"
#include "core/mutex.h"
#include "fabq/fi_fabq.h"

namespace fabq::prov {

class Domain;

// A fault rule armed on one object.
struct ArmedFault {
  std::shared_ptr<const core::FaultRule> rule;
  core::FaultTrigger trigger;
};

// What a counted operation must do, decided by the triggers that fired on it.
struct FaultAction {
  int err = 0;  // nonzero: the operation completes in error with this err / prov_errno
  int prov_errno = 0;
  std::vector<uint32_t> events;  // events to raise on the object after the operation
  bool any() const { return err != 0 || !events.empty(); }
};

class AsyncTarget {
 public:
  AsyncTarget(core::FaultTargetKind kind, fid_t fid) : kind_(kind), fid_(fid) {}
  core::FaultTargetKind kind() const { return kind_; }
  fid_t target_fid() const { return fid_; }
  core::AsyncTracker* tracker() { return &tracker_; }
  // Unique in the domain once registered (Domain::register_target); 0 before. An endpoint
  // opened from a connection request is reachable by upcalls just before it is registered: what
  // they queue then names serial 0 and is dropped, as for an object not open yet. Relaxed: the
  // serial orders nothing, it only names the object.
  uint64_t serial() const { return serial_.load(std::memory_order_relaxed); }

  // Whether a fault rule was ever armed on it (acquire, pairing with the release that armed
  // one): if not, count_operation() decides nothing and take_net_fault() returns kNone.
  bool faults_armed() const { return has_faults_.load(std::memory_order_acquire); }
  // Counts one operation against the armed triggers. Cheap when nothing is armed (one acquire
  // load, pairing with the release that armed one). Takes fault_mu_, a leaf: any caller.
  FaultAction count_operation() FABQ_EXCLUDES(fault_mu_) {
    if (!faults_armed()) [[likely]]
      return {};
    return count_armed_operation();
  }
  // A kNow/kMs error rule on an endpoint fails its next operation: taken here.
  void arm_next_failure(int err, int prov_errno) FABQ_EXCLUDES(fault_mu_);
  // A net= rule fired on an endpoint: its connection applies the fault once (take_net_fault()
  // returns it, then kNone). The order: release here, acquire in take.
  void arm_net_fault(core::NetFault f) {
    net_fault_.store(static_cast<uint8_t>(f), std::memory_order_release);
  }
  core::NetFault take_net_fault() {
    if (net_fault_.load(std::memory_order_relaxed) == 0) [[likely]]
      return core::NetFault::kNone;
    return static_cast<core::NetFault>(net_fault_.exchange(0, std::memory_order_acquire));
  }
  // The armed fault if it is `f` (then nothing is armed any more); else false, and what is
  // armed stays for what applies it. For an endpoint whose operations apply different faults
  // (a datagram endpoint: drop and corrupt to its sends, reject and timeout to its joins).
  bool take_net_fault(core::NetFault f) {
    auto want = static_cast<uint8_t>(f);
    if (net_fault_.load(std::memory_order_relaxed) != want) [[likely]]
      return false;
    return net_fault_.compare_exchange_strong(want, 0, std::memory_order_acquire);
  }

 private:
  friend class Domain;
  FaultAction count_armed_operation() FABQ_EXCLUDES(fault_mu_);

  const core::FaultTargetKind kind_;
  const fid_t fid_;
  core::AsyncTracker tracker_;       // guarded by the domain's channel
  int64_t index_ = -1;               // order of opening in the domain, per kind
  std::string name_;                 // set_name(); guarded by Domain::mu_
  std::atomic<uint64_t> serial_{0};  // unique in the domain; timers refer to targets by it
  core::Mutex fault_mu_;             // a leaf: nothing is called while it is held
  std::vector<ArmedFault> armed_ FABQ_GUARDED_BY(fault_mu_);
  std::atomic<bool> has_faults_{false};  // armed_ or next_err_ was ever set (release, under it)
  std::atomic<uint8_t> net_fault_{0};
  int next_err_ FABQ_GUARDED_BY(fault_mu_) = 0;
  int next_prov_errno_ FABQ_GUARDED_BY(fault_mu_) = 0;
};

// fi_open_ops(domain, FI_FABQ_ASYNC_OPS, ...).
int open_async_ops(Domain* domain, uint64_t flags, void** ops);

// Whether `type` is a port or device event: one that reaches every domain of the device
// (Registry::raise_device) rather than one object.
bool is_device_event(uint32_t type);

// Raises `type` on `target` (owned by `domain`; for port and device kinds, the domain's own
// target), with every effect fi_fabq.h lists. Null `target`, or an unknown type: nothing. Takes
// the domain's lock, or for port and device kinds the registry's (then each domain's of the
// device): the caller holds no provider lock (registry, domain, endpoint, SRX, passive endpoint)
// and none of the transport's; code that does queues the event in its fabric's outbox.
void raise(Domain* domain, AsyncTarget* target, uint32_t type);
// Each of `types`, in order (what a counted operation's fault triggers decided), each as above.
// Inline so that the usual empty list costs one test.
inline void raise(Domain* domain, AsyncTarget* target, const std::vector<uint32_t>& types) {
  for (uint32_t type : types) raise(domain, target, type);
}

// Process-wide devices. attach() is called when a domain opens (it learns the port state and
// starts the monitor), close_domain() when it closes.
class Registry {
 public:
  static Registry& get();
  void attach(Domain* d);
  // The domain's close: kBusy while it has unacknowledged events or open children, else
  // detaches it and destroys it.
  core::Status close_domain(Domain* d);
  // Raises a port or device event on every domain of `ifname`. Takes the registry's lock, then
  // each of those domains' in turn: the caller holds neither.
  void raise_device(const std::string& ifname, uint32_t type);
  int port_state(const std::string& ifname);
  // Fires `rule` on the target with this serial of the domain with this id after delay_ms,
  // unless the domain or the target has closed by then. Takes the registry's lock.
  void schedule(uint64_t domain_id, uint64_t delay_ms, uint64_t target_serial,
                std::shared_ptr<const core::FaultRule> rule);
  // Raises `type` on the target with this serial of the domain with this id, if both are open
  // (a port or device event: on every domain of that domain's device). What an outbox's
  // entries are published with (prov/outbox.h). The caller holds no provider lock, as for
  // raise().
  void raise_on(uint64_t domain_id, uint64_t target_serial, uint32_t type);
  // Fires `rule` as schedule() would, now, on the calling thread, which holds no provider lock.
  void fire(uint64_t domain_id, uint64_t target_serial,
            const std::shared_ptr<const core::FaultRule>& rule);
  // The provider is being unloaded (fi_provider::cleanup): stops and joins the link monitor's
  // and the fault timers' threads, whatever is still open, since their code is about to be
  // unmapped, then frees the registry. Domains left open report no more port or device events
  // or timed faults. Call once nothing else of fabq's runs (the transport's threads stopped).
  static void unload();

 private:
  // Its lock and everything it guards (events.cc); the *_locked functions that need the lock
  // are Impl's, so that the analysis can name it.
  struct Impl;
  friend class core::LazyGlobal<Registry>;
  Registry();
  ~Registry();
  void stop_threads();
  std::unique_ptr<Impl> impl_;
};

}  // namespace fabq::prov
