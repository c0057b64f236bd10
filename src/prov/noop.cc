#include "prov/noop.h"

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

}  // namespace fabq::prov
