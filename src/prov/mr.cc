#include "prov/mr.h"

#include <rdma/fi_eq.h>

#include "prov/domain.h"
#include "prov/eq.h"
#include "prov/fabric.h"
#include "prov/noop.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kAccess =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr size_t kMrIovLimit = 1;  // domain_attr->mr_iov_limit (getinfo.cc)

}  // namespace

struct MrOps {
  static int close(fid* f) { return close_object(Mr::from_fid(f)); }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = no_bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
};

Mr* Mr::from_fid(const fid* f) {
  return Object::from<Mr, fid_mr>(f, FI_CLASS_MR, &MrOps::fi_ops_);
}

Mr::Mr(Domain* domain, const fi_mr_attr& attr, void* context)
    : Object(FI_CLASS_MR, domain), domain_(domain), access_(attr.access) {
  init_fid(&box_.fid.fid, FI_CLASS_MR, context, &MrOps::fi_ops_);
  box_.fid.mem_desc = this;
  box_.fid.key = attr.requested_key;
  box_.owner = this;
}

Mr::~Mr() {
  domain_->drop_mr_key(box_.fid.key);
}

int mr_regattr(fid* domain_fid, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if (flags != 0) return -FI_EBADFLAGS;
  // fi_mr_attr grew `iface` in 1.10: an older application's struct ends before it.
  const bool has_iface = !FI_VERSION_LT(domain->fabric()->api_version(), FI_VERSION(1, 10));
  if (has_iface && attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
  if ((attr->access & ~kAccess) != 0) return -FI_EINVAL;
  if (attr->iov_count == 0 || attr->iov_count > kMrIovLimit || attr->mr_iov == nullptr) {
    return -FI_EINVAL;
  }
  for (size_t i = 0; i < attr->iov_count; ++i) {
    if (attr->mr_iov[i].iov_base == nullptr && attr->mr_iov[i].iov_len != 0) return -FI_EINVAL;
  }
  if (domain->failed()) return -FI_EOPBADSTATE;
  if (!domain->claim_mr_key(attr->requested_key)) return -FI_ENOKEY;
  Mr* mr = make_object<Mr>(domain, *attr, attr->context);
  if (mr == nullptr) {
    domain->drop_mr_key(attr->requested_key);
    return -FI_ENOMEM;
  }
  // FI_REG_MR: the registration completes on the domain's EQ (fi_domain(3)).
  if (Eq* eq = domain->reg_mr_eq(); eq != nullptr) {
    fi_eq_entry entry{.fid = &mr->handle()->fid, .context = attr->context, .data = 0};
    if (!eq->queue().write(FI_MR_COMPLETE, &entry, sizeof(entry)).ok()) {
      delete mr;
      return -FI_EAGAIN;
    }
  }
  *out = mr->handle();
  return 0;
}

int mr_regv(fid* domain, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  fi_mr_attr attr{};
  attr.mr_iov = iov;
  attr.iov_count = count;
  attr.access = access;
  attr.offset = offset;
  attr.requested_key = requested_key;
  attr.context = context;
  attr.iface = FI_HMEM_SYSTEM;
  return mr_regattr(domain, &attr, flags, mr);
}

int mr_reg(fid* domain, const void* buf, size_t len, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context) {
  const iovec iov{const_cast<void*>(buf), len};
  return mr_regv(domain, &iov, 1, access, offset, requested_key, flags, mr, context);
}

}  // namespace fabq::prov
