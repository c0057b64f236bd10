// fabq provider: memory regions (fi_mr(3)).
//
// fabq moves data with the CPU, so it needs no registration: getinfo reports no mr_mode bits
// (FI_MR_SCALABLE to callers older than 1.5), and a buffer's descriptor is accepted and not
// read wherever a call takes one. Applications written for hardware that needs registration
// (fabtests, middleware) still register, and get real regions:
//
// - fi_mr_reg / fi_mr_regv / fi_mr_regattr: at most the domain's mr_iov_limit (1) buffers, each
//   with a length and, if it has one, a non-null address; access a subset of FI_SEND, FI_RECV,
//   FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE; flags 0; host memory only. Else
//   -FI_EINVAL (-FI_EBADFLAGS for flags, -FI_ENOSYS for another memory interface).
// - the key is the application's requested_key (mr_mode has no FI_MR_PROV_KEY), unique in the
//   domain: a key another live region of the domain holds is -FI_ENOKEY. fi_mr_key returns it;
//   fi_mr_desc a descriptor that names the region.
// - with the domain's EQ bound with FI_REG_MR, each registration completes there as an
//   FI_MR_COMPLETE event (fid = the region's, context = its context); with no room in that EQ
//   the registration fails with -FI_EAGAIN and nothing is registered.
// - fi_close frees the region and its key; a domain with live regions cannot close (-FI_EBUSY).
//
// Remote access is not used yet: fabq has no RMA (fi_mr_bind, fi_mr_refresh and fi_mr_enable
// are -FI_ENOSYS).
//
// Threads: any; a region is immutable after registration.
#pragma once

#include <rdma/fi_domain.h>

#include "prov/object.h"

namespace fabq::prov {

class Domain;

class Mr final : public Object {
 public:
  static Mr* from_fid(const fid* f);
  Mr(Domain* domain, const fi_mr_attr& attr, void* context);
  ~Mr() override;
  fid_mr* handle() { return &box_.fid; }

 private:
  friend struct MrOps;
  FidBox<fid_mr> box_;
  Domain* const domain_;
  const uint64_t access_;
};

int mr_regattr(fid* domain, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr);
int mr_reg(fid* domain, const void* buf, size_t len, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context);
int mr_regv(fid* domain, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context);

}  // namespace fabq::prov
