// FI_EP_RDM endpoints between processes on 127.0.0.1 (fi_endpoint(3), fi_av(3), fi_tagged(3)):
// each process has its own fabric, AV and endpoint; names travel over the test's pipes and are
// inserted in the AVs. Messages of every size arrive whole and in order, receives name their
// source (FI_SOURCE), a vanished peer fails only the sends addressed to it, and bytes that are
// not fabq's protocol close only the connection that carried them.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "support/peer.h"
#include "support/side.h"

namespace fabq::testing {
namespace {

// From FI_FABQ_SHM_DIRECT_MSG_MIN (256 KiB) a message's receiver copies it from the sender's
// memory, and so from FI_FABQ_SHM_DIRECT_MSG_IDLE_MIN (16 KiB) does the receiver of an answer
// (every message here but the first); from FI_FABQ_SHM_SHARE_MIN (256 KiB) both processes copy
// a half: sizes on both sides, and 1 MiB + 4097, whose halves meet at no page boundary of the
// sender's. Those sizes only make a message eligible: which way it goes is chosen by what each
// costs (FI_FABQ_SHM_ADAPT), unless that is turned off.
void ping_pong_of_every_size() {
  const std::vector<size_t> sizes = {0,     1,     8,      64,     4096,    16383,
                                     16384, 65536, 262143, 262144, 1 << 20, (1 << 20) + 4097};
  Peer peer([&](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    const fi_addr_t parent = r.learn(link);
    std::string buf(2 << 20, '\0');
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(r.trecv(buf.data(), buf.size(), i, &buf), 0);
      Completion g = r.next_for(&buf);
      ASSERT_EQ(g.rc, 1);
      ASSERT_EQ(g.entry.len, sizes[i]);
      EXPECT_EQ(g.src, parent);
      ASSERT_EQ(r.tsend(buf.data(), sizes[i], parent, i, &link), 0);
      ASSERT_EQ(r.next_for(&link).rc, 1);
    }
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(peer.link()));
  const fi_addr_t child = r.learn(peer.link());
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string out = pattern(sizes[i], static_cast<unsigned>(i));
    std::string in(sizes[i] + 16, '\0');
    ASSERT_EQ(r.trecv(in.data(), in.size(), i, &in), 0);
    ASSERT_EQ(r.tsend(out.data(), out.size(), child, i, nullptr), 0);
    Completion g = r.next_for(&in);
    ASSERT_EQ(g.rc, 1) << "size " << sizes[i];
    EXPECT_EQ(g.entry.len, sizes[i]);
    EXPECT_EQ(g.entry.tag, i);
    EXPECT_EQ(g.src, child);
    EXPECT_EQ(in.substr(0, sizes[i]), out) << "size " << sizes[i];
    ASSERT_EQ(r.next_for(nullptr).rc, 1);
  }
  EXPECT_EQ(peer.join(), 0);
}

TEST(RdmSystem, PingPongOfEverySizeBetweenTwoProcessesNamesTheSource) {
  ping_pong_of_every_size();
}

// The same with every eligible message direct, as its size says (both processes: the peer is
// forked after this).
TEST(RdmSystem, PingPongOfEverySizeWithDirectCopiesBySizeNamesTheSource) {
  setenv("FI_FABQ_SHM_ADAPT", "0", 1);
  ping_pong_of_every_size();
}

// Large messages sent before their receives are posted wait in the receiver (copied from the
// sender's memory into its buffer) and complete whole, in order, once receives come.
TEST(RdmSystem, LargeMessagesSentBeforeTheirReceivesArriveWholeInOrder) {
  const std::vector<size_t> sizes = {20000, 1 << 20, 300000, 65536};
  Peer peer([&](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    const fi_addr_t parent = r.learn(link);
    std::vector<std::string> out;
    for (size_t i = 0; i < sizes.size(); ++i)
      out.push_back(pattern(sizes[i], static_cast<unsigned>(40 + i)));
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_EQ(r.retry([&] {
        return fi_send(r.ep(), out[i].data(), out[i].size(), nullptr, parent, &out[i]);
      }),
                0);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      Completion g = r.next_for(&out[i]);
      ASSERT_EQ(g.rc, 1) << "send " << i;
    }
    link.wait('d');
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(peer.link()));
  const fi_addr_t child = r.learn(peer.link());
  // Progress without a receive, long enough for every message to have arrived unexpected.
  const auto t0 = Clock::now();
  while (ms_since(t0) < 200) r.next(1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string in(sizes[i] + 8, '\0');
    ASSERT_EQ(r.recv(in.data(), in.size(), &in), 0);
    Completion g = r.next_for(&in);
    ASSERT_EQ(g.rc, 1) << "message " << i;
    EXPECT_EQ(g.entry.len, sizes[i]);
    EXPECT_EQ(g.src, child);
    EXPECT_TRUE(in.substr(0, sizes[i]) == pattern(sizes[i], static_cast<unsigned>(40 + i)))
        << "message " << i;
  }
  ASSERT_TRUE(peer.link().signal('d'));
  EXPECT_EQ(peer.join(), 0);
}

TEST(RdmSystem, ThreeSendersToOneReceiverArriveInOrderPerSenderWithTheirSources) {
  constexpr int kSenders = 3;
  constexpr uint32_t kEach = 200;
  std::vector<std::unique_ptr<Peer>> peers;
  for (int s = 0; s < kSenders; ++s) {
    peers.push_back(std::make_unique<Peer>([s](Link& link) {
      Rdm r;
      if (!r.ok() || !r.tell(link)) return;
      const fi_addr_t receiver = r.learn(link);
      for (uint32_t i = 0; i < kEach; ++i) {
        const uint32_t v = (static_cast<uint32_t>(s) << 16) | i;
        ASSERT_EQ(r.retry([&] { return fi_tinject(r.ep(), &v, sizeof(v), receiver, 5); }), 0);
      }
      // Progress (manual: only reading the CQ moves bytes) until the receiver has everything.
      const auto t0 = Clock::now();
      while (!link.readable(0) && ms_since(t0) < kTimeoutMs * 4) r.next(1);
      link.wait('d');
    }));
  }
  Rdm r;
  ASSERT_TRUE(r.ok());
  std::vector<fi_addr_t> addr(kSenders);
  for (int s = 0; s < kSenders; ++s) {
    addr[s] = r.learn(peers[s]->link());
    ASSERT_TRUE(r.tell(peers[s]->link()));
  }
  std::vector<uint32_t> next(kSenders, 0);
  uint32_t v = 0;
  for (uint32_t n = 0; n < kSenders * kEach; ++n) {
    ASSERT_EQ(r.trecv(&v, sizeof(v), 5, &v), 0);
    Completion g = r.next_for(&v);
    ASSERT_EQ(g.rc, 1);
    const uint32_t s = v >> 16;
    ASSERT_LT(s, static_cast<uint32_t>(kSenders));
    EXPECT_EQ(v & 0xffff, next[s]++) << "sender " << s << " out of order";
    EXPECT_EQ(g.src, addr[s]);
  }
  for (auto& p : peers) {
    ASSERT_TRUE(p->link().signal('d'));
    EXPECT_EQ(p->join(), 0);
  }
}

TEST(RdmSystem, APeerThatDiesFailsOnlyTheSendsAddressedToIt) {
  Peer doomed([](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    for (;;) r.next(100);  // accepts the connection, takes the message, never receives it
  });
  Peer healthy([](Link& link) {
    Rdm r;
    if (!r.ok() || !r.tell(link)) return;
    char buf[16] = {};
    ASSERT_EQ(r.trecv(buf, sizeof(buf), 1, buf), 0);
    Completion g = r.next_for(buf);
    ASSERT_EQ(g.rc, 1);
    EXPECT_STREQ(buf, "still here");
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  const fi_addr_t to_doomed = r.learn(doomed.link());
  const fi_addr_t to_healthy = r.learn(healthy.link());
  // A send that waits for the doomed peer to place it: that never happens.
  char out[] = "never placed";
  iovec iov{out, sizeof(out)};
  fi_msg_tagged msg{};
  msg.msg_iov = &iov;
  msg.iov_count = 1;
  msg.addr = to_doomed;
  msg.tag = 9;
  msg.context = out;
  ASSERT_EQ(
      r.retry([&] { return fi_tsendmsg(r.ep(), &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION); }), 0);
  // (libfabric's tcp provider completes it once the peer has the bytes, received or not.)
  if (provider_is_fabq()) {
    EXPECT_EQ(r.next(300).rc, -FI_ETIMEDOUT) << "nothing completes while the peer lives";
  }
  kill(doomed.pid(), SIGKILL);
  // libfabric's tcp provider leaves such a send pending for ever; fabq fails it.
  if (provider_is_fabq()) {
    Completion g = r.next_for(out);
    ASSERT_EQ(g.rc, -FI_EAVAIL);
    EXPECT_EQ(g.err.err, FI_ECONNABORTED);
  }
  // The doomed peer is reaped by its Peer (it died of SIGKILL, as meant).

  const char ok[] = "still here";
  ASSERT_EQ(r.tsend(ok, sizeof(ok), to_healthy, 1, nullptr), 0);
  EXPECT_EQ(r.next_for(nullptr).rc, 1);
  EXPECT_EQ(healthy.join(), 0);
}

// fabq's own wire protocol: a stranger's bytes must not disturb the endpoint.
TEST(RdmSystem, GarbageSentToTheListenerClosesOnlyThatConnection) {
  if (!provider_is_fabq()) GTEST_SKIP() << "fabq's wire protocol";
  Peer peer([](Link& link) {
    Rdm r;
    if (!r.ok()) return;
    const fi_addr_t receiver = r.learn(link);
    ASSERT_TRUE(link.wait('g'));
    const char msg[] = "after the garbage";
    ASSERT_EQ(r.tsend(msg, sizeof(msg), receiver, 2, nullptr), 0);
    EXPECT_EQ(r.next_for(nullptr).rc, 1);
  });
  Rdm r;
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r.tell(peer.link()));
  // Two strangers: one sends bytes that are no header, one a request without a name.
  for (int kind = 0; kind < 2; ++kind) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in to = r.address();
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    unsigned char bytes[32] = {};
    if (kind == 0) {
      std::memset(bytes, 0xee, sizeof(bytes));
    } else {
      bytes[0] = 0x46;  // magic 0x7146, version 1, op kConnReq, no data
      bytes[1] = 0x71;
      bytes[2] = 1;
      bytes[3] = 1;
    }
    ASSERT_EQ(write(fd, bytes, sizeof(bytes)), static_cast<ssize_t>(sizeof(bytes)));
    // The endpoint closes the stranger's connection: its read ends.
    pollfd p{.fd = fd, .events = POLLIN};
    const auto t0 = Clock::now();
    char c;
    ssize_t n = -1;
    while (ms_since(t0) < kTimeoutMs) {
      r.next(1);  // progress
      if (poll(&p, 1, 0) == 1) {
        n = read(fd, &c, 1);
        break;
      }
    }
    EXPECT_LE(n, 0) << "kind " << kind << ": the connection was closed";
    close(fd);
  }
  char buf[32] = {};
  ASSERT_EQ(r.trecv(buf, sizeof(buf), 2, buf), 0);
  ASSERT_TRUE(peer.link().signal('g'));
  Completion g = r.next_for(buf);
  ASSERT_EQ(g.rc, 1);
  EXPECT_STREQ(buf, "after the garbage");
  EXPECT_EQ(peer.join(), 0);
}

}  // namespace
}  // namespace fabq::testing
