// fi_fabq(7) RELIABILITY AND SECURITY, the shared secret: with one (FI_FABQ_AUTH_KEY, or the
// auth_key of the fi_info an endpoint is opened with), both ends of a connection prove in the
// handshake that they hold it, without sending it. Two processes on 127.0.0.1; the raw peers
// speak fabq's wire format (raw_peer.h).
//
//   - endpoints that share the secret connect and talk (MSG and RDM), over shared memory and
//     over the socket alike;
//   - a peer without it, or with another, is refused before the application hears of it: no
//     FI_CONNREQ, no RDM message placed, the connecting side gets FI_ECONNREFUSED;
//   - a server that cannot prove it (an impostor) is refused by the connecting side, which never
//     sends the secret;
//   - datagram endpoints that share it take each other's datagrams; one of another secret's is
//     dropped before it reaches a receive.
#include <sys/socket.h>

#include <cstring>
#include <functional>
#include <string>

#include "raw_peer.h"

namespace fabq::testing {
namespace {

constexpr const char* kSecret = "correct horse battery staple";
constexpr const char* kOtherSecret = "incorrect horse battery staple";

// The connecting side's FI_CONNREQ never reaches `s`: progresses it until the peer reports, then
// finds its EQ empty.
void never_hears_of_it(Side& s, Link& link) {
  ASSERT_TRUE(s.await(link, 'r', kTimeoutMs));
  uint32_t event = 0;
  CmEvent ev;
  EXPECT_EQ(fi_eq_read(s.eq(), &event, ev.bytes, sizeof(ev.bytes), 0), -FI_EAGAIN)
      << "the EQ holds event " << event;
}

// In the peer: connects to the port that comes over the link and expects to be refused.
void connects_and_is_refused(Link& link, Options opts) {
  uint64_t port = 0;
  Side c(opts);
  ASSERT_TRUE(link.get_u64(&port));
  ASSERT_TRUE(c.open_active(static_cast<uint16_t>(port)));
  ASSERT_EQ(c.connect("hello", 5), 0);
  uint32_t event = 0;
  CmEvent ev;
  CmError err;
  ASSERT_EQ(c.read_event(&event, &ev, kTimeoutMs, &err), -FI_EAVAIL);
  EXPECT_EQ(err.entry.err, FI_ECONNREFUSED) << fi_strerror(err.entry.err);
  ASSERT_TRUE(link.signal('r'));
}

TEST(Auth, EndpointsThatShareTheSecretConnectAndExchangeMessages) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_AUTH_KEY", kSecret, 1);  // both processes
  Peer client([](Link& link) {
    Side c;
    std::string accepted;
    ASSERT_TRUE(c.dial(link, "connect data", &accepted));
    EXPECT_EQ(accepted, "accept data");
    const std::string msg = "authenticated";
    fi_context2 ctx;
    ASSERT_EQ(c.send(msg.data(), msg.size(), &ctx), 0);
    EXPECT_EQ(c.next_tx().rc, 1);
    c.await(link, 'd');
  });
  Side s;
  std::string connect_data;
  ASSERT_TRUE(s.serve(client.link(), &connect_data, "accept data"));
  EXPECT_EQ(connect_data, "connect data") << "the nonce is not the application's data";
  char buf[32] = {};
  fi_context2 ctx;
  ASSERT_EQ(s.recv(buf, sizeof(buf), &ctx), 0);
  const Completion r = s.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(buf, r.entry.len), "authenticated");
  ASSERT_TRUE(client.link().signal('d'));
  EXPECT_EQ(client.join(&s), 0);
}

// A server with `server` and a peer process running `client` (given the server's port over the
// link): the peer is refused, the server never hears of it.
template <class Client>
void refused_and_never_reported(Options server, Client client) {
  Peer peer(client);
  Side s(server);
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  ASSERT_TRUE(peer.link().put_u64(port));
  never_hears_of_it(s, peer.link());
  EXPECT_EQ(peer.join(&s), 0);
}

TEST(Auth, APeerWithoutTheSecretIsRefusedBeforeTheApplicationHearsOfIt) {
  SKIP_UNLESS_FABQ();
  refused_and_never_reported(Options{.auth_key = kSecret},
                             [](Link& link) { connects_and_is_refused(link, Options{}); });
}

TEST(Auth, APeerWithAnotherSecretIsRefusedBeforeTheApplicationHearsOfIt) {
  SKIP_UNLESS_FABQ();
  refused_and_never_reported(Options{.auth_key = kSecret}, [](Link& link) {
    connects_and_is_refused(link, Options{.auth_key = kOtherSecret});
  });
}

TEST(Auth, AServerWithoutASecretRefusesAPeerThatAsksToAuthenticate) {
  SKIP_UNLESS_FABQ();
  refused_and_never_reported(
      Options{}, [](Link& link) { connects_and_is_refused(link, Options{.auth_key = kSecret}); });
}

TEST(Auth, AWrongAnswerToTheChallengeIsRefusedAndNeverReported) {
  SKIP_UNLESS_FABQ();
  refused_and_never_reported(Options{.auth_key = kSecret}, [](Link& link) {
    RawConnection raw;
    ASSERT_TRUE(raw.dial(link));
    const std::string req = "hi" + std::string(16, 'n');  // data, then the nonce
    ASSERT_TRUE(raw.send_all(
        encode(
            Header{.op = kConnReq, .flags = kAuth, .length = static_cast<uint32_t>(req.size())}) +
        req));
    unsigned char h[kHeaderSize];
    ASSERT_TRUE(raw.recv_exact(h, sizeof(h)));
    ASSERT_EQ(h[3], kChallenge);
    ASSERT_EQ(get_le(h + 8, 4), 48u) << "Ns and MAC_s";
    unsigned char challenge[48];
    ASSERT_TRUE(raw.recv_exact(challenge, sizeof(challenge)));
    ASSERT_TRUE(raw.send_all(encode(Header{.op = kProof, .length = 32}) + std::string(32, 'p')));
    EXPECT_TRUE(raw.closed_by_peer());
    ASSERT_TRUE(link.signal('r'));
  });
}

TEST(Auth, AnImpostorServerIsRefusedAndNeverSeesTheSecret) {
  SKIP_UNLESS_FABQ();
  Peer impostor([](Link& link) {
    const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    ASSERT_EQ(listen(lfd, 1), 0);
    ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    ASSERT_TRUE(link.put_u64(ntohs(a.sin_port)));
    pollfd p{.fd = lfd, .events = POLLIN};
    ASSERT_EQ(poll(&p, 1, kTimeoutMs), 1);
    const int fd = accept(lfd, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    // Everything the client sends, until the impostor answers.
    std::string got;
    unsigned char h[kHeaderSize];
    for (size_t need = sizeof(h); got.size() < need;) {
      char c[512];
      p = {.fd = fd, .events = POLLIN};
      ASSERT_EQ(poll(&p, 1, kTimeoutMs), 1);
      const ssize_t n = recv(fd, c, sizeof(c), 0);
      ASSERT_GT(n, 0);
      got.append(c, static_cast<size_t>(n));
      if (got.size() >= sizeof(h)) {
        std::memcpy(h, got.data(), sizeof(h));
        need = sizeof(h) + get_le(h + 8, 4);
      }
    }
    EXPECT_EQ(h[3], kConnReq);
    EXPECT_TRUE(get_le(h + 4, 4) & kAuth) << "the client asks to authenticate";
    EXPECT_EQ(got.find(kSecret), std::string::npos) << "the secret went over the wire";
    EXPECT_EQ(got.substr(sizeof(h), 5), "hello");
    const std::string challenge(48, 'c');  // a MAC that proves nothing
    const std::string frame = encode(Header{.op = kChallenge, .length = 48}) + challenge;
    ASSERT_EQ(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
    // The client closes without proving anything itself.
    std::string after;
    for (;;) {
      char c[256];
      p = {.fd = fd, .events = POLLIN};
      if (poll(&p, 1, kTimeoutMs) != 1) break;
      const ssize_t n = recv(fd, c, sizeof(c), 0);
      if (n <= 0) break;
      after.append(c, static_cast<size_t>(n));
    }
    EXPECT_EQ(after, "") << "the client answered an impostor";
    close(fd);
    close(lfd);
  });
  Side c(Options{.auth_key = kSecret});
  uint64_t port = 0;
  ASSERT_TRUE(impostor.link().get_u64(&port));
  ASSERT_TRUE(c.open_active(static_cast<uint16_t>(port)));
  ASSERT_EQ(c.connect("hello", 5), 0);
  uint32_t event = 0;
  CmEvent ev;
  CmError err;
  ASSERT_EQ(c.read_event(&event, &ev, kTimeoutMs, &err), -FI_EAVAIL);
  EXPECT_EQ(err.entry.err, FI_ECONNREFUSED) << fi_strerror(err.entry.err);
  EXPECT_EQ(impostor.join(&c), 0);
}

// Without the secret, a stranger could announce another endpoint's name and have its messages
// taken for that endpoint's (fi_cq_readfrom naming the victim). With it, the stranger is refused
// before its message is placed, and the real endpoint's arrives named as it should be.
TEST(Auth, AnRdmStrangerPosingAsAnotherEndpointIsRefusedBeforeItConsumesAReceive) {
  SKIP_UNLESS_FABQ();
  Peer legit([](Link& link) {
    Rdm r(kSecret);
    if (!r.ok() || !r.tell(link)) return;
    const fi_addr_t receiver = r.learn(link);
    ASSERT_TRUE(link.wait('s'));
    const char msg[] = "the real one";
    ASSERT_EQ(r.tsend(msg, sizeof(msg), receiver, 3, nullptr), 0);
    EXPECT_EQ(r.next_for(nullptr).rc, 1);
    link.wait('d', kPeerSeconds * 1000);
  });
  Rdm r(kSecret);
  ASSERT_TRUE(r.ok());
  sockaddr_in victim{};
  ASSERT_TRUE(legit.link().get(&victim, sizeof(victim)));
  const fi_addr_t victim_addr = r.insert(victim);
  ASSERT_TRUE(r.tell(legit.link()));
  char buf[64] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 3, buf), 0);
  // The stranger announces the victim's name and sends a message right behind its request.
  RawConnection stranger;
  ASSERT_TRUE(stranger.connect_to(ntohs(r.address().sin_port)));
  const std::string name(reinterpret_cast<const char*>(&victim), sizeof(victim));
  ASSERT_TRUE(stranger.send_all(
      encode(Header{.op = kConnReq, .length = static_cast<uint32_t>(name.size())}) + name +
      encode(Header{.op = kConnReady}) + encode(Header{.op = kTagged, .length = 5, .tag = 3}) +
      "forge"));
  bool closed = false;
  for (const auto t0 = Clock::now(); !closed && ms_since(t0) < kTimeoutMs;) {
    r.progress();
    pollfd p{.fd = stranger.fd(), .events = POLLIN};
    if (poll(&p, 1, 0) != 1) continue;
    char c[256];
    const ssize_t n = recv(stranger.fd(), c, sizeof(c), MSG_DONTWAIT);
    closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
  }
  EXPECT_TRUE(closed) << "the stranger was not refused";
  ASSERT_TRUE(legit.link().signal('s'));
  const Completion g = r.next_for(buf);
  ASSERT_EQ(g.rc, 1) << "err " << g.err.err;
  EXPECT_STREQ(buf, "the real one");
  EXPECT_EQ(g.src, victim_addr);
  ASSERT_TRUE(legit.link().signal('d'));
  EXPECT_EQ(legit.join(), 0);
}

// FI_EP_DGRAM: every datagram carries a MAC under the secret (fi_fabq(7) RELIABILITY AND
// SECURITY). FI_FABQ_AUTH_KEY gives it to every process; the stranger's hints name another.
Options dgram_options(const char* auth_key = nullptr) {
  Options o;
  o.type = FI_EP_DGRAM;
  o.caps = FI_MSG | FI_SOURCE;
  o.auth_key = auth_key;
  return o;
}

// In a peer: a datagram endpoint that tells its name, learns the receiver's, and at 's' sends it
// `msg`, then says 'x' once the send has completed.
std::function<void(Link&)> datagram_sender(const char* auth_key, const char* msg) {
  return [auth_key, msg](Link& link) {
    Side s(dgram_options(auth_key));
    if (!s.open() || !s.tell(link)) return;
    const fi_addr_t to = s.learn(link);
    ASSERT_TRUE(link.wait('s'));
    ASSERT_EQ(
        s.retry([&] { return fi_send(s.ep(), msg, std::strlen(msg) + 1, nullptr, to, nullptr); }),
        0);
    EXPECT_EQ(s.next_tx().rc, 1);
    ASSERT_TRUE(link.signal('x'));
    link.wait('d', kPeerSeconds * 1000);
  };
}

TEST(Auth, DatagramsOfProcessesThatShareTheSecretAreTakenAndAnotherSecretsAreDropped) {
  setenv("FI_FABQ_AUTH_KEY", kSecret, 1);  // every process, read when the provider loads
  SKIP_UNLESS_FABQ();
  Peer stranger(datagram_sender(kOtherSecret, "stranger"));
  Peer friendly(datagram_sender(nullptr, "friend"));
  Side r(dgram_options());
  ASSERT_TRUE(r.open());
  // fi_getinfo says what the secret leaves of a datagram: 65507 - 24 - 40 bytes.
  EXPECT_EQ(r.info()->ep_attr->max_msg_size, 65443u);
  fi_addr_t from[2] = {};
  Peer* const peers[2] = {&stranger, &friendly};
  for (int i = 0; i < 2; ++i) {
    from[i] = r.learn(peers[i]->link());
    ASSERT_TRUE(r.tell(peers[i]->link()));
  }
  char buf[2][32] = {};
  for (auto& b : buf) ASSERT_EQ(r.recv(b, sizeof(b), b), 0);
  ASSERT_TRUE(stranger.link().signal('s'));
  ASSERT_TRUE(r.await(stranger.link(), 'x'));
  EXPECT_TRUE(r.quiet_for(r.rx_cq(), 300)) << "the stranger's datagram was taken: " << buf[0];
  ASSERT_TRUE(friendly.link().signal('s'));
  const Completion c = r.next_rx();
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_STREQ(buf[0], "friend");
  EXPECT_EQ(c.src, from[1]);
  for (Peer* p : peers) ASSERT_TRUE(p->link().signal('d'));
  EXPECT_EQ(stranger.join(&r), 0);
  EXPECT_EQ(friendly.join(&r), 0);
}

}  // namespace
}  // namespace fabq::testing
