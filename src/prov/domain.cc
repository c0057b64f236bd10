#include "prov/domain.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/hmac.h"
#include "prov/auth.h"
#include "prov/av.h"
#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/getinfo.h"
#include "prov/mr.h"
#include "prov/noop.h"
#include "prov/provider.h"
#include "prov/rma_ops.h"
#include "prov/sep.h"
#include "prov/srx.h"
#include "prov/stx.h"
#include "prov/wait_set.h"

namespace fabq::prov {

struct DomainOps {
  static int close(fid* f) {
    Domain* d = Domain::from_fid(f);
    if (d == nullptr) return -FI_EINVAL;
    return Registry::get().close_domain(d).to_fi();
  }

  static int ops_open(fid* f, const char* name, uint64_t flags, void** ops, void*) {
    Domain* d = Domain::from_fid(f);
    if (d == nullptr || name == nullptr || ops == nullptr) return -FI_EINVAL;
    if (std::strcmp(name, FI_FABQ_ASYNC_OPS) != 0) return -FI_ENOSYS;
    return open_async_ops(d, flags, ops);
  }

  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Domain* d = Domain::from_fid(f);
    if (d == nullptr) return -FI_EINVAL;
    Eq* eq = Eq::from_fid(bfid);
    if (eq == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_REG_MR) != 0) return -FI_EBADFLAGS;
    core::MutexLock lock(d->mu_);
    if (d->eq_ != nullptr) return -FI_EBUSY;
    d->eq_ = eq;
    d->eq_flags_ = flags;
    eq->hold();
    return 0;
  }

  static int endpoint2(fid_domain* dom, fi_info* info, fid_ep** ep, uint64_t flags, void* context) {
    if (flags != 0) return -FI_EBADFLAGS;
    return open_endpoint(dom, info, ep, context);
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = bind,
      .control = no_control,
      .ops_open = ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_domain domain_ops_ = {
      .size = sizeof(fi_ops_domain),
      .av_open = open_av,
      .cq_open = open_cq,
      .endpoint = open_endpoint,
      .scalable_ep = open_sep,
      .cntr_open = open_cntr,
      .poll_open = open_poll_set,
      .stx_ctx = open_stx,
      .srx_ctx = open_srx,
      .query_atomic = query_atomic,
      .query_collective = enosys<fid_domain*, enum fi_collective_op, fi_collective_attr*, uint64_t>,
      .endpoint2 = endpoint2,
  };
  static inline fi_ops_mr mr_ops_ = {
      .size = sizeof(fi_ops_mr),
      .reg = mr_reg,
      .regv = mr_regv,
      .regattr = mr_regattr,
  };
};

bool Domain::add_region(Region* r) {
  core::MutexLock lock(mr_mu_);
  if (regions_.size() >= kMrCount) return false;
  if (prov_key_) {
    // A key a peer cannot guess. 0 and FI_KEY_NOTAVAIL are never handed out.
    for (;;) {
      uint64_t key = 0;
      if (!core::fill_random(&key, sizeof(key)).ok()) return false;
      if (key == 0 || key == FI_KEY_NOTAVAIL || regions_.contains(key)) continue;
      r->key = key;
      break;
    }
  } else if (regions_.contains(r->key)) {
    return false;
  }
  regions_.emplace(r->key, r);
  return true;
}

void Domain::remove_region(Region* r) {
  Endpoint* ep = nullptr;
  {
    core::MutexLock lock(mr_mu_);
    auto it = regions_.find(r->key);
    if (it != regions_.end() && it->second == r) regions_.erase(it);
    // A remote access still using the record reads its bytes and counters, never its endpoint.
    ep = std::exchange(r->ep, nullptr);
  }
  if (ep != nullptr) ep->release();
}

xport::RmaStatus Domain::acquire_region(uint64_t key, uint64_t addr, size_t len, uint64_t access,
                                        const Endpoint* ep, RegionUse* use) {
  core::MutexLock lock(mr_mu_);
  auto it = regions_.find(key);
  if (it == regions_.end()) return xport::RmaStatus::kBadKey;
  Region* r = it->second;
  if (!r->enabled || (mr_endpoint_ && r->ep != ep)) return xport::RmaStatus::kBadKey;
  // addr - first is the offset; no comparison computes addr + len, which a peer can make wrap.
  // at = base + offset stays inside the region since no region wraps (mr.cc refuses them).
  if (addr < r->first || addr - r->first > r->len || len > r->len - (addr - r->first)) {
    return xport::RmaStatus::kOutOfBounds;
  }
  if ((r->access & access) != access) return xport::RmaStatus::kNotGranted;
  r->refs.fetch_add(1, std::memory_order_relaxed);
  use->region = r;
  use->at = r->base + (addr - r->first);
  use->cntr = access == FI_REMOTE_READ ? r->read_cntr : r->write_cntr;
  return xport::RmaStatus::kOk;
}

void Domain::purge_eq_locked(fid_t f) {
  if (eq_ != nullptr) eq_->queue().purge(f);
}

Eq* Domain::reg_mr_eq() {
  core::MutexLock lock(mu_);
  return (eq_flags_ & FI_REG_MR) != 0 ? eq_ : nullptr;
}

Domain* Domain::from_fid(const fid* f) {
  return Object::from<Domain, fid_domain>(f, FI_CLASS_DOMAIN, &DomainOps::fi_ops_);
}

Domain::Domain(Fabric* fabric, const fi_info& info, std::unique_ptr<core::AsyncChannel> channel,
               void* context)
    : Object(FI_CLASS_DOMAIN, fabric),
      AsyncTarget(core::FaultTargetKind::kDomain, &box_.fid.fid),
      fabric_(fabric),
      name_(info.domain_attr->name),
      av_type_(raw_enum(info.domain_attr->av_type)),
      auth_(domain_auth_key_of(info)),
      channel_(std::move(channel)) {
  init_fid(&box_.fid.fid, FI_CLASS_DOMAIN, context, &DomainOps::fi_ops_);
  box_.fid.ops = &DomainOps::domain_ops_;
  box_.fid.mr = &DomainOps::mr_ops_;
  box_.owner = this;
  // FI_PROGRESS_AUTO, when asked for: the transport's progress thread runs while the domain
  // is open, as if a thread were always waiting (xport/transport.h).
  const fi_domain_attr* a = info.domain_attr;
  if (a != nullptr) {
    // FI_MR_BASIC (the old API's mode, or its bit in mr_mode) is provider keys and virtual
    // addresses (fi_domain(3)).
    const bool basic = a->mr_mode == FI_MR_BASIC || (a->mr_mode & FI_MR_BASIC) != 0;
    const bool scalable = a->mr_mode == FI_MR_SCALABLE;
    prov_key_ = !scalable && (basic || (a->mr_mode & FI_MR_PROV_KEY) != 0);
    virt_addr_ = !scalable && (basic || (a->mr_mode & FI_MR_VIRT_ADDR) != 0);
    mr_endpoint_ = !scalable && (a->mr_mode & FI_MR_ENDPOINT) != 0;
  }
  if (a != nullptr &&
      (a->data_progress == FI_PROGRESS_AUTO || a->control_progress == FI_PROGRESS_AUTO)) {
    auto_progress_ = fabric->transport();
    auto_progress_->begin_wait();
  }
}

Domain::~Domain() {
  if (auto_progress_ != nullptr) auto_progress_->end_wait();
  if (eq_ != nullptr) eq_->release();
}

bool Domain::acquire_cq_slot() {
  if (cqs_.fetch_add(1, std::memory_order_relaxed) >= params().cq_max_count) {
    cqs_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool Domain::acquire_cntr_slot() {
  if (cntrs_.fetch_add(1, std::memory_order_relaxed) >= params().cntr_max_count) {
    cntrs_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

Eq* Domain::eq() {
  core::MutexLock lock(mu_);
  return eq_;
}

void Domain::register_target(AsyncTarget* t) {
  std::vector<Pending> later;
  {
    core::MutexLock lock(mu_);
    t->serial_.store(next_serial_++, std::memory_order_relaxed);
    t->index_ = opened_[static_cast<int>(t->kind())]++;
    targets_.push_back(t);
    for (const auto& r : rules_) arm_locked(t, r, &later);
  }
  run_pending(later);
}

void Domain::unregister_target_locked(AsyncTarget* t) {
  std::erase(targets_, t);
}

void Domain::add_rules(const std::vector<core::FaultRule>& rules) {
  std::vector<Pending> later;
  {
    core::MutexLock lock(mu_);
    for (const core::FaultRule& rule : rules) {
      auto r = std::make_shared<const core::FaultRule>(rule);
      rules_.push_back(r);
      arm_locked(this, r, &later);
      for (AsyncTarget* t : targets_) arm_locked(t, r, &later);
    }
  }
  run_pending(later);
}

int Domain::set_target_name(AsyncTarget* t, const char* name) {
  if (name == nullptr || name[0] == '\0' || std::strlen(name) > 63) return -FI_EINVAL;
  std::vector<Pending> later;
  {
    core::MutexLock lock(mu_);
    if (t->name_ == name) return 0;
    t->name_ = name;
    for (const auto& r : rules_) {
      if (!r->target.name.empty()) arm_locked(t, r, &later);
    }
  }
  run_pending(later);
  return 0;
}

void Domain::arm_locked(AsyncTarget* t, const std::shared_ptr<const core::FaultRule>& rule,
                        std::vector<Pending>* later) {
  const core::FaultTarget& want = rule->target;
  if (want.kind != t->kind()) return;
  if (want.kind != core::FaultTargetKind::kDomain) {
    const bool by_index = want.index >= 0 && want.index == t->index_;
    const bool by_name = !want.name.empty() && want.name == t->name_;
    if (!by_index && !by_name) return;
  }
  {
    core::MutexLock lock(t->fault_mu_);
    for (const ArmedFault& a : t->armed_) {
      if (a.rule == rule) return;  // a renamed object keeps what it has
    }
    t->armed_.push_back({rule, core::FaultTrigger(*rule)});
    t->has_faults_.store(true, std::memory_order_release);
  }
  if (rule->when == core::FaultWhen::kNow || rule->when == core::FaultWhen::kMs) {
    later->push_back({t->serial(), rule});
  }
}

void Domain::run_pending(const std::vector<Pending>& later) {
  for (const Pending& p : later) {
    if (p.rule->when == core::FaultWhen::kMs) {
      Registry::get().schedule(id_, p.rule->ms, p.serial, p.rule);
    } else {
      Registry::get().fire(id_, p.serial, p.rule);
    }
  }
}

AsyncTarget* Domain::find_target_locked(uint64_t serial) {
  if (serial == AsyncTarget::serial()) return this;
  for (AsyncTarget* t : targets_) {
    if (t->serial() == serial) return t;
  }
  return nullptr;
}

uint32_t Domain::fire_timed_locked(uint64_t serial,
                                   const std::shared_ptr<const core::FaultRule>& rule,
                                   bool* again) {
  AsyncTarget* t = find_target_locked(serial);
  if (t == nullptr) return 0;
  bool fire = false;
  {
    core::MutexLock flock(t->fault_mu_);
    for (ArmedFault& a : t->armed_) {
      if (a.rule != rule) continue;
      fire = a.trigger.fire_once();
      *again = rule->when == core::FaultWhen::kMs && !a.trigger.exhausted();
      break;
    }
  }
  return fire ? fire_locked(t, *rule) : 0;
}

uint32_t Domain::fire_locked(AsyncTarget* t, const core::FaultRule& rule) {
  if (rule.what == core::FaultWhat::kEvent) {
    if (is_device_event(rule.event)) return rule.event;
    raise_locked(t, rule.event);
  } else if (rule.what == core::FaultWhat::kNet) {
    t->arm_net_fault(rule.net);
  } else if (t->kind() == core::FaultTargetKind::kEndpoint ||
             t->kind() == core::FaultTargetKind::kDomain) {
    // An endpoint's next post fails; the domain's next memory registration.
    t->arm_next_failure(rule.err, rule.prov_errno);
  } else if (t->kind() == core::FaultTargetKind::kCq) {
    auto* cq = static_cast<Cq*>(t);
    if (cq->inject_error(rule.err, rule.prov_errno)) raise_locked(cq, FI_FABQ_EVENT_CQ_ERR);
  }
  return 0;
}

void Domain::note_operation() {
  FaultAction a = count_operation();
  // An error= rule of the domain fails a memory registration: one that fires on an opening
  // waits for the next registration.
  if (a.err != 0) arm_next_failure(a.err, a.prov_errno);
  raise(this, this, a.events);
}

int open_domain(fid_fabric* fabric_fid, fi_info* info, fid_domain** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Fabric* fabric = Fabric::from_fid(fabric_fid ? &fabric_fid->fid : nullptr);
  if (fabric == nullptr || info == nullptr || out == nullptr || info->domain_attr == nullptr ||
      info->domain_attr->name == nullptr) {
    return -FI_EINVAL;
  }
  if (!domain_exists(fabric->name(), info->domain_attr->name)) {
    FABQ_WARN(FI_LOG_DOMAIN, "fi_domain: no interface %s on fabric %s\n", info->domain_attr->name,
              fabric->name().c_str());
    return -FI_ENODEV;
  }
  std::vector<core::FaultRule> rules;
  if (const char* spec = std::getenv("FI_FABQ_FAULTS"); spec != nullptr) {
    std::string why;
    if (!core::parse_fault_spec(spec, &rules, &why)) {
      FABQ_WARN(FI_LOG_DOMAIN, "FI_FABQ_FAULTS: %s\n", why.c_str());
      return -FI_EINVAL;
    }
  }
  auto channel = core::AsyncChannel::create();
  if (!channel.ok()) return channel.status().to_fi();
  Domain* d = make_object<Domain>(fabric, *info, std::move(channel).value(), context);
  if (d == nullptr) return -FI_ENOMEM;
  Registry::get().attach(d);
  d->add_rules(rules);
  *out = d->handle();
  return 0;
}

}  // namespace fabq::prov
