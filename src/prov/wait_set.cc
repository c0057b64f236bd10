#include "prov/wait_set.h"

#include <algorithm>

#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/noop.h"
#include "prov/provider.h"

namespace fabq::prov {

struct WaitSetOps {
  static int close(fid* f) { return close_object(WaitSet::from_fid(f)); }
  static int control(fid* f, int command, void* arg) {
    WaitSet* w = WaitSet::from_fid(f);
    if (w == nullptr) return -FI_EINVAL;
    return control_wait(w->set_->kind(), w->set_->object(), command, arg);
  }
  static int wait(fid_wait* f, int timeout) {
    WaitSet* w = WaitSet::from_fid(f != nullptr ? &f->fid : nullptr);
    if (w == nullptr) return -FI_EINVAL;
    w->external_.disarm();
    progress(w->fabric_);
    BlockingScope blocking(w->fabric_);
    return w->set_->wait(timeout).to_fi();
  }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = no_bind,
      .control = control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_wait wait_ops_ = {.size = sizeof(fi_ops_wait), .wait = wait};
};

WaitSet* WaitSet::from_fid(const fid* f) {
  return Object::from<WaitSet, fid_wait>(f, FI_CLASS_WAIT, &WaitSetOps::fi_ops_);
}

WaitSet::WaitSet(Fabric* fabric, std::unique_ptr<core::WaitSet> set)
    : Object(FI_CLASS_WAIT, fabric), fabric_(fabric), set_(std::move(set)) {
  init_fid(&box_.fid.fid, FI_CLASS_WAIT, nullptr, &WaitSetOps::fi_ops_);
  box_.fid.ops = &WaitSetOps::wait_ops_;
  box_.owner = this;
}

int open_wait_set(fid_fabric* fabric_fid, fi_wait_attr* attr, fid_wait** out) {
  if (out != nullptr) *out = nullptr;
  Fabric* fabric = Fabric::from_fid(fabric_fid ? &fabric_fid->fid : nullptr);
  if (fabric == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->flags != 0) return -FI_EBADFLAGS;
  auto kind = core::wait_kind_from_fi(raw_enum(attr->wait_obj));
  if (!kind.ok() || *kind == core::WaitKind::kNone || *kind == core::WaitKind::kSet) {
    return -FI_EINVAL;
  }
  auto set = core::WaitSet::create(*kind, static_cast<int64_t>(params().spin_us) * 1000);
  if (!set.ok()) return set.status().to_fi();
  WaitSet* w = make_object<WaitSet>(fabric, std::move(set.value()));
  if (w == nullptr) return -FI_ENOMEM;
  *out = w->handle();
  return 0;
}

namespace {

// The poll-set view of a fabq CQ or counter, and the object that owns it.
struct PollMember {
  core::WaitSetMember* member = nullptr;
  Object* owner = nullptr;
};

PollMember poll_member(const fid* f) {
  if (Cq* cq = Cq::from_fid(f)) return {&cq->queue(), cq};
  if (Cntr* c = Cntr::from_fid(f)) return {&c->counter(), c};
  return {};
}

}  // namespace

struct PollSetOps {
  static int close(fid* f) {
    PollSet* p = PollSet::from_fid(f);
    if (p == nullptr) return -FI_EINVAL;
    delete p;
    return 0;
  }
  static int poll(fid_poll* f, void** contexts, int count) {
    PollSet* p = PollSet::from_fid(f != nullptr ? &f->fid : nullptr);
    if (p == nullptr || contexts == nullptr || count <= 0) return -FI_EINVAL;
    progress(p->domain_->fabric());
    return static_cast<int>(p->set_.poll(contexts, static_cast<size_t>(count)));
  }
  static int add(fid_poll* f, fid* event_fid, uint64_t flags) {
    PollSet* p = PollSet::from_fid(f != nullptr ? &f->fid : nullptr);
    if (p == nullptr) return -FI_EINVAL;
    if (flags != 0) return -FI_EBADFLAGS;
    const PollMember m = poll_member(event_fid);
    if (m.member == nullptr) return -FI_EINVAL;
    core::MutexLock lock(p->mu_);
    if (core::Status s = p->set_.add(m.member, event_fid->context); !s.ok()) return s.to_fi();
    m.owner->hold();
    p->members_.push_back(m.owner);
    return 0;
  }
  static int del(fid_poll* f, fid* event_fid, uint64_t flags) {
    PollSet* p = PollSet::from_fid(f != nullptr ? &f->fid : nullptr);
    if (p == nullptr) return -FI_EINVAL;
    if (flags != 0) return -FI_EBADFLAGS;
    const PollMember m = poll_member(event_fid);
    if (m.member == nullptr) return -FI_EINVAL;
    core::MutexLock lock(p->mu_);
    if (core::Status s = p->set_.remove(m.member); !s.ok()) return s.to_fi();
    std::erase(p->members_, m.owner);
    m.owner->release();
    return 0;
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
  static inline fi_ops_poll poll_ops_ = {
      .size = sizeof(fi_ops_poll),
      .poll = poll,
      .poll_add = add,
      .poll_del = del,
  };
};

PollSet* PollSet::from_fid(const fid* f) {
  return Object::from<PollSet, fid_poll>(f, FI_CLASS_POLL, &PollSetOps::fi_ops_);
}

PollSet::PollSet(Domain* domain) : Object(FI_CLASS_POLL, domain), domain_(domain) {
  init_fid(&box_.fid.fid, FI_CLASS_POLL, nullptr, &PollSetOps::fi_ops_);
  box_.fid.ops = &PollSetOps::poll_ops_;
  box_.owner = this;
}

PollSet::~PollSet() {
  for (Object* o : members_) o->release();
}

int open_poll_set(fid_domain* domain_fid, fi_poll_attr* attr, fid_poll** out) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (attr->flags != 0) return -FI_EBADFLAGS;
  PollSet* p = make_object<PollSet>(domain);
  if (p == nullptr) return -FI_ENOMEM;
  *out = p->handle();
  return 0;
}

}  // namespace fabq::prov
