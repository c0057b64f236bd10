// libFuzzer target for a real connection (xport/conn.h) under a hostile peer's one-sided frames.
// A TCP transport (one for the whole run, no progress thread, no shared memory) makes a
// connection for a fake endpoint (an xport::Owner) and connects it to a plain socket that plays
// the peer; once the handshake is done, the peer sends what the input says: one-sided requests
// with forged keys, addresses, lengths and atomic descriptions, answers to the endpoint's own
// requests (right, late, forged, or refusals), headers of any op, messages, big payloads, cut
// into reads of any size. Each progress round the peer reads what the connection wrote back.
//
// The endpoint owns one small region between guard bytes; its key is kKey, and its addresses are
// offsets or the region's virtual addresses (config bit 3). It checks every access against the
// region as the provider's endpoint does, and it can submit reads, writes and atomics of its own
// through the connection, their result buffers between guard bytes too.
//
// The harness runs its own wire::Framer over the bytes the peer sends, so it knows each frame
// the connection will take, in order, and what wire.h and transport.h say must come of it:
//   - the owner's upcalls (place/placed, remote_access, rma_acked, tx_acked) come in the order of
//     the frames, each with the fields of its frame (key, address, length, CQ data, operands and
//     compare values, status, seq), and none for a frame after one that fails the connection;
//   - no byte outside the region (or a result buffer's room) is ever written: the guards and the
//     region's bytes are checked after every upcall and every round against a copy that changes
//     only where a write or an atomic the owner granted says;
//   - every frame the connection writes back decodes (wire::decode, with its max_msg_size);
//     each answer names the request it answers, in order, with the Status the owner gave and
//     exactly the bytes the owner produced (a read's bytes, an atomic's previous values); a
//     refused request gets its Status and no payload; a read longer than max_msg_size is refused
//     kOutOfBounds without the owner;
//   - a read longer than a piece (kPiece, TransportConfig::read_piece) is checked whole first
//     (AccessPart::kCheck, in the order of the frames); once granted it is answered in pieces,
//     each copied by an access of its own (kPiece, kLast), the reads in the order they were
//     granted, each piece with the bytes its access copied, at its offset, kMore on all but the
//     last; whole answers may come between pieces;
//   - the answers to the endpoint's own reads may come in pieces too (wire.h): a piece that does
//     not continue the answer that is arriving (or begins one while another is) fails the
//     connection at its header, before any upcall;
//   - a frame that breaks the protocol (a header decode() refuses, a frame the state forbids, an
//     atomic whose length is not its operands', a kWrite too short for its CQ data, a direct
//     message, request or answer on this connection without shared memory, an answer or
//     acknowledgement of no request, kShutdown) closes the connection, after the answers to what
//     came before it and before any to what came after, and the owner hears of it
//     (abort_sends); nothing else closes it, and everything whole before the end is answered.
// Any broken invariant traps.
//
// Input layout:
//   byte 0       config: bit 0 RDM (else MSG), bits 1-2 max_msg_size (kMaxMsgSizes), bit 3
//                virtual addresses (else offsets), bit 4 the larger region
//   byte 1       the peer's write size (0: each piece at once), for the first 512 bytes of each
//   the rest     records, each a tag byte t and what t % 8 says (u8/u16/u64: little-endian
//                bytes of the input; "addr": a byte s, then base + (int16) or, if s & 1, a u64):
//     0  kWrite: flags u8, seq u16, key (t & 8: a u64, else kKey), addr, length u8, payload
//     1  kReadReq: seq u16, key, addr, the length (s = u8; s % 4: u8, u64, the region's size,
//        max_msg_size + 1)
//     2  kAtomic: seq u16, key, addr, description (op, datatype, kind, reserved, count u8), then
//        the operands' length adjusted by (int8) and filled with a pattern byte
//     3  an answer to the endpoint's request: op (u8 % 3: kRmaAck, kReadResp, kAtomicResp),
//        target (u8: one of its requests, or a forged seq), status u8 (% 8), length (u8:
//        0xff the right one), payload
//     4  the endpoint submits a request: kind u8 (% 3 write, read, atomic), key, addr, a size u8
//     5  a header of 32 input bytes (magic and version forced unless t & 8), payload up to u8
//     6  a big payload: op (t & 8: kMsg, else kWrite, CQ data if t & 16), key, addr, length u16
//        * 4, a fill byte
//     7  the endpoint: (t >> 3) % 4: 0 refuses placements (no receive), 1 takes them again and
//        resumes the connection, 2 a progress round, 3 ten
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/fi_atomic.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "core/atomic_op.h"
#include "xport/transport.h"
#include "xport/wire.h"

namespace fabq::xport {
namespace {

using wire::Header;
using wire::Op;
using Bytes = std::vector<unsigned char>;

constexpr uint64_t kKey = 0x6b6579;
constexpr size_t kMaxMsgSizes[] = {64, 4096, 65536, 1u << 20};
constexpr size_t kRegionSizes[] = {64, 20000};  // the larger one takes direct reads (16 KiB)
constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;
constexpr size_t kMaxOps = 4;          // the endpoint's requests in flight
constexpr size_t kMaxResult = 64;      // bytes of one of its reads or fetches
constexpr size_t kMaxMsgPlace = 16;    // room for a message's payload
constexpr size_t kMaxSent = 1u << 20;  // bytes the peer sends in one run
// A read longer than this is answered in pieces (TransportConfig::read_piece): small, so that
// reads of the larger region (up to 20000 bytes) come in up to 20 of them.
constexpr size_t kPiece = 1024;

// CONN_FUZZ_TRACE set: what the peer hears back, on stderr (for reading a crash's input).
bool tracing() {
  static const bool on = std::getenv("CONN_FUZZ_TRACE") != nullptr;
  return on;
}

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "conn_fuzz: %s\n", why);
  __builtin_trap();
}

void check(bool ok, const char* why) {
  if (!ok) fail(why);
}

bool is_request(Op op) {
  return op == Op::kWrite || op == Op::kReadReq || op == Op::kAtomic;
}

bool is_answer(Op op) {
  return op == Op::kRmaAck || op == Op::kReadResp || op == Op::kAtomicResp;
}

bool is_handshake(Op op) {
  return op == Op::kConnReq || op == Op::kConnAccept || op == Op::kConnReject ||
         op == Op::kConnReady || op == Op::kChallenge || op == Op::kProof;
}

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  uint64_t le(size_t k) {
    uint64_t v = 0;
    for (size_t i = 0; i < k; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
    return v;
  }
  uint16_t u16() { return static_cast<uint16_t>(le(2)); }
  uint64_t u64() { return le(8); }
  Bytes take(size_t k) {
    k = std::min(k, n);
    Bytes b(p, p + k);
    p += k;
    n -= k;
    return b;
  }
};

Bytes frame(const Header& h, const Bytes& payload) {
  Bytes f(wire::kHeaderSize);
  wire::encode(h, f.data());
  f.insert(f.end(), payload.begin(), payload.end());
  return f;
}

// Memory with guard bytes on both sides.
class Guarded {
 public:
  explicit Guarded(size_t size) : bytes_(size + 2 * kGuard, kGuardByte), size_(size) {}
  unsigned char* data() { return bytes_.data() + kGuard; }
  size_t size() const { return size_; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (bytes_[i] != kGuardByte || bytes_[kGuard + size_ + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  Bytes bytes_;
  size_t size_;
};

// What the connection is to make of one frame the peer sent, and what it answers.
struct Entry {
  enum class Upcall : uint8_t { kNone, kPlace, kAccess, kRmaAcked, kTxAcked };
  Header h;
  Bytes payload;  // as it is sent (whole once `whole`)
  bool whole = false;
  Upcall upcall = Upcall::kNone;
  bool closes = false;    // the connection fails at this frame (known, or decided by the owner)
  bool answered = false;  // an answer goes back (request, or message wanting an ack)
  bool resolved = false;  // what the answer holds is known
  Op reply_op = Op::kRmaAck;
  RmaStatus status = RmaStatus::kOk;
  Bytes reply;
  // A kReadReq longer than kPiece: checked whole (the owner's kCheck access); once granted
  // (`streamed`) answered in pieces, not in the order of the frames.
  bool check_only = false;
  bool streamed = false;
  size_t copied = 0;         // bytes copied into pieces so far (the owner's piece accesses)
  size_t answered_to = 0;    // bytes of pieces the peer has read
  std::deque<Bytes> pieces;  // copied, not yet read by the peer
};

// One of the endpoint's own requests.
struct MyOp {
  TxOp op;
  bool live = false;
  bool written = false;
  Bytes sent;  // the frame's payload
  Guarded result{kMaxResult};
  unsigned char buf[2 * kMaxResult] = {};
};

class Harness;

class FakeOwner final : public Owner {
 public:
  explicit FakeOwner(Harness* h) : h_(h) {}
  bool place(const Incoming& in, Placement* p) override;
  bool placed(const Incoming& in, Placement* p) override;
  void unplace(Placement*) override {
    placing_ = false;
    grant_len = 0;
  }
  bool take_retry() override { return false; }
  void inbound_ready(Connection*, const sockaddr_in&) override { fail("inbound_ready"); }
  RmaStatus remote_access(const RemoteAccess& a, void* out) override;
  bool rma_acked(const Connection* c, uint32_t seq, RmaStatus status) override;
  void tx_written(TxOp* op) override;
  void tx_lost(TxOp*, int) override { fail("tx_lost without a fault"); }
  bool tx_acked(const Connection* c, uint32_t seq, bool delivered) override;
  void abort_sends(Connection* c, int err) override;
  void cm_event(const CmEvent&) override {}
  void connection_ended() override {}
  void async_event(uint32_t) override {}
  core::NetFault take_net_fault() override { return core::NetFault::kNone; }
  bool can_free(const Connection*) override { return true; }
  bool holds(const Connection*) override { return false; }

  bool stall = false;
  bool aborted = false;
  bool placing_ = false;
  size_t grant_off = 0;  // a write being placed may change the region there
  size_t grant_len = 0;
  unsigned char cq_data[8] = {};
  unsigned char msg[kMaxMsgPlace] = {};

 private:
  Harness* h_;
};

class Harness {
 public:
  Harness(Transport* t, int listener, const sockaddr_in& at, uint8_t config, uint8_t chunk)
      : rdm_((config & 1) != 0),
        max_msg_(kMaxMsgSizes[(config >> 1) & 3]),
        virt_((config & 8) != 0),
        chunk_(chunk),
        region_(kRegionSizes[(config >> 4) & 1]),
        shadow_(region_.size()),
        model_(max_msg_),
        owner_(this),
        t_(t) {
    for (size_t i = 0; i < region_.size(); ++i) {
      region_.data()[i] = static_cast<unsigned char>(i * 7 + 1);
    }
    std::memcpy(shadow_.data(), region_.data(), region_.size());
    base_ = virt_ ? reinterpret_cast<uintptr_t>(region_.data()) : 0;
    ConnParams params;
    params.rdm = rdm_;
    params.max_msg_size = max_msg_;
    conn_ = t->make_connection(&owner_, params);
    sockaddr_in name{};
    name.sin_family = AF_INET;
    name.sin_port = htons(1);
    name.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    check(conn_->connect(at, &name, sizeof(name)) == 0, "connect");
    fd_ = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    check(fd_ >= 0, "accept");
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    // The handshake, played right: the request comes, the accept goes, kConnReady comes.
    Header req = expect_frame(Op::kConnReq);
    check(req.flags == 0, "a request with an offer or auth nobody asked for");
    Header acc;
    acc.op = Op::kConnAccept;
    send_raw(frame(acc, {}));
    expect_frame(Op::kConnReady);
    for (int i = 0; i < 1000 && !conn_->connected(); ++i) t_->progress();
    check(conn_->connected(), "not connected after kConnReady");
  }

  ~Harness() {
    conn_.reset();
    // Reset, not closed: neither side keeps the port in TIME_WAIT.
    linger l{.l_onoff = 1, .l_linger = 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close(fd_);
  }

  void record(Input& in) {
    const uint8_t t = in.u8();
    switch (t % 8) {
      case 0: {
        Header h;
        h.op = Op::kWrite;
        h.flags = in.u8();
        h.seq = in.u16();
        h.tag = key(in, t);
        h.data = addr(in);
        const Bytes payload = in.take(in.u8());
        h.length = static_cast<uint32_t>(payload.size());
        send(frame(h, payload));
        break;
      }
      case 1: {
        Header h;
        h.op = Op::kReadReq;
        h.seq = in.u16();
        h.tag = key(in, t);
        h.data = addr(in);
        const uint8_t s = in.u8();
        uint64_t len = 0;
        switch (s % 4) {
          case 0:
            len = in.u8();
            break;
          case 1:
            len = in.u64();
            break;
          case 2:
            len = region_.size();
            break;
          default:
            len = max_msg_ + 1;
            break;
        }
        Bytes payload(wire::kReadReqSize);
        wire::put_u64(payload.data(), len);
        h.length = wire::kReadReqSize;
        send(frame(h, payload));
        break;
      }
      case 2: {
        Header h;
        h.op = Op::kAtomic;
        h.seq = in.u16();
        h.tag = key(in, t);
        h.data = addr(in);
        Bytes payload = in.take(4);
        payload.resize(4);
        const uint32_t count = in.u8();
        payload.resize(wire::kAtomicDescSize);
        payload[4] = static_cast<unsigned char>(count);
        const size_t size = core::atomic_datatype_size(payload[1]);
        const size_t arrays = payload[2] == static_cast<uint8_t>(AtomicKind::kCompare) ? 2 : 1;
        const auto skew = static_cast<int8_t>(in.u8());
        const uint8_t fill = in.u8();
        int64_t len = static_cast<int64_t>(arrays * count * size) + skew;
        len = std::clamp<int64_t>(len, 0, 2 * kMaxAtomicBytes);
        for (int64_t i = 0; i < len; ++i) payload.push_back(static_cast<unsigned char>(fill + i));
        h.length = static_cast<uint32_t>(payload.size());
        send(frame(h, payload));
        break;
      }
      case 3:
        answer(in);
        break;
      case 4:
        submit(in);
        break;
      case 5: {
        Bytes hdr = in.take(wire::kHeaderSize);
        hdr.resize(wire::kHeaderSize);
        if ((t & 8) == 0) {
          hdr[0] = wire::kMagic & 0xff;
          hdr[1] = wire::kMagic >> 8;
          hdr[2] = wire::kVersion;
          hdr[3] = static_cast<unsigned char>(hdr[3] % (static_cast<uint8_t>(wire::kLastOp) + 2));
        }
        const Bytes payload = in.take(in.u8());
        hdr.insert(hdr.end(), payload.begin(), payload.end());
        send(hdr);
        break;
      }
      case 6: {
        Header h;
        h.op = (t & 8) != 0 ? Op::kMsg : Op::kWrite;
        if ((t & 16) != 0) h.flags = wire::kRemoteData;
        if (h.op == Op::kWrite) {
          h.tag = key(in, t);
          h.data = addr(in);
        }
        h.seq = in.u8();
        const size_t len = static_cast<size_t>(in.u16()) * 4;
        const uint8_t fill = in.u8();
        Bytes payload(len);
        for (size_t i = 0; i < len; ++i) payload[i] = static_cast<unsigned char>(fill + i);
        h.length = static_cast<uint32_t>(len);
        send(frame(h, payload));
        break;
      }
      default:
        switch ((t >> 3) % 4) {
          case 0:
            owner_.stall = true;
            break;
          case 1:
            unstall();
            break;
          case 2:
            round();
            break;
          default:
            for (int i = 0; i < 10; ++i) round();
            break;
        }
        break;
    }
  }

  // The end of the input: everything whole is answered, or the connection closed where it had
  // to.
  void finish() {
    unstall();
    // A round in which nothing comes back is not the end while the peer's bytes are still on
    // their way: the connection may be working through a backlog of messages it answers with
    // nothing. Calm = nothing came back, everything whole is answered, and every byte the peer
    // sent has left its socket; four calm rounds in a row end it.
    for (int i = 0, calm = 0; i < 2000 && !peer_closed_ && calm < 4; ++i) {
      const bool got = round();
      calm = !got && all_answered() && unsent() == 0 ? calm + 1 : 0;
    }
    if (peer_closed_) return;
    for (const Entry& e : entries_) check(!e.closes, "not closed after a frame that fails it");
    check(all_answered(), "whole requests left unanswered");
  }

  // Bytes the peer's socket still holds: not yet taken by the connection's side.
  int unsent() const {
    int n = 0;
    return ioctl(fd_, SIOCOUTQ, &n) == 0 ? n : 0;
  }

  // --- For the owner.

  Entry& next_upcall(Entry::Upcall want) {
    while (upcall_next_ < entries_.size()) {
      Entry& e = entries_[upcall_next_];
      check(!e.closes, "an upcall after a frame that fails the connection");
      if (e.upcall != Entry::Upcall::kNone) {
        check(e.upcall == want, "an upcall of the wrong kind for the frame");
        return e;
      }
      ++upcall_next_;
    }
    fail("an upcall for no frame");
  }
  void upcall_done() { ++upcall_next_; }
  void stream(Entry* e) { streams_.push_back(e); }
  // The access that copies the next piece of the oldest granted read still being copied.
  RmaStatus piece(const RemoteAccess& a, void* out) {
    check(copying_ < streams_.size(), "a piece access for no read granted");
    // Reads whose pieces were all copied stay in streams_ until the peer read them.
    Entry& e = *streams_[copying_];
    const size_t total = wire::get_u64(e.payload.data());
    const size_t n = std::min(kPiece, total - e.copied);
    const bool last = e.copied + n == total;
    check(a.via == conn() && !a.atomic && a.direct == nullptr && a.key == e.h.tag &&
              a.addr == e.h.data + e.copied && a.len == n && (a.part == AccessPart::kLast) == last,
          "a piece access of the wrong part of its read");
    size_t off = 0;
    check(locate(a.key, a.addr, a.len, &off) == RmaStatus::kOk,
          "a piece of a read granted whole is refused");
    std::memcpy(out, region_.data() + off, n);
    e.pieces.emplace_back(region_.data() + off, region_.data() + off + n);
    e.copied += n;
    if (last) ++copying_;
    return RmaStatus::kOk;
  }
  void check_memory() {
    check(region_.guards_intact(), "a write outside the region");
    const size_t g = owner_.grant_off;
    const size_t end = g + owner_.grant_len;
    check(std::memcmp(region_.data(), shadow_.data(), g) == 0 &&
              std::memcmp(region_.data() + end, shadow_.data() + end, region_.size() - end) == 0,
          "the region changed where nothing granted a write");
    for (MyOp& m : ops_) check(m.result.guards_intact(), "a write outside a result buffer");
    check(std::memcmp(owner_.msg, msg_shadow_, sizeof(msg_shadow_)) == 0 || owner_.placing_,
          "a message buffer written outside a placement");
  }
  // The region's bytes [off, off + len) for an access at `a` of `len` bytes: kOk, or why not.
  RmaStatus locate(uint64_t k, uint64_t a, uint64_t len, size_t* off) const {
    if (k != kKey) return RmaStatus::kBadKey;
    if (a < base_) return RmaStatus::kOutOfBounds;
    const uint64_t o = a - base_;
    if (o > region_.size() || len > region_.size() - o) return RmaStatus::kOutOfBounds;
    *off = static_cast<size_t>(o);
    return RmaStatus::kOk;
  }
  unsigned char* region() { return region_.data(); }
  unsigned char* shadow() { return shadow_.data(); }
  size_t region_size() const { return region_.size(); }
  Connection* conn() const { return conn_.get(); }
  MyOp* op_by_seq(uint32_t seq) {
    for (MyOp& m : ops_) {
      if (m.live && m.op.seq == seq) return &m;
    }
    return nullptr;
  }
  MyOp* op_by_tx(TxOp* op) {
    for (MyOp& m : ops_) {
      if (&m.op == op) return &m;
    }
    return nullptr;
  }
  void all_ops_dead() {
    for (MyOp& m : ops_) m.live = false;
  }
  unsigned char* msg_shadow() { return msg_shadow_; }

 private:
  uint64_t key(Input& in, uint8_t t) { return (t & 8) != 0 ? in.u64() : kKey; }
  uint64_t addr(Input& in) {
    const uint8_t s = in.u8();
    if ((s & 1) != 0) return in.u64();
    return base_ + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int16_t>(in.u16())));
  }

  // An answer to one of the endpoint's requests, or to none.
  void answer(Input& in) {
    static constexpr Op kOps[] = {Op::kRmaAck, Op::kReadResp, Op::kAtomicResp};
    Header h;
    h.op = kOps[in.u8() % 3];
    const uint8_t target = in.u8();
    MyOp& m = ops_[target % kMaxOps];
    h.seq = target < 0x80 ? m.op.seq : target;
    h.data = in.u8() % 8;
    const uint8_t lsel = in.u8();
    size_t len = lsel;
    if (lsel == 0xff) len = h.op == Op::kRmaAck || h.data != 0 ? 0 : m.op.result_len;
    Bytes payload = in.take(len);
    payload.resize(len, 0x77);
    h.length = static_cast<uint32_t>(len);
    send(frame(h, payload));
  }

  // The endpoint's own request, as the provider builds it (rma_ops.cc).
  void submit(Input& in) {
    const uint8_t kind = in.u8() % 3;
    const uint64_t k = key(in, in.u8());
    const uint64_t a = addr(in);
    const uint8_t size = in.u8();
    MyOp* m = nullptr;
    for (MyOp& o : ops_) {
      if (!o.live) {
        m = &o;
        break;
      }
    }
    if (m == nullptr || peer_closed_ || !conn_->open()) return;
    m->op = TxOp{};
    TxOp& op = m->op;
    op.key = k;
    op.addr = a;
    op.seq = ++seq_;
    op.conn = conn_.get();
    size_t n = 0;
    if (kind == 0) {
      op.kind = TxKind::kWrite;
      op.has_data = (size & 0x80) != 0;
      n = std::min<size_t>(size % (2 * kMaxResult), max_msg_);  // as fi_write allows it
      for (size_t i = 0; i < n; ++i) m->buf[i] = static_cast<unsigned char>(size + i);
      if (op.has_data) {
        put_prefix_u64(&op, 0xdada0000 + seq_);
        op.iov[op.iov_count++] = {op.prefix, 8};
      }
      if (n > 0) op.iov[op.iov_count++] = {m->buf, n};
    } else if (kind == 1) {
      op.kind = TxKind::kRead;
      n = size % (kMaxResult + 1);
      put_prefix_u64(&op, n);
      op.iov[op.iov_count++] = {op.prefix, 8};
      op.result_len = n;
    } else {
      op.kind = TxKind::kAtomic;
      const auto akind = static_cast<AtomicKind>(size % 3);
      const uint32_t count = 1 + (size >> 2) % 4;
      n = count * 8;
      put_prefix_atomic(&op, akind == AtomicKind::kCompare ? FI_CSWAP : FI_SUM, FI_UINT64, akind,
                        count);
      op.iov[op.iov_count++] = {op.prefix, 8};
      for (size_t i = 0; i < 2 * n; ++i) m->buf[i] = static_cast<unsigned char>(size * 3 + i);
      op.iov[op.iov_count++] = {m->buf, n};
      if (akind == AtomicKind::kCompare) op.iov[op.iov_count++] = {m->buf + n, n};
      op.result_len = akind == AtomicKind::kPlain ? 0 : n;
    }
    m->sent.clear();
    for (size_t i = 0; i < op.iov_count; ++i) {
      const auto* p = static_cast<const unsigned char*>(op.iov[i].iov_base);
      m->sent.insert(m->sent.end(), p, p + op.iov[i].iov_len);
      op.len += op.iov[i].iov_len;
    }
    if (op.result_len > 0) {
      op.result[0] = {m->result.data(), op.result_len};
      op.result_count = 1;
    }
    m->written = false;
    m->live = true;
    const Submitted sub{.op = kind == 0   ? Op::kWrite
                              : kind == 1 ? Op::kReadReq
                                          : Op::kAtomic,
                        .seq = op.seq,
                        .flags = op.has_data ? uint32_t{wire::kRemoteData} : 0u,
                        .key = op.key,
                        .addr = op.addr,
                        .payload = m->sent};
    submitted_.push_back(sub);
    if (conn_->submit(&op) != 0) {
      m->live = false;
      submitted_.pop_back();
    }
    check_memory();
  }

  void unstall() {
    if (!owner_.stall) return;
    owner_.stall = false;
    conn_->resume();
    round();
  }

  // The peer's bytes: the harness's framer says what each frame is, then they go.
  void send(const Bytes& bytes) {
    if (sent_ + bytes.size() > kMaxSent || model_.dead()) return;
    sent_ += bytes.size();
    size_t pos = 0;
    while (pos < bytes.size() && !model_.dead()) {
      if (model_.in_header()) {
        pos += model_.take_header(bytes.data() + pos, bytes.size() - pos);
        if (model_.dead()) {
          Entry e;
          e.closes = true;  // a header the parser refuses
          entries_.push_back(e);
          break;
        }
        if (model_.in_header()) continue;
        header_done(model_.header());
      } else {
        const size_t took = model_.take_payload(bytes.size() - pos);
        Entry& e = entries_.back();
        e.payload.insert(e.payload.end(), bytes.begin() + static_cast<ptrdiff_t>(pos),
                         bytes.begin() + static_cast<ptrdiff_t>(pos + took));
        pos += took;
      }
      if (model_.frame_done()) {
        frame_done(entries_.back());
        model_.next_frame();
      }
    }
    send_raw(bytes);
  }

  // A whole header: what the connection does at once.
  void header_done(const Header& h) {
    Entry e;
    e.h = h;
    if (is_handshake(h.op) || h.op == Op::kShutdown) {
      e.closes = true;  // forbidden once connected; kShutdown: the peer closed
    } else if (h.op == Op::kReadResp && !answer_in_order(h)) {
      e.closes = true;  // a piece out of the rules of wire.h: failed at its header
    } else if ((h.flags & wire::kDirect) != 0) {
      // A direct request or message: collected whole, then refused (frame_done()).
    } else if (h.op == Op::kWrite || h.op == Op::kMsg || h.op == Op::kTagged ||
               h.op == Op::kReadResp || h.op == Op::kAtomicResp) {
      e.upcall = Entry::Upcall::kPlace;
    } else if (h.op == Op::kRmaAck) {
      e.upcall = Entry::Upcall::kRmaAcked;
    } else if (h.op == Op::kAckReceived || h.op == Op::kAckDelivered) {
      e.upcall = Entry::Upcall::kTxAcked;
    }
    if (h.op == Op::kWrite && (h.flags & wire::kDirect) == 0) {
      e.answered = true;
      e.reply_op = Op::kRmaAck;
    } else if ((h.op == Op::kMsg || h.op == Op::kTagged) && (h.flags & wire::kDirect) == 0) {
      // Acknowledged if asked: delivered at once (placed() says so), or received.
      e.answered = (h.flags & (wire::kWantReceived | wire::kWantDelivered)) != 0;
      e.reply_op = (h.flags & wire::kWantDelivered) != 0 ? Op::kAckDelivered : Op::kAckReceived;
      e.resolved = true;
    }
    entries_.push_back(e);
  }

  // A whole frame: a read or an atomic goes to the owner (or is refused, or fails the
  // connection).
  void frame_done(Entry& e) {
    e.whole = true;
    const Header& h = e.h;
    if ((h.flags & wire::kDirect) != 0 && h.op != Op::kReadResp) {
      // Direct requests and messages come only from a peer proved through shared memory, which this
      // connection has none of: the connection fails.
      e.closes = true;
      return;
    }
    if (h.op == Op::kReadReq) {
      e.answered = true;
      e.reply_op = Op::kReadResp;
      const uint64_t len = wire::get_u64(e.payload.data());
      if (len > max_msg_) {
        e.resolved = true;
        e.status = RmaStatus::kOutOfBounds;
      } else {
        e.upcall = Entry::Upcall::kAccess;
        e.check_only = len > kPiece;
      }
    } else if (h.op == Op::kAtomic) {
      wire::AtomicDesc d;
      const size_t size =
          wire::decode_atomic(e.payload.data(), &d) ? core::atomic_datatype_size(d.datatype) : 0;
      const size_t arrays = d.kind == AtomicKind::kCompare ? 2 : 1;
      if (size == 0 || d.count == 0 || d.count > kMaxAtomicBytes / size ||
          h.length != wire::kAtomicDescSize + arrays * d.count * size) {
        e.closes = true;
        return;
      }
      e.answered = true;
      e.reply_op = Op::kAtomicResp;
      if (d.count * size > max_msg_) {
        e.resolved = true;
        e.status = RmaStatus::kOutOfBounds;
      } else {
        e.upcall = Entry::Upcall::kAccess;
      }
    }
  }

  // The rule of wire.h for the pieces of an answer to the endpoint's reads, as the connection
  // keeps it: whether kReadResp `h` continues the answer arriving in pieces, or begins one when
  // none is.
  bool answer_in_order(const Header& h) {
    if ((h.flags & wire::kDirect) != 0) return true;
    const bool more = (h.flags & wire::kMore) != 0;
    const bool continues = rx_open_ && h.seq == rx_seq_;
    if (continues ? h.tag != rx_next_ : h.tag != 0 || (more && rx_open_)) return false;
    if (continues || more) {
      rx_open_ = more;
      rx_seq_ = h.seq;
      rx_next_ = h.tag + h.length;
    }
    return true;
  }

  void send_raw(const Bytes& bytes) {
    size_t pos = 0;
    int idle = 0;
    while (pos < bytes.size()) {
      if (peer_closed_) return;
      size_t want = bytes.size() - pos;
      if (chunk_ != 0 && pos < 512) want = std::min<size_t>(want, chunk_);
      const ssize_t n = ::send(fd_, bytes.data() + pos, want, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        pos += static_cast<size_t>(n);
        idle = 0;
        if (chunk_ != 0 && pos < bytes.size()) round();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        // The connection is gone (reset): what it said before is still to be read.
        drain_until_closed();
        return;
      }
      // Full: the connection reads what it can; a stalled one waits for a receive.
      if (!round()) ++idle;
      if (idle > 100 && owner_.stall) unstall();
      check(idle < 10000, "the connection stopped reading");
    }
  }

  void drain_until_closed() {
    for (int i = 0; i < 1000 && !peer_closed_; ++i) round();
    check(peer_closed_, "the peer's send failed but the connection did not close");
  }

  // One progress round, then everything the connection wrote. True if anything came.
  bool round() {
    t_->progress();
    check_memory();
    bool got = false;
    unsigned char buf[65536];
    while (!peer_closed_) {
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        in_.insert(in_.end(), buf, buf + n);
        got = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      closed();
      break;
    }
    parse();
    return got;
  }

  // Reads one whole frame of `op` during the handshake.
  Header expect_frame(Op op) {
    for (int i = 0; i < 10000; ++i) {
      t_->progress();
      unsigned char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) in_.insert(in_.end(), buf, buf + n);
      check(n != 0, "closed in the handshake");
      if (in_.size() < wire::kHeaderSize) {
        if (n < 0 && i > 100) {
          pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
          poll(&p, 1, 1);
        }
        continue;
      }
      Header h;
      check(wire::decode(in_.data(), wire::kMaxConnReq, &h) == wire::Violation::kNone,
            "a bad handshake header");
      if (in_.size() < wire::kHeaderSize + h.length) continue;
      check(h.op == op, "an unexpected handshake frame");
      in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(wire::kHeaderSize + h.length));
      return h;
    }
    fail("the handshake did not finish");
  }

  void parse() {
    size_t at = 0;
    while (in_.size() - at >= wire::kHeaderSize) {
      Header h;
      const wire::Violation v = wire::decode(in_.data() + at, max_msg_, &h);
      if (v != wire::Violation::kNone) {
        std::fprintf(stderr, "conn_fuzz: %s\n", wire::violation_str(v));
        fail("the connection wrote a header that does not decode");
      }
      if (in_.size() - at - wire::kHeaderSize < h.length) break;
      const unsigned char* p = in_.data() + at + wire::kHeaderSize;
      const Bytes payload(p, p + h.length);
      at += wire::kHeaderSize + h.length;
      if (is_answer(h.op) || h.op == Op::kAckReceived || h.op == Op::kAckDelivered) {
        got_answer(h, payload);
      } else if (is_request(h.op)) {
        got_request(h, payload);
      } else {
        fail("the connection wrote a frame nobody asked for");
      }
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(at));
  }

  void got_answer(const Header& h, const Bytes& payload) {
    if (h.op == Op::kReadResp && ((h.flags & wire::kMore) != 0 || h.tag != 0)) {
      got_piece(h, payload);
      return;
    }
    while (answer_next_ < entries_.size()) {
      const Entry& e = entries_[answer_next_];
      check(!e.closes, "an answer to a frame after one that fails the connection");
      if (e.answered) break;
      ++answer_next_;
    }
    check(answer_next_ < entries_.size(), "an answer to no request");
    Entry& e = entries_[answer_next_++];
    if (tracing()) {
      std::fprintf(stderr, "answer op %d seq %u status %llu length %u\n", static_cast<int>(h.op),
                   h.seq, static_cast<unsigned long long>(h.data), h.length);
    }
    check(e.whole || e.h.op == Op::kMsg || e.h.op == Op::kTagged, "an answer before the frame");
    check(e.resolved, "an answer before the owner gave one");
    check(h.op == e.reply_op && h.seq == e.h.seq, "an answer of the wrong op or seq");
    check(h.flags == 0 && h.tag == 0, "an answer with flags or a tag");
    if (h.op == Op::kAckReceived || h.op == Op::kAckDelivered) return;
    check(h.data == static_cast<uint64_t>(e.status), "an answer with the wrong status");
    if (e.status != RmaStatus::kOk) check(h.length == 0, "a refusal with a payload");
    check(payload == e.reply, "an answer whose bytes are not the owner's");
  }

  // A piece of the answer to the oldest read granted and not yet answered whole.
  void got_piece(const Header& h, const Bytes& payload) {
    if (tracing()) {
      std::fprintf(stderr, "piece seq %u at %llu length %u%s\n", h.seq,
                   static_cast<unsigned long long>(h.tag), h.length,
                   (h.flags & wire::kMore) != 0 ? " more" : "");
    }
    check(!streams_.empty(), "a piece of no read answered in pieces");
    Entry& e = *streams_.front();
    check(h.seq == e.h.seq && h.data == 0, "a piece of another read, or a refused one");
    check(h.tag == e.answered_to, "a piece out of order");
    check(!e.pieces.empty() && payload == e.pieces.front(),
          "a piece whose bytes are not those its access copied");
    e.pieces.pop_front();
    e.answered_to += payload.size();
    const size_t total = wire::get_u64(e.payload.data());
    const bool last = e.answered_to == total;
    check(((h.flags & wire::kMore) == 0) == last, "kMore on the last piece, or not on another");
    if (last) {
      streams_.pop_front();
      --copying_;  // it was copied whole before its last piece could be read
    }
  }

  // The endpoint's requests, in the order it submitted them, as it submitted them.
  void got_request(const Header& h, const Bytes& payload) {
    check(!submitted_.empty(), "a request the endpoint did not make");
    const Submitted want = submitted_.front();
    submitted_.pop_front();
    check(h.op == want.op && h.seq == want.seq && h.tag == want.key && h.data == want.addr,
          "a request misnamed");
    check(h.flags == want.flags, "a request with the wrong flags");
    check(payload == want.payload, "a request whose bytes are not the endpoint's");
  }

  void closed() {
    peer_closed_ = true;
    if (tracing()) std::fprintf(stderr, "closed\n");
    // A frame that fails it came, and no answer to a later one did. (Answers to earlier ones
    // still unwritten when it failed are lost with it.)
    bool cause = false;
    for (size_t i = answer_next_; i < entries_.size() && !cause; ++i) cause = entries_[i].closes;
    check(cause, "closed without a cause");
    check(owner_.aborted, "closed and the owner never heard");
  }

  bool all_answered() {
    for (size_t i = answer_next_; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      if (e.answered && e.whole) return false;
    }
    return streams_.empty();
  }

  const bool rdm_;
  const size_t max_msg_;
  const bool virt_;
  const size_t chunk_;
  Guarded region_;
  Bytes shadow_;
  uintptr_t base_ = 0;
  wire::Framer model_;
  FakeOwner owner_;
  Transport* t_;
  std::unique_ptr<Connection> conn_;
  int fd_ = -1;
  Bytes in_;
  size_t sent_ = 0;
  bool peer_closed_ = false;
  std::deque<Entry> entries_;
  size_t upcall_next_ = 0;
  size_t answer_next_ = 0;
  // Reads granted to be answered in pieces, in that order; the front one's pieces are copied
  // (and read) first. Entries are never removed from entries_, so these stay valid.
  std::deque<Entry*> streams_;
  size_t copying_ = 0;  // of streams_: the one whose pieces are being copied
  // The answer to one of the endpoint's reads arriving in pieces (answer_in_order()).
  bool rx_open_ = false;
  uint32_t rx_seq_ = 0;
  uint64_t rx_next_ = 0;
  MyOp ops_[kMaxOps];
  struct Submitted {
    Op op;
    uint32_t seq;
    uint32_t flags;
    uint64_t key;
    uint64_t addr;
    Bytes payload;
  };
  std::deque<Submitted> submitted_;  // the endpoint's requests the peer has not read yet
  uint32_t seq_ = 0;
  unsigned char msg_shadow_[kMaxMsgPlace] = {};

  friend class FakeOwner;
};

// --- The owner: one region, checked as the provider's endpoint checks its regions.

bool FakeOwner::place(const Incoming& in, Placement* p) {
  Entry& e = h_->next_upcall(Entry::Upcall::kPlace);
  const Header& h = e.h;
  check(in.via == h_->conn() && in.seq == h.seq && in.len == h.length, "place: wrong frame");
  check(in.has_data == ((h.flags & wire::kRemoteData) != 0), "place: has_data");
  if (stall) return false;
  p->iov_count = 0;
  p->capacity = 0;
  placing_ = true;
  switch (in.kind) {
    case InKind::kMsg: {
      check(h.op == Op::kMsg || h.op == Op::kTagged, "place: a message that is not one");
      check(in.tagged == (h.op == Op::kTagged) && in.tag == h.tag, "place: tag");
      check(in.data == (in.has_data ? h.data : 0), "place: CQ data");
      p->iov[p->iov_count++] = {msg, kMaxMsgPlace};
      p->capacity = kMaxMsgPlace;
      return true;
    }
    case InKind::kWrite: {
      check(h.op == Op::kWrite && in.key == h.tag && in.addr == h.data, "place: a write");
      const size_t prefix = in.has_data ? 8 : 0;
      if (in.len < prefix) {
        e.closes = true;  // too short for its CQ data: the connection fails
        p->bad = true;
        placing_ = false;
        return true;
      }
      if (prefix != 0) p->iov[p->iov_count++] = {cq_data, prefix};
      p->capacity = prefix;
      size_t off = 0;
      p->status = h_->locate(in.key, in.addr, in.len - prefix, &off);
      if (p->status != RmaStatus::kOk) return true;  // read and dropped, then refused
      if (in.len > prefix) p->iov[p->iov_count++] = {h_->region() + off, in.len - prefix};
      p->capacity = in.len;
      // The write is granted [off, off + n): the region may change there until placed().
      grant_off = off;
      grant_len = in.len - prefix;
      return true;
    }
    default: {
      const bool read = in.kind == InKind::kReadResp;
      check(h.op == (read ? Op::kReadResp : Op::kAtomicResp), "place: an answer");
      check(static_cast<uint64_t>(in.status) == h.data && in.key == 0, "place: the status");
      check(in.offset == (read && !in.direct ? h.tag : 0), "place: a piece's offset");
      check(in.more == ((h.flags & wire::kMore) != 0), "place: more pieces");
      MyOp* m = h_->op_by_seq(in.seq);
      const TxKind want = read ? TxKind::kRead : TxKind::kAtomic;
      // A refusal carries no bytes; otherwise they lie inside the result, the last piece (or
      // the whole answer) ending at its end.
      const size_t result = m != nullptr ? m->op.result_len : 0;
      const bool fits = in.status != RmaStatus::kOk
                            ? in.len == 0 && !in.more
                            : in.offset <= result && in.len <= result - in.offset &&
                                  (in.more || in.offset + in.len == result);
      // No request of this endpoint is direct (no shared memory): a direct answer answers none.
      if (m == nullptr || !m->written || m->op.kind != want || !fits || in.direct) {
        e.closes = true;  // an answer to no request: the connection fails
        p->bad = true;
        placing_ = false;
        return true;
      }
      if (result > 0) p->iov[p->iov_count++] = {m->result.data(), result};
      p->capacity = in.offset + in.len;
      return true;
    }
  }
}

bool FakeOwner::placed(const Incoming& in, Placement* p) {
  Entry& e = h_->next_upcall(Entry::Upcall::kPlace);
  check(e.whole && e.payload.size() == in.len, "placed: before the frame is whole");
  placing_ = false;
  grant_len = 0;
  h_->upcall_done();
  switch (in.kind) {
    case InKind::kMsg: {
      const size_t n = std::min(in.len, kMaxMsgPlace);
      check(n == 0 || std::memcmp(msg, e.payload.data(), n) == 0, "placed: a message's bytes");
      std::memcpy(h_->msg_shadow(), msg, sizeof(msg));
      return true;
    }
    case InKind::kWrite: {
      const size_t prefix = in.has_data ? 8 : 0;
      check(prefix == 0 || std::memcmp(cq_data, e.payload.data(), 8) == 0, "placed: CQ data");
      e.status = p->status;
      e.resolved = true;
      if (p->status == RmaStatus::kOk) {
        size_t off = 0;
        check(h_->locate(in.key, in.addr, in.len - prefix, &off) == RmaStatus::kOk, "placed");
        if (in.len > prefix) {
          std::memcpy(h_->shadow() + off, e.payload.data() + prefix, in.len - prefix);
        }
      }
      h_->check_memory();
      return true;
    }
    default: {
      MyOp* m = h_->op_by_seq(in.seq);
      check(m != nullptr, "placed: an answer to nothing");
      check(in.len == 0 || std::memcmp(m->result.data() + in.offset, e.payload.data(), in.len) == 0,
            "placed: an answer's bytes");
      if (!in.more) m->live = false;  // a piece: the read goes on
      h_->check_memory();
      return true;
    }
  }
}

RmaStatus FakeOwner::remote_access(const RemoteAccess& a, void* out) {
  if (a.part == AccessPart::kPiece || a.part == AccessPart::kLast) return h_->piece(a, out);
  Entry& e = h_->next_upcall(Entry::Upcall::kAccess);
  const Header& h = e.h;
  check(e.whole && a.via == h_->conn() && a.key == h.tag && a.addr == h.data, "access: frame");
  h_->upcall_done();
  e.resolved = true;
  check((a.part == AccessPart::kCheck) == e.check_only,
        "access: a read checked whole that is not longer than a piece, or the reverse");
  if (h.op == Op::kReadReq) {
    check(!a.atomic && a.len == wire::get_u64(e.payload.data()), "access: a read's length");
  } else {
    wire::AtomicDesc d;
    check(wire::decode_atomic(e.payload.data(), &d), "access: an atomic's description");
    const size_t size = core::atomic_datatype_size(d.datatype);
    check(a.atomic && a.op == d.op && a.datatype == d.datatype && a.kind == d.kind &&
              a.count == d.count && a.len == d.count * size,
          "access: an atomic's fields");
    const unsigned char* operand = e.payload.data() + wire::kAtomicDescSize;
    check(std::memcmp(a.operand, operand, a.len) == 0, "access: the operands");
    check((a.compare == nullptr) == (d.kind != AtomicKind::kCompare), "access: compare");
    check(a.compare == nullptr || std::memcmp(a.compare, operand + a.len, a.len) == 0,
          "access: the compare values");
  }
  size_t off = 0;
  RmaStatus status = h_->locate(a.key, a.addr, a.len, &off);
  if (status == RmaStatus::kOk && a.atomic && !core::atomic_valid(a.kind, a.op, a.datatype)) {
    status = RmaStatus::kBadAtomic;
  }
  e.status = status;
  if (status != RmaStatus::kOk) return status;
  if (e.check_only) {
    // Granted: answered in pieces, out of the frames' order (Harness::piece(), got_piece()).
    e.answered = false;
    e.streamed = true;
    h_->stream(&e);
    return status;
  }
  unsigned char* at = h_->region() + off;
  if (!a.atomic) {
    if (a.len > 0) std::memcpy(out, at, a.len);
    e.reply.assign(at, at + a.len);
    return status;
  }
  const bool fetch = a.kind != AtomicKind::kPlain;
  Bytes before(at, at + a.len);
  core::atomic_apply(a.kind, a.op, a.datatype, at, a.operand, a.compare, fetch ? out : nullptr,
                     a.count);
  std::memcpy(h_->shadow() + off, at, a.len);
  if (fetch) {
    const auto* o = static_cast<const unsigned char*>(out);
    e.reply.assign(o, o + a.len);
    check(e.reply == before, "access: an atomic fetched other than the previous values");
  }
  return status;
}

bool FakeOwner::rma_acked(const Connection* c, uint32_t seq, RmaStatus status) {
  Entry& e = h_->next_upcall(Entry::Upcall::kRmaAcked);
  check(c == h_->conn() && seq == e.h.seq && static_cast<uint64_t>(status) == e.h.data,
        "rma_acked: wrong frame");
  check(e.whole, "rma_acked: before the frame");
  MyOp* m = h_->op_by_seq(seq);
  if (m == nullptr || !m->written || m->op.kind != TxKind::kWrite) {
    e.closes = true;  // an answer to no write: the connection fails
    return false;
  }
  h_->upcall_done();
  m->live = false;
  return true;
}

void FakeOwner::tx_written(TxOp* op) {
  MyOp* m = h_->op_by_tx(op);
  check(m != nullptr && m->live && !m->written, "tx_written: not a request in flight");
  m->written = true;
}

bool FakeOwner::tx_acked(const Connection* c, uint32_t seq, bool delivered) {
  Entry& e = h_->next_upcall(Entry::Upcall::kTxAcked);
  check(c == h_->conn() && seq == e.h.seq && delivered == (e.h.op == Op::kAckDelivered),
        "tx_acked: wrong frame");
  e.closes = true;  // the endpoint sends no messages: an acknowledgement of nothing
  return false;
}

void FakeOwner::abort_sends(Connection* c, int) {
  check(c == h_->conn(), "abort_sends: another connection");
  aborted = true;
  h_->all_ops_dead();
}

struct World {
  Transport* t = nullptr;
  int listener = -1;
  sockaddr_in at{};
};

World& world() {
  static World w = [] {
    World x;
    TransportConfig config;
    config.shm = false;
    config.keepalive_ms = 0;
    config.connect_timeout_ms = 1000000;
    config.read_piece = kPiece;
    x.t = make_tcp_transport(config).release();  // for the whole run
    x.listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    x.at.sin_family = AF_INET;
    x.at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof(x.at);
    check(x.listener >= 0 && bind(x.listener, reinterpret_cast<sockaddr*>(&x.at), l) == 0 &&
              listen(x.listener, 16) == 0 &&
              getsockname(x.listener, reinterpret_cast<sockaddr*>(&x.at), &l) == 0,
          "the peer's listener");
    return x;
  }();
  return w;
}

void run(const uint8_t* data, size_t size) {
  if (size < 2) return;
  World& w = world();
  Harness h(w.t, w.listener, w.at, data[0], data[1]);
  Input in{data + 2, size - 2};
  while (in.n > 0) h.record(in);
  h.finish();
}

}  // namespace
}  // namespace fabq::xport

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::xport::run(data, size);
  return 0;
}
