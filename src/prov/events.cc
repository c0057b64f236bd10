#include "prov/events.h"

#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "core/async_event.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/link_monitor.h"
#include "prov/provider.h"
#include "prov/srx.h"

namespace fabq::prov {

FaultAction AsyncTarget::count_armed_operation() {
  FaultAction action;
  core::MutexLock lock(fault_mu_);
  if (next_err_ != 0) {
    action.err = std::exchange(next_err_, 0);
    action.prov_errno = std::exchange(next_prov_errno_, 0);
  }
  for (ArmedFault& a : armed_) {
    if (!a.trigger.on_operation()) continue;
    if (a.rule->what == core::FaultWhat::kEvent) {
      action.events.push_back(a.rule->event);
    } else if (a.rule->what == core::FaultWhat::kNet) {
      arm_net_fault(a.rule->net);
    } else if (action.err == 0) {
      action.err = a.rule->err;
      action.prov_errno = a.rule->prov_errno;
    }
  }
  return action;
}

void AsyncTarget::arm_next_failure(int err, int prov_errno) {
  core::MutexLock lock(fault_mu_);
  next_err_ = err;
  next_prov_errno_ = prov_errno;
  has_faults_.store(true, std::memory_order_release);
}

namespace {

// One thread that runs callbacks at their deadlines; callbacks run without its lock held.
class Timers {
 public:
  Timers() : thread_([this] { loop(); }) {}
  ~Timers() {
    {
      core::MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void add(uint64_t delay_ms, std::function<void()> fn) FABQ_EXCLUDES(mu_) {
    {
      core::MutexLock lock(mu_);
      due_.emplace(std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms),
                   std::move(fn));
    }
    cv_.notify_all();
  }

 private:
  void loop() FABQ_EXCLUDES(mu_) {
    std::function<void()> fn;
    for (;;) {
      {
        core::MutexLock lock(mu_);
        if (!next_locked(&fn)) return;
      }
      fn();
      fn = nullptr;
    }
  }
  // Waits for the first callback that is due and takes it; false once stopped.
  bool next_locked(std::function<void()>* fn) FABQ_REQUIRES(mu_) {
    while (!stop_) {
      if (due_.empty()) {
        cv_.wait(mu_);
        continue;
      }
      if (cv_.wait_until(mu_, due_.begin()->first)) continue;  // woken: look again
      auto first = due_.begin();
      if (first == due_.end() || first->first > std::chrono::steady_clock::now()) continue;
      *fn = std::move(first->second);
      due_.erase(first);
      return true;
    }
    return false;
  }

  core::Mutex mu_;  // a leaf: callbacks run without it
  core::CondVar cv_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due_
      FABQ_GUARDED_BY(mu_);
  bool stop_ FABQ_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct Device {
  bool active = false;
  std::vector<Domain*> domains;
};

uint32_t event_for(LinkChange c) {
  switch (c) {
    case LinkChange::kPortActive:
      return FI_FABQ_EVENT_PORT_ACTIVE;
    case LinkChange::kPortErr:
      return FI_FABQ_EVENT_PORT_ERR;
    case LinkChange::kAddrChange:
      return FI_FABQ_EVENT_ADDR_CHANGE;
    case LinkChange::kGidChange:
      return FI_FABQ_EVENT_GID_CHANGE;
    case LinkChange::kDeviceGone:
      return FI_FABQ_EVENT_DEVICE_FATAL;
  }
  return 0;
}

// Puts the event in the domain's channel and, for an error kind, on the object's EQ first, so
// that a reader woken by the channel finds the EQ entry already there.
void deliver(Domain* d, fid_t fid, core::AsyncTracker* tracker, Eq* eq,
             const core::AsyncKind& kind) {
  if (kind.error && eq != nullptr) {
    core::EqError err{.fid = fid,
                      .context = fid->context,
                      .err = kind.err,
                      .prov_errno = static_cast<int>(kind.type)};
    // A full EQ enters the overrun state, which reports itself: the event is not lost silently.
    if (!eq->queue().write_error(err).ok()) {
      FABQ_WARN(FI_LOG_EQ, "%s not written: the EQ is overrun\n", kind.name);
    }
  }
  core::AsyncEvent ev{.type = kind.type,
                      .port_num = kind.object == core::AsyncObject::kPort ? 1u : 0u,
                      .fid = fid,
                      .context = fid->context,
                      .tracker = tracker};
  d->channel().push(ev);
  FABQ_INFO(FI_LOG_DOMAIN, "%s: %s on %p\n", d->name().c_str(), kind.name, static_cast<void*>(fid));
}

}  // namespace

struct Registry::Impl {
  core::Mutex mu;
  std::map<std::string, Device> devices FABQ_GUARDED_BY(mu);
  std::map<uint64_t, Domain*> domains FABQ_GUARDED_BY(mu);
  uint64_t next_id FABQ_GUARDED_BY(mu) = 1;
  std::unique_ptr<LinkMonitor> monitor FABQ_GUARDED_BY(mu);
  std::unique_ptr<Timers> timers FABQ_GUARDED_BY(mu);

  // The open domain with this id, or null.
  Domain* domain_locked(uint64_t id) FABQ_REQUIRES(mu) {
    auto it = domains.find(id);
    return it != domains.end() ? it->second : nullptr;
  }

  // A port or device event on every domain of `ifname`, each under its own lock in turn (taken
  // by Domain::eq()): the caller holds no domain's.
  void raise_device_locked(const std::string& ifname, uint32_t type) FABQ_REQUIRES(mu) {
    const core::AsyncKind* kind = core::async_kind(type);
    if (kind == nullptr) return;
    auto it = devices.find(ifname);
    if (it == devices.end()) return;
    if (type == FI_FABQ_EVENT_PORT_ERR) it->second.active = false;
    if (type == FI_FABQ_EVENT_PORT_ACTIVE) it->second.active = true;
    for (Domain* d : it->second.domains) {
      if (type == FI_FABQ_EVENT_DEVICE_FATAL) d->fail();
      deliver(d, &d->handle()->fid, d->tracker(), d->eq(), *kind);
    }
  }

  void schedule_locked(Registry* self, uint64_t domain_id, uint64_t delay_ms,
                       uint64_t target_serial, std::shared_ptr<const core::FaultRule> rule)
      FABQ_REQUIRES(mu) {
    if (!timers) timers = std::make_unique<Timers>();
    timers->add(delay_ms, [self, domain_id, target_serial, rule] {
      self->fire(domain_id, target_serial, rule);
    });
  }

  // Takes `d` out of the registry (its close). The threads go with the last domain: they are
  // handed to the caller, to be stopped once it has released the lock they may be waiting for.
  void detach_locked(Domain* d, std::unique_ptr<LinkMonitor>* old_monitor,
                     std::unique_ptr<Timers>* old_timers) FABQ_REQUIRES(mu) {
    domains.erase(d->id());
    auto it = devices.find(d->name());
    if (it != devices.end()) {
      std::erase(it->second.domains, d);
      if (it->second.domains.empty()) {
        if (monitor) monitor->unwatch(d->name());
        devices.erase(it);
      }
    }
    if (domains.empty()) {
      *old_monitor = std::move(monitor);
      *old_timers = std::move(timers);
    }
  }
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}

Registry::~Registry() = default;

namespace {

// Not a static: its destructor would run at exit before libfabric's fi_fini, while the monitor's
// thread may still be looking domains up. unload() frees it once the threads are stopped.
core::LazyGlobal<Registry> g_registry;

}  // namespace

Registry& Registry::get() {
  return g_registry.get();
}

void Registry::unload() {
  if (Registry* r = g_registry.if_made()) r->stop_threads();
  g_registry.free();
}

void Registry::stop_threads() {
  Impl& r = *impl_;
  std::unique_ptr<LinkMonitor> monitor;
  std::unique_ptr<Timers> timers;
  {
    core::MutexLock lock(r.mu);
    monitor = std::move(r.monitor);
    timers = std::move(r.timers);
  }
  // Their threads may be waiting for the registry's lock: stop them after releasing it.
  monitor.reset();
  timers.reset();
}

void Registry::attach(Domain* d) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  d->id_ = r.next_id++;
  r.domains[d->id_] = d;
  if (!r.monitor) {
    r.monitor = std::make_unique<LinkMonitor>([this](const std::string& ifname, LinkChange change) {
      if (uint32_t type = event_for(change)) raise_device(ifname, type);
    });
    if (!r.monitor->ok()) {
      FABQ_WARN(FI_LOG_DOMAIN, "netlink unavailable: port events come from injection only\n");
    }
  }
  auto [it, fresh] = r.devices.try_emplace(d->name());
  if (fresh) {
    r.monitor->watch(d->name());
    it->second.active = query_link(d->name()).active;
  }
  it->second.domains.push_back(d);
}

core::Status Registry::close_domain(Domain* d) {
  Impl& r = *impl_;
  std::unique_ptr<LinkMonitor> old_monitor;
  std::unique_ptr<Timers> old_timers;
  core::Status s;
  {
    core::MutexLock lock(r.mu);
    // The domain's own events are raised under this lock only (raise_device_locked): between
    // the channel's purge of its unread ones and its leaving the device, none can come.
    s = d->channel().retire(d->tracker(), [d]() -> core::Status {
      if (d->busy()) return core::Code::kBusy;
      return core::OkStatus();
    });
    if (s.ok()) r.detach_locked(d, &old_monitor, &old_timers);
  }
  // Their threads may be waiting for the registry's lock: stop them after releasing it.
  old_monitor.reset();
  old_timers.reset();
  if (s.ok()) delete d;
  return s;
}

void Registry::raise_device(const std::string& ifname, uint32_t type) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  r.raise_device_locked(ifname, type);
}

int Registry::port_state(const std::string& ifname) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  auto it = r.devices.find(ifname);
  if (it == r.devices.end()) return -FI_EINVAL;
  return it->second.active ? FI_FABQ_PORT_ACTIVE : FI_FABQ_PORT_DOWN;
}

void Registry::schedule(uint64_t domain_id, uint64_t delay_ms, uint64_t target_serial,
                        std::shared_ptr<const core::FaultRule> rule) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  r.schedule_locked(this, domain_id, delay_ms, target_serial, std::move(rule));
}

void Registry::fire(uint64_t domain_id, uint64_t target_serial,
                    const std::shared_ptr<const core::FaultRule>& rule) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  Domain* d = r.domain_locked(domain_id);
  if (d == nullptr) return;
  bool again = false;
  uint32_t device_event = 0;
  {
    core::MutexLock dlock(d->mu_);
    device_event = d->fire_timed_locked(target_serial, rule, &again);
  }
  // A port or device event reaches every domain of the device, each under its own lock.
  if (device_event != 0) r.raise_device_locked(d->name(), device_event);
  if (again) r.schedule_locked(this, domain_id, rule->ms, target_serial, rule);
}

void Registry::raise_on(uint64_t domain_id, uint64_t target_serial, uint32_t type) {
  Impl& r = *impl_;
  core::MutexLock lock(r.mu);
  Domain* d = r.domain_locked(domain_id);
  if (d == nullptr) return;
  {
    core::MutexLock dlock(d->mu_);
    AsyncTarget* t = d->find_target_locked(target_serial);
    if (t == nullptr) return;
    if (!is_device_event(type)) {
      d->raise_locked(t, type);
      return;
    }
  }
  r.raise_device_locked(d->name(), type);
}

bool is_device_event(uint32_t type) {
  const core::AsyncKind* kind = core::async_kind(type);
  return kind != nullptr &&
         (kind->object == core::AsyncObject::kPort || kind->object == core::AsyncObject::kDevice);
}

void raise(Domain* d, AsyncTarget* t, uint32_t type) {
  if (is_device_event(type)) {
    Registry::get().raise_device(d->name(), type);
    return;
  }
  core::MutexLock lock(d->mu_);
  d->raise_locked(t, type);
}

void Domain::raise_locked(AsyncTarget* t, uint32_t type) {
  // Events this one's effects raise (an SRX's failure: EP_FATAL on each of its endpoints) are
  // applied after it, in order, each with all its effects before the next: the order in which
  // their causes arose, under this one acquisition of mu_.
  std::vector<Raised> work{{t, type}};
  for (size_t i = 0; i < work.size(); ++i) {
    const Raised now = work[i];  // a copy: apply_locked may grow `work`
    apply_locked(now, &work);
  }
}

void Domain::apply_locked(const Raised& e, std::vector<Raised>* more) {
  const core::AsyncKind* kind = core::async_kind(e.type);
  // Port and device events are the registry's (is_device_event): callers route them there.
  if (kind == nullptr || e.target == nullptr || is_device_event(e.type)) return;
  AsyncTarget* const t = e.target;
  switch (t->kind()) {
    case core::FaultTargetKind::kEndpoint: {
      auto* ep = static_cast<Endpoint*>(t);
      deliver(this, t->target_fid(), t->tracker(), ep->eq(), *kind);
      if (e.type == FI_FABQ_EVENT_EP_FATAL || e.type == FI_FABQ_EVENT_EP_REQ_ERR ||
          e.type == FI_FABQ_EVENT_EP_ACCESS_ERR) {
        const Endpoint::Failure f = ep->fail(e.type);
        // Its receives' error completions may overrun its CQ: events with no effect beyond the
        // CQ, applied here, before what the endpoint's failure raises next.
        for (uint32_t type : f.cq_events) {
          if (const core::AsyncKind* cq_kind = core::async_kind(type)) {
            apply_cq_locked(f.cq, *cq_kind);
          }
        }
        // An endpoint sharing a receive context stops consuming from it (verbs' QP
        // LAST_WQE_REACHED).
        if (f.first && ep->srx() != nullptr) {
          deliver(this, t->target_fid(), t->tracker(), ep->eq(),
                  *core::async_kind(FI_FABQ_EVENT_LAST_WQE_REACHED));
        }
      }
      break;
    }
    case core::FaultTargetKind::kCq:
      apply_cq_locked(static_cast<Cq*>(t), *kind);
      break;
    case core::FaultTargetKind::kSrx: {
      auto* srx = static_cast<Srx*>(t);
      deliver(this, t->target_fid(), t->tracker(), eq_, *kind);
      if (e.type == FI_FABQ_EVENT_SRX_ERR && srx->fail()) {
        for (Endpoint* ep : srx->endpoints()) more->push_back({ep, FI_FABQ_EVENT_EP_FATAL});
      }
      break;
    }
    case core::FaultTargetKind::kDomain:
      break;
  }
}

void Domain::apply_cq_locked(Cq* cq, const core::AsyncKind& kind) {
  if (cq == nullptr) return;
  deliver(this, cq->target_fid(), cq->tracker(), eq_, kind);
  cq->queue().enter_overrun();
}

}  // namespace fabq::prov

namespace fabq::prov {
namespace {

Domain* domain_of(fid_domain* d) {
  return Domain::from_fid(d != nullptr ? &d->fid : nullptr);
}

int get_event(fid_domain* dom, fi_fabq_async_event* event, int timeout) {
  Domain* d = domain_of(dom);
  if (d == nullptr || event == nullptr) return -FI_EINVAL;
  auto r = d->channel().get(timeout);
  if (!r.ok()) return r.status().to_fi();
  const core::AsyncEvent& ev = r.value();
  *event = {.type = ev.type,
            .port_num = ev.port_num,
            .fid = ev.fid,
            .context = ev.context,
            .time_ns = ev.time_ns,
            .seq = ev.seq};
  return 0;
}

int get_fd(fid_domain* dom, int* fd) {
  Domain* d = domain_of(dom);
  if (d == nullptr || fd == nullptr) return -FI_EINVAL;
  *fd = d->channel().fd();
  return 0;
}

int ack_event(fid_domain* dom, const fi_fabq_async_event* event) {
  Domain* d = domain_of(dom);
  if (d == nullptr || event == nullptr) return -FI_EINVAL;
  return d->channel().ack(event->seq, event->fid).to_fi();
}

const char* event_type_str(uint32_t type) {
  return core::async_event_type_str(type);
}

int inject(fid_domain* dom, const char* spec) {
  Domain* d = domain_of(dom);
  if (d == nullptr || spec == nullptr) return -FI_EINVAL;
  std::vector<core::FaultRule> rules;
  std::string why;
  if (!core::parse_fault_spec(spec, &rules, &why)) {
    FABQ_WARN(FI_LOG_DOMAIN, "inject: %s\n", why.c_str());
    return -FI_EINVAL;
  }
  d->add_rules(rules);
  return 0;
}

int set_name(fid* f, const char* name) {
  if (f == nullptr) return -FI_EINVAL;
  AsyncTarget* t = nullptr;
  Domain* d = nullptr;
  if (Endpoint* e = Endpoint::from_fid(f)) {
    t = e;
    d = e->domain();
  } else if (Cq* cq = Cq::from_fid(f)) {
    t = cq;
    d = cq->domain();
  } else if (Srx* s = Srx::from_fid(f)) {
    t = s;
    d = s->domain();
  }
  if (t == nullptr) return -FI_EINVAL;
  return d->set_target_name(t, name);
}

int srx_arm_limit(fid_ep* srx, size_t limit) {
  Srx* s = Srx::from_fid(srx != nullptr ? &srx->fid : nullptr);
  if (s == nullptr) return -FI_EINVAL;
  s->arm_limit(limit);
  return 0;
}

int port_state(fid_domain* dom) {
  Domain* d = domain_of(dom);
  if (d == nullptr) return -FI_EINVAL;
  return Registry::get().port_state(d->name());
}

fi_fabq_async_ops g_async_ops = {
    .size = sizeof(fi_fabq_async_ops),
    .get_event = get_event,
    .get_fd = get_fd,
    .ack_event = ack_event,
    .event_type_str = event_type_str,
    .inject = inject,
    .set_name = set_name,
    .srx_arm_limit = srx_arm_limit,
    .port_state = port_state,
};

}  // namespace

int open_async_ops(Domain*, uint64_t flags, void** ops) {
  if (flags != 0) return -FI_EBADFLAGS;
  *ops = &g_async_ops;
  return 0;
}

}  // namespace fabq::prov
