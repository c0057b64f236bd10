// The scenarios on two FI_EP_RDM endpoints (rma_side.h), as fabtests measure them:
//
// - rdm-pingpong/<size>: fi_rdm_pingpong. Each side keeps a receive posted for the other's
//   next message; the client sends message k (fi_inject up to the provider's inject size,
//   fi_send beyond) and waits for its receive to complete with the server's k, which the
//   server sends as soon as the client's k arrived. One-way latency = round trip / 2.
// - rdm-bw/<size>: fi_msg_bw -e rdm. The client keeps a window of sends in flight; the server
//   keeps as many receives posted, checks each message and reposts its buffer, and acks the
//   end of each round with 8 bytes. Warm-up rounds, then the timed one, which ends at the ack.
// - rma-write-lat/<size>: fi_rma_pingpong -o write. Each side writes message k into slot k % 2
//   of the other's region (fi_inject_write up to the provider's inject size, fi_write beyond)
//   and the other polls the last 8 bytes of that slot, reading its CQ meanwhile (which is
//   what moves the bytes with manual progress), until they hold k's stamp; then it writes k
//   back. One-way latency = round trip / 2. fi_rma_pingpong polls the last byte alone; the
//   last 8 bytes hold a stamp that names the message and its direction.
// - rma-write-bw/<size>, rma-read-bw/<size>: fi_rma_bw -o write / -o read. A window of
//   operations in flight (64, fewer for large sizes; fi_rma_bw's default window is 64), each
//   completion read from the initiator's CQ frees its slot for the next operation; a warm-up
//   round as long as the timed one. Figure: wall time per operation of the timed round.
// - rma-atomic/sum, rma-fetch-atomic/sum: fi_rdm_atomic's FI_SUM on FI_UINT64, a window of 64
//   fi_atomic or fi_fetch_atomic in flight on one counter.
//
// What is read is checked whole: every byte of every message and every read's buffer
// (MsgFormat), every byte the ping-pong delivers, the writes' region at the end of each round (each
// slot holding the last write into it, whole), the counter after each round (the sum of every add,
// and the bytes around it untouched) and every fetched value (each one once, within the round's
// range); and every completion's context and flags (rma_side.h).
//
// The two sides are two processes, each running the scenario's code (run_pair, rma_side.h):
// what the client measures stays in its process, and heap allocations per operation are the
// client process's alone (with Options::rma_threads, those of both sides).
#include "tools/bench/rma.h"

#include <algorithm>
#include <cstring>

#include "tools/bench/msg.h"
#include "tools/bench/rma_side.h"

namespace fabq::tools::bench {
namespace rma {
namespace {

double allocs_per(int64_t before, int64_t after, uint64_t events) {
  if (before < 0 || after < 0 || events == 0) return -1;
  return static_cast<double>(after - before) / static_cast<double>(events);
}

// Operations per sample: `base`, fewer for large sizes so that a sample moves at most
// Options::rma_bytes, but never fewer than `least`.
uint64_t count_for(uint64_t base, uint64_t least, size_t size, const Options& o) {
  return std::max(least, std::min(base, o.rma_bytes / size));
}

// Operations in flight: Options::rma_window, fewer when they would hold over 16 MiB.
size_t window_for(size_t size, const Options& o) {
  return std::max<size_t>(4, std::min<size_t>(o.rma_window, (16u << 20) / size));
}

// The 8 bytes at `p` (8-aligned), which the provider may be writing.
uint64_t load(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

// What the client measures, for the scenario's run() in the client's process (run_pair).
// What the sides tell each other goes through Side::words, which both sides see in either
// mode.
struct Shared {
  std::vector<double> half_rtt;  // rma-write-lat: one per timed round trip
  int64_t start = 0, end = 0;    // the client's timed round
  int64_t allocs0 = -1, allocs1 = -1;
};

constexpr int kRounds = 2;  // a warm-up round, then the timed one

// A receive's tag for on_done: its message number with this bit set; a send's is the number.
constexpr uint64_t kRecvTag = uint64_t{1} << 63;

// Checks the message in `buf` as `want` going `dir` (0: any number, returned in *seq).
bool check_message(Side& s, const MsgFormat& f, const uint8_t* buf, MsgDir dir, uint64_t want,
                   uint64_t* seq) {
  std::string why;
  if (!f.check(buf, f.size(), dir, seq, &why)) return s.fail("a received message: " + why);
  if (want != 0 && *seq != want) {
    return s.fail(fmt("message %llu arrived where %llu was due",
                      static_cast<unsigned long long>(*seq),
                      static_cast<unsigned long long>(want)));
  }
  return true;
}

// --- rdm-pingpong

constexpr size_t kPingpongSlots = 4;  // a receive, and sends
constexpr size_t kPingpongBuffers = 2 + kPingpongSlots + 1;

// Message k arrives in buffer k % 2 of its receiver, so that the receive for k + 1 is posted
// (before this side sends, as fi_rdm_pingpong does) while k is still to be checked. A send
// goes from its slot's buffer (2 + slot), an inject from the last one (kPingpongBuffers - 1),
// so a send never waits for the last one's completion. The checks, which fi_rdm_pingpong
// skips by default, come after this side's next send: out of the figure.
bool pingpong_side(Side& s, int side, const MsgFormat& f, uint64_t warm, uint64_t timed,
                   Shared* sh) {
  const size_t n = f.size();
  const uint64_t total = warm + timed;
  const MsgDir out = side == 1 ? MsgDir::kToServer : MsgDir::kToClient;
  const MsgDir in = side == 1 ? MsgDir::kToClient : MsgDir::kToServer;
  const bool inject = n <= s.inject_limit();
  for (size_t b = 0; b < kPingpongBuffers; ++b) f.fill(s.local() + b * n);
  uint64_t received = 0;  // the last message whose receive completed
  s.on_done([&](size_t, uint64_t tag) {
    if ((tag & kRecvTag) != 0) received = tag & ~kRecvTag;
    return true;
  });
  auto post_recv = [&](uint64_t k) {
    size_t slot = 0;
    return k > total || (s.acquire(&slot) && s.recv(slot, k | kRecvTag, (k % 2) * n, n));
  };
  auto send = [&](uint64_t k) {
    if (inject) {
      const size_t off = (kPingpongBuffers - 1) * n;
      f.stamp(s.local() + off, k, out);
      return s.inject(off, n);
    }
    size_t slot = 0;
    if (!s.acquire(&slot)) return false;
    f.stamp(s.local() + (2 + slot) * n, k, out);
    return s.send(slot, k, (2 + slot) * n, n);
  };
  auto arrived = [&](uint64_t k) {
    return received >= k ||
           s.wait_until("the peer's message did not arrive", [&] { return received >= k; });
  };
  uint64_t seq = 0;
  bool ok = post_recv(1) && s.barrier(true);  // both receives posted before the first send
  for (uint64_t k = 1; ok && k <= total; ++k) {
    if (side == 0) {
      ok = arrived(k) && post_recv(k + 1) && send(k) &&
           check_message(s, f, s.local() + (k % 2) * n, in, k, &seq);
      continue;
    }
    if (k == warm + 1) sh->allocs0 = heap_allocations_now();
    const int64_t t0 = now_ns();
    ok = send(k) && arrived(k);
    const int64_t t1 = now_ns();
    if (k > warm) sh->half_rtt[k - warm - 1] = static_cast<double>(t1 - t0) / 2;
    ok = ok && post_recv(k + 1) && check_message(s, f, s.local() + (k % 2) * n, in, k, &seq);
  }
  if (side == 1) sh->allocs1 = heap_allocations_now();
  s.on_done(nullptr);  // it refers to this frame
  return ok;
}

Sample pingpong(const Scenario& sc, const Provider& p, const Options& o, bool dgram) {
  const size_t n = sc.msg_size;
  const uint64_t timed = count_for(o.rma_round_trips, 50, n, o);
  const uint64_t warm = std::max<uint64_t>(timed / 10, 10);
  const MsgFormat f(n);
  Shared sh;
  sh.half_rtt.resize(timed);
  const Needs needs{.messages = true,
                    .dgram = dgram,
                    .local_bytes = kPingpongBuffers * n,
                    .window = kPingpongSlots,
                    .op_bytes = n};
  const Part server{needs, [&](Side& s) { return pingpong_side(s, 0, f, warm, timed, &sh); }};
  const Part client{needs, [&](Side& c) { return pingpong_side(c, 1, f, warm, timed, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.p99 = quantile(&sh.half_rtt, 0.99);
  s.value = quantile(&sh.half_rtt, 0.50);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, 2 * timed);
  return s;
}

Sample rdm_pingpong(const Scenario& sc, const Provider& p, const Options& o) {
  return pingpong(sc, p, o, /*dgram=*/false);
}

// The same on FI_EP_DGRAM endpoints (fi_dgram_pingpong): one datagram in flight each way, so
// none is lost on a host (a lost one fails the sample when its wait times out).
Sample dgram_pingpong(const Scenario& sc, const Provider& p, const Options& o) {
  return pingpong(sc, p, o, /*dgram=*/true);
}

// --- dgram-rate

// Datagrams in flight: batches the receiver's socket holds whole (64 KiB of payload, 4 to 32
// messages), since a datagram nobody has room for is lost.
size_t dgram_batch(size_t size) {
  return std::clamp<size_t>((64u << 10) / size, 4, 32);
}

// The client sends batch after batch of dgram_batch() messages, each batch once the server
// acknowledged the one before with 8 bytes (its number), which it sends once the whole batch
// arrived and its receives for the next are posted. Message k goes from buffer k % batch; the
// ack of batch b arrives into the buffer past them.
bool rate_client(Side& c, const MsgFormat& f, const MsgFormat& ack, uint64_t warm, uint64_t timed,
                 Shared* sh) {
  const size_t n = f.size();
  const size_t batch = dgram_batch(n);
  const size_t ack_off = batch * n;
  const bool inject = n <= c.inject_limit();
  for (size_t i = 0; i < batch; ++i) f.fill(c.local() + i * n);
  uint64_t acked = 0, seq = 0, got = 0;
  c.on_done([&](size_t, uint64_t tag) {
    if ((tag & kRecvTag) != 0) acked = tag & ~kRecvTag;
    return true;
  });
  auto post_ack = [&](uint64_t b) {
    size_t slot = 0;
    return c.acquire(&slot) && c.recv(slot, b | kRecvTag, ack_off, ack.size());
  };
  bool ok = post_ack(1) && c.barrier(true);
  for (uint64_t b = 1; ok && b <= warm + timed; ++b) {
    if (b == warm + 1) {
      sh->allocs0 = heap_allocations_now();
      sh->start = now_ns();
    }
    for (size_t i = 0; ok && i < batch; ++i) {
      const size_t off = (seq % batch) * n;
      f.stamp(c.local() + off, ++seq, MsgDir::kToServer);
      if (inject) {
        ok = c.inject(off, n);
      } else {
        size_t slot = 0;
        ok = c.acquire(&slot) && c.send(slot, seq, off, n);
      }
    }
    ok = ok && c.wait_until("the batch's ack did not arrive", [&] { return acked >= b; }) &&
         check_message(c, ack, c.local() + ack_off, MsgDir::kToClient, b, &got);
    if (ok && b < warm + timed) ok = post_ack(b + 1);
  }
  if (ok) {
    sh->end = now_ns();
    sh->allocs1 = heap_allocations_now();
  }
  c.on_done(nullptr);  // it refers to this frame
  return ok && c.drain();
}

// The server's ack of round (or batch) `number`: 8 bytes from the buffer of a free slot, whose
// buffers are `n` bytes apart.
bool send_ack(Side& s, const MsgFormat& ack, size_t n, uint64_t number) {
  size_t slot = 0;
  if (!s.acquire(&slot)) return false;
  ack.stamp(s.local() + slot * n, number, MsgDir::kToClient);
  return s.send(slot, number, slot * n, ack.size());
}

// The server keeps a receive posted for each message of the batch to come, into buffer `slot`;
// a batch's messages arrive in any order, each once.
bool rate_server(Side& s, const MsgFormat& f, const MsgFormat& ack, uint64_t batches) {
  const size_t n = f.size();
  const size_t batch = dgram_batch(n);
  std::vector<size_t> arrived;
  arrived.reserve(s.window());
  std::vector<bool> seen(batch + 1);
  s.on_done([&](size_t slot, uint64_t tag) {
    if ((tag & kRecvTag) != 0) arrived.push_back(slot);
    return true;
  });
  auto post_batch = [&] {
    bool ok = true;
    for (size_t i = 0; ok && i < batch; ++i) {
      size_t slot = 0;
      ok = s.acquire(&slot) && s.recv(slot, kRecvTag, slot * n, n);
    }
    return ok;
  };
  bool ok = post_batch() && s.barrier(true);
  for (uint64_t b = 1; ok && b <= batches; ++b) {
    const uint64_t first = (b - 1) * batch + 1;
    std::fill(seen.begin(), seen.end(), false);
    for (size_t got = 0; ok && got < batch;) {
      ok = !arrived.empty() ||
           s.wait_until("the client's datagrams did not arrive", [&] { return !arrived.empty(); });
      for (size_t i = 0; ok && i < arrived.size(); ++i) {
        uint64_t seq = 0;
        ok = check_message(s, f, s.local() + arrived[i] * n, MsgDir::kToServer, 0, &seq);
        if (ok && (seq < first || seq >= first + batch || seen[seq - first])) {
          ok = s.fail(fmt("datagram %llu arrived out of its batch (%llu-%llu), or twice",
                          static_cast<unsigned long long>(seq),
                          static_cast<unsigned long long>(first),
                          static_cast<unsigned long long>(first + batch - 1)));
        }
        if (ok) seen[seq - first] = true;
      }
      got += arrived.size();
      arrived.clear();
    }
    // The next batch's receives before the ack that lets it come.
    ok = ok && (b == batches || post_batch()) && send_ack(s, ack, n, b);
  }
  s.on_done(nullptr);  // it refers to this frame
  return ok;
}

Sample dgram_rate(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t n = sc.msg_size;
  const size_t batch = dgram_batch(n);
  const uint64_t timed = std::max<uint64_t>(count_for(o.rma_ops, 4 * batch, n, o) / batch, 4);
  const uint64_t warm = std::max<uint64_t>(timed / 4, 2);
  const MsgFormat f(n), ack(MsgFormat::kMinSize);
  Shared sh;
  // The client: its batch's buffers and the ack's; the server: a buffer per receive slot. Each
  // side: the batch and a slot for the ack's send or receive.
  const size_t slots = batch + 1;
  const Needs needs{.messages = true,
                    .dgram = true,
                    .local_bytes = (slots + 1) * n,
                    .window = slots,
                    .op_bytes = n};
  const Part server{needs, [&](Side& s) { return rate_server(s, f, ack, warm + timed); }};
  const Part client{needs, [&](Side& c) { return rate_client(c, f, ack, warm, timed, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  const uint64_t msgs = timed * batch;
  s.value = static_cast<double>(sh.end - sh.start) / static_cast<double>(msgs);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, msgs);
  return s;
}

// --- rdm-bw

// Rounds: warm-up ones as long as the timed one, which let the receiver's buffers for messages
// that outran their receives reach their peak before it (as msg-rate).
constexpr uint64_t kBwRounds = 4;

// The client sends from its slot's buffer; the ack of round r is message r, 8 bytes, into the
// buffer at `ack_off`, past every slot's (its receive's slot is whichever was free).
bool bw_client(Side& c, const MsgFormat& f, const MsgFormat& ack, size_t ack_off, uint64_t ops,
               Shared* sh) {
  const size_t n = f.size();
  for (size_t i = 0; i < c.window(); ++i) f.fill(c.local() + i * n);
  uint64_t acked = 0, seq = 0, got = 0;
  c.on_done([&](size_t, uint64_t tag) {
    if ((tag & kRecvTag) != 0) acked = tag & ~kRecvTag;
    return true;
  });
  size_t slot = 0;
  bool ok = c.acquire(&slot) && c.recv(slot, 1 | kRecvTag, ack_off, ack.size()) && c.barrier(true);
  for (uint64_t round = 1; ok && round <= kBwRounds; ++round) {
    const bool timed = round == kBwRounds;
    if (timed) {
      sh->allocs0 = heap_allocations_now();
      sh->start = now_ns();
    }
    for (uint64_t i = 0; ok && i < ops; ++i) {
      ok = c.acquire(&slot);
      if (!ok) break;
      f.stamp(c.local() + slot * n, ++seq, MsgDir::kToServer);
      ok = c.send(slot, seq, slot * n, n);
    }
    ok = ok && c.wait_until("the round's ack did not arrive", [&] { return acked >= round; }) &&
         check_message(c, ack, c.local() + ack_off, MsgDir::kToClient, round, &got) && c.drain();
    if (timed && ok) {
      sh->end = now_ns();
      sh->allocs1 = heap_allocations_now();
    }
    if (ok && round < kBwRounds) {
      ok = c.acquire(&slot) && c.recv(slot, (round + 1) | kRecvTag, ack_off, ack.size());
    }
  }
  c.on_done(nullptr);  // it refers to this frame
  return ok;
}

// The server receives into buffer `slot` of its window; messages numbered [first, first + n)
// make a round, in any order, each once.
bool bw_server(Side& s, const MsgFormat& f, const MsgFormat& ack, uint64_t ops) {
  const size_t n = f.size();
  const size_t w = s.window() - 1;  // receives posted at most: one slot for the ack's send
  const uint64_t total = kBwRounds * ops;
  if (w == 0) return s.fail("a window of one operation leaves no slot for a receive");
  std::vector<size_t> arrived;  // receive slots completed and not yet checked
  arrived.reserve(s.window());
  std::vector<bool> seen(kBwRounds * ops + 1, false);
  s.on_done([&](size_t slot, uint64_t tag) {
    if ((tag & kRecvTag) != 0) arrived.push_back(slot);
    return true;
  });
  uint64_t posted = 0, received = 0;
  // Receives for the messages still to come, up to w: none is left posted after the last.
  auto repost = [&] {
    bool ok = true;
    while (ok && posted < w && posted < total - received) {
      size_t slot = 0;
      ok = s.acquire(&slot) && s.recv(slot, kRecvTag, slot * n, n);
      posted += ok;
    }
    return ok;
  };
  bool ok = repost() && s.barrier(true);
  uint64_t first = 1;
  for (uint64_t round = 1; ok && round <= kBwRounds; ++round) {
    for (uint64_t got = 0; ok && got < ops;) {
      ok = !arrived.empty() ||
           s.wait_until("the client's messages did not arrive", [&] { return !arrived.empty(); });
      // Check every buffer that arrived before reposting any: a repost may take any free slot.
      for (size_t i = 0; ok && i < arrived.size(); ++i) {
        uint64_t seq = 0;
        ok = check_message(s, f, s.local() + arrived[i] * n, MsgDir::kToServer, 0, &seq);
        if (ok && (seq < first || seq >= first + ops || seen[seq])) {
          ok = s.fail(fmt("message %llu arrived out of place (this round is %llu-%llu)%s",
                          static_cast<unsigned long long>(seq),
                          static_cast<unsigned long long>(first),
                          static_cast<unsigned long long>(first + ops - 1),
                          seq < seen.size() && seen[seq] ? ", a second time" : ""));
        }
        if (ok) seen[seq] = true;
      }
      got += arrived.size();
      received += arrived.size();
      posted -= arrived.size();
      arrived.clear();
      ok = ok && repost();
    }
    first += ops;
    ok = ok && send_ack(s, ack, n, round);
  }
  s.on_done(nullptr);  // it refers to this frame
  return ok;
}

Sample rdm_bw(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t n = sc.msg_size;
  const size_t window = window_for(n, o);
  const uint64_t ops = count_for(o.rma_ops, 4 * window, n, o);
  const MsgFormat f(n), ack(MsgFormat::kMinSize);
  Shared sh;
  // Each side: the window and a slot for the ack's send or receive; the client's ack buffer
  // past every slot's.
  const size_t slots = window + 1;
  const Needs needs{
      .messages = true, .local_bytes = (slots + 1) * n, .window = slots, .op_bytes = n};
  const Part server{needs, [&](Side& s) { return bw_server(s, f, ack, ops); }};
  const Part client{needs, [&](Side& c) { return bw_client(c, f, ack, slots * n, ops, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(sh.end - sh.start) / static_cast<double>(ops);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, ops);
  return s;
}

// --- rma-write-lat

bool lat_side(Side& s, int side, const MsgFormat& f, uint64_t warm, uint64_t timed, Shared* sh) {
  const size_t n = f.size();
  const MsgDir out = side == 1 ? MsgDir::kToServer : MsgDir::kToClient;
  const MsgDir in = side == 1 ? MsgDir::kToClient : MsgDir::kToServer;
  const bool inject = n <= s.inject_limit();
  for (size_t i = 0; i < s.window(); ++i) f.fill(s.local() + i * n);
  auto send = [&](uint64_t k) {
    const size_t to = (k % 2) * n;
    if (inject) {
      f.stamp(s.local(), k, out);
      return s.inject_write(0, n, to);
    }
    size_t slot = 0;
    if (!s.acquire(&slot)) return false;
    f.stamp(s.local() + slot * n, k, out);
    return s.write(slot, k, slot * n, n, to);
  };
  auto arrived = [&](uint64_t k) {
    const uint8_t* last = s.target() + (k % 2) * n + n - 8;
    const uint64_t want = MsgFormat::stamp_value(k, in);
    if (load(last) == want) return true;
    return s.wait_until("the peer's write did not arrive", [&] { return load(last) == want; });
  };
  // The slot is the peer's to write again only after this side's next write: stable here.
  auto check = [&](uint64_t k) {
    const uint8_t* buf = s.target() + (k % 2) * n;
    std::string why;
    uint64_t seq = 0;
    auto whole = [&] {
      if (!f.check(buf, n, in, &seq, &why)) return false;
      if (seq == k) return true;
      why = fmt("message %llu where %llu was due", static_cast<unsigned long long>(seq),
                static_cast<unsigned long long>(k));
      return false;
    };
    // Its last bytes came; a provider may still be placing the others.
    return whole() || s.wait_until("the written bytes were not all there", whole, &why);
  };
  for (uint64_t k = 1; k <= warm + timed; ++k) {
    if (side == 0) {
      if (!arrived(k) || !send(k) || !check(k)) return false;
      continue;
    }
    if (k == warm + 1) sh->allocs0 = heap_allocations_now();
    const int64_t t0 = now_ns();
    if (!send(k) || !arrived(k)) return false;
    const int64_t t1 = now_ns();
    if (k > warm) sh->half_rtt[k - warm - 1] = static_cast<double>(t1 - t0) / 2;
    if (!check(k)) return false;
  }
  if (side == 1) sh->allocs1 = heap_allocations_now();
  return true;
}

Sample write_lat(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t n = sc.msg_size;
  const uint64_t timed = count_for(o.rma_round_trips, 50, n, o);
  const uint64_t warm = std::max<uint64_t>(timed / 10, 10);
  const MsgFormat f(n);
  Shared sh;
  sh.half_rtt.resize(timed);
  // Each side: 2 slots the other writes into, 2 sources (the next write never waits for the
  // last one's completion).
  const Needs needs{.target_bytes = 2 * n, .local_bytes = 2 * n, .window = 2, .op_bytes = n};
  const Part server{needs, [&](Side& s) { return lat_side(s, 0, f, warm, timed, &sh); }};
  const Part client{needs, [&](Side& c) { return lat_side(c, 1, f, warm, timed, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.p99 = quantile(&sh.half_rtt, 0.99);
  s.value = quantile(&sh.half_rtt, 0.50);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, 2 * timed);
  return s;
}

// --- rma-write-bw

// The client writes message seq from its slot j into slot j of the server's region, and seq
// into word j (Side::words); after each round the server checks that every slot holds, whole,
// the last message written to it.
bool write_bw_client(Side& c, const MsgFormat& f, uint64_t ops, Shared* sh) {
  const size_t n = f.size();
  for (size_t i = 0; i < c.window(); ++i) f.fill(c.local() + i * n);
  uint64_t* const last = c.words();
  uint64_t seq = 0;
  for (int round = 1; round <= kRounds; ++round) {
    const bool timed = round == kRounds;
    if (!c.barrier(true)) return false;  // the server has checked the last round
    if (timed) {
      sh->allocs0 = heap_allocations_now();
      sh->start = now_ns();
    }
    for (uint64_t i = 0; i < ops; ++i) {
      size_t slot = 0;
      if (!c.acquire(&slot)) return false;
      f.stamp(c.local() + slot * n, ++seq, MsgDir::kToServer);
      last[slot] = seq;
      if (!c.write(slot, seq, slot * n, n, slot * n)) return false;
    }
    if (!c.drain()) return false;
    if (timed) {
      sh->end = now_ns();
      sh->allocs1 = heap_allocations_now();
    }
    if (!c.barrier(true)) return false;  // the round is over: the server checks
  }
  return true;
}

// `window`: the client's (window_for), at most Link::kWords; the client's Side may have fewer
// slots (a smaller tx queue), whose words stay 0.
bool write_bw_server(Side& s, const MsgFormat& f, size_t window) {
  const size_t n = f.size();
  const uint64_t* const last = s.words();
  for (int round = 1; round <= kRounds; ++round) {
    if (!s.barrier(true) || !s.barrier(true)) return false;
    for (size_t slot = 0; slot < window; ++slot) {
      if (last[slot] == 0) continue;
      const uint8_t* buf = s.target() + slot * n;
      std::string why;
      auto whole = [&] {
        uint64_t seq = 0;
        if (!f.check(buf, n, MsgDir::kToServer, &seq, &why)) {
          why = fmt("slot %zu: ", slot) + why;
          return false;
        }
        if (seq == last[slot]) return true;
        why =
            fmt("slot %zu holds write %llu where the last one to it was %llu", slot,
                static_cast<unsigned long long>(seq), static_cast<unsigned long long>(last[slot]));
        return false;
      };
      // Completions at the initiator need not mean the bytes are placed (FI_TRANSMIT_COMPLETE):
      // the server reads its CQ until they are, within the timeout.
      if (!whole() &&
          !s.wait_until("the completed writes were not all in the region", whole, &why)) {
        return false;
      }
    }
  }
  return true;
}

Sample write_bw(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t n = sc.msg_size;
  const size_t window = window_for(n, o);
  const uint64_t ops = count_for(o.rma_ops, 4 * window, n, o);
  const MsgFormat f(n);
  if (window > Link::kWords) {
    return Sample{.state = Sample::State::kFailed,
                  .why = fmt("a window of %zu is more than the %zu writes the server can check",
                             window, Link::kWords)};
  }
  Shared sh;
  const Part server{{.target_bytes = window * n, .op_bytes = n},
                    [&](Side& s) { return write_bw_server(s, f, window); }};
  const Part client{{.local_bytes = window * n, .window = window, .op_bytes = n},
                    [&](Side& c) { return write_bw_client(c, f, ops, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(sh.end - sh.start) / static_cast<double>(ops);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, ops);
  return s;
}

// --- rma-read-bw

// The server's region holds two messages, 1 and 2; each read into a client slot takes the one
// that slot does not hold, so a read that left its buffer alone is caught too.
bool read_bw_server(Side& s, const MsgFormat& f) {
  for (uint64_t r = 0; r < 2; ++r) {
    f.fill(s.target() + r * f.size());
    f.stamp(s.target() + r * f.size(), r + 1, MsgDir::kToClient);
  }
  return s.barrier(true);  // filled: the client may read (finish() polls until it is done)
}

bool read_bw_client(Side& c, const MsgFormat& f, uint64_t ops, Shared* sh) {
  const size_t n = f.size();
  std::vector<uint64_t> held(c.window(), 1);  // which message each slot holds (none yet)
  c.on_done([&](size_t slot, uint64_t r) {
    std::string why;
    uint64_t seq = 0;
    if (!f.check(c.local() + slot * n, n, MsgDir::kToClient, &seq, &why)) {
      return c.fail(fmt("fi_read into slot %zu: ", slot) + why);
    }
    if (seq != r + 1) {
      return c.fail(fmt("fi_read into slot %zu brought message %llu where %llu was read", slot,
                        static_cast<unsigned long long>(seq),
                        static_cast<unsigned long long>(r + 1)));
    }
    return true;
  });
  if (!c.barrier(true)) return false;
  for (int round = 1; round <= kRounds; ++round) {
    const bool timed = round == kRounds;
    if (timed) {
      sh->allocs0 = heap_allocations_now();
      sh->start = now_ns();
    }
    for (uint64_t i = 0; i < ops; ++i) {
      size_t slot = 0;
      if (!c.acquire(&slot)) return false;
      const uint64_t r = 1 - held[slot];
      held[slot] = r;
      if (!c.read(slot, r, slot * n, n, r * n)) return false;
    }
    if (!c.drain()) return false;
    if (timed) {
      sh->end = now_ns();
      sh->allocs1 = heap_allocations_now();
    }
  }
  c.on_done(nullptr);  // it refers to this frame
  return true;
}

Sample read_bw(const Scenario& sc, const Provider& p, const Options& o) {
  const size_t n = sc.msg_size;
  const size_t window = window_for(n, o);
  const uint64_t ops = count_for(o.rma_ops, 4 * window, n, o);
  const MsgFormat f(n);
  Shared sh;
  const Part server{{.target_bytes = 2 * n, .op_bytes = n},
                    [&](Side& s) { return read_bw_server(s, f); }};
  const Part client{{.local_bytes = window * n, .window = window, .op_bytes = n},
                    [&](Side& c) { return read_bw_client(c, f, ops, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(sh.end - sh.start) / static_cast<double>(ops);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, ops);
  return s;
}

// --- rma-atomic/sum, rma-fetch-atomic/sum

constexpr size_t kCounterRegion = 64;  // the counter, then bytes no operation may touch

// After each round the counter must hold the sum of every add so far (the client's word 0),
// and nothing else in the region may have changed.
bool atomic_server(Side& s) {
  for (int round = 1; round <= kRounds; ++round) {
    if (!s.barrier(true) || !s.barrier(true)) return false;
    const uint64_t sum = s.words()[0];
    std::string why;
    auto right = [&] {
      const uint64_t v = load(s.target());
      if (v != sum) {
        why = fmt("the counter holds %llu where the adds so far sum to %llu",
                  static_cast<unsigned long long>(v), static_cast<unsigned long long>(sum));
        return false;
      }
      return true;
    };
    if (!right() && !s.wait_until("the completed atomics were not all applied", right, &why)) {
      return false;
    }
    for (size_t i = 8; i < kCounterRegion; ++i) {
      if (s.target()[i] != 0) {
        return s.fail(
            fmt("byte %zu of the region, beside the counter, is 0x%02x", i, s.target()[i]));
      }
    }
  }
  return true;
}

// fi_atomic adds k with operation k (so a lost or repeated add shows in the sum);
// fi_fetch_atomic adds 1, and the values it fetches must be the round's range, each once.
bool atomic_client(Side& c, bool fetch, uint64_t ops, Shared* sh) {
  const size_t w = c.window();
  uint8_t* operand = c.local();
  uint8_t* result = c.local() + w * 8;
  std::vector<bool> seen(kRounds * ops, false);
  uint64_t k = 0, base = 0;
  if (fetch) {
    c.on_done([&](size_t slot, uint64_t tag) {
      uint64_t v;
      std::memcpy(&v, result + slot * 8, 8);
      if (v < base || v >= base + ops || seen[v]) {
        return c.fail(
            fmt("fi_fetch_atomic %llu fetched %llu: ", static_cast<unsigned long long>(tag),
                static_cast<unsigned long long>(v)) +
            (v < seen.size() && seen[v]
                 ? std::string("fetched before")
                 : fmt("outside this round's %llu-%llu", static_cast<unsigned long long>(base),
                       static_cast<unsigned long long>(base + ops - 1))));
      }
      seen[v] = true;
      return true;
    });
  }
  for (int round = 1; round <= kRounds; ++round) {
    const bool timed = round == kRounds;
    if (!c.barrier(true)) return false;
    if (timed) {
      sh->allocs0 = heap_allocations_now();
      sh->start = now_ns();
    }
    for (uint64_t i = 0; i < ops; ++i) {
      size_t slot = 0;
      if (!c.acquire(&slot)) return false;
      ++k;
      const uint64_t add = fetch ? 1 : k;
      std::memcpy(operand + slot * 8, &add, 8);
      if (fetch) {
        const uint64_t none = ~uint64_t{0};
        std::memcpy(result + slot * 8, &none, 8);
        if (!c.fetch_add(slot, k, slot * 8, w * 8 + slot * 8, 0)) return false;
      } else if (!c.atomic_add(slot, k, slot * 8, 0)) {
        return false;
      }
    }
    if (!c.drain()) return false;
    if (timed) {
      sh->end = now_ns();
      sh->allocs1 = heap_allocations_now();
    }
    base += ops;
    c.words()[0] = fetch ? k : k * (k + 1) / 2;
    if (!c.barrier(true)) return false;  // the server checks the counter
  }
  c.on_done(nullptr);  // it refers to this frame
  return true;
}

Sample atomic_rate(const Scenario& sc, const Provider& p, const Options& o, bool fetch) {
  const size_t window = window_for(sc.msg_size, o);
  const uint64_t ops = o.rma_ops;
  Shared sh;
  const Part server{{.atomics = true, .target_bytes = kCounterRegion, .op_bytes = 8},
                    [&](Side& s) { return atomic_server(s); }};
  const Part client{
      {.atomics = true, .local_bytes = 2 * window * 8, .window = window, .op_bytes = 8},
      [&](Side& c) { return atomic_client(c, fetch, ops, &sh); }};
  Sample s = run_pair(p, o, server, client);
  if (s.state != Sample::State::kOk) return s;
  s.value = static_cast<double>(sh.end - sh.start) / static_cast<double>(ops);
  s.allocs = allocs_per(sh.allocs0, sh.allocs1, ops);
  return s;
}

Sample atomic(const Scenario& sc, const Provider& p, const Options& o) {
  return atomic_rate(sc, p, o, false);
}
Sample fetch_atomic(const Scenario& sc, const Provider& p, const Options& o) {
  return atomic_rate(sc, p, o, true);
}

}  // namespace

bool is_rma(const Scenario& s) {
  for (auto* run : {rdm_pingpong, rdm_bw, write_lat, write_bw, read_bw, atomic, fetch_atomic,
                    dgram_pingpong, dgram_rate}) {
    if (s.run == run) return true;
  }
  return false;
}

}  // namespace rma

const std::vector<Scenario>& rma_scenarios() {
  static const std::vector<Scenario> all = [] {
    using M = Measure;
    const Options o;
    const size_t sizes[] = {8, 64, 4u << 10, 64u << 10, 1u << 20, 4u << 20};
    std::vector<Scenario> v;
    const size_t msg_sizes[] = {8,         64,        256,        1u << 10, 4u << 10,
                                16u << 10, 64u << 10, 256u << 10, 1u << 20, 4u << 20};
    for (const size_t n : msg_sizes) {
      v.push_back({"rdm-pingpong/" + msg_size_name(n),
                   "fi_send/fi_recv ping-pong on FI_EP_RDM, " + msg_size_label(n) +
                       " (fi_rdm_pingpong): one-way latency (round trip / 2), both sides "
                       "busy-polling",
                   M::kLatencyNs, rma::rdm_pingpong, FI_WAIT_NONE, n});
    }
    for (const size_t n : msg_sizes) {
      v.push_back({"rdm-bw/" + msg_size_name(n),
                   "fi_send on FI_EP_RDM, " + msg_size_label(n) + ", " +
                       std::to_string(rma::window_for(n, o)) +
                       " in flight, receives posted (fi_msg_bw -e rdm): ns per message",
                   M::kBandwidth, rma::rdm_bw, FI_WAIT_NONE, n});
    }
    for (const size_t n : sizes) {
      v.push_back({"rma-write-lat/" + msg_size_name(n),
                   "fi_write ping-pong on FI_EP_RDM, " + msg_size_label(n) +
                       ", each side polling its region's last bytes (fi_rma_pingpong -o "
                       "write): one-way latency (round trip / 2)",
                   M::kLatencyNs, rma::write_lat, FI_WAIT_NONE, n});
    }
    for (const size_t n : sizes) {
      v.push_back({"rma-write-bw/" + msg_size_name(n),
                   "fi_write on FI_EP_RDM, " + msg_size_label(n) + ", " +
                       std::to_string(rma::window_for(n, o)) +
                       " in flight (fi_rma_bw -o write): ns per write",
                   M::kBandwidth, rma::write_bw, FI_WAIT_NONE, n});
    }
    for (const size_t n : sizes) {
      v.push_back({"rma-read-bw/" + msg_size_name(n),
                   "fi_read on FI_EP_RDM, " + msg_size_label(n) + ", " +
                       std::to_string(rma::window_for(n, o)) +
                       " in flight (fi_rma_bw -o read): ns per read",
                   M::kBandwidth, rma::read_bw, FI_WAIT_NONE, n});
    }
    v.push_back({"rma-atomic/sum",
                 "fi_atomic FI_SUM on one FI_UINT64 on FI_EP_RDM, " +
                     std::to_string(rma::window_for(8, o)) + " in flight: ns per atomic",
                 M::kNsPerEvent, rma::atomic, FI_WAIT_NONE, 8});
    v.push_back({"rma-fetch-atomic/sum",
                 "fi_fetch_atomic FI_SUM on one FI_UINT64 on FI_EP_RDM, " +
                     std::to_string(rma::window_for(8, o)) + " in flight: ns per atomic",
                 M::kNsPerEvent, rma::fetch_atomic, FI_WAIT_NONE, 8});
    const size_t dgram_sizes[] = {8, 64, 1u << 10, 4u << 10, 16u << 10};
    for (const size_t n : dgram_sizes) {
      v.push_back({"dgram-pingpong/" + msg_size_name(n),
                   "fi_send/fi_recv ping-pong on FI_EP_DGRAM, " + msg_size_label(n) +
                       " (fi_dgram_pingpong): one-way latency (round trip / 2), both sides "
                       "busy-polling",
                   M::kLatencyNs, rma::dgram_pingpong, FI_WAIT_NONE, n});
    }
    for (const size_t n : dgram_sizes) {
      v.push_back({"dgram-rate/" + msg_size_name(n),
                   "fi_send on FI_EP_DGRAM, " + msg_size_label(n) + ", batches of " +
                       std::to_string(rma::dgram_batch(n)) +
                       " each acknowledged by the receiver: ns per datagram",
                   M::kNsPerEvent, rma::dgram_rate, FI_WAIT_NONE, n});
    }
    return v;
  }();
  return all;
}

}  // namespace fabq::tools::bench
