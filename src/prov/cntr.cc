#include "prov/cntr.h"

#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/noop.h"
#include "prov/provider.h"
#include "prov/wait_set.h"

namespace fabq::prov {

struct CntrOps {
  static Cntr* get(fid_cntr* f) { return Cntr::from_fid(f != nullptr ? &f->fid : nullptr); }

  static int close(fid* f) { return close_object(Cntr::from_fid(f)); }

  static int control(fid* f, int command, void* arg) {
    Cntr* c = Cntr::from_fid(f);
    if (c == nullptr) return -FI_EINVAL;
    return control_wait(c->counter_->wait_kind(), c->counter_->wait_object(), command, arg);
  }

  // fi_cntr_read/readerr cannot report errors: a bad fid reads as 0.
  static uint64_t read(fid_cntr* f) {
    Cntr* c = get(f);
    if (c == nullptr) return 0;
    c->drive();
    return c->counter_->value();
  }
  static uint64_t readerr(fid_cntr* f) {
    Cntr* c = get(f);
    if (c == nullptr) return 0;
    c->drive();
    return c->counter_->errors();
  }
  static int add(fid_cntr* f, uint64_t v) {
    Cntr* c = get(f);
    if (c == nullptr) return -FI_EINVAL;
    c->counter_->add(v);
    return 0;
  }
  static int set(fid_cntr* f, uint64_t v) {
    Cntr* c = get(f);
    if (c == nullptr) return -FI_EINVAL;
    c->counter_->set(v);
    return 0;
  }
  static int adderr(fid_cntr* f, uint64_t v) {
    Cntr* c = get(f);
    if (c == nullptr) return -FI_EINVAL;
    c->counter_->add_error(v);
    return 0;
  }
  static int seterr(fid_cntr* f, uint64_t v) {
    Cntr* c = get(f);
    if (c == nullptr) return -FI_EINVAL;
    c->counter_->set_error(v);
    return 0;
  }
  static int wait(fid_cntr* f, uint64_t threshold, int timeout) {
    Cntr* c = get(f);
    if (c == nullptr) return -FI_EINVAL;
    c->drive();
    BlockingScope blocking(c->fabric());
    return c->counter_->wait(threshold, timeout).to_fi();
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
  static inline fi_ops_cntr cntr_ops_ = {
      .size = sizeof(fi_ops_cntr),
      .read = read,
      .readerr = readerr,
      .add = add,
      .set = set,
      .wait = wait,
      .adderr = adderr,
      .seterr = seterr,
  };
};

Fabric* Cntr::fabric() const {
  return domain_->fabric();
}

void Cntr::drive() {
  external_.disarm();
  progress(fabric());
}

Cntr* Cntr::from_fid(const fid* f) {
  return Object::from<Cntr, fid_cntr>(f, FI_CLASS_CNTR, &CntrOps::fi_ops_);
}

Cntr::Cntr(Domain* domain, WaitSet* wait_set, std::unique_ptr<core::Counter> counter, void* context)
    : Object(FI_CLASS_CNTR, domain),
      domain_(domain),
      wait_set_(wait_set),
      counter_(std::move(counter)) {
  init_fid(&box_.fid.fid, FI_CLASS_CNTR, context, &CntrOps::fi_ops_);
  box_.fid.ops = &CntrOps::cntr_ops_;
  box_.owner = this;
  if (wait_set_ != nullptr) wait_set_->hold();
}

Cntr::~Cntr() {
  counter_.reset();
  if (wait_set_ != nullptr) wait_set_->release();
  domain_->release_cntr_slot();
}

int open_cntr(fid_domain* domain_fid, fi_cntr_attr* attr, fid_cntr** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (raw_enum(attr->events) != FI_CNTR_EVENTS_COMP) return -FI_EINVAL;
  if (attr->flags != 0) return -FI_EBADFLAGS;
  auto kind = core::wait_kind_from_fi(raw_enum(attr->wait_obj));
  if (!kind.ok()) return -FI_EINVAL;
  WaitSet* set = nullptr;
  if (*kind == core::WaitKind::kSet) {
    set = WaitSet::from_fid(attr->wait_set ? &attr->wait_set->fid : nullptr);
    if (set == nullptr) return -FI_EINVAL;
  }
  if (domain->failed()) return -FI_EOPBADSTATE;
  if (!domain->acquire_cntr_slot()) return -FI_ENOSPC;
  auto counter = core::Counter::create({
      .wait = *kind,
      .spin_ns = static_cast<int64_t>(params().spin_us) * 1000,
      .wait_set = set != nullptr ? &set->core() : nullptr,
  });
  if (!counter.ok()) {
    domain->release_cntr_slot();
    return counter.status().to_fi();
  }
  Cntr* c = make_object<Cntr>(domain, set, std::move(counter.value()), context);
  if (c == nullptr) {
    domain->release_cntr_slot();
    return -FI_ENOMEM;
  }
  *out = c->handle();
  domain->note_operation();
  return 0;
}

}  // namespace fabq::prov
