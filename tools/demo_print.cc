#include "tools/demo_print.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "core/strerror.h"

namespace fabq::tools::demo {

double seconds_since(const timespec& start) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec - start.tv_sec) +
         static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9;
}

void vemit(const timespec& start, const char* who, const char* fmt, va_list ap) {
  char line[1024];
  const int head = std::snprintf(line, sizeof(line), "%7.3f  %-6s  ", seconds_since(start), who);
  const size_t room = sizeof(line) - static_cast<size_t>(head) - 1;  // 1: the newline
  const int body = std::vsnprintf(line + head, room, fmt, ap);
  size_t len = static_cast<size_t>(head) + std::min<size_t>(body < 0 ? 0 : body, room - 1);
  line[len++] = '\n';
  for (size_t done = 0; done < len;) {
    const ssize_t n = write(STDOUT_FILENO, line + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

__attribute__((format(printf, 3, 4))) void emit(const timespec& start, const char* who,
                                                const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vemit(start, who, fmt, ap);
  va_end(ap);
}

std::string describe(ssize_t rc, const char* peer) {
  if (rc == kTimedOut) return "nothing came within " + std::to_string(kWaitMs / 1000) + " s";
  if (rc == kPeerGone) return std::string("the ") + peer + " stopped (its lines say why)";
  const int err = static_cast<int>(rc < 0 ? -rc : rc);
  const char* name = core::fi_errno_name(err);
  return std::string(rc < 0 ? "-" : "") + (name != nullptr ? name : std::to_string(err)) + " (" +
         fi_strerror(err) + ")";
}

std::string errno_name(int err) {
  const char* name = core::fi_errno_name(err);
  return name != nullptr ? name : std::to_string(err);
}

std::string cq_flags(uint64_t flags) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {FI_SEND, "FI_SEND"},
      {FI_RECV, "FI_RECV"},
      {FI_MSG, "FI_MSG"},
      {FI_TAGGED, "FI_TAGGED"},
      {FI_RMA, "FI_RMA"},
      {FI_ATOMIC, "FI_ATOMIC"},
      {FI_READ, "FI_READ"},
      {FI_WRITE, "FI_WRITE"},
      {FI_REMOTE_READ, "FI_REMOTE_READ"},
      {FI_REMOTE_WRITE, "FI_REMOTE_WRITE"},
      {FI_REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"},
      {FI_MULTI_RECV, "FI_MULTI_RECV"},
      {FI_MORE, "FI_MORE"},
      {FI_CLAIM, "FI_CLAIM"},
  };
  std::string out;
  for (const auto& n : kNames) {
    if ((flags & n.bit) == 0) continue;
    out += (out.empty() ? "" : "|") + std::string(n.name);
    flags &= ~n.bit;
  }
  if (flags != 0) {
    char rest[32];
    std::snprintf(rest, sizeof(rest), "%s%#llx", out.empty() ? "" : "|", (unsigned long long)flags);
    out += rest;
  }
  return out.empty() ? "0" : out;
}

const char* event_name(uint32_t event) {
  switch (event) {
    case FI_NOTIFY:
      return "FI_NOTIFY";
    case FI_CONNREQ:
      return "FI_CONNREQ";
    case FI_CONNECTED:
      return "FI_CONNECTED";
    case FI_SHUTDOWN:
      return "FI_SHUTDOWN";
    case FI_MR_COMPLETE:
      return "FI_MR_COMPLETE";
    case FI_AV_COMPLETE:
      return "FI_AV_COMPLETE";
    case FI_JOIN_COMPLETE:
      return "FI_JOIN_COMPLETE";
    default:
      return "an unknown event";
  }
}

const char* progress_name(fi_progress p) {
  switch (p) {
    case FI_PROGRESS_AUTO:
      return "auto";
    case FI_PROGRESS_MANUAL:
      return "manual";
    default:
      return "unspecified";
  }
}

std::string address(const void* addr, size_t len) {
  if (addr == nullptr || len == 0) return "(none)";
  char host[INET6_ADDRSTRLEN] = "?";
  const auto* sa = static_cast<const sockaddr*>(addr);
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* in = static_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* in6 = static_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "(an address of family " + std::to_string(sa->sa_family) + ")";
}

unsigned port_of(const void* addr, size_t len) {
  const auto* sa = static_cast<const sockaddr*>(addr);
  if (sa->sa_family == AF_INET && len >= sizeof(sockaddr_in)) {
    return ntohs(static_cast<const sockaddr_in*>(addr)->sin_port);
  }
  if (sa->sa_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    return ntohs(static_cast<const sockaddr_in6*>(addr)->sin6_port);
  }
  return 0;
}

std::string printable(const char* buf, size_t len) {
  std::string out(buf, len);
  for (char& ch : out) {
    if (ch < 0x20 || ch > 0x7e) ch = '.';
  }
  return out;
}

}  // namespace fabq::tools::demo
