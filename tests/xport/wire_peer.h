// Test support for tests/xport: a raw TCP peer that speaks the wire format of xport/wire.h with a
// plain socket (headers made with wire::encode, read with wire::decode), to play the other end
// of a transport's connection byte by byte: a well-behaved peer cut into odd pieces, or one
// that sends what no fabq would. Its reads wait for the transport while calling `tick` (one
// progress round, or nothing when the progress thread runs), so a test drives both ends from
// one thread; every wait has a timeout and fails the test, never hangs it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "fake_owner.h"
#include "xport/wire.h"

namespace fabq::xport::testing {

inline sockaddr_in loopback(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A frame's bytes: its header (wire::encode) and payload.
inline std::string frame(const wire::Header& h, std::string_view payload = {}) {
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  std::string out(reinterpret_cast<const char*>(hdr), sizeof(hdr));
  out.append(payload);
  return out;
}

class WirePeer {
 public:
  explicit WirePeer(std::function<void()> tick) : tick_(std::move(tick)) {}
  // An accepted socket (see WireListener).
  WirePeer(std::function<void()> tick, int fd) : tick_(std::move(tick)), fd_(fd) {}
  WirePeer(const WirePeer&) = delete;
  WirePeer& operator=(const WirePeer&) = delete;
  ~WirePeer() { close_now(); }

  bool connect_to(const sockaddr_in& a) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      ADD_FAILURE() << "socket: " << std::strerror(errno);
      return false;
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // A listening socket completes the TCP handshake itself: connect() returns at once.
    if (connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
      ADD_FAILURE() << "connect to port " << ntohs(a.sin_port) << ": " << std::strerror(errno);
      return false;
    }
    return true;
  }

  bool send_bytes(std::string_view bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ADD_FAILURE() << "send: " << std::strerror(errno);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool send_frame(const wire::Header& h, std::string_view payload = {}) {
    return send_bytes(frame(h, payload));
  }
  // One byte per write(), with a progress round and a short sleep after each, so that the
  // transport reads them one by one.
  bool send_byte_by_byte(std::string_view bytes) {
    for (char c : bytes) {
      if (!send_bytes(std::string_view(&c, 1))) return false;
      tick_();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      tick_();
    }
    return true;
  }

  // Reads exactly n bytes within the timeout, calling tick_ while it waits.
  bool recv_exact(void* p, size_t n, milliseconds timeout = kTimeout) {
    char* c = static_cast<char*>(p);
    const auto end = Clock::now() + timeout;
    while (n > 0) {
      const ssize_t r = recv(fd_, c, n, MSG_DONTWAIT);
      if (r > 0) {
        c += r;
        n -= static_cast<size_t>(r);
        continue;
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        ADD_FAILURE() << "the transport closed the connection: "
                      << (r == 0 ? "EOF" : std::strerror(errno));
        return false;
      }
      if (Clock::now() > end) {
        ADD_FAILURE() << "the transport sent nothing within " << timeout.count() << " ms";
        return false;
      }
      tick_();
      wait_readable(1);
    }
    return true;
  }

  // Reads one frame: its header must be valid (wire::decode).
  bool recv_frame(wire::Header* h, std::string* payload) {
    unsigned char hdr[wire::kHeaderSize];
    if (!recv_exact(hdr, sizeof(hdr))) return false;
    const wire::Violation v = wire::decode(hdr, SIZE_MAX, h);
    if (v != wire::Violation::kNone) {
      ADD_FAILURE() << "the transport sent a bad header: " << wire::violation_str(v);
      return false;
    }
    payload->assign(h->length, '\0');
    return h->length == 0 || recv_exact(payload->data(), h->length);
  }

  // True when the transport closes the connection (EOF or reset) within the timeout; whatever
  // it sends first is read and dropped.
  bool closed_by_peer(milliseconds timeout = kTimeout) {
    const auto end = Clock::now() + timeout;
    char buf[4096];
    for (;;) {
      const ssize_t r = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (r == 0) return true;
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
      if (r > 0) continue;
      if (Clock::now() > end) return false;
      tick_();
      wait_readable(1);
    }
  }

  // The local address of the socket (what the transport sees as the peer).
  sockaddr_in name() const {
    sockaddr_in a{};
    socklen_t l = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l);
    return a;
  }
  int fd() const { return fd_; }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void wait_readable(int ms) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    poll(&p, 1, ms);
  }

  std::function<void()> tick_;
  int fd_ = -1;
};

// A plain listening socket on 127.0.0.1: the passive end of a connection a transport makes,
// played raw.
class WireListener {
 public:
  explicit WireListener(std::function<void()> tick) : tick_(std::move(tick)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    socklen_t l = sizeof(a);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(fd_, 8) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l) != 0) {
      ADD_FAILURE() << "raw listener: " << std::strerror(errno);
    }
    addr_ = a;
  }
  WireListener(const WireListener&) = delete;
  WireListener& operator=(const WireListener&) = delete;
  ~WireListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  const sockaddr_in& addr() const { return addr_; }

  // The next connection, within the timeout (calling tick_ while it waits); -1 on failure.
  int accept_one(milliseconds timeout = kTimeout) {
    const auto end = Clock::now() + timeout;
    for (;;) {
      const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) return fd;
      if (Clock::now() > end) {
        ADD_FAILURE() << "nobody connected within " << timeout.count() << " ms";
        return -1;
      }
      tick_();
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      poll(&p, 1, 1);
    }
  }

 private:
  std::function<void()> tick_;
  int fd_ = -1;
  sockaddr_in addr_{};
};

// A port on 127.0.0.1 where nothing listens: bound (so nobody else takes it) and never
// listening, so a connection to it is refused.
class DeadPort {
 public:
  DeadPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    socklen_t l = sizeof(a);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &l) != 0) {
      ADD_FAILURE() << "dead port: " << std::strerror(errno);
    }
    addr_ = a;
  }
  DeadPort(const DeadPort&) = delete;
  DeadPort& operator=(const DeadPort&) = delete;
  ~DeadPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  const sockaddr_in& addr() const { return addr_; }

 private:
  int fd_ = -1;
  sockaddr_in addr_{};
};

}  // namespace fabq::xport::testing
