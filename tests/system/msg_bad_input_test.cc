// fabq's MSG transport against a peer that does not follow its wire format: a raw TCP socket
// in a child process connects to a fabq passive endpoint on 127.0.0.1 and sends garbage (bad
// magic, bad version, unknown op, lengths above the limits, flags and fields an op does not
// allow, a header cut short). fabq drops that connection and goes on serving: a well-behaved
// fabq peer still connects through the same passive endpoint and exchanges messages. When the
// garbage comes on an accepted endpoint, that endpoint fails the way fi_fabq.h says for
// FI_FABQ_EVENT_EP_REQ_ERR: an EQ error entry about it (err FI_EREMOTEIO, prov_errno the
// kind), the event on the domain's asynchronous channel, posted receives completing with
// FI_EIO, later posts refused with -FI_EOPBADSTATE.
//
// The frames are written from the format in src/xport/wire.h (raw_peer.h); the tests skip with
// any other provider.
#include <string>

#include "fabq/fi_fabq.h"
#include "raw_peer.h"

namespace fabq::testing {
namespace {

// What the raw peer sends, and whether it then closes the connection itself (otherwise fabq
// must close it).
struct Garbage {
  const char* name;
  std::string bytes;
  bool then_close = false;
};
void PrintTo(const Garbage& g, std::ostream* os) {
  *os << g.name;
}

std::string header_with(Header h) {
  return encode(h);
}

// ---------------------------------------------------------------------------------------------

// A well-behaved fabq peer: connects with connect data "good" once it has the port (the
// parent sends it after the raw peer is done), exchanges one message each way. It is forked
// at the start of a test, before the parent opens anything.
void well_behaved_peer(Link& link) {
  uint64_t port = 0;
  Side c;
  if (!link.get_u64(&port, (kPeerSeconds - 1) * 1000) ||
      !c.open_active(static_cast<uint16_t>(port))) {
    return;
  }
  ASSERT_EQ(c.connect("good", 4), 0);
  if (!c.wait_connected()) return;
  std::array<char, 64> buf{};
  fi_context2 rctx, sctx;
  ASSERT_EQ(c.recv(buf.data(), buf.size(), &rctx), 0);
  const std::string hello = "hello";
  ASSERT_EQ(c.send(hello.data(), hello.size(), &sctx), 0);
  EXPECT_EQ(c.next_tx().rc, 1);
  const Completion r = c.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(buf.data(), r.entry.len), "welcome");
  c.await(link, 'd');
}

// `s`'s passive endpoint accepts the well-behaved peer and exchanges a message each way with
// it. Error entries on the EQ before its connection request are tolerated (fabq may report
// the dropped connection); connection requests are not: the garbage was never one.
void serves_the_well_behaved_peer(Side& s, uint16_t port, Peer& good) {
  ASSERT_TRUE(good.link().put_u64(port));
  fi_info* info = nullptr;
  for (;;) {
    uint32_t event = 0;
    CmEvent ev;
    CmError err;
    const ssize_t n = s.read_event(&event, &ev, kTimeoutMs, &err);
    if (n == -FI_EAVAIL) continue;
    ASSERT_GE(n, static_cast<ssize_t>(kCmEntrySize));
    ASSERT_EQ(event, static_cast<uint32_t>(FI_CONNREQ));
    info = ev.entry().info;
    ASSERT_EQ(std::string(ev.data(), n - kCmEntrySize), "good")
        << "a connection request from the garbage connection";
    break;
  }
  ASSERT_TRUE(s.open_endpoint(info));
  std::array<char, 64> buf{};
  fi_context2 rctx, sctx;
  ASSERT_EQ(s.recv(buf.data(), buf.size(), &rctx), 0);
  ASSERT_TRUE(s.accept());
  const Completion r = s.next_rx();
  ASSERT_EQ(r.rc, 1) << cq_str(r);
  EXPECT_EQ(std::string(buf.data(), r.entry.len), "hello");
  const std::string welcome = "welcome";
  ASSERT_EQ(s.send(welcome.data(), welcome.size(), &sctx), 0);
  EXPECT_EQ(s.next_tx().rc, 1);
  good.link().signal('d');
  EXPECT_EQ(good.join(&s), 0);
}

class GarbageBeforeTheConnectionRequest : public ::testing::TestWithParam<Garbage> {};

TEST_P(GarbageBeforeTheConnectionRequest, IsDroppedAndThePassiveEndpointServesTheNextPeer) {
  SKIP_UNLESS_FABQ();
  const Garbage g = GetParam();
  Peer raw([&g](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    if (!conn.send_all(g.bytes)) return;
    if (g.then_close) {
      conn.close_now();
    } else {
      EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection that sent " << g.name;
    }
    link.signal('g');
  });
  Peer good(well_behaved_peer);
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  ASSERT_TRUE(raw.link().put_u64(port));
  ASSERT_TRUE(s.await(raw.link(), 'g'));
  EXPECT_EQ(raw.join(&s), 0);
  serves_the_well_behaved_peer(s, port, good);
}

const Header kReq{.op = kConnReq};

INSTANTIATE_TEST_SUITE_P(
    MsgBadInput, GarbageBeforeTheConnectionRequest,
    ::testing::Values(
        Garbage{"BadMagic", header_with({.magic = 0xdead, .op = kConnReq})},
        Garbage{"BadVersion", header_with({.version = 7, .op = kConnReq})},
        Garbage{"UnknownOp", header_with({.op = 42})},
        Garbage{"DataOpBeforeConnecting", header_with({.op = kMsg, .length = 4}) + "data"},
        Garbage{"ConnectDataLongerThanCmDataSize", header_with({.op = kConnReq, .length = 257})},
        Garbage{"LengthOfFourGiB", header_with({.op = kConnReq, .length = 0xffffffff})},
        Garbage{"HeaderCutInTheMiddleThenClose", header_with(kReq).substr(0, 16), true}),
    [](const ::testing::TestParamInfo<Garbage>& p) { return std::string(p.param.name); });

class GarbageOnAConnectedEndpoint : public ::testing::TestWithParam<Garbage> {};

TEST_P(GarbageOnAConnectedEndpoint, FailsItWithReqErrAndThePassiveEndpointServesTheNextPeer) {
  SKIP_UNLESS_FABQ();
  const Garbage g = GetParam();
  Peer raw([&g](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    if (!conn.handshake("raw!") || !link.wait('g')) return;
    if (!conn.send_all(g.bytes)) return;
    EXPECT_TRUE(conn.closed_by_peer()) << "fabq kept a connection that sent " << g.name;
    link.signal('x');
  });
  Peer good(well_behaved_peer);
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  fi_fabq_async_ops* ops = nullptr;
  ASSERT_EQ(
      fi_open_ops(&s.domain()->fid, FI_FABQ_ASYNC_OPS, 0, reinterpret_cast<void**>(&ops), nullptr),
      0);
  ASSERT_TRUE(raw.link().put_u64(port));
  std::string data;
  fi_info* info = s.wait_connreq(&data);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(data, "raw!");
  ASSERT_TRUE(s.open_endpoint(info));
  std::array<char, 64> buf{};
  fi_context2 ctx;
  ASSERT_EQ(s.recv(buf.data(), buf.size(), &ctx), 0);
  ASSERT_TRUE(s.accept());
  fid_ep* const bad = s.ep();
  raw.link().signal('g');

  // The EQ entry about the endpoint ...
  uint32_t event = 0;
  CmEvent ev;
  CmError err;
  ASSERT_EQ(s.read_event(&event, &ev, kTimeoutMs, &err), -FI_EAVAIL) << "event " << event;
  EXPECT_EQ(err.entry.fid, &bad->fid);
  EXPECT_EQ(err.entry.err, FI_EREMOTEIO);
  EXPECT_EQ(err.entry.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_REQ_ERR));
  // ... the event on the domain's channel ...
  fi_fabq_async_event ae{};
  ASSERT_EQ(ops->get_event(s.domain(), &ae, kTimeoutMs), 0);
  EXPECT_EQ(ae.type, static_cast<uint32_t>(FI_FABQ_EVENT_EP_REQ_ERR))
      << ops->event_type_str(ae.type);
  EXPECT_EQ(ae.fid, &bad->fid);
  EXPECT_EQ(ops->ack_event(s.domain(), &ae), 0);
  // ... the posted receive failed, and the endpoint takes no more.
  const Completion c = s.next_rx();
  ASSERT_EQ(c.rc, -FI_EAVAIL) << cq_str(c);
  EXPECT_EQ(c.err.err, FI_EIO);
  EXPECT_EQ(c.err.prov_errno, static_cast<int>(FI_FABQ_EVENT_EP_REQ_ERR));
  EXPECT_EQ(c.err.op_context, &ctx);
  EXPECT_EQ(fi_recv(bad, buf.data(), buf.size(), nullptr, FI_ADDR_UNSPEC, &ctx), -FI_EOPBADSTATE);

  ASSERT_TRUE(s.await(raw.link(), 'x'));
  EXPECT_EQ(raw.join(&s), 0);
  ASSERT_EQ(s.close_ep(), 0);
  serves_the_well_behaved_peer(s, port, good);
}

INSTANTIATE_TEST_SUITE_P(
    MsgBadInput, GarbageOnAConnectedEndpoint,
    ::testing::Values(Garbage{"BadMagic", header_with({.magic = 0xdead, .op = kMsg, .length = 0})},
                      Garbage{"BadVersion", header_with({.version = 2, .op = kMsg, .length = 0})},
                      Garbage{"UnknownOp", header_with({.op = 42})},
                      Garbage{"FlagTheOpDoesNotAllow", header_with({.op = kMsg, .flags = 1u << 7})},
                      Garbage{"ShutdownWithADataField", header_with({.op = kShutdown, .data = 1})},
                      Garbage{"MessageOfFourGiB", header_with({.op = kMsg, .length = 0xffffffff})}),
    [](const ::testing::TestParamInfo<Garbage>& p) { return std::string(p.param.name); });

// A connection that sends nothing at all must not hold up the ones after it.
TEST(MsgBadInput, SilentConnectionDoesNotHoldUpTheNextPeer) {
  SKIP_UNLESS_FABQ();
  Peer raw([](Link& link) {
    RawConnection conn;
    if (!conn.dial(link)) return;
    link.signal('c');
    link.wait('x', (kPeerSeconds - 1) * 1000);
  });
  Peer good(well_behaved_peer);
  Side s;
  const uint16_t port = s.listen();
  ASSERT_NE(port, 0);
  ASSERT_TRUE(raw.link().put_u64(port));
  ASSERT_TRUE(s.await(raw.link(), 'c'));
  serves_the_well_behaved_peer(s, port, good);
  raw.link().signal('x');
  EXPECT_EQ(raw.join(&s), 0);
}

}  // namespace
}  // namespace fabq::testing
