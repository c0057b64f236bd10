#include "xport/conn.h"

#include <arpa/inet.h>
#include <rdma/fi_eq.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/atomic_op.h"
#include "core/sockaddr.h"
#include "fabq/fi_fabq.h"
#include "xport/listener.h"
#include "xport/socket_util.h"

namespace fabq::xport {
namespace {

// Small enough that the payload of a large message mostly goes straight into the receive
// buffer (kDirectRead) instead of through this one; large enough to take many small frames
// in one recv().
constexpr size_t kReadBuffer = 16 * 1024;
// Payloads at least this large are read straight into the receive buffer, skipping a copy.
constexpr size_t kDirectRead = 16 * 1024;
// Control frames owed to the peer beyond this (and beyond the piece of a read's answer that may
// wait beside them): stop reading until they are written.
constexpr size_t kCtrlBacklog = 64 * 1024;
// Control frames' memory kept between answers; more (a large piece's) is given back.
constexpr size_t kCtrlKeep = 8 << 20;
constexpr size_t kSendRing = 1024;
constexpr int kIovBatch = 16;
constexpr uint32_t kIn = EPOLLIN;
constexpr uint32_t kOut = EPOLLOUT;
// The peer's end of the socket closed, or the socket failed.
constexpr uint32_t kHup = EPOLLRDHUP | EPOLLHUP | EPOLLERR;
// An answer's payload in the ring from this size on is asked for whole before it is copied out
// (prefetch_answer()), up to kPrefetchMax bytes.
constexpr size_t kPrefetchMin = 1024;
constexpr size_t kPrefetchMax = 16 * 1024;

// The lines of a payload the other core has just written into the ring, requested at once: the
// hardware prefetcher starts only after a few misses in a row, so a lone message would otherwise
// cross over mostly one line at a time (4 KiB ping-pong 1.46-1.51 -> 1.32-1.35 us on the EPYC
// VM). Only for an answer (Conn::heard_ false): in a stream the hardware prefetcher is already
// running, and the extra requests made 4 KiB streams 8 % slower.
void prefetch_answer(const unsigned char* p, size_t n) {
  if (n < kPrefetchMin) return;
  n = std::min(n, kPrefetchMax);
  for (size_t i = 0; i < n; i += 64) {
    __builtin_prefetch(p + i);
    // GCC 12 deletes a loop of prefetches it can prove finite; the empty asm keeps it.
    asm volatile("" : : "r"(p + i));
  }
}

bool is_data(wire::Op op) {
  return op == wire::Op::kMsg || op == wire::Op::kTagged;
}

bool is_direct(const wire::Header& h) {
  return (h.flags & wire::kDirect) != 0;
}

AckWanted ack_wanted(const wire::Header& h) {
  return (h.flags & wire::kWantDelivered)  ? AckWanted::kDelivered
         : (h.flags & wire::kWantReceived) ? AckWanted::kReceived
                                           : AckWanted::kNone;
}

// Frames whose payload the owner places (Owner::place) as it arrives: messages, remote writes,
// and the answers to this side's reads and atomics; not direct ones, which carry no bytes.
bool is_placed(const wire::Header& h) {
  return ((is_data(h.op) || h.op == wire::Op::kWrite) && !is_direct(h)) ||
         h.op == wire::Op::kReadResp || h.op == wire::Op::kAtomicResp;
}

// Frames whose payload the connection collects whole before acting on it.
bool is_collected_request(const wire::Header& h) {
  return h.op == wire::Op::kReadReq || h.op == wire::Op::kAtomic ||
         ((h.op == wire::Op::kWrite || is_data(h.op)) && is_direct(h));
}

// The initiator's buffers of a direct request, copied by the kernel (xport/shm.h PeerMemory).
class DirectRequest final : public DirectCopy {
 public:
  DirectRequest(int pid, bool write, size_t len) : peer_(pid), write_(write), len_(len) {}
  // From `min` bytes on, offers the initiator the second part of request `seq` through `seg`
  // (shm.h "Sharing a copy"); `fd` is the connection's socket, whose end says the peer is gone.
  void share(shm::Segment* seg, bool connecting, uint32_t seq, size_t min, int fd) {
    seg_ = seg;
    connecting_ = connecting;
    seq_ = seq;
    share_min_ = min;
    fd_ = fd;
  }
  bool copy(void* at) const override {
    auto* here = static_cast<unsigned char*>(at);
    // The part begins at a page boundary of this side near the middle: each side pins whole
    // pages of the other's.
    const uintptr_t mid = (reinterpret_cast<uintptr_t>(here) + len_ / 2) & ~uintptr_t{4095};
    const size_t head = mid > reinterpret_cast<uintptr_t>(here)
                            ? static_cast<size_t>(mid - reinterpret_cast<uintptr_t>(here))
                            : 0;
    if (seg_ == nullptr || share_min_ == 0 || len_ < share_min_ || head == 0) {
      return move(here, 0, len_);
    }
    const uint64_t offered = seg_->offer_share(
        connecting_, {.seq = seq_, .offset = head, .addr = mid, .len = len_ - head});
    const bool first = move(here, 0, head);
    switch (seg_->settle_share(connecting_, offered, fd_)) {
      case shm::ShareEnd::kDone:
        return first;
      case shm::ShareEnd::kStuck:
        stuck_ = true;
        return false;
      default:
        return move(here + head, head, len_ - head) && first;
    }
  }
  // The initiator claimed a part and ended without finishing it: the connection must end.
  bool stuck() const { return stuck_; }
  // Bytes [0, n) of the initiator's buffers into `into` (count ranges here), without sharing.
  bool copy_prefix(const iovec* into, size_t count, size_t n) const {
    iovec part[wire::kMaxDirectEntries];
    const size_t k = shm::slice(iov_, count_, 0, n, part);
    return peer_.readv(into, count, part, k, n);
  }
  // Takes the entries of a direct request's payload: false unless they sum to the read's
  // length (a write's length is their sum) and that is at most max_len.
  bool parse(const unsigned char* p, size_t bytes, size_t max_len) {
    count_ = bytes / wire::kDirectEntrySize;
    size_t sum = 0;
    for (size_t i = 0; i < count_; ++i, p += wire::kDirectEntrySize) {
      const uint64_t addr = wire::get_u64(p);
      const uint64_t n = wire::get_u64(p + 8);
      if (n > max_len - sum) return false;  // also keeps the sum from wrapping
      sum += static_cast<size_t>(n);
      iov_[i] = {reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), static_cast<size_t>(n)};
    }
    if (write_) len_ = sum;
    return sum == len_;
  }
  size_t len() const { return len_; }

 private:
  // Bytes [off, off + n) of the initiator's buffers to or from `at`.
  bool move(unsigned char* at, size_t off, size_t n) const {
    iovec part[wire::kMaxDirectEntries];
    const size_t k = shm::slice(iov_, count_, off, n, part);
    return write_ ? peer_.read(at, n, part, k) : peer_.write(at, n, part, k);
  }

  shm::PeerMemory peer_;
  bool write_;
  size_t len_;
  iovec iov_[wire::kMaxDirectEntries];
  size_t count_ = 0;
  shm::Segment* seg_ = nullptr;
  bool connecting_ = false;
  uint32_t seq_ = 0;
  size_t share_min_ = 0;
  int fd_ = -1;
  mutable bool stuck_ = false;
};
static_assert(wire::kMaxDirectEntries <= shm::kMaxPeerRanges);
static_assert(sizeof(TxOp::direct_desc) == wire::kMaxDirectEntries * wire::kDirectEntrySize);

}  // namespace

// --- Conn

Conn::Conn(Engine* engine, Owner* owner, const ConnParams& params, core::UniqueFd fd)
    : engine_(engine),
      owner_(owner),
      params_(params),
      rdm_(params.rdm),
      hs_(params.rdm, params.auth),
      fd_(std::move(fd)),
      framer_(params.max_msg_size),
      rbuf_(new unsigned char[kReadBuffer]),
      req_buf_(new unsigned char[wire::kAtomicDescSize + 2 * kMaxAtomicBytes]),
      sendq_(kSendRing, nullptr) {
  ctrl_.reserve(4096);
}

Conn::~Conn() {
  if (left_engine_) return;
  core::MutexLock elock(engine_->mu());
  leave_engine_locked(engine_);
}

void Conn::leave_engine_locked(Engine* engine) {
  assert(engine == engine_);
  core::MutexLock lock(mu_);
  // Destroyed inside a message (its endpoint is closing): the receive it was filling goes back.
  if (have_place_ && owner() != nullptr) owner()->unplace(&place_);
  have_place_ = false;
  if (fd_.valid() && registered_) engine->remove_fd(fd_.get());
  engine->unschedule(this);  // its calls and its deadline
  engine->forget_shm(this);  // the mapping goes with the members, once no round can see it
  engine->forget_hot(this);
  fd_.reset();
  left_engine_ = true;
}

void Conn::close_socket_locked() {
  if (have_place_ && owner() != nullptr) {
    // Closed inside a message: whatever receive it was filling is not lost.
    owner()->unplace(&place_);
    have_place_ = false;
  }
  if (fd_.valid()) {
    engine_->remove(fd_.get(), this);
    registered_ = false;
    interest_ = 0;
    // The fd stays open until the Conn is destroyed: a readiness report already in flight
    // for it must not reach a reused descriptor. Shutting it down makes it inert.
    ::shutdown(fd_.get(), SHUT_RDWR);
  }
  engine_->set_deadline(this, 0);
  set_state(hs_.close());
  if (shm_agreed_) {
    engine_->remove_shm(this);
    shm_rx_open_.store(false, std::memory_order_relaxed);
    shm_tx_blocked_.store(false, std::memory_order_relaxed);
  }
  seg_.unlink();     // a handshake cut short: the name must not outlive it
  share_count_ = 0;  // its ops end with the connection
  shares_waiting_.store(false, std::memory_order_relaxed);
  // Ended before it was handed over: its acceptor frees it (at the end of this round).
  if (acceptor_ != nullptr) acceptor_->reap(this);
}

void Conn::want_write_locked(bool on) {
  if (writing_ == on) return;
  writing_ = on;
  update_interest_locked();
}

// The socket is in the epoll set exactly while there is something to wait for. Out of it, a
// peer's hang-up is not reported either: a stalled or pending connection whose peer left does
// not make the progress thread spin; it is looked at again when it is resumed.
//
// Once frames go through shared memory, the socket carries doorbells for both directions: it
// is read while it is open, stalled or not, and never waited on for writing.
void Conn::update_interest_locked() {
  if (!fd_.valid()) return;
  const State s = state();
  const bool open = s != State::kClosed && s != State::kIdle;
  if (shm_agreed_) {
    const bool rx_open = open && rx_shm_ && !stalled_;
    if (rx_open && !shm_rx_open_.exchange(true, std::memory_order_relaxed)) {
      // The progress thread may be asleep without having asked this ring for a doorbell.
      engine_->kick_if_waiting();
    } else if (!rx_open) {
      shm_rx_open_.store(false, std::memory_order_relaxed);
    }
  }
  const bool reading =
      open && (rx_shm_ || tx_shm_ ? !peer_eof_ : !stalled_ && s != State::kPending);
  // A stalled socket is listened to for its peer's leaving alone (once: epoll keeps reporting
  // it), so that a peer gone meanwhile does not keep its descriptor until the stall ends
  // (left_while_stalled_locked()). Through shared memory the socket is read anyway.
  const bool hup_watch = open && !reading && stalled_ && !peer_hup_ && !rx_shm_ && !tx_shm_;
  const bool waiting_out = open && !tx_shm_ && (writing_ || s == State::kConnecting);
  const uint32_t want =
      (reading ? kIn : 0) | (waiting_out ? kOut : 0) | (hup_watch ? uint32_t{EPOLLRDHUP} : 0);
  if (want == interest_ && registered_ == (want != 0)) return;
  if (want == 0) {
    if (registered_) engine_->remove_fd(fd_.get());
    registered_ = false;
  } else if (!registered_) {
    registered_ = engine_->add(fd_.get(), this, want);
  } else {
    engine_->modify(fd_.get(), this, want);
  }
  interest_ = want;
}

void Conn::queue_ctrl_locked(wire::Op op, uint32_t seq, const void* data, size_t len,
                             uint32_t flags, uint64_t tag, uint64_t hdata) {
  wire::Header h;
  h.op = op;
  h.seq = seq;
  h.length = static_cast<uint32_t>(len);
  h.flags = flags;
  h.tag = tag;
  h.data = hdata;
  unsigned char hdr[wire::kHeaderSize];
  wire::encode(h, hdr);
  ctrl_.insert(ctrl_.end(), hdr, hdr + sizeof(hdr));
  if (len > 0) {
    const auto* p = static_cast<const unsigned char*>(data);
    ctrl_.insert(ctrl_.end(), p, p + len);
  }
}

int Conn::shutdown() {
  core::MutexLock lock(mu_);
  if (reported_ && was_connected_) return 0;  // already shut down, by the peer or by us
  if (state() != State::kConnected) return -FI_ENOTCONN;
  if (shutting_) return 0;
  shutting_ = true;
  flush_locked();
  return 0;
}

int Conn::submit(TxOp* op) {
  core::MutexLock lock(mu_);
  // An RDM connection queues sends until it is established.
  if (shutting_ || (rdm_ ? state() == State::kClosed : state() != State::kConnected)) {
    return -FI_ENOTCONN;
  }
  if (send_count_ == sendq_.size()) return -FI_EAGAIN;  // the transmit ring is no larger
  touch();
  wire::Header h;
  h.length = static_cast<uint32_t>(op->len);
  h.seq = op->seq;
  switch (op->kind) {
    case TxKind::kSend:
      h.op = op->tagged ? wire::Op::kTagged : wire::Op::kMsg;
      h.tag = op->tag;
      if (op->has_data) {
        h.flags |= wire::kRemoteData;
        h.data = op->data;
      }
      if (op->level == TxLevel::kTransmit) h.flags |= wire::kWantReceived;
      if (op->level == TxLevel::kDelivery) h.flags |= wire::kWantDelivered;
      break;
    case TxKind::kWrite:
    case TxKind::kRead:
    case TxKind::kAtomic:
      h.op = op->kind == TxKind::kWrite  ? wire::Op::kWrite
             : op->kind == TxKind::kRead ? wire::Op::kReadReq
                                         : wire::Op::kAtomic;
      h.tag = op->key;
      h.data = op->addr;
      if (op->kind == TxKind::kWrite && op->has_data) h.flags |= wire::kRemoteData;
      break;
  }
  // An RDM connection still in its handshake does not know yet whether it will have shared
  // memory: a read queued meanwhile (the first window of an application's reads, say) is made
  // direct, if it may be, when it is written; else its answer would come in pieces (a read
  // longer than a piece) while the direct reads after it go first. Writes and messages keep to
  // the ring then, where the copy choice begins its measurements (copy_choice.h).
  op->decide_later = state() != State::kConnected && op->kind == TxKind::kRead;
  op->direct = !op->decide_later && go_direct_locked(op, &h);
  heard_ = false;
  op->shared = false;
  wire::encode(h, op->header);
  op->written = 0;
  op->accepted = true;
  switch (owner()->take_net_fault()) {
    case core::NetFault::kDrop:
      // Injected loss: the message never reaches the peer.
      owner()->tx_lost(op, FI_ETIMEDOUT);
      return 0;
    case core::NetFault::kCorrupt:
      // Injected damage: the peer sees a header that is not fabq's and fails the connection.
      op->header[0] ^= 0xff;
      op->decide_later = false;
      break;
    default:
      break;
  }
  if (op->direct) record_share_locked(op);
  sendq_[(send_head_ + send_count_) % sendq_.size()] = op;
  ++send_count_;
  if (!writing_ || send_count_ == 1) flush_locked();
  return 0;
}

InlineResult Conn::send_inline(const InlineSend& s) {
  core::MutexLock lock(mu_);
  // Only where nothing could be ahead of it: what submit() queued is written first.
  if (!tx_shm_ || shutting_ || state() != State::kConnected || send_count_ != 0 || mid_frame_ ||
      tx_switch_pending_ || ctrl_off_ < ctrl_.size() || s.iov_count > kMaxIov) {
    return InlineResult::kQueue;
  }
  heard_ = false;
  touch();
  wire::Header h;
  h.op = s.tagged ? wire::Op::kTagged : wire::Op::kMsg;
  h.length = static_cast<uint32_t>(s.len);
  h.tag = s.tagged ? s.tag : 0;
  if (s.has_data) {
    h.flags |= wire::kRemoteData;
    h.data = s.data;
  }
  // seq names a send to its answers; this one asks for none.
  bool bell = false;
  unsigned char* at = nullptr;
  if (s.iov_count <= 1 && tx_ring_.claim(wire::kHeaderSize + s.len, &at) == shm::Status::kOk &&
      at != nullptr) {
    // Built where the peer reads it: no copy of the header on the way.
    wire::encode(h, at);
    if (s.len > 0) std::memcpy(at + wire::kHeaderSize, s.iov[0].iov_base, s.len);
    tx_ring_.commit(wire::kHeaderSize + s.len, &bell);
    if (bell) doorbell_locked();
    return InlineResult::kSent;
  }
  unsigned char header[wire::kHeaderSize];
  wire::encode(h, header);
  iovec iov[1 + kMaxIov];
  iov[0] = {header, sizeof(header)};
  for (size_t i = 0; i < s.iov_count; ++i) iov[1 + i] = s.iov[i];
  bool written = false;
  if (tx_ring_.write_whole(iov, static_cast<int>(1 + s.iov_count), &written, &bell) !=
      shm::Status::kOk) {
    fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "the peer corrupted a shared ring");
    return InlineResult::kQueue;  // submit() finds it closed
  }
  if (!written) return InlineResult::kQueue;
  if (bell) doorbell_locked();
  return InlineResult::kSent;
}

// A message of at least direct_msg_min bytes (direct_msg_idle_min on an idle connection), a
// write (without CQ data) or a read of at least direct_min, to a peer that serves direct
// requests: its frame describes its buffers instead of carrying their bytes.
bool Conn::go_direct_locked(TxOp* op, wire::Header* h) {
  const TransportConfig& config = engine_->config();
  const bool send = op->kind == TxKind::kSend;
  const size_t min = send ? config.direct_msg_min : config.direct_min;
  const bool write = (op->kind == TxKind::kWrite && !op->has_data) || send;
  const bool read = op->kind == TxKind::kRead && op->iov_count == 1;
  if (!shm_agreed_ || min == 0 || !(write || read)) return false;
  const iovec* bufs = write ? op->iov : op->result;
  const size_t count = write ? op->iov_count : op->result_count;
  const size_t len = write ? op->len : op->result_len;
  if (count > wire::kMaxDirectEntries || !seg_.peer_serves(shm_connecting_)) return false;
  // A message that answers the peer's, on a connection with nothing else on its way (no send
  // queued, the ring read to its end, which includes the copy of an earlier direct message,
  // but for the acknowledgement of the peer's last one), may go direct from a lower size:
  // alone, one copy on the receiver's core may be faster than the ring's two, which pay off
  // when messages follow one another and the two cores copy at once.
  const bool idle = len < min;
  if (idle && !(send && config.direct_msg_idle_min != 0 && len >= config.direct_msg_idle_min &&
                heard_ && send_count_ == 0)) {
    return false;
  }
  // Either way works from here: the one the receiver measured faster (xport/copy_choice.h).
  // The ring's head, a line of the peer's, is read only when the turn is the direct way's; a
  // ring the peer has not read keeps the turn for the next message.
  const auto alone = [&] { return !idle || tx_ring_.unread_at_most(wire::kHeaderSize); };
  if (write && config.adapt_copies) {
    if (planner_.choose(len, seg_.peer_advice(shm_connecting_), alone) == CopyPath::kRing) {
      return false;
    }
  } else if (!alone()) {
    return false;
  }
  size_t entries = 0;
  for (size_t i = 0; i < count; ++i) {
    if (bufs[i].iov_len == 0) continue;
    unsigned char* e = op->direct_desc + entries++ * wire::kDirectEntrySize;
    wire::put_u64(e, reinterpret_cast<uintptr_t>(bufs[i].iov_base));
    wire::put_u64(e + 8, bufs[i].iov_len);
  }
  const iovec desc{op->direct_desc, entries * wire::kDirectEntrySize};
  op->iov[write ? 0 : 1] = desc;  // a read keeps its length first
  op->iov_count = write ? 1 : 2;
  op->len = (write ? 0 : wire::kReadReqSize) + desc.iov_len;
  h->length = static_cast<uint32_t>(op->len);
  h->flags |= wire::kDirect;
  // The receiver reads the sender's buffers after this frame is written: a send waits for its
  // acknowledgement, whatever completion level it asked for (Owner::tx_written).
  if (send && (h->flags & (wire::kWantReceived | wire::kWantDelivered)) == 0) {
    h->flags |= wire::kWantReceived;
  }
  return true;
}

void Conn::decide_direct_locked(TxOp* op) {
  op->decide_later = false;
  wire::Header h;
  if (wire::decode(op->header, SIZE_MAX, &h) != wire::Violation::kNone) return;
  if (!go_direct_locked(op, &h)) return;
  op->direct = true;
  wire::encode(h, op->header);
  record_share_locked(op);
}

void Conn::ack_delivered(uint32_t seq) {
  core::MutexLock lock(mu_);
  if (state() != State::kConnected) return;
  queue_ctrl_locked(wire::Op::kAckDelivered, seq, nullptr, 0);
  flush_locked();
}

void Conn::ack_delivered_later(uint32_t seq) {
  {
    core::MutexLock lock(owed_mu_);
    owed_acks_.push_back(seq);
    acks_owed_.store(true, std::memory_order_release);
  }
  engine_->schedule(this);
}

void Conn::resume() {
  engine_->schedule(this);
}

int Conn::getname(void* addr, size_t* len) {
  core::MutexLock lock(mu_);
  sockaddr_in local{};
  if (fd_.valid()) {
    socklen_t l = sizeof(local);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&local), &l);
  } else if (owner() != nullptr) {
    local = params_.src;
  }
  return core::copy_sockaddr(local, addr, len);
}

int Conn::getpeer(void* addr, size_t* len) {
  core::MutexLock lock(mu_);
  if (state() != State::kConnected && state() != State::kAccepted && state() != State::kPending) {
    return -FI_ENOTCONN;
  }
  return core::copy_sockaddr(peer_, addr, len);
}

// Writes control frames and queued sends until the kernel takes no more. False when the
// connection failed.
bool Conn::flush_locked() {
  if (!fd_.valid() || state() == State::kConnecting || state() == State::kClosed) return true;
  bool bell = false;
  for (;;) {
    if (tx_switch_pending_ && ctrl_off_ == tx_switch_at_) {
      // The handshake's last frame is on the socket: everything after it goes to the ring.
      tx_switch_pending_ = false;
      tx_shm_ = true;
      update_interest_locked();
      if (std::exchange(bell_owed_, false)) bell = true;
    }
    // The next piece of a queued read's answer, once everything before it is written: what a
    // peer's reads make this side hold is one piece at a time.
    if (reads_count_ > 0 && ctrl_off_ == ctrl_.size() && !tx_switch_pending_) pump_read_locked();
    iovec iov[kIovBatch];
    int cnt = 0;
    const bool with_ctrl = !mid_frame_ && ctrl_off_ < ctrl_.size();
    const size_t ctrl_end = tx_switch_pending_ ? tx_switch_at_ : ctrl_.size();
    if (with_ctrl) iov[cnt++] = {ctrl_.data() + ctrl_off_, ctrl_end - ctrl_off_};
    const size_t sendable = state() == State::kConnected && !tx_switch_pending_ ? send_count_ : 0;
    for (size_t i = 0; i < sendable && cnt + 1 + static_cast<int>(kMaxTxIov) <= kIovBatch; ++i) {
      TxOp* op = sendq_[(send_head_ + i) % sendq_.size()];
      if (op->decide_later) decide_direct_locked(op);
      size_t skip = op->written;
      if (skip < wire::kHeaderSize) {
        iov[cnt++] = {op->header + skip, wire::kHeaderSize - skip};
        skip = 0;
      } else {
        skip -= wire::kHeaderSize;
      }
      cnt += iov_slice(op->iov, op->iov_count, skip, SIZE_MAX, iov + cnt);
    }
    if (cnt == 0) {
      want_write_locked(false);
      shm_tx_blocked_.store(false, std::memory_order_relaxed);
      if (shutting_ && !shut_queued_ && state() == State::kConnected) {
        // Every send is out: announce the end through the same path, after everything else.
        shut_queued_ = true;
        queue_ctrl_locked(wire::Op::kShutdown, 0, nullptr, 0);
        continue;
      }
      if (shut_queued_ && !shut_done_) {
        // The announcement is written: close the sending side (reads go on, for the peer's
        // acknowledgements and its own kShutdown) and tell the application its queue drained.
        // Through shared memory the socket stays whole: it still carries doorbells both ways.
        shut_done_ = true;
        if (!tx_shm_) ::shutdown(fd_.get(), SHUT_WR);
        if (owner() != nullptr) {
          owner()->async_event(FI_FABQ_EVENT_SQ_DRAINED);
          // Both sides see FI_SHUTDOWN, as with rdma_disconnect(): this one now, the peer when
          // the kShutdown arrives.
          if (!reported_) owner()->cm_event({.event = FI_SHUTDOWN});
        }
        reported_ = true;
      }
      if (bell) doorbell_locked();
      return true;
    }
    ssize_t n;
    if (tx_shm_) {
      size_t w = 0;
      bool b = false;
      if (tx_ring_.write(iov, cnt, &w, &b) != shm::Status::kOk) {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "the peer corrupted a shared ring");
        return false;
      }
      bell |= b;
      if (w == 0) {
        if (tx_ring_.arm_producer()) continue;  // the peer made room meanwhile
        if (bell) doorbell_locked();
        // Full: the peer rings when it makes room; the engine also looks every round.
        shm_tx_blocked_.store(true, std::memory_order_relaxed);
        want_write_locked(true);
        return true;
      }
      shm_tx_blocked_.store(false, std::memory_order_relaxed);
      n = static_cast<ssize_t>(w);
    } else {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(cnt);
      n = sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        want_write_locked(true);
        return true;
      }
      if (errno == EPIPE || errno == ECONNRESET) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EIO, FI_FABQ_EVENT_EP_FATAL, strerror(errno));
      }
      return false;
    }
    size_t left = static_cast<size_t>(n);
    if (with_ctrl) {
      const size_t c = std::min(left, ctrl_end - ctrl_off_);
      ctrl_off_ += c;
      left -= c;
      if (ctrl_off_ == ctrl_.size() && !tx_switch_pending_) {
        ctrl_.clear();
        ctrl_off_ = 0;
        // A large answer went out: its memory does not stay with the connection.
        if (ctrl_.capacity() > kCtrlKeep) std::vector<unsigned char>().swap(ctrl_);
      }
      if (held_for_answers_ && !answers_backlogged_locked()) {
        // Room again for what the peer's requests cost: its frames are taken again (on_ready()).
        held_for_answers_ = false;
        engine_->schedule(this);
      }
    }
    while (left > 0 && send_count_ > 0) {
      TxOp* op = sendq_[send_head_];
      const size_t total = wire::kHeaderSize + op->len;
      const size_t c = std::min(left, total - op->written);
      op->written += c;
      left -= c;
      if (op->written < total) {
        mid_frame_ = true;
        break;
      }
      mid_frame_ = false;
      send_head_ = (send_head_ + 1) % sendq_.size();
      --send_count_;
      owner()->tx_written(op);
    }
  }
}

void Conn::on_deadline() {
  core::MutexLock lock(mu_);
  switch (state()) {
    case State::kConnecting:
    case State::kRequested:
    case State::kAccepted:
      reported_ = true;
      close_socket_locked();
      refused_locked(FI_ETIMEDOUT, nullptr, 0);
      break;
    case State::kIncoming:
    case State::kProving:
      close_socket_locked();
      break;
    default:
      break;
  }
}

void Conn::on_ready(uint32_t events) {
  core::MutexLock lock(mu_);
  const State s = state();
  if (s == State::kClosed || !fd_.valid()) return;
  if (acks_owed_.load(std::memory_order_acquire)) {
    std::vector<uint32_t> owed;
    {
      core::MutexLock olock(owed_mu_);
      owed.swap(owed_acks_);
      acks_owed_.store(false, std::memory_order_relaxed);
    }
    if (s == State::kConnected) {
      for (uint32_t seq : owed) queue_ctrl_locked(wire::Op::kAckDelivered, seq, nullptr, 0);
      if (!flush_locked()) return;
    }
  }
  if (stalled_ && !rx_shm_ && !tx_shm_ && (events & EPOLLIN) == 0 && (events & kHup) != 0) {
    // A stalled socket is in the epoll set for this alone (update_interest_locked()).
    left_while_stalled_locked();
    if (state() == State::kClosed) return;
    events &= ~kHup;
  }
  if (s == State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0 && (events & (EPOLLERR | EPOLLHUP)) != 0) err = ECONNREFUSED;
    if (err != 0) {
      reported_ = true;
      close_socket_locked();
      refused_locked(fi_errno_of(err), nullptr, 0);
      return;
    }
    if ((events & EPOLLOUT) == 0) return;
    set_state(hs_.sent());
    writing_ = false;
    update_interest_locked();
    flush_locked();
    return;
  }
  if (rx_shm_) {
    // A doorbell, the end of the socket, or a call from schedule(): look at both rings.
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0) drain_doorbells_locked();
    if (state() == State::kClosed) return;
    if (!flush_locked()) return;
    if (stalled_ && (events & EPOLLIN) != 0) {
      stalled_ = false;
      update_interest_locked();
    }
    if (!stalled_) read_locked();
    return;
  }
  if (events & EPOLLOUT) {
    if (!flush_locked()) return;
    // Requests held back while their answers were written (handle_bytes_locked) go on.
    if (!writing_ && !stalled_ && rpos_ < rlen_ && (events & EPOLLIN) == 0) read_locked();
  }
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    if (stalled_) {
      stalled_ = false;
      update_interest_locked();
    }
    read_locked();
  }
}

bool Conn::poll_read() {
  core::MutexLock lock(mu_);
  if (state() != State::kConnected || !fd_.valid() || rx_shm_ || stalled_ || writing_) {
    return false;
  }
  read_locked();
  return state() == State::kConnected && !stalled_;
}

void Conn::read_locked() {
  touch();
  // Whoever calls (a schedule() for another reason, an acknowledgement owed, a resume), bytes
  // already read are not taken while the answers owed are more than this side keeps.
  if (answers_backlogged_locked()) {
    stop_for_answers_locked();
    return;
  }
  if (rx_shm_ && rpos_ == rlen_ && framer_.between_frames()) {
    // Nothing from the socket is left to handle: the ring is all there is to read.
    rpos_ = rlen_ = 0;
    read_shm_locked();
    return;
  }
  bool drained = false;
  for (;;) {
    const State s = state();
    if (s == State::kClosed || s == State::kPending) return;
    size_t used = 0;
    if (!handle_bytes_locked(rbuf_.get() + rpos_, rlen_ - rpos_, &used)) {
      rpos_ += used;
      return;
    }
    rpos_ = rlen_ = 0;
    if (rx_shm_) {
      // The handshake is over: the peer's frames are in the ring.
      read_shm_locked();
      return;
    }
    // A short read emptied the socket: asking again would only hear EAGAIN. What comes next is
    // read at the next progress (epoll is level-triggered, so a waiter still hears of it).
    if (drained) return;
    if (answers_backlogged_locked()) {
      stop_for_answers_locked();
      return;
    }
    ssize_t n;
    if (!framer_.in_header() && have_place_ && !framer_.frame_done() &&
        framer_.payload_left() >= kDirectRead && placed_ < place_.capacity) {
      // Straight into the application's buffer.
      iovec iov[kMaxIov + 1];
      const int cnt = iov_slice(place_.iov, place_.iov_count, placed_,
                                std::min(framer_.payload_left(), place_.capacity - placed_), iov);
      n = readv(fd_.get(), iov, cnt);
      if (n > 0) {
        framer_.take_payload(static_cast<size_t>(n));
        placed_ += static_cast<size_t>(n);
        continue;
      }
    } else {
      n = recv(fd_.get(), rbuf_.get(), kReadBuffer, MSG_DONTWAIT);
      if (n > 0) {
        rlen_ = static_cast<size_t>(n);
        drained = rlen_ < kReadBuffer;
        continue;
      }
    }
    if (n == 0) {
      // The peer closed. Between frames that is a close; inside one, a violation.
      if (framer_.between_frames()) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "connection closed inside a frame");
      }
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == ECONNRESET || errno == EPIPE) {
      peer_closed_locked();
    } else {
      fail_locked(fi_errno_of(errno), FI_FABQ_EVENT_EP_FATAL, strerror(errno));
    }
    return;
  }
}

// Consumes bytes p[0..n) of the stream. True when all were consumed (more are wanted); false
// when the connection stalled or ended (*used says how far it got).
bool Conn::handle_bytes_locked(const unsigned char* p, size_t n, size_t* used) {
  const bool from_socket = !rx_shm_;
  size_t off = 0;
  for (;;) {
    if (state() == State::kClosed) {
      *used = off;
      return false;
    }
    if (!framer_.in_header() || framer_.frame_done()) {
      const wire::Header& h = framer_.header();
      if (is_placed(h) && !have_place_) {
        const bool took = place_locked();
        if (took && place_.bad) {
          *used = off;
          fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an answer to no request of ours");
          return false;
        }
        if (!took) {
          *used = off;
          return false;
        }
        have_place_ = true;
        // A piece of an answer goes where it begins in the result (Placement).
        placed_ = in_.kind == InKind::kReadResp ? static_cast<size_t>(in_.offset) : 0;
      }
      if (framer_.frame_done()) {
        if (!frame_done_locked()) {
          rx_timed_at_ = 0;  // stalled: its time is the application's
          *used = off;
          return false;
        }
        if (rx_timed_at_ != 0) {
          // Read as it came: the sender had copied rx_timed_seen_ bytes before this side saw
          // the header. A frame caught in its first chunk is charged for them at the rate this
          // side measured; one that was mostly there when seen is charged what it cost here.
          const uint64_t len = h.length;
          const uint64_t seen = std::min<uint64_t>(rx_timed_seen_, len);
          int64_t ns = now_ns() - std::exchange(rx_timed_at_, 0);
          if (seen <= shm::kPublishEvery && len != 0)
            ns += ns * static_cast<int64_t>(seen) / static_cast<int64_t>(len);
          note_ring_copy_locked(len, ns);
        }
        framer_.next_frame();
        have_place_ = false;
        placed_ = 0;
        if (from_socket && rx_shm_) {
          // That was the handshake's last frame on the socket; what follows it there is
          // doorbells, and the frames are in the ring.
          *used = n;
          return true;
        }
        if (answers_backlogged_locked()) {
          // Answers wait to be written: take no more requests until they are, so a peer's
          // requests cannot grow what this side holds without bound.
          *used = off;
          return stop_for_answers_locked();
        }
        continue;
      }
      if (off == n) break;
      const size_t take = framer_.take_payload(n - off);
      if (is_placed(h)) {
        // Into the placement, up to its capacity; the rest of a too-long message is dropped.
        const size_t room =
            placed_ < place_.capacity ? std::min(take, place_.capacity - placed_) : 0;
        iovec dst[kMaxIov + 1];
        const int cnt = iov_slice(place_.iov, place_.iov_count, placed_, room, dst);
        const unsigned char* src = p + off;
        for (int j = 0; j < cnt; ++j) {
          std::memcpy(dst[j].iov_base, src, dst[j].iov_len);
          src += dst[j].iov_len;
        }
      } else if (is_collected_request(h)) {
        std::memcpy(req_buf_.get() + placed_, p + off, take);
      } else {
        std::memcpy(cm_buf_ + placed_, p + off, take);
      }
      placed_ += take;
      off += take;
      continue;
    }
    if (off == n) break;
    wire::Header whole;
    if ((comm_est_ || rdm_) && framer_.whole_frame(p + off, n - off, &whole) && is_data(whole.op) &&
        !is_direct(whole) && ack_wanted(whole) == AckWanted::kNone && hs_.allowed(whole)) {
      // A whole message that asks for no answer, header and payload here: handed over in one
      // upcall, past the framer. A MSG connection's first one raises COMM_EST once placed
      // (frame_done_locked()), and a frame split between reads is placed as it comes: below.
      if (!heard_ && rx_shm_) prefetch_answer(p + off + wire::kHeaderSize, whole.length);
      incoming_locked(whole);
      const int64_t started = timed_locked(whole.op, CopyPath::kRing, whole.length) ? now_ns() : 0;
      if (!deliver_locked(p + off + wire::kHeaderSize)) {
        *used = off;  // taken again, header and all, when the stall ends
        return false;
      }
      // Whole in the ring when first seen: what the ring cost this side is its copy out.
      if (started != 0) {
        note_ring_copy_locked(whole.length, now_ns() - started);
      }
      off += wire::kHeaderSize + whole.length;
      continue;
    }
    off += framer_.take_header(p + off, n - off);
    if (framer_.dead()) {
      *used = off;
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, wire::violation_str(framer_.violation()));
      return false;
    }
    if (framer_.in_header()) continue;
    // A whole header: is it allowed now?
    const wire::Header& h = framer_.header();
    if (!hs_.allowed(h)) {
      *used = off;
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "a frame the connection's state forbids");
      return false;
    }
    if (h.op == wire::Op::kReadResp && !answer_in_order_locked(h)) {
      *used = off;
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "a piece of an answer out of order");
      return false;
    }
    if (is_placed(h)) {
      incoming_locked(h);
      have_place_ = false;
      if (timed_locked(h.op, CopyPath::kRing, h.length)) {
        rx_timed_at_ = now_ns();
        rx_timed_seen_ = n - off;
      }
    }
    placed_ = 0;
  }
  *used = off;
  return true;
}

// in_ for a placed frame (a message, a write, an answer) with header h.
void Conn::incoming_locked(const wire::Header& h) {
  const bool msg = is_data(h.op);
  heard_ = heard_ || msg;
  in_.kind = msg                           ? InKind::kMsg
             : h.op == wire::Op::kWrite    ? InKind::kWrite
             : h.op == wire::Op::kReadResp ? InKind::kReadResp
                                           : InKind::kAtomicResp;
  in_.tagged = h.op == wire::Op::kTagged;
  in_.tag = msg ? h.tag : 0;
  in_.has_data = (h.flags & wire::kRemoteData) != 0;
  in_.data = msg ? h.data : 0;
  in_.key = h.op == wire::Op::kWrite ? h.tag : 0;
  in_.addr = h.op == wire::Op::kWrite ? h.data : 0;
  in_.status = h.op == wire::Op::kReadResp || h.op == wire::Op::kAtomicResp
                   ? static_cast<RmaStatus>(h.data)
                   : RmaStatus::kOk;
  in_.direct = is_direct(h);
  in_.offset = h.op == wire::Op::kReadResp ? h.tag : 0;
  in_.more = (h.flags & wire::kMore) != 0;
  in_.len = h.length;
  in_.seq = h.seq;
  in_.from = peer_name_;
  in_.via = this;
  in_.ack = ack_wanted(h);
}

// Acts on a complete frame. False when the connection ended or stalled.
bool Conn::frame_done_locked() {
  const wire::Header& h = framer_.header();
  switch (h.op) {
    case wire::Op::kMsg:
    case wire::Op::kTagged: {
      if (!comm_est_ && !rdm_) {
        comm_est_ = true;
        owner()->async_event(FI_FABQ_EVENT_COMM_EST);
      }
      if (is_direct(h) && !deliver_direct_locked(h)) return false;
      const bool delivered_now = owner()->placed(in_, &place_);
      if (in_.ack == AckWanted::kReceived) {
        queue_ctrl_locked(wire::Op::kAckReceived, in_.seq, nullptr, 0);
      } else if (in_.ack == AckWanted::kDelivered && delivered_now) {
        queue_ctrl_locked(wire::Op::kAckDelivered, in_.seq, nullptr, 0);
      }
      if (in_.ack != AckWanted::kNone) return flush_locked();
      return true;
    }
    case wire::Op::kWrite:
      if (is_direct(h)) return answer_request_locked(h);
      owner()->placed(in_, &place_);
      queue_ctrl_locked(wire::Op::kRmaAck, in_.seq, nullptr, 0, 0, 0,
                        static_cast<uint64_t>(place_.status));
      return flush_locked();
    case wire::Op::kReadResp:
    case wire::Op::kAtomicResp:
      forget_share_locked(h.seq);
      owner()->placed(in_, &place_);
      return true;
    case wire::Op::kReadReq:
    case wire::Op::kAtomic:
      return answer_request_locked(h);
    case wire::Op::kRmaAck:
      forget_share_locked(h.seq);
      if (!owner()->rma_acked(this, h.seq, static_cast<RmaStatus>(h.data))) {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an answer to no write of ours");
        return false;
      }
      return true;
    case wire::Op::kAckReceived:
    case wire::Op::kAckDelivered:
      forget_share_locked(h.seq);
      if (!owner()->tx_acked(this, h.seq, h.op == wire::Op::kAckDelivered)) {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "an acknowledgement of no send");
        return false;
      }
      return true;
    default:
      return handshake_frame_locked(h);
  }
}

// kReadReq, kAtomic, a direct kWrite: the owner checks and performs the access, and the answer
// (with the bytes read, or the previous values, unless direct) is queued among the control
// frames.
bool Conn::answer_request_locked(const wire::Header& h) {
  RemoteAccess a{.key = h.tag, .addr = h.data, .via = this};
  wire::Op reply = wire::Op::kReadResp;
  size_t out_len = 0;
  if (is_direct(h)) {
    // Only a peer this side proved and told it serves (shm.h) may ask; the copy uses the pid
    // proved, never one the peer names.
    const bool write = h.op == wire::Op::kWrite;
    const size_t fixed = write ? 0 : wire::kReadReqSize;
    DirectRequest copy(direct_peer_pid_, write,
                       write ? 0 : static_cast<size_t>(wire::get_u64(req_buf_.get())));
    if (direct_peer_pid_ == 0 ||
        !copy.parse(req_buf_.get() + fixed, h.length - fixed, params_.max_msg_size)) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                  direct_peer_pid_ == 0 ? "a direct request this side does not serve"
                                        : "a direct request whose buffers are not its length");
      return false;
    }
    a.len = copy.len();
    a.direct = &copy;
    a.write = write;
    // Only a peer that showed it can write this side's memory may copy a part itself.
    if (seg_.peer_serves(shm_connecting_) && seg_.peer_reaches()) {
      copy.share(&seg_, shm_connecting_, h.seq, engine_->config().share_min, fd_.get());
    }
    const bool timed = write && timed_locked(h.op, CopyPath::kDirect, copy.len());
    const int64_t started = timed ? now_ns() : 0;
    const RmaStatus status = owner()->remote_access(a, nullptr);
    if (timed && status == RmaStatus::kOk) {
      // The region's key and address name the destination.
      note_direct_copy_locked(copy.len(), h.tag ^ std::rotl(h.data, 17), now_ns() - started);
    }
    if (copy.stuck()) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                  "the peer took part of a direct copy and did not finish it");
      return false;
    }
    queue_ctrl_locked(write ? wire::Op::kRmaAck : wire::Op::kReadResp, h.seq, nullptr, 0,
                      write ? 0u : uint32_t{wire::kDirect}, 0, static_cast<uint64_t>(status));
    return flush_locked();
  }
  if (h.op == wire::Op::kReadReq) {
    a.len = static_cast<size_t>(wire::get_u64(req_buf_.get()));
    if (a.len > engine_->config().read_piece && a.len <= params_.max_msg_size) {
      return queue_read_locked(h, a.len) && flush_locked();
    }
    out_len = a.len;
  } else {
    reply = wire::Op::kAtomicResp;
    wire::AtomicDesc d;
    const size_t size =
        wire::decode_atomic(req_buf_.get(), &d) ? core::atomic_datatype_size(d.datatype) : 0;
    const size_t operands = d.kind == AtomicKind::kCompare ? 2 : 1;
    if (size == 0 || d.count == 0 || d.count > kMaxAtomicBytes / size ||
        h.length != wire::kAtomicDescSize + operands * d.count * size) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                  "an atomic whose length is not its operands'");
      return false;
    }
    a.atomic = true;
    a.op = d.op;
    a.datatype = d.datatype;
    a.kind = d.kind;
    a.count = d.count;
    a.len = d.count * size;
    a.operand = req_buf_.get() + wire::kAtomicDescSize;
    if (d.kind == AtomicKind::kCompare) a.compare = req_buf_.get() + wire::kAtomicDescSize + a.len;
    out_len = d.kind == AtomicKind::kPlain ? 0 : a.len;
  }
  const size_t at = ctrl_.size();
  RmaStatus status = RmaStatus::kOutOfBounds;  // a read longer than any message
  if (a.len <= params_.max_msg_size) {
    ctrl_.resize(at + wire::kHeaderSize + out_len);
    status = owner()->remote_access(a, ctrl_.data() + at + wire::kHeaderSize);
  }
  if (status != RmaStatus::kOk) out_len = 0;
  ctrl_.resize(at + wire::kHeaderSize + out_len);
  wire::Header r;
  r.op = reply;
  r.seq = h.seq;
  r.length = static_cast<uint32_t>(out_len);
  r.data = static_cast<uint64_t>(status);
  wire::encode(r, ctrl_.data() + at);
  return flush_locked();
}

bool Conn::queue_read_locked(const wire::Header& h, size_t len) {
  // Checked whole before anything is held for it: a refused read costs its answer's header.
  const RemoteAccess check{
      .key = h.tag, .addr = h.data, .len = len, .via = this, .part = AccessPart::kCheck};
  const RmaStatus status = owner()->remote_access(check, nullptr);
  if (status != RmaStatus::kOk) {
    queue_ctrl_locked(wire::Op::kReadResp, h.seq, nullptr, 0, 0, 0, static_cast<uint64_t>(status));
    return true;
  }
  if (reads_count_ == kQueuedReads) {
    // Frames stop being taken once it is full (answers_backlogged_locked(), checked after every
    // frame and before any is read): reaching here is a bug, and never an overwrite.
    fail_locked(FI_EIO, FI_FABQ_EVENT_EP_REQ_ERR, "more reads queued than a connection keeps");
    return false;
  }
  if (!reads_) reads_ = std::make_unique<QueuedRead[]>(kQueuedReads);
  reads_[(reads_head_ + reads_count_) % kQueuedReads] = {
      .seq = h.seq, .key = h.tag, .addr = h.data, .len = len};
  ++reads_count_;
  return true;
}

void Conn::pump_read_locked() {
  QueuedRead& r = reads_[reads_head_];
  const size_t n = std::min(engine_->config().read_piece, r.len - r.sent);
  const bool last = n == r.len - r.sent;
  const RemoteAccess a{.key = r.key,
                       .addr = r.addr + r.sent,
                       .len = n,
                       .via = this,
                       .part = last ? AccessPart::kLast : AccessPart::kPiece};
  const size_t at = ctrl_.size();
  ctrl_.resize(at + wire::kHeaderSize + n);
  // Checked again: the region may have been closed since the read was queued. A refusal ends
  // the answer (wire.h); the pieces sent stay where they are in the initiator's buffer.
  const RmaStatus status = owner()->remote_access(a, ctrl_.data() + at + wire::kHeaderSize);
  const bool ok = status == RmaStatus::kOk;
  if (!ok) ctrl_.resize(at + wire::kHeaderSize);
  wire::Header piece;
  piece.op = wire::Op::kReadResp;
  piece.flags = ok && !last ? uint32_t{wire::kMore} : 0;
  piece.length = ok ? static_cast<uint32_t>(n) : 0;
  piece.seq = r.seq;
  piece.tag = r.sent;
  piece.data = static_cast<uint64_t>(status);
  wire::encode(piece, ctrl_.data() + at);
  r.sent += n;
  if (ok && !last) return;
  reads_head_ = (reads_head_ + 1) % kQueuedReads;
  --reads_count_;
}

bool Conn::answers_backlogged_locked() const {
  const size_t piece = wire::kHeaderSize + engine_->config().read_piece;
  return ctrl_.size() - ctrl_off_ > kCtrlBacklog + piece || reads_count_ == kQueuedReads;
}

bool Conn::stop_for_answers_locked() {
  // Not read, not polled, until flush_locked() has written enough (and schedules on_ready()).
  held_for_answers_ = true;
  stalled_ = true;
  update_interest_locked();
  return false;
}

bool Conn::answer_in_order_locked(const wire::Header& h) {
  if (is_direct(h)) return true;  // whole, at offset 0 (wire.h)
  const bool more = (h.flags & wire::kMore) != 0;
  const bool continues = rx_piece_open_ && h.seq == rx_piece_seq_;
  if (continues ? h.tag != rx_piece_next_ : h.tag != 0 || (more && rx_piece_open_)) return false;
  if (continues || more) {
    rx_piece_open_ = more;
    rx_piece_seq_ = h.seq;
    rx_piece_next_ = h.tag + h.length;
  }
  return true;
}

bool Conn::deliver_locked(const unsigned char* bytes) {
  if (owner() != nullptr && owner()->deliver(in_, bytes)) return true;
  return stall_locked();
}

bool Conn::stall_locked() {
  stalled_ = true;
  rx_timed_at_ = 0;
  // Either way its owner resumes it (a receive posted, a buffered message taken, room in the
  // CQ): nothing here asks again meanwhile, which would make the progress thread spin.
  stalled_for_cq_ = owner() != nullptr && owner()->take_retry();
  update_interest_locked();
  return false;
}

void Conn::left_while_stalled_locked() {
  // What the peer sent before it left is read to its end once the owner resumes the
  // connection. Until then it holds only its descriptor and the kernel's buffer, and, as an RDM
  // listener's, it is the one to close when the listener needs room (shed()).
  peer_hup_ = true;
  update_interest_locked();
}

bool Conn::shed(Shed how, int64_t stale_before) {
  core::MutexLock lock(mu_);
  const State s = state();
  if (!rdm_ || acceptor_ == nullptr || s == State::kClosed) return false;
  const bool inactive = how == Shed::kStale && last_active_ns() < stale_before;
  // Waiting for its owner, its peer gone: what is left of the peer's messages goes with it.
  const bool gone = how != Shed::kIdle && stalled_ && (peer_hup_ || peer_eof_);
  const char* why = "in its handshake";
  if (s != State::kConnected) {
    if (!inactive) return false;  // a handshake ends by itself at its deadline
  } else {
    // What this side owes the peer is never dropped: its sends, its answers and
    // acknowledgements.
    if (send_count_ != 0 || ctrl_off_ < ctrl_.size() || share_count_ != 0 || shutting_ ||
        acks_owed_.load(std::memory_order_acquire)) {
      return false;
    }
    bool busy = stalled_ || have_place_ || rpos_ < rlen_ || !framer_.between_frames() ||
                (rx_shm_ && rx_ring_.readable());
    if (!busy && !rx_shm_ && fd_.valid()) {
      int unread = 0;
      busy = ioctl(fd_.get(), FIONREAD, &unread) != 0 || unread > 0;
    }
    // Idle, it loses nothing. Otherwise only a peer that left, or one silent for longer than
    // the connect timeout, loses what it has in flight (a send of its that waits for this
    // side's delivery acknowledgement fails; the message stays buffered here).
    const bool held = busy || owner() == nullptr || owner()->holds(this);
    if (held && !gone && !inactive) return false;
    why = !held                     ? "idle"
          : gone && stalled_for_cq_ ? "its peer gone, its last message waiting for a CQ"
          : gone                    ? "its peer gone, its last messages not taken"
                                    : "inactive";
  }
  engine_->log(LogLevel::kInfo, "closing the connection from %s:%u (%s) to make room for another\n",
               inet_ntoa(peer_.sin_addr), ntohs(peer_.sin_port), why);
  peer_closed_locked();
  return true;
}

bool Conn::place_locked() {
  place_.status = RmaStatus::kOk;
  place_.bad = false;
  if (owner() != nullptr && owner()->place(in_, &place_)) return true;
  return stall_locked();
}

bool Conn::deliver_direct_locked(const wire::Header& h) {
  // Only a peer this side proved and told it serves (shm.h) may send one; the copy uses the pid
  // proved, never one the peer names.
  DirectRequest copy(direct_peer_pid_, /*write=*/true, 0);
  if (direct_peer_pid_ == 0 || !copy.parse(req_buf_.get(), h.length, params_.max_msg_size)) {
    fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                direct_peer_pid_ == 0 ? "a direct message this side does not serve"
                                      : "a direct message longer than the largest message");
    return false;
  }
  const bool timed = timed_locked(h.op, CopyPath::kDirect, copy.len());
  const int64_t started = timed ? now_ns() : 0;
  heard_ = true;
  in_ = Incoming{};
  in_.kind = InKind::kMsg;
  in_.tagged = h.op == wire::Op::kTagged;
  in_.tag = h.tag;
  in_.has_data = (h.flags & wire::kRemoteData) != 0;
  in_.data = h.data;
  in_.len = copy.len();
  in_.seq = h.seq;
  in_.from = peer_name_;
  in_.via = this;
  in_.ack = ack_wanted(h);
  if (!have_place_) {
    if (!place_locked()) return false;
    have_place_ = true;
  }
  // Whole into one buffer: both processes may copy (shm.h "Sharing a copy"); else what fits.
  const size_t n = std::min(copy.len(), place_.capacity);
  bool copied = false;
  if (n == copy.len() && place_.iov_count >= 1 && place_.iov[0].iov_len >= n) {
    if (seg_.peer_serves(shm_connecting_) && seg_.peer_reaches()) {
      copy.share(&seg_, shm_connecting_, h.seq, engine_->config().share_min, fd_.get());
    }
    copied = copy.copy(place_.iov[0].iov_base);
  } else {
    iovec into[kMaxIov + 1];
    const int cnt = iov_slice(place_.iov, place_.iov_count, 0, n, into);
    copied = copy.copy_prefix(into, static_cast<size_t>(cnt), n);
  }
  if (!copied) {
    // The peer proved it lets this process read its memory; a buffer it named that is not
    // mapped, or a peer that took that back, ends the connection (the sender's sends fail).
    fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR,
                copy.stuck() ? "the peer took part of a direct copy and did not finish it"
                             : "a direct message whose bytes this process could not copy");
    return false;
  }
  if (timed) {
    note_direct_copy_locked(
        copy.len(), place_.iov_count > 0 ? reinterpret_cast<uintptr_t>(place_.iov[0].iov_base) : 0,
        now_ns() - started);
  }
  return true;
}

void Conn::peer_closed_locked() {
  const State s = state();
  close_socket_locked();
  if (rdm_) {
    // The peer endpoint closed (or never answered): what was sent to it and not acknowledged
    // fails; the next send to it connects anew.
    refused_locked(s == State::kConnected ? FI_ECONNABORTED : FI_ECONNREFUSED, nullptr, 0);
    return;
  }
  const bool was_reported = std::exchange(reported_, true);
  if (s == State::kConnected && owner() != nullptr) {
    if (!was_reported) owner()->cm_event({.event = FI_SHUTDOWN});
    // Sends still waiting for the peer's acknowledgement will not get it.
    owner()->abort_sends(this, FI_ECONNABORTED);
  }
  send_count_ = 0;
  mid_frame_ = false;
  if (!was_reported && s != State::kConnected) {
    switch (s) {
      case State::kIncoming:
      case State::kProving:
      case State::kPending:
        break;  // its acceptor frees it (close_socket_locked)
      case State::kConnecting:
      case State::kRequested:
        owner()->cm_event({.err = FI_ECONNREFUSED});
        break;
      case State::kAccepted:
        owner()->cm_event({.err = FI_ECONNABORTED});
        break;
      default:
        break;
    }
  }
  // Nothing more can arrive: the posted receives end too, after FI_SHUTDOWN or the error.
  if (owner() != nullptr) owner()->connection_ended();
}

void Conn::fail_locked(int err, uint32_t event, const char* why) {
  engine_->log(LogLevel::kWarn, "connection with %s:%u failed: %s\n", inet_ntoa(peer_.sin_addr),
               ntohs(peer_.sin_port), why);
  const State s = state();
  close_socket_locked();
  if (rdm_) {
    // Only this connection ends: its sends fail, the endpoint goes on.
    refused_locked(err == FI_EREMOTEIO ? FI_EIO : err, nullptr, 0);
    return;
  }
  send_count_ = 0;
  mid_frame_ = false;
  const bool was_reported = std::exchange(reported_, true);
  if (owner() == nullptr) return;  // not reported yet: its acceptor frees it
  if (s == State::kConnected) owner()->abort_sends(this, err == FI_EREMOTEIO ? FI_EIO : err);
  if (!was_reported && s == State::kConnected) {
    // The event writes the EQ error entry and fails the posted receives.
    owner()->async_event(event);
    return;
  }
  if (!was_reported) owner()->cm_event({.err = err});
  // Already shut down, or never connected: the receives end as with the peer's close.
  owner()->connection_ended();
}

}  // namespace fabq::xport
