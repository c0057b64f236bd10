// Test support for the system tests that play a peer fabq's own code would never be: a raw TCP
// socket that speaks fabq's wire format (src/xport/wire.h: a 32-byte little-endian header per
// frame), mirrored here from its documentation so that a change of the format shows up as a
// failing test. Used by the tests of bad input and of the shared-memory handshake.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "support/peer.h"
#include "support/side.h"

namespace fabq::testing {

#define SKIP_UNLESS_FABQ()                                                              \
  do {                                                                                  \
    if (!provider_is_fabq()) {                                                          \
      GTEST_SKIP() << "fabq's wire format and events; " << provider() << " has others"; \
    }                                                                                   \
  } while (0)

// ---------------------------------------------------------------------------------------------
// fabq's wire format (src/xport/wire.h).

constexpr size_t kHeaderSize = 32;
constexpr uint16_t kMagic = 0x7146;
constexpr uint8_t kWireVersion = 1;
enum Op : uint8_t {
  kConnReq = 1,
  kConnAccept = 2,
  kConnReady = 4,
  kConnReject = 3,
  kMsg = 5,
  kTagged = 6,
  kAckReceived = 7,  // seq: the message acknowledged
  kShutdown = 9,
  kChallenge = 10,
  kProof = 11,
  kWrite = 12,       // tag: key, data: address; payload [8 bytes CQ data] + bytes
  kReadReq = 13,     // tag: key, data: address; payload: 8-byte length
  kReadResp = 14,    // data: status; payload: the bytes (status 0 only)
  kRmaAck = 15,      // data: status
  kAtomic = 16,      // tag: key, data: address; payload: op, datatype, kind, 0, count (u32), ...
  kAtomicResp = 17,  // data: status; payload: previous values
};
constexpr uint32_t kRemoteData = 1u << 0;    // kMsg, kTagged, kWrite: CQ data goes with it
constexpr uint32_t kWantReceived = 1u << 1;  // kMsg, kTagged: answer with kAckReceived
constexpr uint32_t kShmOffer = 1u << 3;      // kConnReq: tag names a segment, data is its nonce
constexpr uint32_t kShmAccept = 1u << 4;     // kConnAccept: the offer is taken
constexpr uint32_t kAuth = 1u << 5;          // kConnReq: the payload ends with a 16-byte nonce
// kMsg, kTagged, kWrite, kReadReq, kReadResp: the payload names the initiator's buffers,
// (address u64, length u64) each, after a read's length; only through shared memory, from a
// peer the target proved.
constexpr uint32_t kDirect = 1u << 6;

struct Header {
  uint16_t magic = kMagic;
  uint8_t version = kWireVersion;
  uint8_t op = kMsg;
  uint32_t flags = 0;
  uint32_t length = 0;
  uint32_t seq = 0;
  uint64_t tag = 0;
  uint64_t data = 0;
};

inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline std::string encode(const Header& h) {
  std::string out;
  put_le(out, h.magic, 2);
  put_le(out, h.version, 1);
  put_le(out, h.op, 1);
  put_le(out, h.flags, 4);
  put_le(out, h.length, 4);
  put_le(out, h.seq, 4);
  put_le(out, h.tag, 8);
  put_le(out, h.data, 8);
  return out;
}

// ---------------------------------------------------------------------------------------------
// A plain TCP connection to the passive endpoint.

class RawConnection {
 public:
  RawConnection() = default;
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  ~RawConnection() { close_now(); }

  // Receives the passive endpoint's port over `link`, then connects to it.
  bool dial(Link& link) {
    uint64_t port = 0;
    return link.get_u64(&port) && connect_to(static_cast<uint16_t>(port));
  }
  bool connect_to(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (fd_ < 0 || connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ADD_FAILURE() << "connect to 127.0.0.1:" << port << ": " << std::strerror(errno);
      return false;
    }
    return true;
  }
  bool send_all(const std::string& bytes) {
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
  // Reads exactly n bytes within the timeout.
  bool recv_exact(void* p, size_t n, int timeout_ms = kTimeoutMs) {
    char* c = static_cast<char*>(p);
    const auto t0 = Clock::now();
    while (n > 0) {
      if (!readable(std::max(0, timeout_ms - ms_since(t0)))) {
        ADD_FAILURE() << "fabq sent nothing within " << timeout_ms << " ms";
        return false;
      }
      const ssize_t r = recv(fd_, c, n, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        ADD_FAILURE() << "fabq closed the connection: " << (r == 0 ? "EOF" : std::strerror(errno));
        return false;
      }
      c += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  // True when fabq closes the connection (EOF or reset) within the timeout; whatever it sends
  // first is read and dropped.
  bool closed_by_peer(int timeout_ms = kTimeoutMs) {
    const auto t0 = Clock::now();
    char buf[256];
    while (readable(std::max(0, timeout_ms - ms_since(t0)))) {
      const ssize_t r = recv(fd_, buf, sizeof(buf), 0);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) return true;
    }
    return false;
  }
  int fd() const { return fd_; }
  // One byte that is not a frame: after the handshake of a shared-memory connection, a doorbell.
  bool doorbell() { return send_all(std::string(1, '\0')); }
  void close_now() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // The active side of fabq's handshake: kConnReq with `data`, kConnAccept back (its header
  // checked, its payload read), kConnReady. Afterwards fabq's side is connected. With `offer`
  // the request offers that shared-memory segment (tag: id, data: nonce); *accept_flags gets
  // the flags of fabq's answer.
  struct ShmOffer {
    uint64_t id;
    uint64_t nonce;
  };
  // `after_request` runs between the kConnReq and the wait for the answer.
  bool handshake(const std::string& data, const ShmOffer* offer = nullptr,
                 uint32_t* accept_flags = nullptr,
                 const std::function<void()>& after_request = nullptr) {
    Header req{.op = kConnReq, .length = static_cast<uint32_t>(data.size())};
    if (offer != nullptr) {
      req.flags = kShmOffer;
      req.tag = offer->id;
      req.data = offer->nonce;
    }
    if (!send_all(encode(req) + data)) return false;
    if (after_request) after_request();
    unsigned char h[kHeaderSize];
    if (!recv_exact(h, sizeof(h))) return false;
    EXPECT_EQ(get_le(h, 2), kMagic);
    EXPECT_EQ(h[2], kWireVersion);
    if (h[3] != kConnAccept) {
      ADD_FAILURE() << "expected kConnAccept (2), fabq sent op " << int{h[3]};
      return false;
    }
    if (accept_flags != nullptr) *accept_flags = static_cast<uint32_t>(get_le(h + 4, 4));
    const uint64_t len = get_le(h + 8, 4);
    if (len > 256) {
      ADD_FAILURE() << "accept data of " << len << " bytes";
      return false;
    }
    std::string payload(len, '\0');
    if (len > 0 && !recv_exact(payload.data(), len)) return false;
    return send_all(encode(Header{.op = kConnReady}));
  }

 private:
  bool readable(int timeout_ms) {
    pollfd p{.fd = fd_, .events = POLLIN};
    int rc;
    do rc = poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
  }

  int fd_ = -1;
};

}  // namespace fabq::testing
