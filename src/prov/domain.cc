#include "prov/domain.h"

#include "prov/cntr.h"
#include "prov/cq.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/getinfo.h"
#include "prov/noop.h"
#include "prov/provider.h"
#include "prov/wait_set.h"

namespace fabq::prov {

struct DomainOps {
  static int close(fid* f) { return close_object(Domain::from_fid(f)); }

  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Domain* d = Domain::from_fid(f);
    if (d == nullptr) return -FI_EINVAL;
    Eq* eq = Eq::from_fid(bfid);
    if (eq == nullptr) return -FI_EINVAL;
    if ((flags & ~FI_REG_MR) != 0) return -FI_EBADFLAGS;
    std::lock_guard lock(d->mu_);
    if (d->eq_ != nullptr) return -FI_EBUSY;
    d->eq_ = eq;
    d->eq_flags_ = flags;
    eq->hold();
    return 0;
  }

  static int endpoint2(fid_domain*, fi_info*, fid_ep**, uint64_t, void*) { return -FI_ENOSYS; }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_domain domain_ops_ = {
      .size = sizeof(fi_ops_domain),
      .av_open = enosys<fid_domain*, fi_av_attr*, fid_av**, void*>,
      .cq_open = open_cq,
      .endpoint = enosys<fid_domain*, fi_info*, fid_ep**, void*>,
      .scalable_ep = enosys<fid_domain*, fi_info*, fid_ep**, void*>,
      .cntr_open = open_cntr,
      .poll_open = open_poll_set,
      .stx_ctx = enosys<fid_domain*, fi_tx_attr*, fid_stx**, void*>,
      .srx_ctx = enosys<fid_domain*, fi_rx_attr*, fid_ep**, void*>,
      .query_atomic = enosys<fid_domain*, enum fi_datatype, enum fi_op, fi_atomic_attr*, uint64_t>,
      .query_collective = enosys<fid_domain*, enum fi_collective_op, fi_collective_attr*, uint64_t>,
      .endpoint2 = endpoint2,
  };
  static inline fi_ops_mr mr_ops_ = {
      .size = sizeof(fi_ops_mr),
      .reg = enosys<fid*, const void*, size_t, uint64_t, uint64_t, uint64_t, uint64_t, fid_mr**,
                    void*>,
      .regv = enosys<fid*, const iovec*, size_t, uint64_t, uint64_t, uint64_t, uint64_t, fid_mr**,
                     void*>,
      .regattr = enosys<fid*, const fi_mr_attr*, uint64_t, fid_mr**>,
  };
};

Domain* Domain::from_fid(const fid* f) {
  return Object::from<Domain, fid_domain>(f, FI_CLASS_DOMAIN, &DomainOps::fi_ops_);
}

Domain::Domain(Fabric* fabric, const fi_info& info, void* context)
    : Object(FI_CLASS_DOMAIN, fabric), fabric_(fabric), name_(info.domain_attr->name) {
  init_fid(&box_.fid.fid, FI_CLASS_DOMAIN, context, &DomainOps::fi_ops_);
  box_.fid.ops = &DomainOps::domain_ops_;
  box_.fid.mr = &DomainOps::mr_ops_;
  box_.owner = this;
}

Domain::~Domain() {
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
  Domain* d = make_object<Domain>(fabric, *info, context);
  if (d == nullptr) return -FI_ENOMEM;
  *out = d->handle();
  return 0;
}

}  // namespace fabq::prov
