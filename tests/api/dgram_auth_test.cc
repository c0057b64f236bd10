// Datagram endpoints with a shared secret (fi_fabq(7) RELIABILITY AND SECURITY): with an
// auth_key (the fi_info's, or FI_FABQ_AUTH_KEY) every datagram carries a MAC of its header, its
// payload and the two addresses, and a sequence number its receiver remembers. What a stranger
// sends (a raw UDP socket that speaks fabq's datagram format), what it forwards or damages, and
// what it replays never completes a receive; endpoints that share the secret talk as before.
//
// The replays need raw sockets (CAP_NET_RAW): they capture a datagram on its way over loopback
// and send it again, byte for byte, from its sender's address. Without the capability those
// tests skip.
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "dgram_fixture.h"

namespace fabq::testing {
namespace {

constexpr const char* kSecret = "correct horse battery staple";
constexpr const char* kOtherSecret = "incorrect horse battery staple";

// The largest payload of an authenticated datagram: the largest UDP payload over IPv4 (65507)
// less fabq's 24-byte header and the 40 bytes of its authentication (epoch, sequence number,
// time, MAC).
constexpr size_t kMaxAuthPayload = 65507 - 24 - 40;
constexpr size_t kMaxPlainPayload = 65507 - 24;

class DgramAuth : public Dgram {
 protected:
  DgramAuth() : Dgram(FI_MSG | FI_SOURCE | FI_MULTICAST, 0, kSecret) {}
};

ssize_t post_recv(const DgramEp* e, void* buf, size_t len, void* ctx) {
  return fi_recv(e->ep, buf, len, nullptr, FI_ADDR_UNSPEC, ctx);
}

sockaddr_in loopback(uint16_t port = 0) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A stranger: a plain UDP socket on 127.0.0.1 that knows fabq's datagram format but not the
// secret. It receives what endpoints send to its address (once the AV holds it) and sends
// whatever bytes it likes.
class Stranger {
 public:
  Stranger() : fd_(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    EXPECT_GE(fd_, 0);
    name_ = loopback();
    EXPECT_EQ(bind(fd_, reinterpret_cast<const sockaddr*>(&name_), sizeof(name_)), 0);
    socklen_t len = sizeof(name_);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&name_), &len), 0);
    // Multicast goes out of loopback, where the tests' groups live.
    const in_addr lo{htonl(INADDR_LOOPBACK)};
    EXPECT_EQ(setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof(lo)), 0);
  }
  ~Stranger() { close(fd_); }
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;

  const sockaddr_in& name() const { return name_; }
  // The next datagram that reaches it within kDgramWaitMs; empty when none does.
  std::vector<unsigned char> receive() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, kDgramWaitMs) != 1) return {};
    std::vector<unsigned char> d(70000);
    const ssize_t n = recv(fd_, d.data(), d.size(), 0);
    d.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return d;
  }
  void send(const std::vector<unsigned char>& d, const sockaddr_in& to) {
    ASSERT_EQ(
        sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
        static_cast<ssize_t>(d.size()));
  }

 private:
  int fd_;
  sockaddr_in name_{};
};

// An on-path attacker on loopback: a raw socket that sees every UDP packet the host receives,
// and another that sends IP packets as they are, source address included.
class Wiretap {
 public:
  Wiretap()
      : tap_(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP)),
        out_(socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW)) {
    // Replays to a group go out of loopback, where the tests' groups live.
    const in_addr lo{htonl(INADDR_LOOPBACK)};
    if (out_ >= 0) setsockopt(out_, IPPROTO_IP, IP_MULTICAST_IF, &lo, sizeof(lo));
  }
  ~Wiretap() {
    if (tap_ >= 0) close(tap_);
    if (out_ >= 0) close(out_);
  }
  Wiretap(const Wiretap&) = delete;
  Wiretap& operator=(const Wiretap&) = delete;

  bool ok() const { return tap_ >= 0 && out_ >= 0; }
  // The IP packet of the next datagram from `from` to `to` that it sees within kDgramWaitMs;
  // empty when none.
  std::vector<unsigned char> capture(const sockaddr_in& from, const sockaddr_in& to) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kDgramWaitMs);
    std::vector<unsigned char> pkt(70000);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{tap_, POLLIN, 0};
      if (poll(&p, 1, 100) != 1) continue;
      const ssize_t n = recv(tap_, pkt.data(), pkt.size(), 0);
      if (n < static_cast<ssize_t>(sizeof(iphdr))) continue;
      iphdr ip;
      std::memcpy(&ip, pkt.data(), sizeof(ip));
      const size_t ihl = ip.ihl * 4u;
      if (static_cast<size_t>(n) < ihl + sizeof(udphdr)) continue;
      udphdr udp;
      std::memcpy(&udp, pkt.data() + ihl, sizeof(udp));
      if (ip.saddr == from.sin_addr.s_addr && ip.daddr == to.sin_addr.s_addr &&
          udp.source == from.sin_port && udp.dest == to.sin_port) {
        pkt.resize(static_cast<size_t>(n));
        return pkt;
      }
    }
    return {};
  }
  // Sends `pkt` (a captured IP packet) again, with `flip` (an offset into its UDP payload, if
  // any) flipped. Loopback leaves the UDP checksum to be completed by hardware that is not
  // there: it is cleared (no checksum, valid over IPv4) so that the kernel delivers the copy.
  void replay(std::vector<unsigned char> pkt, const sockaddr_in& to, long flip = -1) {
    iphdr ip;
    std::memcpy(&ip, pkt.data(), sizeof(ip));
    const size_t ihl = ip.ihl * 4u;
    const size_t check_at = ihl + offsetof(udphdr, check);
    pkt[check_at] = pkt[check_at + 1] = 0;
    if (flip >= 0) pkt[ihl + sizeof(udphdr) + static_cast<size_t>(flip)] ^= 0x01;
    ASSERT_EQ(
        sendto(out_, pkt.data(), pkt.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
        static_cast<ssize_t>(pkt.size()))
        << std::strerror(errno);
  }

 private:
  int tap_;
  int out_;
};

#define SKIP_WITHOUT_RAW_SOCKETS(tap) \
  if (!(tap).ok()) GTEST_SKIP() << "needs raw sockets (CAP_NET_RAW): " << std::strerror(errno)

// What `sender` sends to `stranger` (inserted in the AV): the bytes of one of its datagrams.
std::vector<unsigned char> captured(fid_ep* sender, fid_av* av, Stranger& stranger, const char* msg,
                                    uint64_t data = 0) {
  fi_addr_t at = FI_ADDR_UNSPEC;
  EXPECT_EQ(fi_av_insert(av, &stranger.name(), 1, &at, 0, nullptr), 1);
  EXPECT_EQ(data != 0 ? fi_senddata(sender, msg, std::strlen(msg) + 1, nullptr, data, at, nullptr)
                      : fi_send(sender, msg, std::strlen(msg) + 1, nullptr, at, nullptr),
            0);
  return stranger.receive();
}

TEST_F(DgramAuth, EndpointsThatShareTheSecretExchangeDatagramsWithTheirDataAndSource) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[32] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  ASSERT_EQ(fi_senddata(a->ep, "authenticated", 14, nullptr, 0xfeed, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(rx, "authenticated");
  EXPECT_EQ(e.len, 14u);
  EXPECT_EQ(e.data, 0xfeedu);
  EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_REMOTE_CQ_DATA);
  EXPECT_EQ(src, a->addr);
  // Many in a row, each once: the receiver's window takes every new sequence number.
  std::vector<std::string> got(64, std::string(8, '\0'));
  for (auto& r : got) ASSERT_EQ(post_recv(b, r.data(), r.size(), nullptr), 0);
  for (int i = 0; i < 64; ++i) {
    const std::string m = std::to_string(i);
    ASSERT_EQ(fi_send(a->ep, m.c_str(), m.size() + 1, nullptr, b->addr, nullptr), 0);
  }
  for (int i = 0; i < 64; ++i) ASSERT_EQ(wait_cq(b->cq, &e), 1) << i;
  EXPECT_TRUE(stays_empty(b->cq));
}

// A stranger that speaks fabq's format: a well-formed datagram without a MAC (what an endpoint
// without the secret sends), one that claims a MAC it cannot make, and one of another secret.
TEST_F(DgramAuth, AStrangersWellFormedDatagramCompletesNoReceive) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  DgramEp* plain = open_ep({.keyless = true});
  DgramEp* other = open_ep({.key = kOtherSecret});
  char rx[32] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  Stranger s;
  const std::vector<unsigned char> unsigned_dgram = captured(plain->ep, av_, s, "stranger");
  ASSERT_EQ(unsigned_dgram.size(), 24u + 9u) << "a datagram without a secret is as before";
  s.send(unsigned_dgram, b->name);
  EXPECT_TRUE(stays_empty(b->cq, 300)) << "received: " << rx;
  // The same, claiming to be authenticated: the flag, the room for it, and no MAC worth a thing.
  std::vector<unsigned char> claims = captured(a->ep, av_, s, "claims");
  ASSERT_EQ(claims.size(), 24u + 40u + 7u);
  std::fill(claims.begin() + 24 + 24, claims.begin() + 24 + 40, 0);  // the MAC
  s.send(claims, b->name);
  s.send(captured(other->ep, av_, s, "other secret"), b->name);
  EXPECT_TRUE(stays_empty(b->cq, 300)) << "received: " << rx;
  // The receive is still there for a datagram of the secret.
  ASSERT_EQ(fi_send(a->ep, "genuine", 8, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  EXPECT_STREQ(rx, "genuine");
  EXPECT_EQ(src, a->addr);
}

// The MAC covers who sent a datagram and to whom: one that a holder of the secret sent to the
// stranger, sent on by it to an endpoint, is not that endpoint's.
TEST_F(DgramAuth, ADatagramForwardedByAStrangerCompletesNoReceive) {
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[32] = {};
  ASSERT_EQ(post_recv(b, rx, sizeof(rx), rx), 0);
  Stranger s;
  const std::vector<unsigned char> d = captured(a->ep, av_, s, "for the stranger", 7);
  ASSERT_FALSE(d.empty());
  s.send(d, b->name);
  EXPECT_TRUE(stays_empty(b->cq, 300)) << "received: " << rx;
}

TEST_F(DgramAuth, EndpointsWithoutTheSecretOrWithAnotherHearNothingOfEndpointsWithIt) {
  DgramEp* a = open_ep();
  DgramEp* plain = open_ep({.keyless = true});
  DgramEp* other = open_ep({.key = kOtherSecret});
  DgramEp* const eps[] = {a, plain, other};
  char rx[3][16] = {};
  for (int i = 0; i < 3; ++i) ASSERT_EQ(post_recv(eps[i], rx[i], sizeof(rx[i]), nullptr), 0);
  // Each way between the secret and no secret, and between two secrets.
  ASSERT_EQ(fi_send(plain->ep, "plain", 6, nullptr, a->addr, nullptr), 0);
  ASSERT_EQ(fi_send(other->ep, "other", 6, nullptr, a->addr, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, "secret", 7, nullptr, plain->addr, nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, "secret", 7, nullptr, other->addr, nullptr), 0);
  fi_cq_data_entry e{};
  for (DgramEp* s : {a, a, plain, other}) ASSERT_EQ(wait_cq(s->cq, &e), 1);  // the sends
  for (DgramEp* r : {a, plain, other}) EXPECT_TRUE(stays_empty(r->cq, 200));
}

// fi_getinfo(3) max_msg_size: the secret's 40 bytes come out of the largest payload.
TEST_F(DgramAuth, MaxMsgSizeLeavesRoomForTheAuthenticationAndIsTheTruth) {
  EXPECT_EQ(info_->ep_attr->max_msg_size, kMaxAuthPayload);
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  std::vector<char> tx(kMaxAuthPayload + 1, 'm');
  std::vector<char> rx(kMaxAuthPayload + 1);
  ASSERT_EQ(post_recv(b, rx.data(), rx.size(), nullptr), 0);
  ASSERT_EQ(fi_send(a->ep, tx.data(), kMaxAuthPayload, nullptr, b->addr, nullptr), 0);
  EXPECT_EQ(fi_send(a->ep, tx.data(), kMaxAuthPayload + 1, nullptr, b->addr, nullptr),
            -FI_EMSGSIZE);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, kMaxAuthPayload);
  // Hints that ask for more than the secret leaves, with a secret, get no DGRAM info.
  for (const bool keyed : {true, false}) {
    fi_info* hints = fabq_hints();
    hints->ep_attr->type = FI_EP_DGRAM;
    hints->ep_attr->max_msg_size = kMaxPlainPayload;
    if (keyed) set_key(&hints->ep_attr->auth_key, &hints->ep_attr->auth_key_size, kSecret);
    fi_info* got = nullptr;
    const int rc = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &got);
    fi_freeinfo(hints);
    if (keyed) {
      EXPECT_EQ(rc, -FI_ENODATA) << "max_msg_size " << kMaxPlainPayload << " with a secret";
    } else {
      ASSERT_EQ(rc, 0);
      EXPECT_EQ(got->ep_attr->max_msg_size, kMaxPlainPayload);
    }
    fi_freeinfo(got);
  }
}

// fi_domain(3): a domain's auth_key is "the default authorization key to associate with
// endpoint[s] ... created within the domain": an endpoint whose own info has none takes it.
TEST_F(DgramAuth, AnEndpointOfADomainOpenedWithTheSecretHasItThoughItsInfoHasNone) {
  fid_domain* keyed = nullptr;
  ASSERT_EQ(fi_domain(fabric_, info_, &keyed, nullptr), 0) << "info_ carries the secret";
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  ASSERT_EQ(fi_av_open(keyed, &av_attr, &av, nullptr), 0);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;
  fid_cq* cq = nullptr;
  ASSERT_EQ(fi_cq_open(keyed, &cq_attr, &cq, nullptr), 0);
  fi_info* info = fi_dupinfo(info_);
  set_key(&info->domain_attr->auth_key, &info->domain_attr->auth_key_size, nullptr);
  set_key(&info->ep_attr->auth_key, &info->ep_attr->auth_key_size, nullptr);
  fid_ep* ep = nullptr;
  ASSERT_EQ(fi_endpoint(keyed, info, &ep, nullptr), 0);
  fi_freeinfo(info);
  ASSERT_EQ(fi_ep_bind(ep, &av->fid, 0), 0);
  ASSERT_EQ(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
  ASSERT_EQ(fi_enable(ep), 0);
  Stranger s;
  const std::vector<unsigned char> d = captured(ep, av, s, "default");
  EXPECT_EQ(d.size(), 24u + 40u + 8u) << "sent without the domain's secret";
  EXPECT_EQ(d.size() > 3 ? d[3] & 2 : 0, 2) << "flags";
  for (fid* f : {&ep->fid, &cq->fid, &av->fid, &keyed->fid}) EXPECT_EQ(fi_close(f), 0);
}

class DgramAuthPrefix : public Dgram {
 protected:
  DgramAuthPrefix() : Dgram(FI_MSG | FI_SOURCE, FI_MSG_PREFIX, kSecret) {}
};

// FI_MSG_PREFIX: the prefix is not sent and does not count toward max_msg_size, which is the
// secret's.
TEST_F(DgramAuthPrefix, ThePrefixComesOnTopOfMaxMsgSizeWhichLeavesRoomForTheAuthentication) {
  ASSERT_NE(info_->mode & FI_MSG_PREFIX, 0u);
  const size_t prefix = info_->ep_attr->msg_prefix_size;
  EXPECT_EQ(info_->ep_attr->max_msg_size, kMaxAuthPayload);
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  std::vector<char> tx(prefix + kMaxAuthPayload + 1, 'p');
  std::vector<char> rx(prefix + kMaxAuthPayload + 1);
  ASSERT_EQ(post_recv(b, rx.data(), rx.size(), nullptr), 0);
  EXPECT_EQ(fi_send(a->ep, tx.data(), prefix + kMaxAuthPayload + 1, nullptr, b->addr, nullptr),
            -FI_EMSGSIZE);
  ASSERT_EQ(fi_send(a->ep, tx.data(), prefix + kMaxAuthPayload, nullptr, b->addr, nullptr), 0);
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(e.len, prefix + kMaxAuthPayload);
}

// The MAC covers the addresses: an endpoint with a secret sends and receives on an address of
// its own, not on INADDR_ANY, whose datagrams would leave from an address it cannot know.
TEST_F(DgramAuth, AnEndpointWithTheSecretNeedsAnAddressOfItsOwn) {
  const sockaddr_in any{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_ANY)}};
  DgramEp* keyed = open_ep({.name = &any, .enable = false});
  EXPECT_EQ(fi_enable(keyed->ep), -FI_EINVAL);
  DgramEp* plain = open_ep({.keyless = true, .name = &any, .enable = false});
  EXPECT_EQ(fi_enable(plain->ep), 0);
}

// The wire: without a secret a datagram is its 24-byte header and the payload, as ever; with
// one, the header says so (flag 2) and 40 bytes follow it before the payload.
TEST_F(DgramAuth, WithTheSecretTheHeaderIsFollowedByItsAuthenticationAndWithoutItNothingChanges) {
  DgramEp* a = open_ep();
  DgramEp* plain = open_ep({.keyless = true});
  Stranger s;
  const std::vector<unsigned char> p = captured(plain->ep, av_, s, "plain", 5);
  ASSERT_EQ(p.size(), 24u + 6u);
  EXPECT_EQ(p[3], 1u) << "flags: remote CQ data only";
  EXPECT_EQ(std::memcmp(p.data() + 24, "plain", 6), 0);
  const std::vector<unsigned char> k = captured(a->ep, av_, s, "keyed", 5);
  ASSERT_EQ(k.size(), 24u + 40u + 6u);
  EXPECT_EQ(k[3], 1u | 2u) << "flags: remote CQ data, authenticated";
  EXPECT_EQ(k[4], 6u) << "the length is the payload's";
  EXPECT_EQ(std::memcmp(k.data() + 64, "keyed", 6), 0);
  // Two datagrams of one endpoint: the same epoch, the next sequence number.
  const std::vector<unsigned char> k2 = captured(a->ep, av_, s, "again");
  ASSERT_EQ(k2.size(), 24u + 40u + 6u);
  EXPECT_EQ(std::memcmp(k.data() + 24, k2.data() + 24, 8), 0) << "epoch";
  uint64_t seq1 = 0, seq2 = 0;
  std::memcpy(&seq1, k.data() + 32, 8);
  std::memcpy(&seq2, k2.data() + 32, 8);
  EXPECT_EQ(seq2, seq1 + 1);
}

// The replay guard: a datagram captured on its way and sent again from its sender's address,
// byte for byte, completes no second receive; damaged, none at all. Without a secret (the
// control: the capture and replay reach the receiver) the copy completes one.
TEST_F(DgramAuth, AReplayedOrDamagedDatagramCompletesNoReceive) {
  Wiretap tap;
  SKIP_WITHOUT_RAW_SOCKETS(tap);
  fi_cq_data_entry e{};
  {
    DgramEp* c = open_ep({.keyless = true});
    DgramEp* d = open_ep({.keyless = true});
    char rx[2][16] = {};
    for (auto& r : rx) ASSERT_EQ(post_recv(d, r, sizeof(r), r), 0);
    ASSERT_EQ(fi_send(c->ep, "twice", 6, nullptr, d->addr, nullptr), 0);
    const std::vector<unsigned char> pkt = tap.capture(c->name, d->name);
    ASSERT_FALSE(pkt.empty());
    ASSERT_EQ(wait_cq(d->cq, &e), 1);
    tap.replay(pkt, d->name);
    ASSERT_EQ(wait_cq(d->cq, &e), 1) << "without a secret, a replay is delivered";
    EXPECT_STREQ(rx[1], "twice");
  }
  DgramEp* a = open_ep();
  DgramEp* b = open_ep();
  char rx[3][16] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  ASSERT_EQ(fi_senddata(a->ep, "once", 5, nullptr, 42, b->addr, nullptr), 0);
  const std::vector<unsigned char> pkt = tap.capture(a->name, b->name);
  ASSERT_FALSE(pkt.empty());
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(rx[0], "once");
  tap.replay(pkt, b->name);
  tap.replay(pkt, b->name);
  EXPECT_TRUE(stays_empty(b->cq, 300)) << "a replay was delivered: " << rx[1];
  // A datagram the receiver never got, damaged on the way: in its payload, in its CQ data, in
  // its sequence number.
  ASSERT_EQ(fi_senddata(a->ep, "fresh", 6, nullptr, 43, b->addr, nullptr), 0);
  const std::vector<unsigned char> fresh = tap.capture(a->name, b->name);
  ASSERT_FALSE(fresh.empty());
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  ASSERT_EQ(fi_senddata(a->ep, "unseen", 7, nullptr, 44, b->addr, nullptr), 0);
  const std::vector<unsigned char> unseen = tap.capture(a->name, b->name);
  ASSERT_FALSE(unseen.empty());
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  // Both are taken now; two more receives, and the damaged copies of both.
  char more[2][16] = {};
  for (auto& r : more) ASSERT_EQ(post_recv(b, r, sizeof(r), r), 0);
  tap.replay(fresh, b->name, 64);       // payload
  tap.replay(unseen, b->name, 16);      // CQ data (the header's check sees it too)
  tap.replay(unseen, b->name, 32 + 7);  // the sequence number's high byte: a datagram never sent
  EXPECT_TRUE(stays_empty(b->cq, 300)) << "delivered: " << more[0];
}

// Multicast: a group's datagrams carry the MAC too; a stranger that sends to the group, in
// fabq's format, reaches no member's receive.
TEST_F(DgramAuth, AStrangersDatagramToAGroupCompletesNoReceiveAndTheMembersHearEachOther) {
  DgramEp* sender = open_ep();
  DgramEp* member = open_ep();
  DgramEp* plain = open_ep({.keyless = true});
  const sockaddr_in g = group(7);
  fid_mc *ms = nullptr, *mm = nullptr;
  ASSERT_EQ(join(sender->ep, g, FI_SEND, &ms, nullptr), 0);
  ASSERT_EQ(join(member->ep, g, FI_RECV, &mm, nullptr), 0);
  char rx[2][16] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(member, r, sizeof(r), r), 0);
  Stranger s;
  s.send(captured(plain->ep, av_, s, "to all"), g);
  // A holder of the secret's datagram to the stranger, sent on to the group.
  s.send(captured(sender->ep, av_, s, "forwarded"), g);
  EXPECT_TRUE(stays_empty(member->cq, 300)) << "received: " << rx[0];
  ASSERT_EQ(fi_send(sender->ep, "members", 8, nullptr, fi_mc_addr(ms), nullptr), 0);
  fi_cq_data_entry e{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(wait_cq(member->cq, &e, nullptr, &src), 1);
  EXPECT_EQ(e.flags, FI_RECV | FI_MSG | FI_MULTICAST);
  EXPECT_STREQ(rx[0], "members");
  EXPECT_EQ(src, sender->addr);
}

// A group's datagram replayed to the group, from its sender's address, reaches no member twice.
TEST_F(DgramAuth, AReplayedGroupDatagramCompletesNoSecondReceive) {
  Wiretap tap;
  SKIP_WITHOUT_RAW_SOCKETS(tap);
  DgramEp* sender = open_ep();
  DgramEp* member = open_ep();
  const sockaddr_in g = group(8);
  fid_mc *ms = nullptr, *mm = nullptr;
  ASSERT_EQ(join(sender->ep, g, FI_SEND, &ms, nullptr), 0);
  ASSERT_EQ(join(member->ep, g, FI_RECV, &mm, nullptr), 0);
  char rx[2][16] = {};
  for (auto& r : rx) ASSERT_EQ(post_recv(member, r, sizeof(r), r), 0);
  ASSERT_EQ(fi_send(sender->ep, "group", 6, nullptr, fi_mc_addr(ms), nullptr), 0);
  const std::vector<unsigned char> pkt = tap.capture(sender->name, g);
  ASSERT_FALSE(pkt.empty());
  fi_cq_data_entry e{};
  ASSERT_EQ(wait_cq(member->cq, &e), 1);
  tap.replay(pkt, g);
  EXPECT_TRUE(stays_empty(member->cq, 300)) << "a replay was delivered: " << rx[1];
}

}  // namespace
}  // namespace fabq::testing
