#include "prov/mc.h"

#include "prov/endpoint.h"
#include "prov/eq.h"
#include "prov/noop.h"

namespace fabq::prov {

struct McOps {
  static int close(fid* f) { return close_object(Mc::from_fid(f)); }
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

Mc* Mc::from_fid(const fid* f) {
  return Object::from<Mc, fid_mc>(f, FI_CLASS_MC, &McOps::fi_ops_);
}

Mc::Mc(Endpoint* ep, const sockaddr_in& group, uint64_t id, bool sends, void* context)
    : Object(FI_CLASS_MC, ep), ep_(ep), group_(group), sends_(sends) {
  init_fid(&box_.fid.fid, FI_CLASS_MC, context, &McOps::fi_ops_);
  box_.fid.fi_addr = kAddrTag | id;
  box_.owner = this;
}

Mc::~Mc() {
  ep_->leave(this);
  // Its unread FI_JOIN_COMPLETE (or error entry) names a fid that is about to go.
  if (Eq* eq = ep_->eq()) eq->queue().purge(&box_.fid.fid);
  // Leaves the group (takes the engine lock): nothing of it is delivered after this.
  membership_.reset();
}

}  // namespace fabq::prov
