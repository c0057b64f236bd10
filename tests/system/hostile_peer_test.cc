// fabq against peers that mean harm or simply die: floods of connection requests, peers that
// connect and never speak or leave at once, a process that runs out of descriptors, and peers
// killed between messages or inside one. Raw peers speak fabq's wire format from raw_peer.h;
// the well-behaved ones are fabq endpoints in a child process. Everything on 127.0.0.1, every
// wait bounded, every count small enough for a 2-core machine.
//
// What fi_fabq(7) RELIABILITY AND SECURITY promises, and these check:
//   - a connection request that the passive endpoint's EQ has no room for (requests may fill
//     half of it) is refused at once; the EQ never overruns for them, and once the application
//     reads it, the next client connects;
//   - at most FI_FABQ_CM_BACKLOG connections are held in their handshake; more are closed at
//     once;
//   - a connection that closes before its request is read is freed by the progress that sees
//     it, not when someone else connects;
//   - out of descriptors, the listener backs off instead of spinning, and connections already
//     made keep working;
//   - a MSG peer that dies ends the receives posted for it (FI_ECANCELED), as one that dies
//     inside a message fails them (FI_EIO), so an application blocked in fi_cq_sread returns;
//   - an RDM receive that a dying peer's half message had taken goes back, and takes a message
//     that arrived meanwhile from another peer.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <vector>

#include "fabq/fi_fabq.h"
#include "raw_peer.h"

namespace fabq::testing {
namespace {

// Descriptors this process has open now.
int open_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1;  // opendir's own
}

// A plain TCP connection to 127.0.0.1:port, or -1.
int dial_raw(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A valid connection request, as fabq's active side sends it.
std::string conn_req(const std::string& data) {
  return encode(Header{.op = kConnReq, .length = static_cast<uint32_t>(data.size())}) + data;
}

// How many of `fds` fabq closes within timeout_ms (EOF or reset; what it sends first, a
// kConnReject, is read and dropped). Closed ones are set to -1 (and closed here).
int wait_closed(std::vector<int>& fds, int timeout_ms) {
  int closed = 0;
  const auto t0 = Clock::now();
  while (ms_since(t0) < timeout_ms) {
    std::vector<pollfd> p;
    for (int fd : fds) {
      if (fd >= 0) p.push_back({.fd = fd, .events = POLLIN});
    }
    if (p.empty()) break;
    if (poll(p.data(), p.size(), 50) <= 0) continue;
    for (const pollfd& q : p) {
      if (q.revents == 0) continue;
      char buf[512];
      const ssize_t n = recv(q.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
      close(q.fd);
      for (int& fd : fds) fd = fd == q.fd ? -1 : fd;
      ++closed;
    }
  }
  return closed;
}

void close_all(std::vector<int>& fds) {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

// Progresses `s` until `link` has something to read (the peer's next report).
bool progress_until_readable(Side& s, Link& link, int timeout_ms = kTimeoutMs) {
  const auto t0 = Clock::now();
  while (!link.readable(1)) {
    if (ms_since(t0) > timeout_ms) {
      ADD_FAILURE() << "the peer reported nothing within " << timeout_ms << " ms";
      return false;
    }
    s.progress();
  }
  return true;
}

// Progresses `s` until pred() holds or timeout_ms passes; returns pred().
template <class Pred>
bool progress_until(Side& s, Pred pred, int timeout_ms) {
  const auto t0 = Clock::now();
  while (!pred() && ms_since(t0) < timeout_ms) s.progress();
  return pred();
}

// A fabq client in the peer process: connects with connect data "good" and waits for
// FI_CONNECTED.
void connect_as_a_good_client(uint16_t port) {
  Side c;
  ASSERT_TRUE(c.open_active(port));
  ASSERT_EQ(c.connect("good", 4), 0);
  EXPECT_TRUE(c.wait_connected());
}

// ---------------------------------------------------------------------------------------------
// Floods and half-open connections against a passive endpoint.

constexpr int kFlood = 200;

TEST(HostilePeer, AFloodOfConnectionRequestsIsRefusedBeyondHalfTheEqWhichNeverOverruns) {
  SKIP_UNLESS_FABQ();
  Peer flooder([](Link& link) {
    uint64_t port = 0;
    ASSERT_TRUE(link.get_u64(&port));
    std::vector<int> fds;
    for (int i = 0; i < kFlood; ++i) {
      const int fd = dial_raw(static_cast<uint16_t>(port));
      ASSERT_GE(fd, 0) << "connection " << i;
      const std::string req = conn_req("evil");
      ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
      fds.push_back(fd);
    }
    // Refused ones are closed at once; the rest wait for the application.
    ASSERT_TRUE(link.put_u64(static_cast<uint64_t>(wait_closed(fds, 2000))));
    ASSERT_TRUE(link.wait('r'));  // the server rejected the rest
    const int rejected = wait_closed(fds, 3000);
    ASSERT_TRUE(link.put_u64(static_cast<uint64_t>(rejected)));
    close_all(fds);
    connect_as_a_good_client(static_cast<uint16_t>(port));
  });
  Side s;  // its EQ holds 64 events
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  const int baseline = open_fds();
  ASSERT_TRUE(flooder.link().put_u64(port));
  ASSERT_TRUE(progress_until_readable(s, flooder.link()));
  uint64_t refused = 0;
  ASSERT_TRUE(flooder.link().get_u64(&refused));
  EXPECT_GE(refused, static_cast<uint64_t>(kFlood - 32)) << "requests beyond half the EQ";
  // Every request is either refused or in the EQ, and the EQ holds requests only: no error,
  // no overrun.
  int queued = 0;
  for (;;) {
    uint32_t event = 0;
    CmEvent ev;
    const ssize_t n = fi_eq_read(s.eq(), &event, ev.bytes, sizeof(ev.bytes), 0);
    if (n == -FI_EAGAIN) break;
    ASSERT_GT(n, 0) << "fi_eq_read: " << fi_strerror(static_cast<int>(-n));
    ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
    ASSERT_EQ(std::string(ev.data(), n - kCmEntrySize), "evil");
    EXPECT_EQ(fi_reject(s.pep(), ev.entry().info->handle, nullptr, 0), 0);
    fi_freeinfo(ev.entry().info);
    ++queued;
  }
  EXPECT_LE(queued, 32);
  EXPECT_EQ(static_cast<uint64_t>(queued) + refused, static_cast<uint64_t>(kFlood));
  ASSERT_TRUE(flooder.link().signal('r'));
  ASSERT_TRUE(progress_until_readable(s, flooder.link()));
  uint64_t rejected = 0;
  ASSERT_TRUE(flooder.link().get_u64(&rejected));
  EXPECT_EQ(rejected, static_cast<uint64_t>(queued));
  EXPECT_LE(open_fds(), baseline + 2) << "the flood's connections are all gone";
  // A legitimate client connects now.
  std::string data;
  fi_info* req = s.wait_connreq(&data);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(data, "good");
  ASSERT_TRUE(s.open_endpoint(req));
  ASSERT_TRUE(s.accept());
  EXPECT_EQ(flooder.join(&s), 0);
}

TEST(HostilePeer, ConnectionsBeyondTheBacklogAreClosedAtOnce) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_CM_BACKLOG", "8", 1);
  Peer idler([](Link& link) {
    uint64_t port = 0;
    ASSERT_TRUE(link.get_u64(&port));
    std::vector<int> fds;
    for (int i = 0; i < 40; ++i) {
      const int fd = dial_raw(static_cast<uint16_t>(port));
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
    }
    // Long before the connect timeout (10 s) of the ones that are held.
    ASSERT_TRUE(link.put_u64(static_cast<uint64_t>(wait_closed(fds, 2000))));
    ASSERT_TRUE(link.wait('c'));
    close_all(fds);
    connect_as_a_good_client(static_cast<uint16_t>(port));
  });
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  const int baseline = open_fds();
  ASSERT_TRUE(idler.link().put_u64(port));
  ASSERT_TRUE(progress_until_readable(s, idler.link()));
  uint64_t closed = 0;
  ASSERT_TRUE(idler.link().get_u64(&closed));
  EXPECT_EQ(closed, 32u);
  EXPECT_LE(open_fds(), baseline + 8);
  // The held ones leave with their peer, and make room for a legitimate client.
  ASSERT_TRUE(idler.link().signal('c'));
  fi_info* req = s.wait_connreq();
  ASSERT_NE(req, nullptr);
  ASSERT_TRUE(s.open_endpoint(req));
  ASSERT_TRUE(s.accept());
  EXPECT_EQ(idler.join(&s), 0);
}

TEST(HostilePeer, ConnectionsThatCloseBeforeTheirRequestAreFreedWithoutANewConnection) {
  SKIP_UNLESS_FABQ();
  constexpr int kHalfOpen = 300;
  Peer prober([](Link& link) {
    uint64_t port = 0;
    ASSERT_TRUE(link.get_u64(&port));
    std::vector<int> fds;
    for (int i = 0; i < kHalfOpen; ++i) {
      const int fd = dial_raw(static_cast<uint16_t>(port));
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
    }
    ASSERT_TRUE(link.signal('o'));
    ASSERT_TRUE(link.wait('c'));
    close_all(fds);
    ASSERT_TRUE(link.signal('x'));
    ASSERT_TRUE(link.wait('d'));
  });
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  const int baseline = open_fds();
  ASSERT_TRUE(prober.link().put_u64(port));
  ASSERT_TRUE(s.await(prober.link(), 'o'));
  EXPECT_TRUE(progress_until(
      s, [&] { return open_fds() >= baseline + kHalfOpen; }, kTimeoutMs))
      << open_fds() - baseline << " of " << kHalfOpen << " accepted";
  ASSERT_TRUE(prober.link().signal('c'));
  ASSERT_TRUE(s.await(prober.link(), 'x'));
  EXPECT_TRUE(progress_until(
      s, [&] { return open_fds() <= baseline; }, 3000))
      << open_fds() - baseline << " descriptors still held";
  ASSERT_TRUE(prober.link().signal('d'));
  EXPECT_EQ(prober.join(&s), 0);
}

// CPU time of this process (all its threads), in milliseconds.
int64_t cpu_ms() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1000;
}

TEST(HostilePeer, OutOfDescriptorsTheListenerBacksOffAndConnectionsKeepWorking) {
  SKIP_UNLESS_FABQ();
  Peer client([](Link& link) {
    Side c;
    if (!c.dial(link)) return;
    uint64_t port = 0;
    ASSERT_TRUE(link.get_u64(&port));
    std::vector<int> idle;
    for (int i = 0; i < 100; ++i) {
      const int fd = dial_raw(static_cast<uint16_t>(port));
      ASSERT_GE(fd, 0);
      idle.push_back(fd);
    }
    ASSERT_TRUE(link.signal('f'));
    ASSERT_TRUE(c.await(link, 'm'));
    const std::string msg = "still here";
    fi_context2 ctx;
    ASSERT_EQ(c.send(msg.data(), msg.size(), &ctx), 0);
    EXPECT_EQ(c.next_tx().rc, 1);
    ASSERT_TRUE(c.await(link, 'c'));
    close_all(idle);
    // A new request gets through once descriptors are back.
    RawConnection raw;
    ASSERT_TRUE(raw.connect_to(static_cast<uint16_t>(port)));
    ASSERT_TRUE(raw.send_all(conn_req("late")));
    c.await(link, 'd');
  });
  Side s;
  ASSERT_TRUE(s.serve(client.link()));
  const sockaddr_in pep = s.name(&s.pep()->fid);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds() + 10);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_TRUE(client.link().put_u64(ntohs(pep.sin_port)));
  ASSERT_TRUE(s.await(client.link(), 'f'));
  // Blocked for a second while the listening socket stays readable and accept fails: the
  // progress thread must not spin on it.
  char buf[32] = {};
  fi_context2 ctx;
  ASSERT_EQ(s.recv(buf, sizeof(buf), &ctx), 0);
  const int64_t cpu0 = cpu_ms();
  fi_cq_tagged_entry entry;
  EXPECT_EQ(fi_cq_sread(s.rx_cq(), &entry, 1, nullptr, 1000), -FI_EAGAIN);
  const int64_t spent = cpu_ms() - cpu0;
  RecordProperty("cpu_ms_while_blocked_1000_ms", static_cast<int>(spent));
  EXPECT_LT(spent, 300) << "ms of CPU while blocked for 1000 ms";
  // The connection made before keeps working.
  ASSERT_TRUE(client.link().signal('m'));
  const Completion r = s.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(buf, r.entry.len), "still here");
  ASSERT_TRUE(client.link().signal('c'));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  // The idle ones sent no request: the first one to come is the late one.
  uint32_t event = 0;
  CmEvent ev;
  const ssize_t n = s.read_event(&event, &ev);
  ASSERT_GT(n, 0);
  ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
  fi_info* late = ev.entry().info;
  EXPECT_EQ(std::string(ev.data(), n - kCmEntrySize), "late");
  EXPECT_EQ(fi_reject(s.pep(), late->handle, nullptr, 0), 0);
  fi_freeinfo(late);
  ASSERT_TRUE(client.link().signal('d'));
  EXPECT_EQ(client.join(&s), 0);
}

// ---------------------------------------------------------------------------------------------
// Peers that die.

TEST(HostilePeer, AMsgPeerKilledBetweenMessagesEndsTheReceivesPostedForIt) {
  Peer client([](Link& link) {
    Side c;
    if (!c.dial(link)) return;
    const std::string msg = "one";
    fi_context2 ctx;
    ASSERT_EQ(c.send(msg.data(), msg.size(), &ctx), 0);
    EXPECT_EQ(c.next_tx().rc, 1);
    c.await(link, 'k', kPeerSeconds * 1000);  // killed meanwhile
  });
  Side s;
  ASSERT_TRUE(s.serve(client.link()));
  char a[16] = {}, b[16] = {}, c[16] = {};
  fi_context2 ca, cb, cc;
  ASSERT_EQ(s.recv(a, sizeof(a), &ca), 0);
  Completion got = s.next_rx();
  ASSERT_EQ(got.rc, 1) << cq_str(got);
  ASSERT_EQ(s.recv(b, sizeof(b), &cb), 0);
  client.kill_now();
  // An application blocked in fi_cq_sread returns with the receive in error.
  got = s.next_rx();
  ASSERT_EQ(got.rc, -FI_EAVAIL) << cq_str(got);
  EXPECT_EQ(got.err.op_context, &cb);
  EXPECT_EQ(got.err.err, FI_ECANCELED);
  EXPECT_TRUE(got.err.flags & FI_RECV);
  // So does a receive posted after the end: nothing can come any more.
  ASSERT_EQ(s.recv(c, sizeof(c), &cc), 0);
  got = s.next_rx(1000);
  ASSERT_EQ(got.rc, -FI_EAVAIL) << cq_str(got);
  EXPECT_EQ(got.err.op_context, &cc);
  EXPECT_EQ(got.err.err, FI_ECANCELED);
  // And the EQ says why.
  uint32_t event = 0;
  CmEvent ev;
  ASSERT_GE(s.read_event(&event, &ev), 0);
  EXPECT_EQ(event, static_cast<uint32_t>(FI_SHUTDOWN));
}

TEST(HostilePeer, AMsgPeerThatDiesInsideAMessageFailsItsReceivesWithEio) {
  SKIP_UNLESS_FABQ();
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  RawConnection raw;
  ASSERT_TRUE(raw.connect_to(port));
  ASSERT_TRUE(raw.send_all(conn_req("")));
  fi_info* req = s.wait_connreq();
  ASSERT_NE(req, nullptr);
  ASSERT_TRUE(s.open_endpoint(req));
  ASSERT_EQ(fi_accept(s.ep(), nullptr, 0), 0);
  // fi_accept wrote its answer; the handshake's end makes both sides connected.
  unsigned char h[kHeaderSize];
  ASSERT_TRUE(raw.recv_exact(h, sizeof(h)));
  ASSERT_EQ(h[3], kConnAccept);
  ASSERT_TRUE(raw.send_all(encode(Header{.op = kConnReady})));
  ASSERT_TRUE(s.wait_connected());
  char buf[64];
  fi_context2 ctx;
  ASSERT_EQ(s.recv(buf, sizeof(buf), &ctx), 0);
  ASSERT_TRUE(raw.send_all(encode(Header{.op = kMsg, .length = 1000}) + std::string(10, 'x')));
  raw.close_now();
  const Completion got = s.next_rx();
  ASSERT_EQ(got.rc, -FI_EAVAIL) << cq_str(got);
  EXPECT_EQ(got.err.op_context, &ctx);
  EXPECT_EQ(got.err.err, FI_EIO);
  EXPECT_EQ(got.err.prov_errno, FI_FABQ_EVENT_EP_REQ_ERR);
}

TEST(HostilePeer, AnRdmReceiveTakenByAHalfMessageOfADyingPeerTakesAMessageThatCameMeanwhile) {
  SKIP_UNLESS_FABQ();
  Peer sender([](Link& link) {
    Rdm r;
    if (!r.ok()) return;
    const fi_addr_t receiver = r.learn(link);
    ASSERT_TRUE(link.wait('s'));
    const char msg[] = "whole";
    ASSERT_EQ(r.tsend(msg, sizeof(msg), receiver, 5, nullptr), 0);
    EXPECT_EQ(r.next_for(nullptr).rc, 1);
    ASSERT_TRUE(link.signal('w'));
    link.wait('d', kPeerSeconds * 1000);
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(sender.link()));
  char buf[64] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 5, buf), 0);
  // A stranger connects as an RDM endpoint would and sends the first 10 bytes of 100.
  RawConnection raw;
  ASSERT_TRUE(raw.connect_to(ntohs(r.address().sin_port)));
  sockaddr_in stranger = r.address();
  stranger.sin_port = htons(1);
  ASSERT_TRUE(
      raw.send_all(conn_req(std::string(reinterpret_cast<char*>(&stranger), sizeof(stranger)))));
  unsigned char h[kHeaderSize];
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();
  ASSERT_TRUE(raw.recv_exact(h, sizeof(h)));
  ASSERT_EQ(h[3], kConnAccept);
  ASSERT_TRUE(raw.send_all(encode(Header{.op = kConnReady}) +
                           encode(Header{.op = kTagged, .length = 100, .tag = 5}) +
                           std::string(10, 'x')));
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();  // the half message takes it
  // The whole message arrives while the only receive is taken: it is buffered.
  ASSERT_TRUE(sender.link().signal('s'));
  for (auto t0 = Clock::now(); !sender.link().readable(0) && ms_since(t0) < kTimeoutMs;) {
    r.progress();
  }
  ASSERT_TRUE(sender.link().wait('w'));
  // The stranger dies: its half message is dropped, the receive goes back and takes the whole
  // one at once.
  raw.close_now();
  const Completion g = r.next_for(buf);
  ASSERT_EQ(g.rc, 1);
  EXPECT_STREQ(buf, "whole");
  ASSERT_TRUE(sender.link().signal('d'));
  EXPECT_EQ(sender.join(), 0);
}

// A raw peer that connects to `r` as an RDM endpoint announcing 127.0.0.1:`port` would.
bool rdm_handshake(Rdm& r, RawConnection& raw, uint16_t port) {
  if (!raw.connect_to(ntohs(r.address().sin_port))) return false;
  sockaddr_in me = r.address();
  me.sin_port = htons(port);
  if (!raw.send_all(conn_req(std::string(reinterpret_cast<char*>(&me), sizeof(me))))) {
    return false;
  }
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();
  unsigned char h[kHeaderSize];
  if (!raw.recv_exact(h, sizeof(h)) || h[3] != kConnAccept) return false;
  return raw.send_all(encode(Header{.op = kConnReady}));
}

// Closing an endpoint destroys its connections one by one; the one inside a message gives back
// its receive, which must neither take a buffered message (whose connection may be gone
// already: its delivery acknowledgement would go through freed memory) nor resume another
// connection. AddressSanitizer sees the difference; the other builds check nothing hangs.
TEST(HostilePeer, ClosingAnRdmEndpointWhileAPeerIsInsideAMessageTouchesNoClosedConnection) {
  SKIP_UNLESS_FABQ();
  Rdm r;
  ASSERT_TRUE(r.ok());
  RawConnection earlier, inside;
  ASSERT_TRUE(rdm_handshake(r, earlier, 1));  // accepted first, destroyed first
  ASSERT_TRUE(rdm_handshake(r, inside, 2));
  char buf[64] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 5, buf), 0);
  ASSERT_TRUE(inside.send_all(encode(Header{.op = kTagged, .length = 100, .tag = 5}) +
                              std::string(10, 'x')));
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();  // it takes the receive
  // A whole message that wants its delivery acknowledged: buffered.
  ASSERT_TRUE(earlier.send_all(
      encode(Header{.op = kTagged, .flags = 1u << 2, .length = 6, .seq = 1, .tag = 5}) +
      std::string("whole", 6)));
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();
  // ~Rdm closes the endpoint with both connections open.
}

TEST(HostilePeer, ClosingAnRdmEndpointWhileAPeerIsInsideAMessageResumesNoClosedConnection) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_UNEXPECTED_BYTES", "16", 1);  // the earlier connection's message stalls it
  Rdm r;
  ASSERT_TRUE(r.ok());
  RawConnection earlier, inside;
  ASSERT_TRUE(rdm_handshake(r, earlier, 1));
  ASSERT_TRUE(rdm_handshake(r, inside, 2));
  char buf[64] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 5, buf), 0);
  ASSERT_TRUE(inside.send_all(encode(Header{.op = kTagged, .length = 100, .tag = 5}) +
                              std::string(10, 'x')));
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();
  ASSERT_TRUE(earlier.send_all(encode(Header{.op = kTagged, .length = 64, .tag = 7}) +
                               std::string(64, 'y')));
  for (auto t0 = Clock::now(); ms_since(t0) < 200;) r.progress();
}

// ---------------------------------------------------------------------------------------------
// Strangers that hold descriptors and buffers.

// The request of a raw peer that connects as an RDM endpoint named 127.0.0.1:`port` would.
std::string rdm_request(const Rdm& r, uint16_t port) {
  sockaddr_in me = r.address();
  me.sin_port = htons(port);
  return conn_req(std::string(reinterpret_cast<char*>(&me), sizeof(me)));
}

// Answers, on each of `fds` that has one, the kConnAccept of `r` with kConnReady, while
// progressing `r`, until every one of them answered (or closed) or timeout_ms passed. Returns
// how many were accepted; those that closed are set to -1 (and closed here).
int finish_handshakes(Side* r, std::vector<int>& fds, int timeout_ms = kTimeoutMs) {
  std::vector<bool> done(fds.size());
  int accepted = 0;
  size_t left = fds.size();
  for (const auto t0 = Clock::now(); left > 0 && ms_since(t0) < timeout_ms;) {
    if (r != nullptr) {
      r->progress();
    } else {
      usleep(1000);
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (done[i] || fds[i] < 0) continue;
      unsigned char h[kHeaderSize];
      const ssize_t n = recv(fds[i], h, sizeof(h), MSG_DONTWAIT | MSG_PEEK);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      done[i] = true;
      --left;
      if (n == static_cast<ssize_t>(sizeof(h)) && h[3] == kConnAccept) {
        (void)recv(fds[i], h, sizeof(h), MSG_DONTWAIT);
        const std::string ready = encode(Header{.op = kConnReady});
        if (send(fds[i], ready.data(), ready.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(ready.size())) {
          ++accepted;
          continue;
        }
      }
      close(fds[i]);  // refused, closed, or not fabq's answer
      fds[i] = -1;
    }
  }
  return accepted;
}

// `n` raw peers connected to `r` as RDM endpoints would, named 127.0.0.1:first..first+n-1 (so
// that each is a peer of its own), their handshakes done; their sockets are appended to *fds.
bool rdm_strangers(Rdm& r, int n, uint16_t first, std::vector<int>* fds) {
  std::vector<int> mine;
  for (int i = 0; i < n; ++i) {
    const int fd = dial_raw(ntohs(r.address().sin_port));
    if (fd < 0) {
      ADD_FAILURE() << "connect: " << std::strerror(errno);
      close_all(mine);
      return false;
    }
    mine.push_back(fd);
    const std::string req = rdm_request(r, static_cast<uint16_t>(first + i));
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
      ADD_FAILURE() << "send: " << std::strerror(errno);
      close_all(mine);
      return false;
    }
  }
  const int accepted = finish_handshakes(&r, mine);
  fds->insert(fds->end(), mine.begin(), mine.end());
  EXPECT_EQ(accepted, n) << "strangers whose handshake ended";
  return accepted == n;
}

// Sends one whole tagged message of `len` bytes on a raw socket.
bool send_tagged(int fd, uint64_t tag, size_t len, char fill = 'x') {
  const std::string frame =
      encode(Header{.op = kTagged, .length = static_cast<uint32_t>(len), .tag = tag}) +
      std::string(len, fill);
  return send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
}

// Whether a message with `tag` is buffered at `s` now: one FI_PEEK.
bool buffered(Side& s, uint64_t tag) {
  fi_context2 ctx;
  fi_msg_tagged m{.addr = FI_ADDR_UNSPEC, .tag = tag, .context = &ctx};
  const ssize_t rc = s.retry([&] { return fi_trecvmsg(s.ep(), &m, FI_PEEK | FI_COMPLETION); });
  if (rc != 0) {
    ADD_FAILURE() << "fi_trecvmsg(FI_PEEK): " << fi_strerror(static_cast<int>(-rc));
    return false;
  }
  const Completion c = s.next_for(&ctx);
  if (c.rc == -FI_EAVAIL && c.err.err == FI_ENOMSG) return false;
  EXPECT_EQ(c.rc, 1) << cq_str(c);
  return c.rc == 1;
}

// Progresses `s` for ms milliseconds.
void progress_for(Side& s, int ms) {
  for (const auto t0 = Clock::now(); ms_since(t0) < ms;) s.progress();
}

// A message nobody receives holds neither the closed connection it came through nor that
// connection's descriptor: 300 strangers each leave a 4-byte tagged message nobody wants and
// go, and every descriptor comes back. The messages stay, for receives to come.
TEST(HostilePeer, ClosedConnectionsWhoseMessagesNobodyReceivedGiveBackTheirDescriptors) {
  SKIP_UNLESS_FABQ();
  constexpr int kStrangers = 300;
  constexpr uint64_t kTag = 0x5eed0000;
  Rdm r;
  ASSERT_TRUE(r.ok());
  const int baseline = open_fds();
  std::vector<int> fds;
  ASSERT_TRUE(rdm_strangers(r, kStrangers, 20000, &fds));
  for (int i = 0; i < kStrangers; ++i) ASSERT_TRUE(send_tagged(fds[i], kTag + i, 4));
  close_all(fds);
  EXPECT_TRUE(progress_until(
      r, [&] { return open_fds() <= baseline; }, 3000))
      << open_fds() - baseline << " descriptors still held";
  char buf[8] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), kTag + 7, buf), 0);
  const Completion c = r.next_for(buf);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(std::string(buf, 4), "xxxx");
}

// A connection whose message waits for room (no receive takes it, and the buffer's bounds are
// reached) keeps what its peer sent, and its descriptor, until a receive comes, even after its
// peer left (in CLOSE_WAIT); but when the endpoint needs room for another connection, one whose
// peer left is the first to go after the idle ones. So strangers that each leave a message to
// wait and go hold no more than FI_FABQ_INBOUND_MAX descriptors, and a peer still gets in.
TEST(HostilePeer, ConnectionsWaitingForRoomWhosePeersLeftHoldNoMoreThanTheInboundBound) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_UNEXPECTED_BYTES", "1024", 1);  // one message of 600 bytes fits
  setenv("FI_FABQ_INBOUND_MAX", "8", 1);
  constexpr int kStrangers = 50;
  Rdm r;
  ASSERT_TRUE(r.ok());
  const int baseline = open_fds();
  for (int i = 0; i < kStrangers; ++i) {
    std::vector<int> one;
    ASSERT_TRUE(rdm_strangers(r, 1, static_cast<uint16_t>(20000 + i), &one));
    ASSERT_TRUE(send_tagged(one[0], 1, 600, static_cast<char>('a' + i % 26)));
    progress_for(r, 5);  // the first is buffered, the others wait for room
    close_all(one);
  }
  progress_for(r, 200);
  EXPECT_LE(open_fds() - baseline, 8) << "descriptors held for " << kStrangers << " strangers";
  // A peer still gets in, and its message reaches the receive posted for it.
  char hello[8] = {};
  ASSERT_EQ(r.trecv(hello, sizeof(hello), 9, hello), 0);
  std::vector<int> late;
  ASSERT_TRUE(rdm_strangers(r, 1, 21000, &late));
  ASSERT_TRUE(send_tagged(late[0], 9, 4));
  const Completion h = r.next_for(hello);
  ASSERT_EQ(h.rc, 1) << cq_str(h);
  close_all(late);
  // The message that found room is still there.
  char buf[600] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 1, buf), 0);
  const Completion c = r.next_for(buf);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_EQ(c.entry.len, 600u);
  EXPECT_EQ(buf[0], 'a');
}

// An RDM endpoint holds at most FI_FABQ_INBOUND_MAX connections up from peers that connected
// to it; one that comes up beyond the bound takes the place of the least recently active that
// holds nothing in flight, whose peer connects anew at its next send.
TEST(HostilePeer, AtTheInboundBoundANewConnectionReplacesTheLeastRecentlyActiveIdleOne) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_INBOUND_MAX", "8", 1);
  Rdm r;
  ASSERT_TRUE(r.ok());
  const int baseline = open_fds();
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(rdm_strangers(r, 1, static_cast<uint16_t>(20000 + i), &held));
    progress_for(r, 5);  // one after the other
  }
  // The first one is the oldest, but a message (which a receive takes) makes it the most
  // recently active: the second is the one to go.
  char buf[8] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 3, buf), 0);
  ASSERT_TRUE(send_tagged(held[0], 3, 4));
  ASSERT_EQ(r.next_for(buf).rc, 1);
  EXPECT_EQ(open_fds(), baseline + 8 + 8);  // each stranger's socket and fabq's
  std::vector<int> late;
  ASSERT_TRUE(rdm_strangers(r, 1, 21000, &late));
  progress_for(r, 100);  // it comes up, one more than the bound
  std::vector<int> second{held[1]};
  EXPECT_EQ(wait_closed(second, 2000), 1) << "the least recently active idle one was closed";
  held[1] = second[0];
  std::vector<int> first{held[0]};
  EXPECT_EQ(wait_closed(first, 200), 0) << "the one that spoke last stays";
  EXPECT_TRUE(progress_until(
      r, [&] { return open_fds() <= baseline + 8 + 8; }, 2000))
      << open_fds() - baseline << " descriptors: 8 fabq's and 8 strangers' expected";
  // Strangers beyond the bound never make it hold more.
  std::vector<int> flood;
  for (int i = 0; i < 32; ++i) {
    const int fd = dial_raw(ntohs(r.address().sin_port));
    ASSERT_GE(fd, 0);
    flood.push_back(fd);
    const std::string req = rdm_request(r, static_cast<uint16_t>(22000 + i));
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  finish_handshakes(&r, flood, 2000);
  progress_for(r, 100);
  int strangers = 0;
  for (const auto* v : {&held, &late, &flood}) {
    for (int fd : *v) strangers += fd >= 0;
  }
  EXPECT_LE(open_fds() - baseline - strangers, 8) << "fabq's descriptors";
  close_all(held);
  close_all(late);
  close_all(flood);
}

// The attack as it came: strangers take every descriptor a process has (here few: a low
// RLIMIT_NOFILE), so that its listener can accept no one and a legitimate peer's send fails
// with FI_ETIMEDOUT. Connections beyond half the descriptor limit replace idle ones instead,
// and the peer's message arrives.
TEST(HostilePeer, StrangersHoldingConnectionsCannotKeepAPeerFromSending) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_CONNECT_TIMEOUT_MS", "3000", 1);
  constexpr int kStrangers = 200;
  Peer peers([](Link& link) {
    sockaddr_in target{};
    ASSERT_TRUE(link.get(&target, sizeof(target)));
    std::vector<int> fds;
    for (int i = 0; i < kStrangers; ++i) {
      const int fd = dial_raw(ntohs(target.sin_port));
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
      sockaddr_in me = target;
      me.sin_port = htons(static_cast<uint16_t>(20000 + i));
      const std::string req = conn_req(std::string(reinterpret_cast<char*>(&me), sizeof(me)));
      ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    }
    const int accepted = finish_handshakes(nullptr, fds, 2000);
    ASSERT_TRUE(link.put_u64(static_cast<uint64_t>(accepted)));
    ASSERT_TRUE(link.wait('s'));
    {
      Rdm legit;
      ASSERT_TRUE(legit.ok());
      const fi_addr_t to = legit.insert(target);
      const char msg[] = "hello";
      ASSERT_EQ(legit.tsend(msg, sizeof(msg), to, 9, nullptr), 0);
      const Completion c = legit.next_for(nullptr, 6000);
      EXPECT_EQ(c.rc, 1) << cq_str(c);
      ASSERT_TRUE(link.signal('d'));
      legit.await(link, 'x');
    }
    close_all(fds);
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(open_fds() + 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_TRUE(r.tell(peers.link()));
  ASSERT_TRUE(progress_until_readable(r, peers.link()));
  uint64_t accepted = 0;
  ASSERT_TRUE(peers.link().get_u64(&accepted));
  RecordProperty("strangers_accepted", static_cast<int>(accepted));
  char buf[16] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 9, buf), 0);
  ASSERT_TRUE(peers.link().signal('s'));
  const Completion c = r.next_for(buf, 8000);
  ASSERT_EQ(c.rc, 1) << cq_str(c);
  EXPECT_STREQ(buf, "hello");
  EXPECT_TRUE(r.await(peers.link(), 'd'));
  ASSERT_TRUE(peers.link().signal('x'));
  EXPECT_EQ(peers.join(&r), 0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
}

// One peer cannot take the whole of an endpoint's buffer for messages that came before their
// receive: its share is FI_FABQ_UNEXPECTED_PEER_BYTES (each message counted with its
// bookkeeping), beyond which it waits and the others' messages are still buffered.
TEST(HostilePeer, OnePeerCannotFillTheBufferOtherPeersMessagesNeed) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_UNEXPECTED_BYTES", "16384", 1);
  setenv("FI_FABQ_UNEXPECTED_PEER_BYTES", "8192", 1);  // six 1024-byte messages
  Rdm r;
  ASSERT_TRUE(r.ok());
  std::vector<int> fds;
  ASSERT_TRUE(rdm_strangers(r, 2, 20000, &fds));
  // Without the share, its first 16 would fill the endpoint's 16 KiB.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(send_tagged(fds[0], 1, 1024));
  progress_for(r, 200);
  ASSERT_TRUE(send_tagged(fds[1], 2, 100));
  bool found = false;
  for (const auto t0 = Clock::now(); !found && ms_since(t0) < 1000;) {
    progress_for(r, 20);
    found = buffered(r, 2);
  }
  EXPECT_TRUE(found) << "the second peer's message was not buffered";
  // The first peer's messages all arrive as receives take them.
  std::vector<std::array<char, 1024>> bufs(40);
  for (auto& b : bufs) ASSERT_EQ(r.trecv(b.data(), b.size(), 1, b.data()), 0);
  for (auto& b : bufs) ASSERT_EQ(r.next_for(b.data()).rc, 1);
  close_all(fds);
}

// Nor can peers of one endpoint take the buffer of every other endpoint of the fabric: all of
// them together buffer at most FI_FABQ_UNEXPECTED_TOTAL_BYTES, and a message that found no
// room is buffered once receives elsewhere free some.
TEST(HostilePeer, TheEndpointsOfAFabricBufferAtMostTheTotalAndGoOnWhenItFrees) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_UNEXPECTED_TOTAL_BYTES", "8192", 1);  // six 1000-byte messages
  Rdm r;
  ASSERT_TRUE(r.ok());
  Side other(rdm_options(), &r);
  ASSERT_TRUE(other.open());
  std::vector<int> to_r, to_other;
  ASSERT_TRUE(rdm_strangers(r, 1, 20000, &to_r));
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(send_tagged(to_r[0], 1, 1000));
  progress_for(r, 200);
  RawConnection raw;
  ASSERT_TRUE(raw.connect_to(ntohs(other.address().sin_port)));
  sockaddr_in me = other.address();
  me.sin_port = htons(21000);
  ASSERT_TRUE(raw.send_all(conn_req(std::string(reinterpret_cast<char*>(&me), sizeof(me)))));
  progress_for(other, 200);
  unsigned char h[kHeaderSize];
  ASSERT_TRUE(raw.recv_exact(h, sizeof(h)));
  ASSERT_EQ(h[3], kConnAccept);
  ASSERT_TRUE(raw.send_all(encode(Header{.op = kConnReady})));
  ASSERT_TRUE(send_tagged(raw.fd(), 2, 100));
  progress_for(other, 200);
  EXPECT_FALSE(buffered(other, 2)) << "buffered beyond the fabric's total";
  // r's messages are received: the room they free goes to the one waiting at `other`.
  std::vector<std::array<char, 1000>> bufs(7);
  for (auto& b : bufs) ASSERT_EQ(r.trecv(b.data(), b.size(), 1, b.data()), 0);
  for (auto& b : bufs) ASSERT_EQ(r.next_for(b.data()).rc, 1);
  bool found = false;
  for (const auto t0 = Clock::now(); !found && ms_since(t0) < 2000;) {
    progress_for(other, 20);
    found = buffered(other, 2);
  }
  EXPECT_TRUE(found) << "the waiting message was not buffered once there was room";
  close_all(to_r);
}

// With a shared secret, a stranger never gets past the handshake: what it can hold is bounded
// by the backlog (FI_FABQ_CM_BACKLOG) and the connect timeout, whatever FI_FABQ_INBOUND_MAX is.
TEST(HostilePeer, StrangersWithoutTheSecretAreHeldNoMoreThanTheBacklog) {
  SKIP_UNLESS_FABQ();
  setenv("FI_FABQ_CM_BACKLOG", "8", 1);
  Rdm r("the secret");
  ASSERT_TRUE(r.ok());
  const int baseline = open_fds();
  std::vector<int> fds;
  for (int i = 0; i < 40; ++i) {
    const int fd = dial_raw(ntohs(r.address().sin_port));
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    // A request that asks to be authenticated (its nonce last), then no proof.
    sockaddr_in me = r.address();
    me.sin_port = htons(static_cast<uint16_t>(20000 + i));
    const std::string name(reinterpret_cast<char*>(&me), sizeof(me));
    const std::string req =
        encode(Header{
            .op = kConnReq, .flags = kAuth, .length = static_cast<uint32_t>(name.size() + 16)}) +
        name + std::string(16, 'n');
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  progress_for(r, 300);
  EXPECT_EQ(open_fds() - baseline - 40, 8) << "fabq's descriptors for strangers in handshake";
  close_all(fds);
}

}  // namespace
}  // namespace fabq::testing
