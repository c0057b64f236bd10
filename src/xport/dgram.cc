#include "xport/dgram.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <cstring>

#include "xport/dgram_wire.h"

namespace fabq::xport {
namespace {

int bind_error(int e) {
  switch (e) {
    case EADDRINUSE:
      return -FI_EADDRINUSE;
    case EADDRNOTAVAIL:
      return -FI_EADDRNOTAVAIL;
    default:
      return -FI_EINVAL;
  }
}

// What a socket's receive buffer asks for: a datagram that finds it full is lost, and a burst
// of large ones fills the kernel's default (208 KiB: three of 64 KiB) at once. The kernel
// grants at most net.core.rmem_max.
constexpr int kRcvBufBytes = 4 << 20;

core::UniqueFd udp_socket(int* err) {
  core::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    *err = errno == EMFILE || errno == ENFILE ? -FI_EMFILE : -FI_EIO;
    return fd;
  }
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &kRcvBufBytes, sizeof(kRcvBufBytes));
  return fd;
}

// The sender's clock, as an authenticated datagram's time: microseconds since 1970.
uint64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
}

const char* drop_reason(DgramSocket::Drop why) {
  switch (why) {
    case DgramSocket::Drop::kMalformed:
      return "not a fabq datagram";
    case DgramSocket::Drop::kUnauthenticated:
      return "not authenticated (the sender has no secret)";
    case DgramSocket::Drop::kUnexpectedAuth:
      return "authenticated, and this endpoint has no secret";
    case DgramSocket::Drop::kBadMac:
      return "wrong MAC (another secret, damaged, or not sent there by that sender)";
    case DgramSocket::Drop::kReplayed:
      return "replayed (its sequence number was seen, or is behind the window)";
    case DgramSocket::Drop::kStale:
      return "from a sender the replay guard forgot, or no later than it";
    case DgramSocket::Drop::kCount:
      break;
  }
  return "?";
}

DgramSocket::Drop drop_of(dgram::Replay r) {
  return r == dgram::Replay::kStale ? DgramSocket::Drop::kStale : DgramSocket::Drop::kReplayed;
}

}  // namespace

DgramSocket::DgramSocket(Engine* engine, Owner* owner, const core::HmacSha256* auth)
    : engine_(engine),
      owner_(owner),
      auth_(auth != nullptr ? std::make_unique<Auth>(*auth, engine->config().dgram_senders)
                            : nullptr),
      buf_(new unsigned char[dgram::kMaxDatagram + 1]) {}

DgramSocket::~DgramSocket() {
  core::MutexLock elock(engine_->mu());
  if (fd_.valid()) engine_->remove(fd_.get(), this);
  engine_->forget_hot(this);
}

int DgramSocket::open(const sockaddr_in& at) {
  // The MAC covers the address a datagram leaves from and the one it arrives at: a socket on
  // every address knows neither.
  if (auth_ != nullptr && at.sin_addr.s_addr == htonl(INADDR_ANY)) return -FI_EINVAL;
  if (auth_ != nullptr && !core::fill_random(&auth_->epoch, sizeof(auth_->epoch)).ok()) {
    return -FI_EIO;
  }
  int err = 0;
  core::UniqueFd fd = udp_socket(&err);
  if (!fd.valid()) return err;
  sockaddr_in a = at;
  a.sin_family = AF_INET;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    return bind_error(errno);
  }
  socklen_t len = sizeof(name_);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&name_), &len);
  // Multicast goes out of the endpoint's own interface, and comes back to members on this host
  // (a group's members may share it). One hop: a group lives on the endpoint's network.
  if (name_.sin_addr.s_addr != htonl(INADDR_ANY)) {
    setsockopt(fd.get(), IPPROTO_IP, IP_MULTICAST_IF, &name_.sin_addr, sizeof(name_.sin_addr));
  }
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_IP, IP_MULTICAST_LOOP, &one, sizeof(one));
  core::MutexLock elock(engine_->mu());
  if (!engine_->add(fd.get(), this, EPOLLIN)) return -FI_EIO;
  fd_ = std::move(fd);
  return 0;
}

int DgramSocket::send(const sockaddr_in& to, const DgramSend& s, core::NetFault fault) {
  if (s.iov_count > kMaxIov) return -FI_EINVAL;
  if (s.len > max_payload()) return -FI_EMSGSIZE;
  if (fault == core::NetFault::kDrop) return 0;  // injected loss: it never leaves
  unsigned char header[dgram::kAuthHeaderSize];
  dgram::Header h{.flags = s.has_data ? dgram::kDgramData : uint8_t{0},
                  .length = static_cast<uint32_t>(s.len),
                  .data = s.has_data ? s.data : 0};
  if (auth_ != nullptr) {
    h.flags |= dgram::kDgramAuth;
    h.epoch = auth_->epoch;
    h.seq = auth_->seq.fetch_add(1, std::memory_order_relaxed) + 1;
    h.time_us = now_us();
  }
  dgram::encode(h, header);
  if (auth_ != nullptr) auth_->key.seal(dgram::Ends(name_, to), header, s.iov, s.iov_count);
  // Injected damage: one bit of the CQ data, which the header's check catches (and the MAC).
  if (fault == core::NetFault::kCorrupt) header[16] ^= 0x01;
  iovec iov[kMaxIov + 1];
  iov[0] = {header, dgram::header_size(h.flags)};
  size_t n = 1;
  for (size_t i = 0; i < s.iov_count; ++i) {
    if (s.iov[i].iov_len > 0) iov[n++] = s.iov[i];
  }
  msghdr m{};
  sockaddr_in dest = to;
  m.msg_name = &dest;
  m.msg_namelen = sizeof(dest);
  m.msg_iov = iov;
  m.msg_iovlen = n;
  while (true) {
    if (sendmsg(fd_.get(), &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return 0;
    switch (errno) {
      case EINTR:
        continue;
      case EAGAIN:
      case ENOBUFS:
        return -FI_EAGAIN;
      case EMSGSIZE:
        return -FI_EMSGSIZE;
      case EHOSTUNREACH:
        return -FI_EHOSTUNREACH;
      case ENETUNREACH:
        return -FI_ENETUNREACH;
      case EINVAL:
      case EAFNOSUPPORT:
      case EACCES:
        return -FI_EINVAL;
      default:
        return -FI_EIO;
    }
  }
}

void DgramSocket::on_ready(uint32_t /*events*/) {
  read_one(fd_.get(), name_, /*multicast=*/false);
}

bool DgramSocket::poll_read() {
  read_one(fd_.get(), name_, /*multicast=*/false);
  return !paused_;
}

bool DgramSocket::offer_pending() {
  if (!owner_->deliver(pending_in_, buf_.get() + pending_at_) && owner_->take_retry()) {
    // Only the receive CQ stood in the way: kept until the owner resumes the socket, once the
    // application read the CQ. The socket, readable or not, waits out of the epoll set.
    if (!paused_) {
      paused_ = true;
      engine_->remove_fd(fd_.get());
    }
    return false;
  }
  // Taken, or refused for want of a receive and of room to buffer it: dropped, as a full
  // socket buffer drops one.
  pending_ = false;
  if (paused_) {
    paused_ = false;
    engine_->add(fd_.get(), this, EPOLLIN);
    for (McSocket* m : parked_) engine_->add(m->fd(), m, EPOLLIN);
    parked_.clear();
  }
  return true;
}

bool DgramSocket::authentic(const dgram::Header& h, const sockaddr_in& from, const sockaddr_in& at,
                            size_t n) {
  const bool authenticated = (h.flags & dgram::kDgramAuth) != 0;
  if (auth_ == nullptr) {
    if (!authenticated) return true;
    dropped(Drop::kUnexpectedAuth, from);
    return false;
  }
  if (!authenticated) {
    dropped(Drop::kUnauthenticated, from);
    return false;
  }
  const dgram::Ends ends(from, at);
  // What the window surely refuses costs no MAC; only a verified datagram changes the guard.
  dgram::Replay r = auth_->guard.check(ends, h.epoch, h.seq, h.time_us);
  if (r == dgram::Replay::kFresh) {
    if (!auth_->key.verify(ends, buf_.get(), n)) {
      dropped(Drop::kBadMac, from);
      return false;
    }
    r = auth_->guard.accept(ends, h.epoch, h.seq, h.time_us);
  }
  if (r == dgram::Replay::kFresh) return true;
  dropped(drop_of(r), from);
  return false;
}

void DgramSocket::dropped(Drop why, const sockaddr_in& from) {
  ++drops_[static_cast<size_t>(why)];
  if (why == Drop::kMalformed) return;  // stray traffic, as ever: counted, not logged
  ++unlogged_;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_log_) return;
  next_log_ = now + std::chrono::seconds(1);
  char me[INET_ADDRSTRLEN] = "?", peer[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &name_.sin_addr, me, sizeof(me));
  inet_ntop(AF_INET, &from.sin_addr, peer, sizeof(peer));
  engine_->log(LogLevel::kWarn,
               "datagram endpoint %s:%u dropped %llu datagram(s) since its last report; the "
               "last from %s:%u: %s\n",
               me, ntohs(name_.sin_port), static_cast<unsigned long long>(unlogged_), peer,
               ntohs(from.sin_port), drop_reason(why));
  unlogged_ = 0;
}

void DgramSocket::park(McSocket* m) {
  engine_->remove_fd(m->fd());
  parked_.push_back(m);
}

void DgramSocket::unpark(McSocket* m) {
  std::erase(parked_, m);
}

void DgramSocket::read_one(int fd, const sockaddr_in& at, bool multicast) {
  if (pending_ && !offer_pending()) return;
  sockaddr_in from{};
  socklen_t flen = sizeof(from);
  const ssize_t n = recvfrom(fd, buf_.get(), dgram::kMaxDatagram + 1, MSG_DONTWAIT,
                             reinterpret_cast<sockaddr*>(&from), &flen);
  if (n < 0) return;  // nothing after all (EAGAIN), or an ICMP error report: nothing to deliver
  dgram::Header h;
  if (flen != sizeof(from) || from.sin_family != AF_INET ||
      dgram::decode(buf_.get(), static_cast<size_t>(n), &h) != dgram::Refusal::kNone) {
    dropped(Drop::kMalformed, from);  // not fabq's, or damaged
    return;
  }
  if (!authentic(h, from, at, static_cast<size_t>(n))) return;
  Incoming in;
  in.kind = InKind::kMsg;
  in.has_data = (h.flags & dgram::kDgramData) != 0;
  in.data = h.data;
  in.len = h.length;
  in.from = from;
  in.multicast = multicast;
  pending_in_ = in;
  pending_at_ = dgram::header_size(h.flags);
  pending_ = true;
  (void)offer_pending();
}

std::unique_ptr<Membership> DgramSocket::join(const sockaddr_in& group, int* err) {
  if (!IN_MULTICAST(ntohl(group.sin_addr.s_addr)) || group.sin_port == 0) {
    *err = -FI_EINVAL;
    return nullptr;
  }
  auto m = std::make_unique<McSocket>(engine_, this);
  if (const int rc = m->open(group, name_.sin_addr); rc != 0) {
    *err = rc;
    return nullptr;
  }
  return m;
}

McSocket::McSocket(Engine* engine, DgramSocket* parent) : engine_(engine), parent_(parent) {}

McSocket::~McSocket() {
  core::MutexLock elock(engine_->mu());
  parent_->unpark(this);
  if (fd_.valid()) engine_->remove(fd_.get(), this);
}

int McSocket::open(const sockaddr_in& group, in_addr iface) {
  int err = 0;
  core::UniqueFd fd = udp_socket(&err);
  if (!fd.valid()) return err;
  // Several members of one group on this host each bind its address and port.
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Only this group's datagrams, not those of every group some socket of the host joined.
  const int zero = 0;
  setsockopt(fd.get(), IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof(zero));
  sockaddr_in a = group;
  a.sin_family = AF_INET;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0) {
    return bind_error(errno);
  }
  ip_mreqn req{};
  req.imr_multiaddr = group.sin_addr;
  req.imr_address = iface;
  if (setsockopt(fd.get(), IPPROTO_IP, IP_ADD_MEMBERSHIP, &req, sizeof(req)) != 0) {
    return errno == ENODEV || errno == EADDRNOTAVAIL ? -FI_EADDRNOTAVAIL
           : errno == ENOBUFS                        ? -FI_ENOSPC
                                                     : -FI_EIO;
  }
  group_ = a;
  core::MutexLock elock(engine_->mu());
  if (!engine_->add(fd.get(), this, EPOLLIN)) return -FI_EIO;
  fd_ = std::move(fd);
  return 0;
}

void McSocket::on_ready(uint32_t /*events*/) {
  parent_->read_one(fd_.get(), group_, /*multicast=*/true);
  if (parent_->paused()) parent_->park(this);  // until the pending datagram is taken
}

}  // namespace fabq::xport
