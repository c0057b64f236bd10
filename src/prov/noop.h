// fabq provider: the answers for operations fabq does not support (yet).
//
// libfabric's inline wrappers call through op tables without checking for NULL, so every slot
// of every table fabq hands out points somewhere; what is not supported returns -FI_ENOSYS.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

namespace fabq::prov {

template <class... Args>
int enosys(Args...) {
  return -FI_ENOSYS;
}
template <class... Args>
ssize_t enosys_ssize(Args...) {
  return -FI_ENOSYS;
}

int no_bind(fid*, fid*, uint64_t);
int no_control(fid*, int, void*);
int no_ops_open(fid*, const char*, uint64_t, void**, void*);
int no_tostr(const fid*, char*, size_t);
int no_ops_set(fid*, const char*, uint64_t, void*, void*);

}  // namespace fabq::prov
