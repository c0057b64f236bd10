#include "prov/link_monitor.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace fabq::prov {

namespace {

// Enough for any datagram: the kernel sizes dump datagrams to the reader's buffer, up to 32 KiB.
constexpr size_t kBufSize = 64 * 1024;

core::UniqueFd open_route_socket(uint32_t groups) {
  core::UniqueFd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (!fd.valid()) return fd;
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = groups;
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) != 0) return {};
  return fd;
}

bool send_request(int fd, const nlmsghdr* h) {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  for (;;) {
    const ssize_t n =
        sendto(fd, h, h->nlmsg_len, 0, reinterpret_cast<const sockaddr*>(&kernel), sizeof(kernel));
    if (n >= 0) return static_cast<size_t>(n) == h->nlmsg_len;
    if (errno != EINTR) return false;
  }
}

// One datagram; 0 when there was nothing (EAGAIN), -errno on error. Datagrams not sent by the
// kernel (any local process may unicast to a netlink socket) are skipped.
ssize_t receive(int fd, std::vector<char>& buf, int flags, bool* truncated) {
  for (;;) {
    sockaddr_nl from{};
    iovec iov{buf.data(), buf.size()};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof(from);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    const ssize_t n = recvmsg(fd, &msg, flags);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
    }
    if (from.nl_pid != 0) continue;
    *truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    return n;
  }
}

// The NLMSG_* macros compare signed with unsigned lengths (-Wsign-compare): walk by hand.
template <typename F>
void for_each_message(const char* buf, size_t len, F&& f) {
  size_t off = 0;
  while (len - off >= sizeof(nlmsghdr)) {
    const auto* h = reinterpret_cast<const nlmsghdr*>(buf + off);
    if (h->nlmsg_len < sizeof(nlmsghdr) || h->nlmsg_len > len - off) return;
    f(h);
    off += NLMSG_ALIGN(h->nlmsg_len);
  }
}

template <typename Header>
const Header* payload(const nlmsghdr* h) {
  if (h->nlmsg_len < NLMSG_LENGTH(sizeof(Header))) return nullptr;
  return reinterpret_cast<const Header*>(reinterpret_cast<const char*>(h) + NLMSG_HDRLEN);
}

// Calls f(type, data, size) for each attribute after the family header `Header`.
template <typename Header, typename F>
void for_each_attr(const nlmsghdr* h, F&& f) {
  size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(Header));
  while (off + sizeof(rtattr) <= h->nlmsg_len) {
    const auto* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const char*>(h) + off);
    if (a->rta_len < sizeof(rtattr) || a->rta_len > h->nlmsg_len - off) return;
    f(a->rta_type & NLA_TYPE_MASK, reinterpret_cast<const char*>(a) + RTA_LENGTH(0),
      static_cast<size_t>(a->rta_len - RTA_LENGTH(0)));
    off += RTA_ALIGN(a->rta_len);
  }
}

struct LinkMsg {
  LinkState state;
  bool has_name = false;
  std::string name;
  bool has_hwaddr = false;
};

// RTM_NEWLINK / RTM_DELLINK. Only AF_UNSPEC messages describe the interface itself: AF_BRIDGE
// ones (even RTM_DELLINK) are about its bridge port.
bool parse_link(const nlmsghdr* h, LinkMsg* m) {
  const auto* ifi = payload<ifinfomsg>(h);
  if (ifi == nullptr || ifi->ifi_family != AF_UNSPEC || ifi->ifi_index <= 0) return false;
  m->state.exists = true;
  m->state.ifindex = static_cast<unsigned>(ifi->ifi_index);
  m->state.active = (ifi->ifi_flags & IFF_UP) != 0 && (ifi->ifi_flags & IFF_RUNNING) != 0;
  for_each_attr<ifinfomsg>(h, [&](unsigned type, const char* data, size_t size) {
    if (type == IFLA_IFNAME) {
      m->has_name = true;
      m->name.assign(data, strnlen(data, size));
    } else if (type == IFLA_ADDRESS) {
      m->has_hwaddr = true;
      m->state.hwaddr_len = std::min(size, m->state.hwaddr.size());
      std::memcpy(m->state.hwaddr.data(), data, m->state.hwaddr_len);
    }
  });
  return true;
}

// RTM_NEWADDR / RTM_DELADDR: the interface and a key naming the address (family, prefix,
// local and peer address), equal in notifications and dumps.
bool parse_addr(const nlmsghdr* h, unsigned* ifindex, std::string* key) {
  const auto* ifa = payload<ifaddrmsg>(h);
  if (ifa == nullptr || (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6)) {
    return false;
  }
  std::string local, address;
  for_each_attr<ifaddrmsg>(h, [&](unsigned type, const char* data, size_t size) {
    if (type == IFA_LOCAL) local.assign(data, size);
    if (type == IFA_ADDRESS) address.assign(data, size);
  });
  *ifindex = ifa->ifa_index;
  key->clear();
  key->push_back(static_cast<char>(ifa->ifa_family));
  key->push_back(static_cast<char>(ifa->ifa_prefixlen));
  key->push_back(static_cast<char>(local.size()));
  *key += local;
  *key += address;
  return true;
}

bool same_hwaddr(const LinkState& a, const LinkState& b) {
  return a.hwaddr_len == b.hwaddr_len &&
         std::memcmp(a.hwaddr.data(), b.hwaddr.data(), a.hwaddr_len) == 0;
}

// A private socket for one request and its answer. The kernel answers synchronously; the
// receive timeout only guards against the unforeseen, since callers may hold locks.
core::UniqueFd open_request_socket() {
  core::UniqueFd fd = open_route_socket(0);
  if (!fd.valid()) return fd;
  timeval tv{.tv_sec = 2, .tv_usec = 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Sends `req` and calls f(message) for each answer until NLMSG_DONE or NLMSG_ERROR (passed to f
// too). False when the exchange failed or a dump was interrupted by a change (NLM_F_DUMP_INTR).
template <typename F>
bool transact(int fd, const nlmsghdr* req, F&& f) {
  if (!send_request(fd, req)) return false;
  std::vector<char> buf(kBufSize);
  for (;;) {
    bool truncated = false;
    const ssize_t n = receive(fd, buf, 0, &truncated);
    if (n <= 0 || truncated) return false;
    bool done = false, intr = false;
    for_each_message(buf.data(), static_cast<size_t>(n), [&](const nlmsghdr* h) {
      if (h->nlmsg_seq != req->nlmsg_seq || done) return;
      if (h->nlmsg_flags & NLM_F_DUMP_INTR) intr = true;
      f(h);
      if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) done = true;
    });
    if (done) return !intr;
  }
}

// The IPv4 and IPv6 addresses of interface `ifindex`, as parse_addr() keys.
std::set<std::string> query_addrs(unsigned ifindex) {
  std::set<std::string> addrs;
  core::UniqueFd fd = open_request_socket();
  if (!fd.valid()) return addrs;
  for (uint32_t attempt = 1; attempt <= 3; ++attempt) {
    struct {
      nlmsghdr h;
      ifaddrmsg ifa;
    } req{};
    req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
    req.h.nlmsg_type = RTM_GETADDR;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = attempt;
    req.ifa.ifa_family = AF_UNSPEC;
    addrs.clear();
    const bool ok = transact(fd.get(), &req.h, [&](const nlmsghdr* h) {
      unsigned index = 0;
      std::string key;
      if (h->nlmsg_type == RTM_NEWADDR && parse_addr(h, &index, &key) && index == ifindex) {
        addrs.insert(std::move(key));
      }
    });
    if (ok) break;
  }
  return addrs;
}

}  // namespace

LinkState query_link(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) return {};
  core::UniqueFd fd = open_request_socket();
  if (!fd.valid()) return {};
  struct {
    nlmsghdr h;
    ifinfomsg ifi;
    char attrs[RTA_SPACE(IFNAMSIZ)];
  } req{};
  auto* name = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) +
                                         NLMSG_LENGTH(NLMSG_ALIGN(sizeof(ifinfomsg))));
  name->rta_type = IFLA_IFNAME;
  name->rta_len = static_cast<unsigned short>(RTA_LENGTH(ifname.size() + 1));
  std::memcpy(RTA_DATA(name), ifname.c_str(), ifname.size() + 1);
  req.h.nlmsg_len = NLMSG_LENGTH(NLMSG_ALIGN(sizeof(ifinfomsg))) + RTA_ALIGN(name->rta_len);
  req.h.nlmsg_type = RTM_GETLINK;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  req.h.nlmsg_seq = 1;
  req.ifi.ifi_family = AF_UNSPEC;
  LinkMsg m;
  bool found = false;
  transact(fd.get(), &req.h, [&](const nlmsghdr* h) {
    if (h->nlmsg_type == RTM_NEWLINK) found = parse_link(h, &m);
  });
  // The kernel also finds an interface by an alternative name; the messages about it carry the
  // primary name, so only that one is the interface's name here.
  if (!found || !m.has_name || m.name != ifname) return {};
  return m.state;
}

LinkMonitor::LinkMonitor(Callback cb) : cb_(std::move(cb)) {
  sock_ = open_route_socket(RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR);
  wake_ = core::UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!sock_.valid() || !wake_.valid()) return;
  // A larger buffer makes overflows (and the resync they cost) rarer; capped by rmem_max.
  const int rcvbuf = 1 << 20;
  setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_nl self{};
  socklen_t len = sizeof(self);
  if (getsockname(sock_.get(), reinterpret_cast<sockaddr*>(&self), &len) != 0) return;
  portid_ = self.nl_pid;
  ok_ = true;
  thread_ = std::thread([this] { run(); });
}

LinkMonitor::~LinkMonitor() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  const uint64_t one = 1;
  while (write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  thread_.join();
}

// A request whose answers (lo's link, then the acknowledgement) are queued behind everything
// the kernel had queued for the socket when it was sent. The acknowledgement marks the point.
uint32_t LinkMonitor::send_barrier_locked() {
  const uint32_t seq = next_seq_++;
  if (next_seq_ == 0) next_seq_ = 1;  // 0 means "no barrier"
  struct {
    nlmsghdr h;
    ifinfomsg ifi;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ifinfomsg));
  req.h.nlmsg_type = RTM_GETLINK;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  req.h.nlmsg_seq = seq;
  req.ifi.ifi_family = AF_UNSPEC;
  req.ifi.ifi_index = 1;  // the loopback interface, in every namespace
  return send_request(sock_.get(), &req.h) ? seq : 0;
}

void LinkMonitor::watch(const std::string& ifname) {
  if (!ok_) return;
  core::MutexLock lock(mu_);
  Watched& w = watched_[ifname];
  if (w.refs++ == 0) read_baseline_locked(ifname, w);
}

// The lock is held across the reading so the thread cannot apply a message to the entry before
// its baseline is set. Messages queued before the barrier predate the reading: the thread skips
// them, they would replay older states on top of it.
void LinkMonitor::read_baseline_locked(const std::string& name, Watched& w) {
  w.barrier = send_barrier_locked();
  w.state = query_link(name);
  w.addrs.clear();
  if (w.state.exists) w.addrs = query_addrs(w.state.ifindex);
}

void LinkMonitor::unwatch(const std::string& ifname) {
  if (!ok_) return;
  core::MutexLock lock(mu_);
  auto it = watched_.find(ifname);
  if (it != watched_.end() && --it->second.refs == 0) watched_.erase(it);
}

bool LinkMonitor::flush(int timeout_ms) {
  if (!ok_) return false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  core::MutexLock lock(mu_);
  const uint32_t seq = send_barrier_locked();
  if (seq == 0) return false;
  pending_flushes_.insert(seq);
  while (pending_flushes_.count(seq) != 0 && flushed_.wait_until(mu_, deadline)) {
  }
  const bool done = pending_flushes_.count(seq) == 0;
  pending_flushes_.erase(seq);
  return done;
}

void LinkMonitor::run() {
  std::vector<char> buf(kBufSize);
  pollfd fds[2] = {{sock_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  while (!stop_.load()) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) receive_all(buf);
  }
}

void LinkMonitor::receive_all(std::vector<char>& buf) {
  while (!stop_.load()) {
    bool truncated = false;
    const ssize_t n = receive(sock_.get(), buf, MSG_DONTWAIT, &truncated);
    if (n == 0) return;
    // ENOBUFS: the kernel dropped messages. A truncated datagram lost some too.
    if (n == -ENOBUFS || truncated) {
      resync();
      continue;
    }
    if (n < 0) return;
    for_each_message(buf.data(), static_cast<size_t>(n), [&](const nlmsghdr* h) {
      if (h->nlmsg_type == NLMSG_ERROR) {
        if (h->nlmsg_pid == portid_) complete_barrier(h->nlmsg_seq);
        return;
      }
      Changes changes;
      {
        core::MutexLock lock(mu_);
        handle(h, &changes);
      }
      report(changes);
    });
  }
}

void LinkMonitor::complete_barrier(uint32_t seq) {
  // Every earlier message has been reported: reports happen message by message.
  core::MutexLock lock(mu_);
  for (auto& [name, w] : watched_) {
    if (w.barrier == seq) w.barrier = 0;
  }
  if (pending_flushes_.erase(seq) != 0) flushed_.notify_all();
}

void LinkMonitor::gone(const std::string& name, Watched& w, Changes* out) {
  out->emplace_back(name, LinkChange::kDeviceGone);
  w.state = LinkState{};
  w.addrs.clear();
}

void LinkMonitor::update(const std::string& name, Watched& w, const LinkState& now,
                         std::set<std::string>* addrs, Changes* out) {
  if (w.state.exists && (!now.exists || now.ifindex != w.state.ifindex)) gone(name, w, out);
  if (!now.exists) return;
  if (!w.state.exists) {
    // Another interface under the watched name: new, whatever the old one was.
    if (now.active) out->emplace_back(name, LinkChange::kPortActive);
  } else {
    if (now.active != w.state.active) {
      out->emplace_back(name, now.active ? LinkChange::kPortActive : LinkChange::kPortErr);
    }
    if (!same_hwaddr(now, w.state)) out->emplace_back(name, LinkChange::kAddrChange);
    if (addrs != nullptr && *addrs != w.addrs) out->emplace_back(name, LinkChange::kGidChange);
  }
  w.state = now;
  if (addrs != nullptr) w.addrs = std::move(*addrs);
}

void LinkMonitor::handle(const nlmsghdr* h, Changes* out) {
  // Other answers to our barriers (lo's link); notifications carry the requester's portid,
  // never ours, since this socket changes nothing.
  if (h->nlmsg_pid == portid_) return;
  switch (h->nlmsg_type) {
    case RTM_NEWLINK: {
      LinkMsg m;
      if (!parse_link(h, &m)) return;
      for (auto& [name, w] : watched_) {
        if (w.barrier != 0) continue;
        const bool same_dev = w.state.exists && w.state.ifindex == m.state.ifindex;
        const bool same_name = m.has_name && m.name == name;
        if (same_dev && m.has_name && !same_name) {
          gone(name, w, out);  // renamed away
        } else if (same_dev) {
          LinkState now = m.state;
          // Some notifications (wireless events) carry no address: it did not change.
          if (!m.has_hwaddr) {
            now.hwaddr = w.state.hwaddr;
            now.hwaddr_len = w.state.hwaddr_len;
          }
          update(name, w, now, nullptr, out);
        } else if (same_name) {
          // An interface new under this name (created, or renamed to it, perhaps with
          // addresses): read afresh, like watch().
          if (w.state.exists) gone(name, w, out);
          read_baseline_locked(name, w);
          if (w.state.active) out->emplace_back(name, LinkChange::kPortActive);
        }
      }
      return;
    }
    case RTM_DELLINK: {
      LinkMsg m;
      if (!parse_link(h, &m)) return;
      for (auto& [name, w] : watched_) {
        if (w.barrier != 0 || !w.state.exists) continue;
        if (w.state.ifindex == m.state.ifindex || (m.has_name && m.name == name)) {
          gone(name, w, out);
        }
      }
      return;
    }
    case RTM_NEWADDR:
    case RTM_DELADDR: {
      unsigned index = 0;
      std::string key;
      if (!parse_addr(h, &index, &key)) return;
      for (auto& [name, w] : watched_) {
        if (w.barrier != 0 || !w.state.exists || w.state.ifindex != index) continue;
        // RTM_NEWADDR also updates an address already there (IPv6 duplicate address
        // detection ending, lifetimes): not a change. RTM_DELADDR always removes one.
        if (h->nlmsg_type == RTM_DELADDR) {
          w.addrs.erase(key);
          out->emplace_back(name, LinkChange::kGidChange);
        } else if (w.addrs.insert(key).second) {
          out->emplace_back(name, LinkChange::kGidChange);
        }
      }
      return;
    }
    default:
      return;
  }
}

void LinkMonitor::resync() {
  // What is still queued is older than the readings below: drop it, or it would be applied on
  // top of newer state. Barrier answers may go with it; the barriers complete here instead.
  std::vector<char> buf(kBufSize);
  for (;;) {
    bool truncated = false;
    const ssize_t n = receive(sock_.get(), buf, MSG_DONTWAIT, &truncated);
    if (n == 0 || (n < 0 && n != -ENOBUFS)) break;
  }
  Changes changes;
  std::set<uint32_t> flushes;
  {
    core::MutexLock lock(mu_);
    for (auto& [name, w] : watched_) {
      const LinkState now = query_link(name);
      std::set<std::string> addrs;
      if (now.exists) addrs = query_addrs(now.ifindex);
      update(name, w, now, &addrs, &changes);
      w.barrier = 0;
    }
    flushes = pending_flushes_;
  }
  report(changes);
  core::MutexLock lock(mu_);
  for (uint32_t seq : flushes) pending_flushes_.erase(seq);
  flushed_.notify_all();
}

void LinkMonitor::report(const Changes& changes) {
  for (const auto& [name, change] : changes) cb_(name, change);
}

}  // namespace fabq::prov
