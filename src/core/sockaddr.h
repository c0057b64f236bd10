// fabq core: handing an IPv4 address to the application (fi_getname, fi_getpeer).
#pragma once

#include <netinet/in.h>
#include <rdma/fi_errno.h>

#include <cstddef>
#include <cstring>

namespace fabq::core {

// Copies `a` into `addr`, which has *len bytes of room, and sets *len to the size of an address.
// 0; -FI_ETOOSMALL when addr is null or too small (the caller learns the size needed from *len);
// -FI_EINVAL when len is null.
inline int copy_sockaddr(const sockaddr_in& a, void* addr, size_t* len) {
  if (len == nullptr) return -FI_EINVAL;
  const size_t have = *len;
  *len = sizeof(sockaddr_in);
  if (addr == nullptr || have < sizeof(sockaddr_in)) return -FI_ETOOSMALL;
  std::memcpy(addr, &a, sizeof(a));
  return 0;
}

}  // namespace fabq::core
