// What the transport tests (transport_*_test.cc) share. They drive the TCP transport through
// its seam only (xport/transport.h), with fake owners (fake_owner.h) in place of the provider's
// endpoints and raw wire-format peers (wire_peer.h) where a peer fabq would never be is needed.
// Connection and data tests (TransportTest) run both over TCP and over shared memory
// (TransportConfig::shm); raw peers (TransportRawTest) never offer shared memory, so theirs run
// once. Network: 127.0.0.1 only. Every wait has a timeout (kTimeout): a broken transport fails a
// test, it never hangs it.
#pragma once

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
#include "xport/transport.h"
#include "xport/wire.h"

namespace fabq::xport::testing {

inline constexpr size_t kMaxMsg = 4u << 20;

// --- What the transport logs (TransportConfig::log has no context: one test at a time).

inline std::mutex g_log_mu;
inline std::vector<std::string> g_log;
inline void log_line(LogLevel, const char* message) {
  std::lock_guard lock(g_log_mu);
  g_log.emplace_back(message);
}
inline std::vector<std::string> logged() {
  std::lock_guard lock(g_log_mu);
  return g_log;
}
inline bool logged_containing(std::string_view what) {
  std::lock_guard lock(g_log_mu);
  for (const std::string& l : g_log) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

inline std::atomic<int> g_rounds{0};
inline void count_round(void*) {
  g_rounds.fetch_add(1, std::memory_order_relaxed);
}

// --- Readable descriptions of what owners saw, for exact comparisons.

inline std::string cm_str(uint32_t event, int err, std::string_view data = {}) {
  std::string s = event == FI_CONNECTED  ? "FI_CONNECTED"
                  : event == FI_SHUTDOWN ? "FI_SHUTDOWN"
                  : event == 0           ? "error"
                                         : "event " + std::to_string(event);
  if (err != 0) s += " err=" + std::to_string(err);
  if (!data.empty()) s += " data='" + std::string(data) + "'";
  return s;
}
inline std::vector<std::string> cms(const FakeOwner& o) {
  std::vector<std::string> out;
  for (const CmRecord& r : o.cm_events()) out.push_back(cm_str(r.event, r.err, r.data));
  return out;
}
inline std::string async_str(uint32_t type) {
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
inline std::vector<std::string> asyncs(const FakeOwner& o) {
  std::vector<std::string> out;
  for (uint32_t t : o.async_events()) out.push_back(async_str(t));
  return out;
}
// Index of the first journal entry equal to `what`; -1 when none.
inline int journal_at(const std::vector<std::string>& j, std::string_view what) {
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i] == what) return static_cast<int>(i);
  }
  return -1;
}

// n pseudo-random bytes (xorshift): a byte lost, repeated or out of place shows.
inline std::string pattern(size_t n, uint32_t seed) {
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

inline sockaddr_in name_of(Connection& c) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(c.getname(&a, &len), 0);
  return a;
}
inline sockaddr_in peer_of(Connection& c) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(c.getpeer(&a, &len), 0);
  return a;
}
inline sockaddr_in name_of(Listener& l) {
  sockaddr_in a{};
  size_t len = sizeof(a);
  EXPECT_EQ(l.getname(&a, &len), 0);
  return a;
}
inline std::string addr_str(const sockaddr_in& a) {
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

// Two RDM endpoints: a (client_) and b (server_) each listening on 127.0.0.1, and a's connection
// `c`, not connected yet, which announces a's name.
struct RdmPair {
  std::unique_ptr<Listener> la, lb;
  sockaddr_in a_name{}, b_name{};
  std::unique_ptr<Connection> c;
};

// Everything a test needs: one transport, the fake owners, ways to drive progress.
template <class Base>
class Harness : public Base {
 protected:
  virtual bool use_shm() const = 0;
  // A fixture's changes to the transport's configuration.
  virtual void configure(TransportConfig*) {}

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
    // Direct copies as their sizes say: the tests of the copy choice turn it on themselves.
    c.adapt_copies = false;
    configure(&c);
    t_ = make_tcp_transport(c);
    ASSERT_NE(t_, nullptr);
    config_ = c;
  }
  // From now on the connecting side's connections are made by a second transport of the same
  // configuration (its own engine, as another process would have); tick() progresses both.
  void second_transport() {
    t2_ = make_tcp_transport(config_);
    ASSERT_NE(t2_, nullptr);
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
    if (!manual_) return;
    t_->progress();
    if (t2_ != nullptr && tick_second_) t2_->progress();
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
    p->client = (t2_ != nullptr ? t2_ : t_)->make_connection(&client_, params(auth));
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
  void open_rdm_pair(RdmPair* p) {
    int err = 0;
    p->lb = t_->open_listener(&server_, rdm_params(), loopback(0), &err);
    ASSERT_NE(p->lb, nullptr) << err;
    p->la = t_->open_listener(&client_, rdm_params(), loopback(0), &err);
    ASSERT_NE(p->la, nullptr) << err;
    p->a_name = name_of(*p->la);
    p->b_name = name_of(*p->lb);
    p->c = t_->make_connection(&client_, rdm_params());
  }
  void send(FakeOwner& owner, Connection* c, TxOp* op) { ASSERT_EQ(owner.submit(c, op), 0); }

  FakeOwner client_;  // the connecting endpoint (A of RDM tests)
  FakeOwner server_;  // the endpoint that adopts the accepted connection (B of RDM tests)
  FakePassiveOwner passive_;
  std::unique_ptr<Transport> t_;   // after the owners: destroyed (and its thread stopped) first
  std::unique_ptr<Transport> t2_;  // second_transport(); destroyed before t_
  bool tick_second_ = true;        // false: a thread of the test progresses t2_
  TransportConfig config_;
  bool manual_ = true;  // false: the progress thread moves the bytes (begin_wait)
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

// The names of TransportTest's two instances. Each file with TEST_P(TransportTest, ...)
// instantiates the suite itself: instantiated here, it would add a failing
// GoogleTestVerification test to the binaries that have none.
inline std::string tcp_or_shm(const ::testing::TestParamInfo<bool>& i) {
  return i.param ? "Shm" : "Tcp";
}

}  // namespace fabq::xport::testing
