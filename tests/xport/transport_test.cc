// The TCP transport through its seam only (xport/transport.h), with fake owners (fake_owner.h)
// in place of the provider's endpoints and raw wire-format peers (wire_peer.h) where a peer
// fabq would never be is needed:
//   - connection set-up: a passive listener's request (peer, connect data), take(), adopt(),
//     accept() and FI_CONNECTED on both sides with the accept data, reject() and a request the
//     passive owner cannot queue (FI_ECONNREFUSED), a peer that leaves before the accept, the
//     shared-memory offer of the connecting side and its fallback when declined;
//   - data: messages of 0 B to 1 MiB in several iovecs both ways, tags and remote data,
//     tx_written, the kTransmit and kDelivery acknowledgements (now, or when the owner says),
//     truncation to a placement's capacity, take_retry();
//   - back-pressure: a receiver that refuses placements stalls its connection, the sender's
//     writes stop, nothing is lost and all arrives in order after resume();
//   - the end of a connection: shutdown() after queued sends, destruction, a refused connect;
//   - framing: a raw peer writing one byte at a time, a frame split at the header, several
//     frames in one write;
//   - bad input: every kind of bad frame after the handshake (EP_REQ_ERR), garbage before it
//     (nobody hears of it; the listener goes on);
//   - RDM: a message carries its sender's announced name, no CM event, a refused connect fails
//     the sends, the listener asks its owner before freeing a closed connection;
//   - authentication: the same key, different keys, a key on one side only, and a raw peer that
//     computes the MACs as wire.h documents them (or proves nothing);
//   - the progress thread: begin_wait() moves everything, end_wait() stops it; after_round.
// Connection and data tests run both over TCP and over shared memory (TransportConfig::shm);
// raw peers never offer shared memory, so theirs run once. Network: 127.0.0.1 only. Every wait
// has a timeout (kTimeout): a broken transport fails a test, it never hangs it.
#include "xport/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/hmac.h"
#include "fabq/fi_fabq.h"
#include "fake_owner.h"
#include "wire_peer.h"
#include "xport/wire.h"

namespace fabq::xport::testing {
namespace {

using std::chrono::milliseconds;
using namespace std::string_literals;

constexpr size_t kMaxMsg = 4u << 20;

// --- What the transport logs (TransportConfig::log has no context: one test at a time).

std::mutex g_log_mu;
std::vector<std::string> g_log;
void log_line(LogLevel, const char* message) {
  std::lock_guard lock(g_log_mu);
  g_log.emplace_back(message);
}
std::vector<std::string> logged() {
  std::lock_guard lock(g_log_mu);
  return g_log;
}
bool logged_containing(std::string_view what) {
  std::lock_guard lock(g_log_mu);
  for (const std::string& l : g_log) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

std::atomic<int> g_rounds{0};
void count_round(void*) {
  g_rounds.fetch_add(1, std::memory_order_relaxed);
}

// --- Readable descriptions of what owners saw, for exact comparisons.

std::string cm_str(uint32_t event, int err, std::string_view data = {}) {
  std::string s = event == FI_CONNECTED  ? "FI_CONNECTED"
                  : event == FI_SHUTDOWN ? "FI_SHUTDOWN"
                  : event == 0           ? "error"
                                         : "event " + std::to_string(event);
  if (err != 0) s += " err=" + std::to_string(err);
  if (!data.empty()) s += " data='" + std::string(data) + "'";
  return s;
}
std::vector<std::string> cms(const FakeOwner& o) {
  std::vector<std::string> out;
  for (const CmRecord& r : o.cm_events()) out.push_back(cm_str(r.event, r.err, r.data));
  return out;
}
std::string async_str(uint32_t type) {
  switch (type) {
    case FI_FABQ_EVENT_COMM_EST:
      return "COMM_EST";
    case FI_FABQ_EVENT_SQ_DRAINED:
      return "SQ_DRAINED";
    case FI_FABQ_EVENT_EP_FATAL:
      return "EP_FATAL";
    case FI_FABQ_EVENT_EP_REQ_ERR:
      return "EP_REQ_ERR";
    default:
      return "event " + std::to_string(type);
  }
}
std::vector<std::string> asyncs(const FakeOwner& o) {
  std::vector<std::string> out;
  for (uint32_t t : o.async_events()) out.push_back(async_str(t));
  return out;
}
// Index of the first journal entry equal to `what`; -1 when none.
int journal_at(const std::vector<std::string>& j, std::string_view what) {
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == what) return static_cast<int>(i);
  }
  return -1;
}

// n pseudo-random bytes (xorshift): a byte lost, repeated or out of place shows.
std::string pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

sockaddr_in name_of(Connection& c) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(c.getname(&a, &len), 0);
  return a;
}
sockaddr_in peer_of(Connection& c) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(c.getpeer(&a, &len), 0);
  return a;
}
sockaddr_in name_of(Listener& l) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(l.getname(&a, &len), 0);
  return a;
}
std::string addr_str(const sockaddr_in& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
  return "family " + std::to_string(a.sin_family) + " " + buf + ":" +
         std::to_string(ntohs(a.sin_port));
}

// Sends that stay put while the transport holds them (TxOp and payload addresses are stable).
class Outbox {
 public:
  // A send of `payload` numbered `seq`, cut into up to `pieces` iovecs of uneven sizes.
  TxOp* make(std::string payload, uint32_t seq, size_t pieces = 1,
             TxLevel level = TxLevel::kInject) {
    const std::string& p = payloads_.emplace_back(std::move(payload));
    TxOp& op = ops_.emplace_back();
    op.cq_flags = FI_SEND | FI_MSG;
    op.seq = seq;
    op.level = level;
    op.len = p.size();
    std::vector<size_t> cuts = {0};
    for (size_t c : {size_t{1}, size_t{4096}, p.size() / 2}) {
      if (cuts.size() < pieces && c > cuts.back() && c < p.size()) cuts.push_back(c);
    }
    cuts.push_back(p.size());
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      if (cuts[i + 1] == cuts[i]) continue;
      op.iov[op.iov_count++] = {const_cast<char*>(p.data()) + cuts[i], cuts[i + 1] - cuts[i]};
    }
    return &op;
  }
  TxOp* tagged(std::string payload, uint32_t seq, uint64_t tag, size_t pieces = 1) {
    TxOp* op = make(std::move(payload), seq, pieces);
    op->tagged = true;
    op->tag = tag;
    op->cq_flags = FI_SEND | FI_TAGGED;
    return op;
  }
  TxOp* with_data(TxOp* op, uint64_t data) {
    op->has_data = true;
    op->data = data;
    return op;
  }
  const std::string& payload(size_t i) const { return payloads_[i]; }

 private:
  std::deque<std::string> payloads_;
  std::deque<TxOp> ops_;
};

// A connected MSG pair: `client` (client_'s) connected to `server` (taken from `listener`,
// adopted by server_). Members go in this order: connections first, then the listener.
struct Pair {
  std::unique_ptr<PassiveListener> listener;
  sockaddr_in at{};
  std::unique_ptr<Connection> client;
  std::unique_ptr<Connection> server;
};

// Everything a test needs: one transport, the fake owners, ways to drive progress.
template <class Base>
class Harness : public Base {
 protected:
  virtual bool use_shm() const = 0;

  void SetUp() override {
    {
      std::lock_guard lock(g_log_mu);
      g_log.clear();
    }
    TransportConfig c;
    c.shm = use_shm();
    c.connect_timeout_ms = 5000;
    c.log = &log_line;
    c.after_round = &count_round;
    t_ = make_tcp_transport(c);
    ASSERT_NE(t_, nullptr);
  }
  void TearDown() override {
    for (const FakeOwner* o : {&client_, &server_}) {
      EXPECT_EQ(o->problems(), std::vector<std::string>{})
          << (o == &client_ ? "client_" : "server_");
    }
    if (::testing::Test::HasFailure()) {
      for (const std::string& l : logged()) std::fprintf(stderr, "transport log: %s", l.c_str());
    }
  }

  // One progress round, unless the progress thread moves the bytes.
  void tick() {
    if (manual_) t_->progress();
  }
  template <class Pred>
  bool pump(Pred done, milliseconds timeout = kTimeout) {
    return eventually([this] { tick(); }, done, timeout);
  }
  // Progress for `d`, to give the transport every chance to do what it must not.
  void settle(milliseconds d) {
    eventually([this] { tick(); }, [] { return false; }, d);
  }
  std::function<void()> ticker() {
    return [this] { tick(); };
  }

  static ConnParams params(const core::HmacSha256* auth = nullptr) {
    ConnParams p;
    p.max_msg_size = kMaxMsg;
    p.auth = auth;
    return p;
  }
  static ConnParams rdm_params(const core::HmacSha256* auth = nullptr) {
    ConnParams p = params(auth);
    p.rdm = true;
    return p;
  }

  // A passive listener of passive_ on 127.0.0.1, port 0.
  void listen(Pair* p, const core::HmacSha256* auth = nullptr) {
    p->listener = t_->open_passive(&passive_, auth);
    ASSERT_NE(p->listener, nullptr);
    ASSERT_EQ(p->listener->listen(loopback(0), &p->at), 0);
  }
  // client_ connects to p's listener with `data` and waits for the request; returns it.
  void request(Pair* p, std::string_view data, Request* out,
               const core::HmacSha256* auth = nullptr) {
    const size_t before = passive_.request_count();
    p->client = t_->make_connection(&client_, params(auth));
    ASSERT_NE(p->client, nullptr);
    ASSERT_EQ(p->client->connect(p->at, data.data(), data.size()), 0);
    ASSERT_TRUE(pump([&] { return passive_.request_count() > before; }))
        << "no request reached the passive owner";
    *out = passive_.requests().back();
  }
  // The whole set-up: listen, connect, request, take, adopt, accept, FI_CONNECTED both sides.
  void connect_pair(Pair* p, std::string_view cdata = "hello", std::string_view adata = "welcome",
                    const core::HmacSha256* ckey = nullptr,
                    const core::HmacSha256* skey = nullptr) {
    ASSERT_NO_FATAL_FAILURE(listen(p, skey));
    Request r;
    ASSERT_NO_FATAL_FAILURE(request(p, cdata, &r, ckey));
    p->server = p->listener->take(r.pending);
    ASSERT_NE(p->server, nullptr);
    ASSERT_TRUE(p->server->adopt(&server_, params(skey)));
    ASSERT_EQ(p->server->accept(adata.data(), adata.size()), 0);
    ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }))
        << "client " << ::testing::PrintToString(cms(client_)) << ", server "
        << ::testing::PrintToString(cms(server_));
  }
  void send(FakeOwner& owner, Connection* c, TxOp* op) { ASSERT_EQ(owner.submit(c, op), 0); }

  FakeOwner client_;  // the connecting endpoint (A of RDM tests)
  FakeOwner server_;  // the endpoint that adopts the accepted connection (B of RDM tests)
  FakePassiveOwner passive_;
  std::unique_ptr<Transport> t_;  // after the owners: destroyed (and its thread stopped) first
  bool manual_ = true;            // false: the progress thread moves the bytes (begin_wait)
};

// Connection and data tests, over TCP (false) and over shared memory (true).
class TransportTest : public Harness<::testing::TestWithParam<bool>> {
 protected:
  bool use_shm() const override { return GetParam(); }
};

// Raw-peer tests: a raw peer never offers shared memory, so the transport's setting (on, the
// default) does not matter; they run once.
class TransportRawTest : public Harness<::testing::Test> {
 protected:
  bool use_shm() const override { return true; }

  // A raw peer through the whole handshake with p's listener (kConnReq with `data`, written
  // whole or byte by byte; kConnAccept back; kConnReady), its connection adopted by `owner`.
  void accept_raw(Pair* p, WirePeer* peer, FakeOwner* owner, std::string_view data = "raw",
                  bool byte_by_byte = false) {
    const size_t before = passive_.request_count();
    ASSERT_TRUE(peer->connect_to(p->at));
    const std::string req =
        frame({.op = wire::Op::kConnReq, .length = static_cast<uint32_t>(data.size())}, data);
    ASSERT_TRUE(byte_by_byte ? peer->send_byte_by_byte(req) : peer->send_bytes(req));
    ASSERT_TRUE(pump([&] { return passive_.request_count() > before; }));
    const Request r = passive_.requests().back();
    EXPECT_EQ(r.data, data);
    EXPECT_EQ(r.peer.sin_port, peer->name().sin_port);
    p->server = p->listener->take(r.pending);
    ASSERT_NE(p->server, nullptr);
    ASSERT_TRUE(p->server->adopt(owner, params()));
    ASSERT_EQ(p->server->accept("acc", 3), 0);
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer->recv_frame(&h, &payload));
    ASSERT_EQ(h.op, wire::Op::kConnAccept);
    EXPECT_EQ(h.flags, 0u) << "shared memory taken though never offered";
    EXPECT_EQ(payload, "acc");
    const std::string ready = frame({.op = wire::Op::kConnReady});
    ASSERT_TRUE(byte_by_byte ? peer->send_byte_by_byte(ready) : peer->send_bytes(ready));
    ASSERT_TRUE(pump([&] { return owner->has_cm(FI_CONNECTED); }));
    EXPECT_EQ(cms(*owner), std::vector<std::string>{cm_str(FI_CONNECTED, 0)});
  }
};

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Shm" : "Tcp";
                         });

// =============================================================================================
// Connection set-up

TEST_P(TransportTest, RequestCarriesThePeerAddressAndTheConnectData) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  EXPECT_EQ(p.at.sin_family, AF_INET);
  EXPECT_EQ(p.at.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_NE(p.at.sin_port, 0) << "port 0 asks the kernel for one; listen() says which";
  // The largest connect data there is, NULs included.
  const std::string data = pattern(core::kCmDataSize, 7);
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, data, &r));
  EXPECT_EQ(r.data, data);
  const sockaddr_in me = name_of(*p.client);
  EXPECT_EQ(addr_str(r.peer), addr_str(me)) << "the request names the connecting socket";
  EXPECT_NE(r.pending, nullptr);
  // Nothing else until the request is answered.
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 1u);
  EXPECT_EQ(client_.journal(), std::vector<std::string>{});
  EXPECT_FALSE(p.client->connected());
  EXPECT_TRUE(p.client->open());
  EXPECT_EQ(p.client->connect(p.at, nullptr, 0), -FI_EISCONN);
}

TEST_P(TransportTest, AcceptReportsConnectedToBothOwnersWithTheAcceptData) {
  Pair p;
  const std::string accept_data = "welcome\0aboard"s;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p, "hello", accept_data));
  settle(milliseconds(30));  // and nothing more comes of it
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, accept_data)});
  EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(FI_CONNECTED, 0)});
  EXPECT_EQ(client_.ended(), 0);
  EXPECT_EQ(server_.ended(), 0);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{});
  EXPECT_TRUE(p.client->connected());
  EXPECT_TRUE(p.server->connected());
  EXPECT_EQ(addr_str(peer_of(*p.client)), addr_str(p.at));
  EXPECT_EQ(addr_str(peer_of(*p.server)), addr_str(name_of(*p.client)));
  EXPECT_EQ(p.server->accept(nullptr, 0), -FI_EOPBADSTATE) << "accepted twice";
}

TEST_P(TransportTest, TakeOfAConnectionTheListenerDoesNotHoldGivesNull) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "x", &r));
  FakeOwner other_owner;
  std::unique_ptr<Connection> other = t_->make_connection(&other_owner, params());
  EXPECT_EQ(p.listener->take(other.get()), nullptr) << "a connection it never made";
  EXPECT_EQ(p.listener->take(nullptr), nullptr);
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  EXPECT_EQ(p.server.get(), r.pending);
  EXPECT_EQ(p.listener->take(r.pending), nullptr) << "taken twice";
  // What was taken is whole: it still connects.
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
}

TEST_P(TransportTest, RejectRefusesThePeerWithTheRejectData) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "let me in", &r));
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  const std::string reject_data = "go\0away"s;
  ASSERT_EQ(p.server->reject(reject_data.data(), reject_data.size()), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED, reject_data)});
  EXPECT_EQ(client_.ended(), 1);
  EXPECT_FALSE(p.client->open());
  EXPECT_FALSE(p.client->connected());
  EXPECT_EQ(p.server->reject(nullptr, 0), -FI_EOPBADSTATE) << "rejected twice";
  Outbox out;
  EXPECT_EQ(client_.submit(p.client.get(), out.make("late", 1)), -FI_ENOTCONN);
  EXPECT_EQ(server_.journal(), std::vector<std::string>{});
  EXPECT_EQ(passive_.request_count(), 1u);
}

TEST_P(TransportTest, RequestThePassiveOwnerCannotQueueRefusesThePeer) {
  passive_.set_accepting(false);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "first", &r));
  EXPECT_EQ(r.data, "first");
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_FALSE(p.client->open());
  EXPECT_EQ(p.listener->take(r.pending), nullptr) << "a refused request is not the owner's";
  // The listener goes on: the next peer, accepted this time, connects.
  passive_.set_accepting(true);
  FakeOwner second;
  std::unique_ptr<Connection> c2 = t_->make_connection(&second, params());
  ASSERT_EQ(c2->connect(p.at, "second", 6), 0);
  ASSERT_TRUE(pump([&] { return passive_.request_count() == 2; }));
  EXPECT_EQ(passive_.requests()[1].data, "second");
  p.server = p.listener->take(passive_.requests()[1].pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return second.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
  EXPECT_EQ(second.problems(), std::vector<std::string>{});
}

TEST_P(TransportTest, PeerThatLeavesBeforeTheAcceptIsReportedAsAborted) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "bye", &r));
  p.client.reset();
  settle(milliseconds(30));
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr) << "a requested connection waits for take(), whatever its peer";
  // The transport may notice at adopt() (false), at accept() (-FI_ECONNABORTED) or after it
  // (an FI_ECONNABORTED error event); never FI_CONNECTED.
  const bool adopted = p.server->adopt(&server_, params());
  const int rc = adopted ? p.server->accept("late", 4) : -FI_ECONNABORTED;
  if (rc == 0) {
    ASSERT_TRUE(pump([&] { return server_.cm_count() > 0; }));
    settle(milliseconds(30));
    EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(0, FI_ECONNABORTED)});
    EXPECT_EQ(server_.ended(), 1);
  } else {
    EXPECT_EQ(rc, -FI_ECONNABORTED);
    settle(milliseconds(30));
    EXPECT_EQ(cms(server_), std::vector<std::string>{});
  }
  EXPECT_FALSE(p.server->open());
  EXPECT_FALSE(p.server->connected());
}

TEST_P(TransportTest, ConnectingSideOffersSharedMemoryOnlyWhenConfiguredAndFallsBackWhenDeclined) {
  WireListener raw(ticker());
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  ASSERT_EQ(c->connect(raw.addr(), "offer?", 6), 0);
  WirePeer peer(ticker(), raw.accept_one());
  ASSERT_GE(peer.fd(), 0);
  wire::Header h;
  std::string payload;
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  ASSERT_EQ(h.op, wire::Op::kConnReq);
  EXPECT_EQ(payload, "offer?");
  EXPECT_EQ((h.flags & wire::kShmOffer) != 0, GetParam()) << "flags " << h.flags;
  EXPECT_EQ(h.flags & ~uint32_t{wire::kShmOffer}, 0u);
  if (GetParam()) {
    EXPECT_NE(h.tag, 0u) << "the offer names its segment";
  } else {
    EXPECT_EQ(h.tag, 0u);
    EXPECT_EQ(h.data, 0u);
  }
  // Declined (no kShmAccept): a plain TCP connection.
  ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnAccept, .length = 2}, "ok"));
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED); }));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, "ok")});
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  EXPECT_EQ(h.op, wire::Op::kConnReady);
  EXPECT_EQ(h.length, 0u);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.with_data(out.tagged("ping", 42, 0x77), 9)));
  ASSERT_TRUE(peer.recv_frame(&h, &payload)) << "the message is on the socket";
  EXPECT_EQ(h.op, wire::Op::kTagged);
  EXPECT_EQ(h.seq, 42u);
  EXPECT_EQ(h.tag, 0x77u);
  EXPECT_EQ(h.flags, uint32_t{wire::kRemoteData});
  EXPECT_EQ(h.data, 9u);
  EXPECT_EQ(payload, "ping");
  ASSERT_TRUE(pump([&] { return client_.written_count() == 1; }));
}

// =============================================================================================
// Data

TEST_P(TransportTest, MessagesOfEverySizeArriveIntactAndAreReportedWritten) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  std::vector<TxOp*> ops = {
      out.make("", 1),
      out.tagged(pattern(1, 2), 2, 0x1122334455667788),
      out.with_data(out.make(pattern(4096, 3), 3, 2), 0xdeadbeefcafef00d),
      out.with_data(out.tagged(pattern(1u << 20, 4), 4, 0xfeed, 4), 0x0102030405060708),
  };
  EXPECT_EQ(ops[3]->iov_count, 4u);
  for (TxOp* op : ops) ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), op));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 4 && client_.written_count() == 4; }))
      << server_.received_count() << " received, " << client_.written_count() << " written";
  const std::vector<Received> got = server_.received();
  for (size_t i = 0; i < ops.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    const Incoming& in = got[i].in;
    EXPECT_EQ(in.seq, ops[i]->seq);
    EXPECT_EQ(in.len, ops[i]->len);
    EXPECT_EQ(in.tagged, ops[i]->tagged);
    EXPECT_EQ(in.tag, ops[i]->tagged ? ops[i]->tag : 0);
    EXPECT_EQ(in.has_data, ops[i]->has_data);
    EXPECT_EQ(in.data, ops[i]->has_data ? ops[i]->data : 0);
    EXPECT_EQ(in.ack, AckWanted::kNone);
    EXPECT_EQ(in.from.sin_family, AF_UNSPEC) << "MSG messages carry no name";
    EXPECT_TRUE(got[i].bytes == out.payload(i)) << "payload of " << in.len << " bytes differs";
  }
  EXPECT_EQ(client_.written(), std::vector<const TxOp*>(ops.begin(), ops.end()));
  // The first message established the connection on the receiving side.
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
  // And the other way, on the same connection.
  Outbox back;
  ASSERT_NO_FATAL_FAILURE(send(server_, p.server.get(), back.make(pattern(70000, 5), 1, 3)));
  ASSERT_TRUE(pump([&] { return client_.received_count() == 1; }));
  EXPECT_TRUE(client_.received()[0].bytes == back.payload(0));
  EXPECT_EQ(server_.written_count(), 1u);
  EXPECT_EQ(client_.ack_count() + server_.ack_count(), 0u) << "kInject waits for no ack";
}

TEST_P(TransportTest, TransmitAndDeliveryCompletionsAreAcknowledged) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make("inject", 10, 1, TxLevel::kInject)));
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make("transmit", 11, 1, TxLevel::kTransmit)));
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make(pattern(100000, 1), 12, 3, TxLevel::kDelivery)));
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 2 && server_.received_count() == 3; }));
  settle(milliseconds(30));
  const std::vector<AckRecord> acks = client_.acks();
  ASSERT_EQ(acks.size(), 2u);
  EXPECT_EQ(acks[0].conn, p.client.get());
  EXPECT_EQ(acks[0].seq, 11u);
  EXPECT_FALSE(acks[0].delivered);
  EXPECT_EQ(acks[1].conn, p.client.get());
  EXPECT_EQ(acks[1].seq, 12u);
  EXPECT_TRUE(acks[1].delivered);
  const std::vector<Received> got = server_.received();
  EXPECT_EQ(got[0].in.ack, AckWanted::kNone);
  EXPECT_EQ(got[1].in.ack, AckWanted::kReceived);
  EXPECT_EQ(got[2].in.ack, AckWanted::kDelivered);
  EXPECT_TRUE(got[2].bytes == out.payload(2));
  EXPECT_EQ(client_.written_count(), 3u);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{}) << "every ack named a send";
}

TEST_P(TransportTest, DeliveryAcknowledgementWaitsUntilTheOwnerSaysDelivered) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_deliver_now(false);  // buffered: delivered when the application takes it
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("a", 20, 1, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("b", 21, 1, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("c", 22, 1, TxLevel::kTransmit)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3 && client_.ack_count() == 1; }));
  settle(milliseconds(50));
  ASSERT_EQ(client_.ack_count(), 1u) << "a delivery ack before the owner said delivered";
  EXPECT_EQ(client_.acks()[0].seq, 22u) << "kTransmit does not wait for the delivery";
  EXPECT_FALSE(client_.acks()[0].delivered);
  p.server->ack_delivered(20);
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 2; }));
  EXPECT_EQ(client_.acks()[1].seq, 20u);
  EXPECT_TRUE(client_.acks()[1].delivered);
  p.server->ack_delivered_later(21);
  ASSERT_TRUE(pump([&] { return client_.ack_count() == 3; }));
  EXPECT_EQ(client_.acks()[2].seq, 21u);
  EXPECT_TRUE(client_.acks()[2].delivered);
  settle(milliseconds(30));
  EXPECT_EQ(client_.ack_count(), 3u);
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{});
}

TEST_P(TransportTest, TruncatedMessageFillsTheCapacityAndTheNextArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  struct Case {
    size_t capacity;
    size_t len;
  };
  // Small messages go through the read buffer; large ones straight into the placement.
  const Case cases[] = {{100, 5000}, {20000, 300000}, {SIZE_MAX, 10}, {0, 64}, {SIZE_MAX, 4097}};
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    server_.set_capacity(cases[i].capacity);
    ASSERT_NO_FATAL_FAILURE(
        send(client_, p.client.get(),
             out.make(pattern(cases[i].len, 100 + i), static_cast<uint32_t>(i), 3)));
    ASSERT_TRUE(pump([&] { return server_.received_count() == i + 1; }));
    const Received got = server_.received()[i];
    EXPECT_EQ(got.in.len, cases[i].len) << "the message's length, not what was kept";
    EXPECT_TRUE(got.bytes == out.payload(i).substr(0, cases[i].capacity))
        << got.bytes.size() << " bytes kept";
  }
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
}

TEST_P(TransportTest, TakeRetryMakesAStalledConnectionTryAgainEveryRound) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);
  server_.set_take_retry(true);  // only a full completion queue stands in the way
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("retry me", 1)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() >= 5; }))
      << "place() asked again without resume(): " << server_.refused_places();
  EXPECT_EQ(server_.received_count(), 0u);
  server_.set_accepting(true);  // no resume(): the retry finds room
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_EQ(server_.received()[0].bytes, "retry me");
}

// =============================================================================================
// Back-pressure

TEST_P(TransportTest, RefusedPlaceStallsTheConnectionUntilResumeAndNothingIsLost) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  server_.set_accepting(false);  // no receive posted
  constexpr size_t kSize = 256 * 1024;
  constexpr uint32_t kMax = 128;  // 32 MiB: far beyond what the kernel buffers on loopback
  Outbox out;
  uint32_t submitted = 0;
  size_t last_written = 0;
  auto last_change = Clock::now();
  int rounds_since_change = 0;
  const auto end = Clock::now() + kTimeout;
  // Sends go out one after the other, each once the one before is written, until one is not
  // written for 100 ms and 200 progress rounds: the receiver's buffers and the sender's are
  // full.
  for (;;) {
    const size_t w = client_.written_count();
    if (w != last_written) {
      last_written = w;
      last_change = Clock::now();
      rounds_since_change = 0;
    }
    if (w == submitted) {
      ASSERT_LT(submitted, kMax) << "never stalled: " << submitted << " sends written";
      ++submitted;
      ASSERT_NO_FATAL_FAILURE(
          send(client_, p.client.get(), out.make(pattern(kSize, submitted), submitted, 2)));
      last_change = Clock::now();
      rounds_since_change = 0;
    } else if (rounds_since_change >= 200 && Clock::now() - last_change > milliseconds(100)) {
      break;
    }
    ASSERT_LT(Clock::now(), end) << "tx_written kept advancing";
    t_->progress();
    ++rounds_since_change;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_LT(client_.written_count(), submitted);
  // Stalled: nothing moves, and place() is not asked again without resume().
  const size_t refused = server_.refused_places();
  EXPECT_GE(refused, 1u);
  const size_t written = client_.written_count();
  settle(milliseconds(100));
  EXPECT_EQ(client_.written_count(), written);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(server_.refused_places(), refused);
  EXPECT_GE(server_.retries_asked(), 1u);
  // Room at last: everything arrives, in order, intact.
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] {
    return server_.received_count() == submitted && client_.written_count() == submitted;
  })) << server_.received_count()
      << " of " << submitted << " received";
  const std::vector<Received> got = server_.received();
  for (uint32_t i = 0; i < submitted; ++i) {
    ASSERT_EQ(got[i].in.seq, i + 1);
    ASSERT_TRUE(got[i].bytes == out.payload(i)) << "message " << i + 1 << " damaged";
  }
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
  EXPECT_EQ(server_.unplaced(), 0u);
}

// =============================================================================================
// The end of a connection

TEST_P(TransportTest, ShutdownSendsWhatIsQueuedThenReportsShutdownToBothSides) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make(pattern(1u << 20, 1), 1, 2)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("last", 2)));
  ASSERT_EQ(p.client->shutdown(), 0);
  EXPECT_EQ(client_.submit(p.client.get(), out.make("too late", 3)), -FI_ENOTCONN);
  ASSERT_TRUE(pump([&] { return server_.ended() == 1 && client_.has_cm(FI_SHUTDOWN); }));
  settle(milliseconds(50));
  // The peer: both messages, then FI_SHUTDOWN, then the end.
  const std::vector<std::string> j = server_.journal();
  const int placed2 = journal_at(j, "placed 2");
  const int shut = journal_at(j, "cm " + std::to_string(FI_SHUTDOWN) + " 0");
  const int ended = journal_at(j, "ended");
  EXPECT_GE(journal_at(j, "placed 1"), 0);
  EXPECT_GE(placed2, 0);
  EXPECT_LT(placed2, shut);
  EXPECT_LT(shut, ended);
  EXPECT_EQ(cms(server_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, ""), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
  EXPECT_FALSE(p.server->open());
  // This side: its queue drained, and FI_SHUTDOWN once.
  EXPECT_EQ(client_.written_count(), 2u);
  EXPECT_EQ(cms(client_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, "welcome"), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_EQ(asyncs(client_), std::vector<std::string>{"SQ_DRAINED"});
  EXPECT_EQ(p.client->shutdown(), 0) << "shut down twice";
}

TEST_P(TransportTest, DestroyingAConnectionReportsShutdownToItsPeer) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  p.client.reset();
  ASSERT_TRUE(pump([&] { return server_.ended() == 1; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(server_),
            (std::vector<std::string>{cm_str(FI_CONNECTED, 0, ""), cm_str(FI_SHUTDOWN, 0)}));
  EXPECT_EQ(server_.ended(), 1);
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{});
  EXPECT_FALSE(p.server->open());
  Outbox out;
  EXPECT_EQ(server_.submit(p.server.get(), out.make("nobody", 1)), -FI_ENOTCONN);
}

TEST_P(TransportTest, ConnectToAPortWhereNothingListensIsRefused) {
  DeadPort dead;
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  ASSERT_EQ(c->connect(dead.addr(), "anyone?", 7), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_EQ(client_.ended(), 1);
  EXPECT_FALSE(c->open());
  EXPECT_FALSE(c->connected());
}

TEST_P(TransportTest, SubmitBeforeTheConnectionIsUpIsRefusedAndTheOpStaysTheOwners) {
  std::unique_ptr<Connection> c = t_->make_connection(&client_, params());
  Outbox out;
  TxOp* op = out.make("early", 1);
  EXPECT_EQ(client_.submit(c.get(), op), -FI_ENOTCONN);
  EXPECT_FALSE(op->accepted);
  EXPECT_FALSE(c->connected());
  EXPECT_TRUE(c->open()) << "not connected yet is not closed";
}

// =============================================================================================
// RDM

TEST_P(TransportTest, RdmMessageArrivesWithTheSendersNameAndNoCmEvent) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  std::unique_ptr<Listener> la = t_->open_listener(&client_, rdm_params(), loopback(0), &err);
  ASSERT_NE(la, nullptr) << err;
  const sockaddr_in a_name = name_of(*la);
  const sockaddr_in b_name = name_of(*lb);
  EXPECT_NE(b_name.sin_port, 0);
  ConnParams pa = rdm_params();
  pa.announce = a_name;
  std::unique_ptr<Connection> c = t_->make_connection(&client_, pa);
  Outbox out;
  // An RDM connection takes sends before it is up.
  ASSERT_NO_FATAL_FAILURE(
      send(client_, c.get(), out.make(pattern(5000, 1), 1, 2, TxLevel::kDelivery)));
  ASSERT_EQ(c->connect(b_name, &a_name, sizeof(a_name)), 0);
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.tagged(pattern(1u << 20, 2), 2, 5, 4)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2 && client_.ack_count() == 1; }));
  settle(milliseconds(30));
  const std::vector<Received> got = server_.received();
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    EXPECT_EQ(addr_str(got[i].in.from), addr_str(a_name)) << "FI_SOURCE: the announced name";
    EXPECT_NE(got[i].in.via, nullptr);
    EXPECT_EQ(got[i].in.via, got[0].in.via);
    EXPECT_TRUE(got[i].bytes == out.payload(i));
  }
  EXPECT_TRUE(got[1].in.tagged);
  EXPECT_EQ(got[1].in.tag, 5u);
  const std::vector<AckRecord> acks = client_.acks();
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].conn, c.get());
  EXPECT_EQ(acks[0].seq, 1u);
  EXPECT_TRUE(acks[0].delivered);
  EXPECT_EQ(client_.written_count(), 2u);
  for (const FakeOwner* o : {&client_, &server_}) {
    EXPECT_EQ(cms(*o), std::vector<std::string>{}) << "no CM event on an RDM connection";
    EXPECT_EQ(o->ended(), 0);
    EXPECT_EQ(asyncs(*o), std::vector<std::string>{});
    EXPECT_EQ(o->abort_count(), 0u);
  }
}

TEST_P(TransportTest, RdmConnectionToAPortWhereNothingListensAbortsItsSendsWithoutACmEvent) {
  DeadPort dead;
  const sockaddr_in me = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("lost", 1, 1, TxLevel::kDelivery)));
  ASSERT_EQ(c->connect(dead.addr(), &me, sizeof(me)), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(30));
  const std::vector<AbortRecord> aborts = client_.aborts();
  ASSERT_EQ(aborts.size(), 1u);
  EXPECT_EQ(aborts[0].conn, c.get());
  EXPECT_EQ(aborts[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
  EXPECT_EQ(client_.ended(), 0);
  EXPECT_EQ(client_.written_count(), 0u);
  EXPECT_FALSE(c->open());
}

TEST_P(TransportTest, RdmRequestWithoutANameIsRefused) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("who am I", 1)));
  ASSERT_EQ(c->connect(name_of(*lb), "not a sockaddr_in", 17), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(30));
  EXPECT_EQ(client_.aborts()[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  EXPECT_TRUE(logged_containing("an RDM request without a name"));
}

TEST_P(TransportTest, RdmListenerAsksItsOwnerBeforeFreeingAConnectionThatClosed) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("hi", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  const Connection* via = server_.received()[0].in.via;
  server_.set_can_free(false);  // say, a buffered message still owes it a delivery ack
  c.reset();
  ASSERT_TRUE(pump([&] { return !server_.can_free_calls().empty(); }));
  // The peer's end fails what was sent on it (nothing) and reports no CM event.
  ASSERT_TRUE(pump([&] { return server_.abort_count() == 1; }));
  EXPECT_EQ(server_.aborts()[0].conn, via);
  EXPECT_EQ(server_.aborts()[0].err, FI_ECONNABORTED);
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  const size_t asked = server_.can_free_calls().size();
  lb->sweep();
  EXPECT_GT(server_.can_free_calls().size(), asked) << "sweep() asks again";
  server_.set_can_free(true);
  lb->sweep();
  const std::vector<const Connection*> calls = server_.can_free_calls();
  for (const Connection* x : calls) EXPECT_EQ(x, via);
  lb->sweep();
  settle(milliseconds(20));
  EXPECT_EQ(server_.can_free_calls().size(), calls.size()) << "freed: nobody asks any more";
}

// =============================================================================================
// Authentication

TEST_P(TransportTest, PeersWithTheSameKeyConnectAndExchangeMessages) {
  const core::HmacSha256 client_key("open sesame", 11);
  const core::HmacSha256 server_key("open sesame", 11);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p, "auth", "ok", &client_key, &server_key));
  EXPECT_EQ(passive_.requests()[0].data, "auth") << "the nonce is not the application's data";
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(FI_CONNECTED, 0, "ok")});
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make(pattern(10000, 1), 1, 2)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
}

TEST_P(TransportTest, PeersWithDifferentKeysAreRefusedAndTheRequestIsNeverReported) {
  const core::HmacSha256 client_key("open sesame", 11);
  const core::HmacSha256 server_key("open barley", 11);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &server_key));
  p.client = t_->make_connection(&client_, params(&client_key));
  ASSERT_EQ(p.client->connect(p.at, "let me in", 9), 0);
  ASSERT_TRUE(pump([&] { return client_.ended() > 0; }));
  settle(milliseconds(100));
  EXPECT_EQ(cms(client_), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
  EXPECT_EQ(passive_.request_count(), 0u);
  EXPECT_FALSE(p.client->open());
  EXPECT_TRUE(logged_containing("did not prove the secret"));
}

TEST_P(TransportTest, KeyOnOneSideOnlyIsRefusedAndTheRequestIsNeverReported) {
  const core::HmacSha256 key("open sesame", 11);
  for (const bool client_has_key : {true, false}) {
    SCOPED_TRACE(client_has_key ? "only the connecting side has a key"
                                : "only the listening side has a key");
    FakeOwner owner;
    FakePassiveOwner passive;
    std::unique_ptr<PassiveListener> l =
        t_->open_passive(&passive, client_has_key ? nullptr : &key);
    sockaddr_in at{};
    ASSERT_EQ(l->listen(loopback(0), &at), 0);
    std::unique_ptr<Connection> c =
        t_->make_connection(&owner, params(client_has_key ? &key : nullptr));
    ASSERT_EQ(c->connect(at, "hi", 2), 0);
    ASSERT_TRUE(pump([&] { return owner.ended() > 0; }));
    settle(milliseconds(50));
    EXPECT_EQ(cms(owner), std::vector<std::string>{cm_str(0, FI_ECONNREFUSED)});
    EXPECT_EQ(passive.request_count(), 0u);
    EXPECT_EQ(owner.problems(), std::vector<std::string>{});
  }
}

TEST_P(TransportTest, RdmPeersWithDifferentKeysExchangeNothing) {
  const core::HmacSha256 a_key("alpha", 5);
  const core::HmacSha256 b_key("bravo", 5);
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(&b_key), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params(&a_key));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("secret", 1)));
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  ASSERT_TRUE(pump([&] { return client_.abort_count() > 0; }));
  settle(milliseconds(50));
  EXPECT_EQ(client_.aborts()[0].err, FI_ECONNREFUSED);
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_EQ(cms(server_), std::vector<std::string>{});
  // All the listener's owner may hear of it: the sends of the inbound connection that never
  // came up (none) fail.
  for (const std::string& e : server_.journal()) {
    EXPECT_EQ(e, "abort " + std::to_string(FI_ECONNREFUSED));
  }
  EXPECT_EQ(cms(client_), std::vector<std::string>{});
}

// An RDM listener's inbound connection, stalled, whose peer went: the owner resumes it, the
// round that places its last message sees it close, the owner frees it (sweep()) and the
// transport goes right after, with no progress round in between. What the engine retired is
// freed with it, safely.
//
// Over shared memory the retired connection's destructor reads the engine's list of rings, which
// still names it: ~Engine must free what it retired before its own members go (ASan reported a
// heap-use-after-free in Engine::forget_shm() here while it did not).
TEST_P(TransportTest, TransportDestroyedRightAfterASweepFreesWhatTheSweepRetired) {
  int err = 0;
  std::unique_ptr<Listener> lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
  ASSERT_NE(lb, nullptr) << err;
  const sockaddr_in a_name = loopback(1);
  std::unique_ptr<Connection> c = t_->make_connection(&client_, rdm_params());
  ASSERT_EQ(c->connect(name_of(*lb), &a_name, sizeof(a_name)), 0);
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("first", 1)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  Connection* via = server_.received()[0].in.via;
  server_.set_accepting(false);
  ASSERT_NO_FATAL_FAILURE(send(client_, c.get(), out.make("last", 2)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() >= 1 && client_.written_count() == 2; }));
  c.reset();
  settle(milliseconds(50));  // the end of the socket is seen; the message still waits
  ASSERT_EQ(server_.received_count(), 1u);
  server_.set_accepting(true);
  server_.set_can_free(false);
  via->resume();
  // One round: the resumed connection places its message, finds its peer gone and closes.
  ASSERT_TRUE(pump([&] { return !server_.can_free_calls().empty(); }));
  EXPECT_EQ(server_.received_count(), 2u);
  server_.set_can_free(true);
  lb->sweep();
  lb.reset();
  t_.reset();
}

// =============================================================================================
// The progress thread

TEST_P(TransportTest, ProgressThreadMovesEverythingWhileSomebodyWaitsAndNothingOnceNobodyDoes) {
  manual_ = false;  // from here on, this thread never calls progress()
  t_->begin_wait();
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  Outbox out;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), out.make(pattern(1u << 20, 1), 1, 4, TxLevel::kDelivery)));
  ASSERT_NO_FATAL_FAILURE(
      send(server_, p.server.get(), out.make("back", 1, 1, TxLevel::kTransmit)));
  ASSERT_TRUE(pump([&] {
    return server_.received_count() == 1 && client_.received_count() == 1 &&
           client_.ack_count() == 1 && server_.ack_count() == 1;
  }));
  EXPECT_TRUE(server_.received()[0].bytes == out.payload(0));
  EXPECT_EQ(client_.received()[0].bytes, "back");
  EXPECT_TRUE(client_.acks()[0].delivered);
  EXPECT_FALSE(server_.acks()[0].delivered);
  // A stalled connection resumed by another thread goes on.
  server_.set_accepting(false);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("stalled", 2)));
  ASSERT_TRUE(pump([&] { return server_.refused_places() == 1; }));
  server_.set_accepting(true);
  p.server->resume();
  ASSERT_TRUE(pump([&] { return server_.received_count() == 2; }));
  EXPECT_EQ(server_.received()[1].bytes, "stalled");

  t_->end_wait();
  // Nobody waits: the bytes are the application's to move (manual progress). (A round the
  // thread began before end_wait() may still end first.)
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), out.make("manual", 3)));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(server_.received_count(), 2u) << "the progress thread ran with nobody waiting";
  manual_ = true;
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3; }));
  EXPECT_EQ(server_.received()[2].bytes, "manual");
}

// =============================================================================================
// Raw peers: framing

TEST_F(TransportRawTest, MessageWrittenOneBytePerWriteArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_, "one byte at a time", true));
  const std::string payload = pattern(100, 1);
  ASSERT_TRUE(peer.send_byte_by_byte(frame({.op = wire::Op::kTagged,
                                            .flags = wire::kRemoteData | wire::kWantReceived,
                                            .length = 100,
                                            .seq = 7,
                                            .tag = 0xabcdef,
                                            .data = 0x55aa},
                                           payload)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 1; }));
  const Received got = server_.received()[0];
  EXPECT_TRUE(got.bytes == payload);
  EXPECT_EQ(got.in.len, 100u);
  EXPECT_EQ(got.in.seq, 7u);
  EXPECT_TRUE(got.in.tagged);
  EXPECT_EQ(got.in.tag, 0xabcdefu);
  EXPECT_TRUE(got.in.has_data);
  EXPECT_EQ(got.in.data, 0x55aau);
  EXPECT_EQ(got.in.ack, AckWanted::kReceived);
  // Its acknowledgement, as wire.h says.
  wire::Header h;
  std::string body;
  ASSERT_TRUE(peer.recv_frame(&h, &body));
  EXPECT_EQ(h.op, wire::Op::kAckReceived);
  EXPECT_EQ(h.seq, 7u);
  EXPECT_EQ(h.length, 0u);
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"COMM_EST"});
}

TEST_F(TransportRawTest, FrameSplitAtTheHeaderPayloadBoundaryArrivesWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  // A small payload (through the read buffer) and a large one (read straight into place).
  const size_t sizes[] = {10, 64 * 1024};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    SCOPED_TRACE(std::to_string(sizes[i]) + " bytes");
    const std::string payload = pattern(sizes[i], static_cast<uint32_t>(i));
    const std::string f =
        frame({.op = wire::Op::kMsg, .length = static_cast<uint32_t>(sizes[i]), .seq = uint32_t(i)},
              payload);
    ASSERT_TRUE(peer.send_bytes(std::string_view(f).substr(0, wire::kHeaderSize)));
    settle(milliseconds(30));
    EXPECT_EQ(server_.received_count(), i) << "a message before its payload";
    ASSERT_TRUE(peer.send_bytes(std::string_view(f).substr(wire::kHeaderSize)));
    ASSERT_TRUE(pump([&] { return server_.received_count() == i + 1; }));
    EXPECT_TRUE(server_.received()[i].bytes == payload);
  }
}

TEST_F(TransportRawTest, SeveralFramesInOneWriteArriveInOrder) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  const std::string a = pattern(3, 1);
  const std::string c = pattern(20000, 3);
  ASSERT_TRUE(peer.send_bytes(frame({.op = wire::Op::kMsg, .length = 3, .seq = 1}, a) +
                              frame({.op = wire::Op::kMsg, .length = 0, .seq = 2}) +
                              frame({.op = wire::Op::kMsg, .length = 20000, .seq = 3}, c)));
  ASSERT_TRUE(pump([&] { return server_.received_count() == 3; }));
  const std::vector<Received> got = server_.received();
  EXPECT_EQ(got[0].in.seq, 1u);
  EXPECT_EQ(got[1].in.seq, 2u);
  EXPECT_EQ(got[2].in.seq, 3u);
  EXPECT_TRUE(got[0].bytes == a);
  EXPECT_EQ(got[1].bytes, "");
  EXPECT_TRUE(got[2].bytes == c);
}

// =============================================================================================
// Raw peers: bad input

TEST_F(TransportRawTest, GarbageAfterTheHandshakeFailsTheConnectionWithReqErr) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &server_));
  ASSERT_TRUE(peer.send_bytes(std::string(wire::kHeaderSize, '\xab')));
  ASSERT_TRUE(pump([&] { return server_.has_async(FI_FABQ_EVENT_EP_REQ_ERR); }));
  EXPECT_TRUE(peer.closed_by_peer()) << "the connection is closed";
  settle(milliseconds(30));
  EXPECT_EQ(asyncs(server_), std::vector<std::string>{"EP_REQ_ERR"});
  EXPECT_EQ(cms(server_), std::vector<std::string>{cm_str(FI_CONNECTED, 0)}) << "no FI_SHUTDOWN";
  ASSERT_EQ(server_.abort_count(), 1u);
  EXPECT_EQ(server_.aborts()[0].conn, p.server.get());
  EXPECT_EQ(server_.aborts()[0].err, FI_EIO);
  EXPECT_FALSE(p.server->open());
  EXPECT_EQ(server_.received_count(), 0u);
  EXPECT_TRUE(logged_containing("bad magic"));
}

TEST_F(TransportRawTest, EveryKindOfBadFrameFailsAnEstablishedConnectionWithReqErr) {
  struct Case {
    const char* what;
    std::string bytes;
    bool then_close;
    const char* logged;
  };
  std::string bad_version = frame({.op = wire::Op::kMsg});
  bad_version[2] = 2;
  std::string unknown_op = frame({.op = wire::Op::kMsg});
  unknown_op[3] = 42;
  const Case cases[] = {
      {"bad version", bad_version, false, "unsupported protocol version"},
      {"unknown op", unknown_op, false, "unknown opcode"},
      {"flag the op does not allow",
       frame({.op = wire::Op::kMsg, .flags = wire::kShmOffer, .length = 1}, "x"), false,
       "flags the opcode does not allow"},
      {"longer than max_msg_size",
       frame({.op = wire::Op::kMsg, .length = static_cast<uint32_t>(kMaxMsg + 1)}), false,
       "length beyond the receiver's limit"},
      {"unused field set", frame({.op = wire::Op::kShutdown, .tag = 5}), false,
       "a field the opcode does not use is set"},
      {"a request once connected", frame({.op = wire::Op::kConnReq}), false,
       "a frame the connection's state forbids"},
      {"an acknowledgement of no send", frame({.op = wire::Op::kAckReceived, .seq = 99}), false,
       "an acknowledgement of no send"},
      {"closed inside a frame", frame({.op = wire::Op::kMsg, .length = 100}) + "0123456789", true,
       "connection closed inside a frame"},
  };
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    {
      std::lock_guard lock(g_log_mu);
      g_log.clear();
    }
    FakeOwner owner;
    WirePeer peer(ticker());
    ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &owner));
    ASSERT_TRUE(peer.send_bytes(c.bytes));
    if (c.then_close) peer.close_now();
    ASSERT_TRUE(pump([&] { return owner.has_async(FI_FABQ_EVENT_EP_REQ_ERR); }))
        << ::testing::PrintToString(owner.journal());
    if (!c.then_close) {
      EXPECT_TRUE(peer.closed_by_peer());
    }
    settle(milliseconds(10));
    EXPECT_EQ(asyncs(owner), std::vector<std::string>{"EP_REQ_ERR"});
    EXPECT_EQ(cms(owner), std::vector<std::string>{cm_str(FI_CONNECTED, 0)});
    EXPECT_EQ(owner.received_count(), 0u);
    EXPECT_FALSE(p.server->open());
    EXPECT_TRUE(logged_containing(c.logged)) << ::testing::PrintToString(logged());
    EXPECT_EQ(owner.problems(), std::vector<std::string>{});
    p.server.reset();
  }
}

TEST_F(TransportRawTest, GarbageBeforeTheHandshakeReachesNobodyAndALegitimatePeerStillConnects) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  {
    WirePeer garbage(ticker());
    ASSERT_TRUE(garbage.connect_to(p.at));
    ASSERT_TRUE(garbage.send_bytes("GET / HTTP/1.1\r\nHost: fabq\r\n\r\n" + pattern(64, 1)));
    EXPECT_TRUE(garbage.closed_by_peer()) << "refused";
  }
  {
    // A valid header the state forbids: a message before any request.
    WirePeer early(ticker());
    ASSERT_TRUE(early.connect_to(p.at));
    ASSERT_TRUE(early.send_frame({.op = wire::Op::kMsg, .length = 2}, "hi"));
    EXPECT_TRUE(early.closed_by_peer()) << "refused";
  }
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 0u);
  EXPECT_EQ(client_.journal(), std::vector<std::string>{});
  EXPECT_EQ(server_.journal(), std::vector<std::string>{});
  EXPECT_TRUE(logged_containing("bad magic"));
  // The listener goes on.
  Request r;
  ASSERT_NO_FATAL_FAILURE(request(&p, "legit", &r));
  EXPECT_EQ(r.data, "legit");
  p.server = p.listener->take(r.pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params()));
  ASSERT_EQ(p.server->accept(nullptr, 0), 0);
  ASSERT_TRUE(pump([&] { return client_.has_cm(FI_CONNECTED) && server_.has_cm(FI_CONNECTED); }));
}

// =============================================================================================
// Raw peers: authentication as wire.h documents it

class AuthRawPeer {
 public:
  AuthRawPeer(WirePeer* peer, const void* key, size_t key_len) : peer_(peer), key_(key, key_len) {
    for (size_t i = 0; i < sizeof(nonce_c_); ++i) nonce_c_[i] = static_cast<unsigned char>(i * 7);
  }
  // kConnReq with kAuth: the connect data, then Nc. R is the SHA-256 of the whole frame.
  bool send_request(std::string_view data) {
    std::string payload(data);
    payload.append(reinterpret_cast<const char*>(nonce_c_), sizeof(nonce_c_));
    const std::string f = frame({.op = wire::Op::kConnReq,
                                 .flags = wire::kAuth,
                                 .length = static_cast<uint32_t>(payload.size())},
                                payload);
    r_ = core::Sha256::hash(f.data(), f.size());
    return peer_->send_bytes(f);
  }
  // kChallenge: Ns and MAC_s = HMAC(K, "fabq-auth-accept" || Nc || Ns || R), checked.
  void take_challenge() {
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer_->recv_frame(&h, &payload));
    ASSERT_EQ(h.op, wire::Op::kChallenge);
    ASSERT_EQ(payload.size(), wire::kChallengeSize);
    std::memcpy(nonce_s_, payload.data(), sizeof(nonce_s_));
    const core::Digest mac_s = mac("fabq-auth-accept");
    EXPECT_EQ(std::memcmp(payload.data() + wire::kNonceSize, mac_s.data(), mac_s.size()), 0)
        << "MAC_s is not what wire.h says";
  }
  // kProof: MAC_c = HMAC(K, "fabq-auth-request" || Nc || Ns || R), or any 32 bytes.
  bool send_proof(bool right) {
    core::Digest proof = mac("fabq-auth-request");
    if (!right) proof.fill(0);
    return peer_->send_frame(
        {.op = wire::Op::kProof, .length = wire::kProofSize},
        std::string_view(reinterpret_cast<const char*>(proof.data()), proof.size()));
  }

 private:
  core::Digest mac(std::string_view label) {
    core::HmacSha256 m = key_;
    m.update(label.data(), label.size());
    m.update(nonce_c_, sizeof(nonce_c_));
    m.update(nonce_s_, sizeof(nonce_s_));
    m.update(r_.data(), r_.size());
    return m.final();
  }

  WirePeer* peer_;
  core::HmacSha256 key_;
  unsigned char nonce_c_[wire::kNonceSize] = {};
  unsigned char nonce_s_[wire::kNonceSize] = {};
  core::Digest r_{};
};

TEST_F(TransportRawTest, RawPeerThatProvesTheSecretAsWireDocumentsIsReportedAndAccepted) {
  const core::HmacSha256 key("shared secret", 13);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &key));
  WirePeer peer(ticker());
  ASSERT_TRUE(peer.connect_to(p.at));
  AuthRawPeer auth(&peer, "shared secret", 13);
  ASSERT_TRUE(auth.send_request("proven"));
  ASSERT_NO_FATAL_FAILURE(auth.take_challenge());
  settle(milliseconds(20));
  EXPECT_EQ(passive_.request_count(), 0u) << "reported before the proof";
  ASSERT_TRUE(auth.send_proof(true));
  ASSERT_TRUE(pump([&] { return passive_.request_count() == 1; }));
  EXPECT_EQ(passive_.requests()[0].data, "proven") << "the nonce is not the application's data";
  p.server = p.listener->take(passive_.requests()[0].pending);
  ASSERT_NE(p.server, nullptr);
  ASSERT_TRUE(p.server->adopt(&server_, params(&key)));
  ASSERT_EQ(p.server->accept("in", 2), 0);
  wire::Header h;
  std::string payload;
  ASSERT_TRUE(peer.recv_frame(&h, &payload));
  EXPECT_EQ(h.op, wire::Op::kConnAccept);
  EXPECT_EQ(payload, "in");
  ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnReady}));
  ASSERT_TRUE(pump([&] { return server_.has_cm(FI_CONNECTED); }));
}

TEST_F(TransportRawTest, RawPeerWithAWrongProofIsRejectedAndNeverReported) {
  const core::HmacSha256 key("shared secret", 13);
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p, &key));
  {
    SCOPED_TRACE("a wrong proof");
    WirePeer peer(ticker());
    ASSERT_TRUE(peer.connect_to(p.at));
    AuthRawPeer auth(&peer, "another secret", 14);
    ASSERT_TRUE(auth.send_request("let me in"));
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    ASSERT_EQ(h.op, wire::Op::kChallenge) << "challenged whatever its key";
    ASSERT_TRUE(auth.send_proof(false));
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    EXPECT_EQ(h.op, wire::Op::kConnReject);
    EXPECT_EQ(payload, "");
    EXPECT_TRUE(peer.closed_by_peer());
    EXPECT_TRUE(logged_containing("did not prove the secret"));
  }
  {
    SCOPED_TRACE("no authentication at all");
    WirePeer peer(ticker());
    ASSERT_TRUE(peer.connect_to(p.at));
    ASSERT_TRUE(peer.send_frame({.op = wire::Op::kConnReq, .length = 2}, "hi"));
    wire::Header h;
    std::string payload;
    ASSERT_TRUE(peer.recv_frame(&h, &payload));
    EXPECT_EQ(h.op, wire::Op::kConnReject);
    EXPECT_TRUE(peer.closed_by_peer());
  }
  settle(milliseconds(30));
  EXPECT_EQ(passive_.request_count(), 0u);
}

// =============================================================================================
// after_round

TEST_F(TransportRawTest, AfterRoundRunsAfterEveryProgressRound) {
  g_rounds.store(0);
  for (int i = 0; i < 5; ++i) t_->progress();
  EXPECT_EQ(g_rounds.load(), 5);
  // The progress thread's rounds too, while somebody waits.
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  t_->begin_wait();
  p.client = t_->make_connection(&client_, params());
  ASSERT_EQ(p.client->connect(p.at, "x", 1), 0);
  const bool requested =
      eventually([] {}, [&] { return passive_.request_count() == 1 && g_rounds.load() > 5; });
  t_->end_wait();
  EXPECT_TRUE(requested) << "the progress thread moved nothing";
}

}  // namespace
}  // namespace fabq::xport::testing
