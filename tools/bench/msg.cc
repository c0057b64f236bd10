// The MSG scenarios: two FI_EP_MSG endpoints of the provider under test connected over TCP on
// 127.0.0.1 (passive endpoint listening on port 0, fi_getname for the port, fi_connect, CM
// events through an EQ), exercised as fabtests' fi_msg_pingpong and fi_msg_bw do.
//
// The connection and its two sides, and how each scenario's parts run on them: msg_peer.h.
#include "tools/bench/msg.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tools/bench/msg_peer.h"

namespace fabq::tools::bench {

// ---------------------------------------------------------------------------------------------
// The message format.

MsgFormat::MsgFormat(size_t size) : pattern_(std::max(size, kMinSize)) {
  uint64_t x = 0x9e3779b97f4a7c15ULL ^ size;  // xorshift64: cheap, and another pattern per size
  for (uint8_t& b : pattern_) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 56);
  }
  for (size_t off = 0; off + 8 <= pattern_.size(); off += kStampEvery) stamps_.push_back(off);
  if (const size_t last = pattern_.size() - 8; last >= stamps_.back() + 8) stamps_.push_back(last);
}

void MsgFormat::fill(void* buf) const {
  std::memcpy(buf, pattern_.data(), pattern_.size());
}

void MsgFormat::stamp(void* buf, uint64_t seq, MsgDir dir) const {
  const uint64_t v = stamp_value(seq, dir);
  for (const size_t off : stamps_) std::memcpy(static_cast<uint8_t*>(buf) + off, &v, sizeof(v));
}

bool MsgFormat::check(const void* buf, size_t len, MsgDir dir, uint64_t* seq,
                      std::string* why) const {
  const auto* p = static_cast<const uint8_t*>(buf);
  if (len != size()) {
    *why = msg::fmt("received %zu bytes where the message has %zu", len, size());
    return false;
  }
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if ((v & 1) != static_cast<uint64_t>(dir) || (v >> 1) == 0) {
    *why = msg::fmt("not a message to the %s: it begins with 0x%016llx",
                    dir == MsgDir::kToServer ? "server" : "client",
                    static_cast<unsigned long long>(v));
    return false;
  }
  const unsigned long long n = v >> 1;
  // The bytes in [from, to) must be the pattern's.
  auto same = [&](size_t from, size_t to) {
    if (std::memcmp(p + from, pattern_.data() + from, to - from) == 0) return true;
    size_t i = from;
    while (p[i] == pattern_[i]) ++i;
    *why = msg::fmt("message %llu of %zu bytes: byte %zu is 0x%02x where 0x%02x was sent", n,
                    size(), i, p[i], pattern_[i]);
    return false;
  };
  size_t pos = 0;
  for (const size_t off : stamps_) {
    if (!same(pos, off)) return false;
    uint64_t w;
    std::memcpy(&w, p + off, sizeof(w));
    if (w != v) {
      *why = msg::fmt(
          "message %llu of %zu bytes: the stamp at byte %zu is 0x%016llx, not 0x%016llx", n, size(),
          off, static_cast<unsigned long long>(w), static_cast<unsigned long long>(v));
      return false;
    }
    pos = off + sizeof(w);
  }
  if (!same(pos, size())) return false;
  *seq = v >> 1;
  return true;
}

std::string msg_size_name(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "Mi";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "Ki";
  return std::to_string(bytes);
}

std::string msg_size_label(size_t bytes) {
  const std::string name = msg_size_name(bytes);
  if (name.back() != 'i') return name + " B";
  return name.substr(0, name.size() - 2) + " " + name.substr(name.size() - 2) + "B";
}

namespace msg {
namespace {

// ---------------------------------------------------------------------------------------------
// The scenarios.

double allocs_per(int64_t before, int64_t after, uint64_t events) {
  if (before < 0 || after < 0 || events == 0) return -1;
  return static_cast<double>(after - before) / static_cast<double>(events);
}

// What the sides measure: each side writes its own members, the client reads all of them
// once the server thread has been joined.
struct Figures {
  std::vector<double> half_rtt;  // msg-pingpong: one per timed round trip
  int64_t start[2] = {0, 0};     // per side (0 server, 1 client): the timed part's bounds
  int64_t end[2] = {0, 0};
  int64_t allocs0 = -1, allocs1 = -1;  // process-wide, around the client's timed part
};

// Message counts: `base`, fewer for large messages so that a sample moves at most
// Options::msg_bytes, but never fewer than `least`.
uint64_t count_for(uint64_t base, uint64_t least, size_t size, const Options& o) {
  return std::max(least, std::min(base, o.msg_bytes / size));
}

// Sends in flight for msg-rate: Options::msg_window, fewer when they would hold over 16 MiB.
size_t window_for(size_t size, const Options& o) {
  return std::max<size_t>(4, std::min<size_t>(o.msg_window, (16u << 20) / size));
}

// The client sends ping k and takes the time from just before fi_send to the receive
// completion of pong k; it checks the pong after that. The server, once ping k completes,
// posts the buffer of ping k - 1 again (checked by then) and sends pong k: a receive posted
// ahead of the answer, as fi_msg_pingpong and rdm-pingpong do, so that the MSG and RDM
// ping-pongs take the same steps between a message and its answer. It checks ping k while the
// pong travels. So the checks, which fi_msg_pingpong skips by default, overlap each other and
// stay (almost) out of the figure.
bool pingpong_client(Peer& c, const MsgFormat& f, uint64_t warm, uint64_t timed, Figures* fig) {
  for (uint64_t k = 1; k <= warm + timed; ++k) {
    if (k == warm + 1) fig->allocs0 = heap_allocations_now();
    size_t s = 0, r = 0, len = 0;
    uint64_t seq = 0;
    if (!c.acquire_send(&s)) return false;
    f.stamp(c.send_buf(s), k, MsgDir::kToServer);
    const int64_t t0 = now_ns();
    if (!c.send(s, f.size()) || !c.next_recv(&r, &len)) return false;
    const int64_t t1 = now_ns();
    if (k > warm) fig->half_rtt[k - warm - 1] = static_cast<double>(t1 - t0) / 2;
    if (!c.check(f, r, len, MsgDir::kToClient, k, &seq) || !c.post_recv(r)) return false;
  }
  fig->allocs1 = heap_allocations_now();
  return true;
}

bool pingpong_server(Peer& s, const MsgFormat& f, uint64_t total) {
  size_t checked = kNone;  // the buffer of the last ping, checked and not yet posted again
  for (uint64_t k = 1; k <= total; ++k) {
    size_t r = 0, len = 0, slot = 0;
    uint64_t seq = 0;
    if (!s.next_recv(&r, &len)) return false;
    if (checked != kNone && !s.post_recv(checked)) return false;
    if (!s.acquire_send(&slot)) return false;
    f.stamp(s.send_buf(slot), k, MsgDir::kToClient);
    if (!s.send(slot, f.size())) return false;
    if (!s.check(f, r, len, MsgDir::kToServer, k, &seq)) return false;
    checked = r;
  }
  return checked == kNone || s.post_recv(checked);
}

Sample msg_pingpong(const Scenario& sc, const Provider& p, const Options& o) {
  const uint64_t timed = count_for(o.msg_round_trips, 50, sc.msg_size, o);
  const uint64_t warm = std::max<uint64_t>(timed / 10, 10);
  const MsgFormat f(sc.msg_size);
  Figures fig;
  fig.half_rtt.resize(timed);
  // Two buffers each way: the next ping never waits for the last one's send completion.
  const Part server{2, 2, [&](Peer& s) { return pingpong_server(s, f, warm + timed); }};
  const Part client{2, 2, [&](Peer& c) { return pingpong_client(c, f, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.p99 = quantile(&fig.half_rtt, 0.99);
  s.value = quantile(&fig.half_rtt, 0.50);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, 2 * timed);
  return s;
}

// msg-rate: the client keeps a window of sends in flight; the server, whose receives are all
// posted before it accepts, checks each message, reposts its buffer and, after the last of a
// round, sends an 8-byte ack. Warm-up rounds, then the timed one, which ends at the ack.
//
// Here and in msg-comp-rate, a sender outruns its receiver, so messages wait for their
// receives, and how many wait at most varies from round to round. Three warm-up rounds as long
// as the timed one let the receiver's buffers for them reach that peak before the timed round,
// which then shows the steady state.
constexpr uint64_t kRateRounds = 4;
bool rate_client(Peer& c, const MsgFormat& f, const MsgFormat& ack, uint64_t warm, uint64_t timed,
                 Figures* fig) {
  uint64_t seq = 0;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const bool timed_round = round == kRateRounds;
    if (timed_round) {
      fig->allocs0 = heap_allocations_now();
      fig->start[1] = now_ns();
    }
    for (uint64_t i = 0, n = timed_round ? timed : warm; i < n; ++i) {
      size_t s = 0;
      if (!c.acquire_send(&s)) return false;
      f.stamp(c.send_buf(s), ++seq, MsgDir::kToServer);
      if (!c.send(s, f.size())) return false;
    }
    size_t r = 0, len = 0;
    uint64_t got = 0;
    if (!c.next_recv(&r, &len) || !c.check(ack, r, len, MsgDir::kToClient, round, &got) ||
        !c.post_recv(r) || !c.drain_sends()) {
      return false;
    }
    if (timed_round) {
      fig->end[1] = now_ns();
      fig->allocs1 = heap_allocations_now();
    }
  }
  return true;
}

// Takes the next `n` messages, numbered [first, first + n) in any order, each once.
bool receive_round(Peer& p, const MsgFormat& f, MsgDir dir, uint64_t first, uint64_t n,
                   std::vector<bool>* seen, size_t r, size_t len) {
  uint64_t seq = 0;
  if (!p.check(f, r, len, dir, 0, &seq)) return false;
  if (seq < first || seq >= first + n || (*seen)[seq]) {
    return p.fail(fmt("message %llu arrived out of place (this round is %llu-%llu)%s",
                      static_cast<unsigned long long>(seq), static_cast<unsigned long long>(first),
                      static_cast<unsigned long long>(first + n - 1),
                      seq < seen->size() && (*seen)[seq] ? ", a second time" : ""));
  }
  (*seen)[seq] = true;
  return p.post_recv(r);
}

bool rate_server(Peer& s, const MsgFormat& f, const MsgFormat& ack, uint64_t warm, uint64_t timed) {
  std::vector<bool> seen((kRateRounds - 1) * warm + timed + 1, false);
  uint64_t first = 1;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const uint64_t n = round == kRateRounds ? timed : warm;
    for (uint64_t i = 0; i < n; ++i) {
      size_t r = 0, len = 0;
      if (!s.next_recv(&r, &len) ||
          !receive_round(s, f, MsgDir::kToServer, first, n, &seen, r, len)) {
        return false;
      }
    }
    first += n;
    size_t slot = 0;
    if (!s.acquire_send(&slot)) return false;
    ack.stamp(s.send_buf(slot), round, MsgDir::kToClient);
    if (!s.send(slot, ack.size())) return false;
  }
  return true;
}

Sample msg_rate(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t window = window_for(sc.msg_size, o);
  const uint64_t timed = count_for(o.msg_messages, 4 * window, sc.msg_size, o);
  const uint64_t warm = timed;
  const MsgFormat f(sc.msg_size), ack(MsgFormat::kMinSize);
  Figures fig;
  const Part server{2, window, [&](Peer& s) { return rate_server(s, f, ack, warm, timed); }};
  const Part client{window, 2, [&](Peer& c) { return rate_client(c, f, ack, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(fig.end[1] - fig.start[1]) / static_cast<double>(timed);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, timed);
  return s;
}

// msg-comp-rate: both sides send and receive at once, each with a window of sends in flight
// and its receives posted; a round starts at a barrier; warm-up rounds as in msg-rate. Its figure
// is the time from the earlier start to the later end over every completion both CQs delivered: 2
// per message.
bool comp_rate_side(Peer& p, int side, const MsgFormat& f, uint64_t warm, uint64_t timed,
                    Figures* fig) {
  const MsgDir out = side == 1 ? MsgDir::kToServer : MsgDir::kToClient;
  const MsgDir in = side == 1 ? MsgDir::kToClient : MsgDir::kToServer;
  std::vector<bool> seen((kRateRounds - 1) * warm + timed + 1, false);
  uint64_t seq = 0, first = 1;
  for (uint64_t round = 1; round <= kRateRounds; ++round) {
    const bool timed_round = round == kRateRounds;
    const uint64_t n = timed_round ? timed : warm;
    if (!p.barrier(true)) return false;
    if (timed_round) {
      if (side == 1) fig->allocs0 = heap_allocations_now();
      fig->start[side] = now_ns();
    }
    uint64_t sent = 0, got = 0;
    while (sent < n || got < n) {
      size_t s = 0, r = 0, len = 0;
      while (sent < n && p.try_acquire_send(&s)) {
        f.stamp(p.send_buf(s), ++seq, out);
        if (!p.send(s, f.size())) return false;
        ++sent;
      }
      bool any = false;
      while (p.pop_recv(&r, &len)) {
        if (!receive_round(p, f, in, first, n, &seen, r, len)) return false;
        ++got;
        any = true;
      }
      // Nothing to do until a completion comes: a message, or a send buffer to reuse.
      if (!any && (sent == n || !p.has_free_send()) && !p.wait_any()) return false;
    }
    if (!p.drain_sends()) return false;
    first += n;
    if (timed_round) {
      fig->end[side] = now_ns();
      if (side == 1) fig->allocs1 = heap_allocations_now();
    }
  }
  return true;
}

Sample msg_comp_rate(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t window = window_for(sc.msg_size, o);
  const uint64_t timed = count_for(o.msg_messages, 4 * window, sc.msg_size, o);
  const uint64_t warm = timed;
  const MsgFormat f(sc.msg_size);
  Figures fig;
  const Part server{window, window,
                    [&](Peer& s) { return comp_rate_side(s, 0, f, warm, timed, &fig); }};
  const Part client{window, window,
                    [&](Peer& c) { return comp_rate_side(c, 1, f, warm, timed, &fig); }};
  Sample s = run_connected(f, p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  const int64_t span = std::max(fig.end[0], fig.end[1]) - std::min(fig.start[0], fig.start[1]);
  const uint64_t completions = 4 * timed;  // each side: a send and a receive per message
  s.value = static_cast<double>(span) / static_cast<double>(completions);
  s.allocs = allocs_per(fig.allocs0, fig.allocs1, completions);
  return s;
}

}  // namespace
}  // namespace msg

const std::vector<Scenario>& msg_scenarios() {
  static const std::vector<Scenario> all = [] {
    using M = Measure;
    const Options o;
    std::vector<Scenario> v;
    for (const size_t n : {8u, 64u, 256u, 1u << 10, 4u << 10, 64u << 10, 1u << 20}) {
      v.push_back({"msg-pingpong/" + msg_size_name(n),
                   "fi_send/fi_recv ping-pong, " + msg_size_label(n) +
                       ": one-way latency (round trip / 2), both sides busy-polling",
                   M::kLatencyNs, msg::msg_pingpong, FI_WAIT_NONE, n});
    }
    for (const size_t n : {8u, 64u, 4u << 10, 64u << 10, 1u << 20}) {
      v.push_back({"msg-rate/" + msg_size_name(n),
                   msg_size_label(n) + " messages one way, " +
                       std::to_string(msg::window_for(n, o)) +
                       " sends in flight, receives pre-posted: ns per message",
                   M::kNsPerEvent, msg::msg_rate, FI_WAIT_NONE, n});
    }
    v.push_back({"msg-comp-rate/8",
                 "8 B messages both ways at once, " + std::to_string(msg::window_for(8, o)) +
                     " sends in flight each: ns per completion, both CQs counted",
                 M::kNsPerEvent, msg::msg_comp_rate, FI_WAIT_NONE, 8});
    return v;
  }();
  return all;
}

}  // namespace fabq::tools::bench
