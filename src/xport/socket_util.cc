#include "xport/socket_util.h"

#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>

namespace fabq::xport {

void set_socket_options(int fd, size_t keepalive_ms) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (keepalive_ms == 0) return;
  const int probe_s = std::max<int>(1, static_cast<int>(keepalive_ms / 3000));
  const int count = 2;
  const unsigned user_timeout = static_cast<unsigned>(keepalive_ms);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof(probe_s));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

int fi_errno_of(int e) {
  switch (e) {
    case ECONNREFUSED:
      return FI_ECONNREFUSED;
    case ETIMEDOUT:
      return FI_ETIMEDOUT;
    case EHOSTUNREACH:
    case ENETUNREACH:
      return FI_EHOSTUNREACH;
    case ECONNRESET:
      return FI_ECONNRESET;
    default:
      return FI_EIO;
  }
}

}  // namespace fabq::xport
