// fabq TCP transport: small socket helpers shared by the engine, connections and listeners.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_errno.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/deadline.h"

namespace fabq::xport {

inline int64_t now_ns() {
  return core::monotonic_ns();
}

// TCP_NODELAY, and keep-alive probes that declare a silent peer gone after `keepalive_ms`
// (0: none). A peer that vanishes without a FIN or RST then fails the socket with ETIMEDOUT.
void set_socket_options(int fd, size_t keepalive_ms);
// The part of iov[0..n) that starts `skip` bytes in and is at most `limit` long, into out[]
// (room for n entries); returns how many entries it wrote. Inline: the data path calls it per
// frame.
inline int iov_slice(const iovec* iov, size_t n, size_t skip, size_t limit, iovec* out) {
  int cnt = 0;
  for (size_t j = 0; j < n && limit > 0; ++j) {
    const size_t l = iov[j].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    const size_t take = std::min(l - skip, limit);
    out[cnt++] = {static_cast<char*>(iov[j].iov_base) + skip, take};
    limit -= take;
    skip = 0;
  }
  return cnt;
}
// The FI_E* code of a socket's errno.
int fi_errno_of(int e);

}  // namespace fabq::xport
