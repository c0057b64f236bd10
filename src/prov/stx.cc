#include "prov/stx.h"

#include "prov/domain.h"
#include "prov/noop.h"
#include "xport/transport.h"

namespace fabq::prov {

struct StxOps {
  static int close(fid* f) { return close_object(Stx::from_fid(f)); }

  static inline fi_ops fi_ops_ = {
      .size = sizeof(fi_ops),
      .close = close,
      .bind = no_bind,
      .control = no_control,
      .ops_open = no_ops_open,
      .tostr = no_tostr,
      .ops_set = no_ops_set,
  };
  static inline fi_ops_ep ep_ops_ = {
      .size = sizeof(fi_ops_ep),
      .cancel = enosys_ssize<fid*, void*>,
      .getopt = [](fid*, int, int, void*, size_t*) { return -FI_ENOPROTOOPT; },
      .setopt = [](fid*, int, int, const void*, size_t) { return -FI_ENOPROTOOPT; },
      .tx_ctx = enosys<fid_ep*, int, fi_tx_attr*, fid_ep**, void*>,
      .rx_ctx = enosys<fid_ep*, int, fi_rx_attr*, fid_ep**, void*>,
      .rx_size_left = enosys_ssize<fid_ep*>,
      .tx_size_left = enosys_ssize<fid_ep*>,
  };
};

Stx* Stx::from_fid(const fid* f) {
  return Object::from<Stx, fid_stx>(f, FI_CLASS_STX_CTX, &StxOps::fi_ops_);
}

Stx::Stx(Domain* domain, size_t size, void* context)
    : Object(FI_CLASS_STX_CTX, domain), domain_(domain), size_(size), credits_(size) {
  init_fid(&box_.fid.fid, FI_CLASS_STX_CTX, context, &StxOps::fi_ops_);
  box_.fid.ops = &StxOps::ep_ops_;
  box_.owner = this;
}

int open_stx(fid_domain* domain_fid, fi_tx_attr* attr, fid_stx** out, void* context) {
  if (out != nullptr) *out = nullptr;
  Domain* domain = Domain::from_fid(domain_fid ? &domain_fid->fid : nullptr);
  if (domain == nullptr || attr == nullptr || out == nullptr) return -FI_EINVAL;
  constexpr uint64_t kTxCaps = FI_MSG | FI_TAGGED | FI_SEND | FI_RMA | FI_ATOMIC | FI_READ |
                               FI_WRITE | FI_LOCAL_COMM | FI_REMOTE_COMM;
  if (attr->size > Stx::kMaxSize || attr->iov_limit > xport::kMaxIov ||
      attr->inject_size > xport::kInjectSize || (attr->caps & ~kTxCaps) != 0) {
    return -FI_EINVAL;
  }
  if (domain->failed()) return -FI_EOPBADSTATE;
  Stx* s = make_object<Stx>(domain, attr->size != 0 ? attr->size : Stx::kMaxSize, context);
  if (s == nullptr) return -FI_ENOMEM;
  *out = s->handle();
  return 0;
}

}  // namespace fabq::prov
