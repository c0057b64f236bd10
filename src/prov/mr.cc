#include "prov/mr.h"

#include <rdma/fi_eq.h>

#include <cstdint>

#include "prov/cntr.h"
#include "prov/domain.h"
#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/events.h"
#include "prov/fabric.h"
#include "prov/noop.h"

namespace fabq::prov {
namespace {

constexpr uint64_t kAccess =
    FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
constexpr size_t kMrIovLimit = 1;  // domain_attr->mr_iov_limit (getinfo.cc)

}  // namespace

void release_region(Region* r) {
  if (r->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (r->write_cntr != nullptr) r->write_cntr->release();
  if (r->read_cntr != nullptr) r->read_cntr->release();
  delete r;
}

struct MrOps {
  static int close(fid* f) { return close_object(Mr::from_fid(f)); }

  static int bind(fid* f, fid* bfid, uint64_t flags) {
    Mr* mr = Mr::from_fid(f);
    if (mr == nullptr || bfid == nullptr) return -FI_EINVAL;
    Domain* d = mr->domain_;
    Region* r = mr->region_;
    switch (bfid->fclass) {
      case FI_CLASS_CNTR: {
        Cntr* c = Cntr::from_fid(bfid);
        if (c == nullptr || c->parent() != d) return -FI_EINVAL;
        if (flags == 0 || (flags & ~(FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0) {
          return -FI_EBADFLAGS;
        }
        core::MutexLock lock(d->mr_mu());
        if (((flags & FI_REMOTE_WRITE) && r->write_cntr != nullptr) ||
            ((flags & FI_REMOTE_READ) && r->read_cntr != nullptr)) {
          return -FI_EBUSY;
        }
        if (flags & FI_REMOTE_WRITE) {
          c->hold();
          r->write_cntr = c;
        }
        if (flags & FI_REMOTE_READ) {
          c->hold();
          r->read_cntr = c;
        }
        return 0;
      }
      case FI_CLASS_EP: {
        Endpoint* ep = Endpoint::from_fid(bfid);
        if (ep == nullptr || ep->domain() != d) return -FI_EINVAL;
        if (flags != 0) return -FI_EBADFLAGS;
        if (!d->mr_endpoint()) return -FI_ENOSYS;
        core::MutexLock lock(d->mr_mu());
        if (r->ep != nullptr) return -FI_EBUSY;
        // Held until the region closes: the endpoint's fi_close is -FI_EBUSY meanwhile, so no
        // later endpoint can take its place (and its address) while the key still names it.
        ep->hold();
        r->ep = ep;
        return 0;
      }
      default:
        return -FI_EINVAL;
    }
  }

  static int control(fid* f, int command, void* arg) {
    Mr* mr = Mr::from_fid(f);
    if (mr == nullptr) return -FI_EINVAL;
    switch (command) {
      case FI_ENABLE: {
        Domain* d = mr->domain_;
        core::MutexLock lock(d->mr_mu());
        // FI_MR_ENDPOINT: reachable from now on, through the endpoint it is bound to.
        if (d->mr_endpoint() && mr->region_->ep == nullptr) return -FI_EOPBADSTATE;
        mr->region_->enabled = true;
        mr->box_.fid.key = mr->region_->key;
        return 0;
      }
      case FI_REFRESH:
        // Host memory does not move under fabq: nothing to refresh.
        return arg != nullptr ? 0 : -FI_EINVAL;
      default:
        return -FI_ENOSYS;
    }
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
};

Mr* Mr::from_fid(const fid* f) {
  return Object::from<Mr, fid_mr>(f, FI_CLASS_MR, &MrOps::fi_ops_);
}

Mr::Mr(Domain* domain, Region* region, void* context)
    : Object(FI_CLASS_MR, domain), domain_(domain), region_(region) {
  init_fid(&box_.fid.fid, FI_CLASS_MR, context, &MrOps::fi_ops_);
  box_.fid.mem_desc = this;
  box_.fid.key = region->enabled ? region->key : FI_KEY_NOTAVAIL;
  box_.owner = this;
}

Mr::~Mr() {
  domain_->remove_region(region_);
  // Its FI_MR_COMPLETE (or error entry), if still unread, names a fid that is about to go: a
  // region registered later may get the same address.
  if (Eq* eq = domain_->reg_mr_eq()) eq->queue().purge(&box_.fid.fid);
  release_region(region_);
}

namespace {

// Whether the FI_REG_MR EQ can take one more event now: 0, -FI_EAGAIN (full: the application
// reads it and registers again) or -FI_EOVERRUN (overrun, for good).
int reg_mr_room(Eq* eq) {
  if (eq->queue().overrun()) return -FI_EOVERRUN;
  return eq->queue().pending() < eq->queue().capacity() ? 0 : -FI_EAGAIN;
}

// A buffer a region may cover: a length and, with one, a non-null address from which that many
// bytes do not run past the end of the address space (a region that wraps would let a peer's
// offset reach memory below its start).
bool valid_region_buffer(const iovec& iov) {
  if (iov.iov_len == 0) return true;
  const auto base = reinterpret_cast<uintptr_t>(iov.iov_base);
  return base != 0 && iov.iov_len <= UINTPTR_MAX - base;
}

}  // namespace

int mr_regattr(fid* domain_fid, const fi_mr_attr* attr, uint64_t flags, fid_mr** out) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  if ((flags & ~FI_RMA_EVENT) != 0) return -FI_EBADFLAGS;
  // fi_mr_attr grew `iface` in 1.10: an older application's struct ends before it.
  const bool has_iface = domain->fabric()->api().mr_iface();
  if (has_iface && attr->iface != FI_HMEM_SYSTEM) return -FI_ENOSYS;
  if ((attr->access & ~kAccess) != 0) return -FI_EINVAL;
  if (attr->iov_count == 0 || attr->iov_count > kMrIovLimit || attr->mr_iov == nullptr) {
    return -FI_EINVAL;
  }
  for (size_t i = 0; i < attr->iov_count; ++i) {
    if (!valid_region_buffer(attr->mr_iov[i])) return -FI_EINVAL;
  }
  // fi_mr(3): "The offset parameter is reserved for future use and must be 0."
  if (attr->offset != 0) return -FI_EINVAL;
  // FI_KEY_NOTAVAIL is what fi_mr_key says of a region with no key: no region may have it.
  if (!domain->prov_key() && attr->requested_key == FI_KEY_NOTAVAIL) return -FI_EKEYREJECTED;
  if (domain->failed()) return -FI_EOPBADSTATE;
  // FI_REG_MR: an EQ with no room for the registration's event fails the call before anything
  // is registered (no fault rule counts it either); one that fills meanwhile, below.
  Eq* const eq = domain->reg_mr_eq();
  if (eq != nullptr) {
    if (const int rc = reg_mr_room(eq); rc != 0) return rc;
  }
  auto* region = new (std::nothrow) Region;
  if (region == nullptr) return -FI_ENOMEM;
  region->key = attr->requested_key;
  region->base = static_cast<unsigned char*>(attr->mr_iov[0].iov_base);
  region->len = attr->mr_iov[0].iov_len;
  region->access = attr->access;
  region->first = domain->virt_addr() ? reinterpret_cast<uintptr_t>(region->base) : 0;
  region->enabled = !domain->mr_endpoint();
  // A registration is one of the domain's operations: an error= rule there fails it.
  FaultAction fault = domain->count_operation();
  raise(domain, domain, fault.events);
  if (fault.err != 0 && eq == nullptr) {
    delete region;
    return -fault.err;
  }
  if (fault.err != 0) region->enabled = false;  // its key is FI_KEY_NOTAVAIL
  if (fault.err == 0 && !domain->add_region(region)) {
    delete region;
    return domain->prov_key() ? -FI_ENOMEM : -FI_ENOKEY;
  }
  Mr* mr = make_object<Mr>(domain, region, attr->context);
  if (mr == nullptr) {
    domain->remove_region(region);
    release_region(region);
    return -FI_ENOMEM;
  }
  // FI_REG_MR: the registration completes on the domain's EQ (fi_domain(3)); one that failed
  // there is an error entry, and its region is never reachable (the application closes it).
  // An EQ that another producer filled since the look above gets neither: the registration is
  // undone and fails as if it had been found full, so the EQ never overruns for it.
  if (eq != nullptr) {
    core::Status written;
    if (fault.err != 0) {
      written = eq->queue().write_error_leaving(0, {.fid = &mr->handle()->fid,
                                                    .context = attr->context,
                                                    .err = fault.err,
                                                    .prov_errno = fault.prov_errno});
    } else {
      fi_eq_entry entry{.fid = &mr->handle()->fid, .context = attr->context, .data = 0};
      written = eq->queue().write_leaving(0, FI_MR_COMPLETE, &entry, sizeof(entry)).status();
    }
    if (!written.ok()) {
      (void)MrOps::close(&mr->handle()->fid);
      return written.to_fi();
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
