#include "prov/noop.h"

#include "prov/object.h"

namespace fabq::prov {

int no_bind(fid*, fid*, uint64_t) {
  return -FI_ENOSYS;
}
int no_control(fid*, int, void*) {
  return -FI_ENOSYS;
}
int no_ops_open(fid*, const char*, uint64_t, void**, void*) {
  return -FI_ENOSYS;
}
int no_tostr(const fid*, char*, size_t) {
  return -FI_ENOSYS;
}
int no_ops_set(fid*, const char*, uint64_t, void*, void*) {
  return -FI_ENOSYS;
}

namespace {

int closed_close(fid*) {
  return -FI_EINVAL;
}
int closed_bind(fid*, fid*, uint64_t) {
  return -FI_EINVAL;
}
int closed_control(fid*, int, void*) {
  return -FI_EINVAL;
}
int closed_ops_open(fid*, const char*, uint64_t, void**, void*) {
  return -FI_EINVAL;
}
int closed_tostr(const fid*, char*, size_t) {
  return -FI_EINVAL;
}
int closed_ops_set(fid*, const char*, uint64_t, void*, void*) {
  return -FI_EINVAL;
}

fi_ops g_closed_ops = {
    .size = sizeof(fi_ops),
    .close = closed_close,
    .bind = closed_bind,
    .control = closed_control,
    .ops_open = closed_ops_open,
    .tostr = closed_tostr,
    .ops_set = closed_ops_set,
};

}  // namespace

void poison_fid(fid* f) {
  f->fclass = FI_CLASS_UNSPEC;
  f->ops = &g_closed_ops;
}

}  // namespace fabq::prov
