// The shared-memory side of a connection (xport/shm.h): the offer, the switch from the socket
// to the rings, reading and writing the rings, and doorbells.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "fabq/fi_fabq.h"
#include "xport/conn.h"
#include "xport/socket_util.h"

namespace fabq::xport {
namespace {

// Control frames owed to the peer beyond this: stop reading until they are written.
constexpr size_t kReadBuffer = 16 * 1024;

// The buffers a direct request named (Conn::go_direct_locked(): op.direct_desc, which its iov
// points at) into bufs; returns their bytes.
size_t direct_buffers(const TxOp& op, iovec* bufs, size_t* count = nullptr) {
  const iovec& desc = op.iov[op.kind == TxKind::kRead ? 1 : 0];
  const size_t n = std::min(desc.iov_len / wire::kDirectEntrySize, wire::kMaxDirectEntries);
  size_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* e = op.direct_desc + i * wire::kDirectEntrySize;
    bufs[i] = {reinterpret_cast<void*>(static_cast<uintptr_t>(wire::get_u64(e))),
               static_cast<size_t>(wire::get_u64(e + 8))};
    bytes += bufs[i].iov_len;
  }
  if (count != nullptr) *count = n;
  return bytes;
}

}  // namespace

// Same host: the peer's address is one of this host's (which includes every loopback one).
bool Conn::is_local(const sockaddr_in& peer) const {
  if ((ntohl(peer.sin_addr.s_addr) >> 24) == 127) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* i = list; i != nullptr && !local; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    local =
        reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == peer.sin_addr.s_addr;
  }
  freeifaddrs(list);
  return local;
}

void Conn::map_offer_locked(const wire::Header& req) {
  if (engine_->config().shm && (req.flags & wire::kShmOffer) != 0) {
    seg_ = shm::Segment::open(req.tag, req.data);
  }
}

void Conn::queue_accept_locked(const void* data, size_t len) {
  if (!seg_.valid()) {
    queue_ctrl_locked(wire::Op::kConnAccept, 0, data, len);
    return;
  }
  queue_ctrl_locked(wire::Op::kConnAccept, 0, data, len, wire::kShmAccept);
  shm_agreed_locked(/*connecting=*/false);
}

void Conn::shm_agreed_locked(bool connecting) {
  seg_.unlink();
  shm_connecting_ = connecting;
  if (engine_->config().direct_min != 0 || engine_->config().direct_msg_min != 0) {
    direct_peer_pid_ = seg_.prove_peer(connecting);
    if (direct_peer_pid_ != 0) {
      seg_.serve_peer(connecting);
      // So that the peer may offer this side parts of large copies (shm.h "Sharing a copy").
      if (engine_->config().share_min != 0) seg_.reach_peer(connecting, direct_peer_pid_);
    } else {
      engine_->log(LogLevel::kInfo,
                   "this process cannot reach its peer's memory: large messages and one-sided "
                   "transfers from the peer stay in the shared ring\n");
    }
  }
  tx_ring_ = seg_.tx(connecting);
  rx_ring_ = seg_.rx(connecting);
  shm_agreed_ = true;
  tx_switch_pending_ = true;
  tx_switch_at_ = ctrl_.size();
  engine_->add_shm(this);
}

bool Conn::poll_shm() {
  const bool rx = shm_readable();
  const bool tx = shm_tx_blocked_.load(std::memory_order_relaxed) && tx_ring_.writable();
  const bool share = shares_waiting_.load(std::memory_order_relaxed);
  if (!rx && !tx && !share) return false;
  core::MutexLock lock(mu_);
  if (state() == State::kClosed) return true;
  if (share) take_share_locked();
  if (tx && !flush_locked()) return true;
  if (rx_shm_ && !stalled_) read_locked();
  return true;
}

bool Conn::arm_shm(bool* armed_now) {
  bool work = false;
  if (shm_rx_open_.load(std::memory_order_relaxed)) {
    const shm::Armed a = rx_ring_.arm_consumer();
    work = a == shm::Armed::kBytes;
    if (a == shm::Armed::kNow) *armed_now = true;
  }
  if (shm_tx_blocked_.load(std::memory_order_relaxed) && tx_ring_.arm_producer()) work = true;
  return work;
}

void Conn::record_share_locked(TxOp* op) {
  const size_t min = engine_->config().share_min;
  iovec bufs[wire::kMaxDirectEntries];
  // Only a peer this side can reach may be helped; it offers nothing below its own minimum.
  if (min == 0 || direct_peer_pid_ == 0 || share_count_ == kShareRecords ||
      direct_buffers(*op, bufs) < min) {
    return;
  }
  shares_[(share_head_ + share_count_++) % kShareRecords] = {op->seq, op};
  shares_waiting_.store(true, std::memory_order_relaxed);
}

void Conn::forget_share_locked(uint32_t seq) {
  // Wherever it is: answers may come out of order (an acknowledgement owed for a message its
  // receiver buffered comes later; a hostile peer answers as it likes), and a record must never
  // outlive its op, whose buffers the application may reuse once it completes.
  for (size_t i = 0; i < share_count_; ++i) {
    if (shares_[(share_head_ + i) % kShareRecords].seq != seq) continue;
    for (size_t j = i; j + 1 < share_count_; ++j) {
      shares_[(share_head_ + j) % kShareRecords] = shares_[(share_head_ + j + 1) % kShareRecords];
    }
    if (--share_count_ == 0) shares_waiting_.store(false, std::memory_order_relaxed);
    return;
  }
}

void Conn::take_share_locked() {
  shm::ShareOffer part;
  if (share_count_ == 0 || !seg_.share_offered(shm_connecting_, &part)) return;
  // Records are in the order of their seqs. The target serves requests in order, so those
  // before the offered one will not be offered any more; those after it may still be.
  while (share_count_ > 0 && static_cast<int32_t>(shares_[share_head_].seq - part.seq) < 0) {
    share_head_ = (share_head_ + 1) % kShareRecords;
    if (--share_count_ == 0) shares_waiting_.store(false, std::memory_order_relaxed);
  }
  if (share_count_ == 0 || shares_[share_head_].seq != part.seq) {
    return;  // not one this side recorded: the target copies it
  }
  TxOp* const op = shares_[share_head_].op;
  forget_share_locked(part.seq);
  if (op->seq != part.seq || !op->direct) return;
  iovec bufs[wire::kMaxDirectEntries];
  size_t count = 0;
  const size_t bytes = direct_buffers(*op, bufs, &count);
  // Only a part inside the request's own buffers: the rest is the target's to copy.
  if (part.offset >= bytes || part.len != bytes - part.offset) return;
  if (!seg_.claim_share(shm_connecting_, part)) return;
  iovec mine[wire::kMaxDirectEntries];
  const size_t n = shm::slice(bufs, count, part.offset, part.len, mine);
  const iovec theirs{reinterpret_cast<void*>(static_cast<uintptr_t>(part.addr)),
                     static_cast<size_t>(part.len)};
  const shm::PeerMemory peer(direct_peer_pid_);
  const bool copied = op->kind == TxKind::kRead ? peer.readv(mine, n, &theirs, 1, part.len)
                                                : peer.writev(mine, n, &theirs, 1, part.len);
  seg_.finish_share(shm_connecting_, part, copied);
  if (copied) op->shared = true;
}

bool Conn::timed_locked(wire::Op op, CopyPath path, size_t len) {
  // From the smallest size this side's sends may go direct at: the peer's are the same unless
  // the two were configured apart, and a class never timed only keeps the peer exploring.
  // Checked first: most frames are below it.
  const size_t floor = engine_->direct_floor();
  if (floor == 0 || len < floor) return false;
  if (!rx_shm_ || !engine_->config().adapt_copies || direct_peer_pid_ == 0) return false;
  if (op != wire::Op::kMsg && op != wire::Op::kTagged && op != wire::Op::kWrite) return false;
  return advisor_.wants(len, path);
}

namespace {
uint64_t nonnegative(int64_t ns) {
  return static_cast<uint64_t>(std::max<int64_t>(ns, 0));
}
}  // namespace

void Conn::note_ring_copy_locked(size_t len, int64_t ns) {
  if (advisor_.record(len, CopyPath::kRing, nonnegative(ns))) advice_changed_locked();
}

void Conn::note_direct_copy_locked(size_t len, uint64_t dest, int64_t ns) {
  if (advisor_.record_direct(len, dest, nonnegative(ns))) advice_changed_locked();
}

void Conn::advice_changed_locked() {
  const uint64_t advice = advisor_.advice();
  seg_.advise_peer(shm_connecting_, advice);
  char what[160];
  format_advice(advice, what, sizeof what);
  engine_->log(LogLevel::kInfo, "copy advice for sends from %s:%u: %s\n", inet_ntoa(peer_.sin_addr),
               ntohs(peer_.sin_port), what);
}

// Reads the peer's frames from the ring until it is empty, the connection stalls or ends.
void Conn::read_shm_locked() {
  bool bell = false;
  for (;;) {
    const State s = state();
    if (s == State::kClosed || s == State::kPending) break;
    if (answers_backlogged_locked()) {
      stop_for_answers_locked();  // resumed by the flush that writes them
      break;
    }
    const unsigned char* p = nullptr;
    size_t contiguous = 0;
    size_t avail = 0;
    if (rx_ring_.peek(&p, &contiguous, &avail) != shm::Status::kOk) {
      fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "the peer corrupted a shared ring");
      return;
    }
    if (avail == 0) {
      if (!peer_eof_) break;
      // The socket ended and the ring is empty: everything the peer wrote has been read.
      if (bell) doorbell_locked();
      if (framer_.between_frames()) {
        peer_closed_locked();
      } else {
        fail_locked(FI_EREMOTEIO, FI_FABQ_EVENT_EP_REQ_ERR, "connection closed inside a frame");
      }
      return;
    }
    size_t used = 0;
    const bool more = handle_bytes_locked(p, contiguous, &used);
    if (rx_ring_.consume(used)) bell = true;
    if (!more) break;
  }
  if (bell && state() != State::kClosed) doorbell_locked();
}

// Empties the socket of doorbells; notes its end or fails the connection on its error.
void Conn::drain_doorbells_locked() {
  for (;;) {
    const ssize_t n = recv(fd_.get(), rbuf_.get(), kReadBuffer, MSG_DONTWAIT);
    if (n > 0) {
      if (static_cast<size_t>(n) < kReadBuffer) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n == 0 || errno == ECONNRESET || errno == EPIPE) {
      // The peer is gone or closed; the ring may still hold its last frames.
      peer_eof_ = true;
      update_interest_locked();
      return;
    }
    fail_locked(fi_errno_of(errno), FI_FABQ_EVENT_EP_FATAL, strerror(errno));
    return;
  }
}

void Conn::doorbell_locked() {
  if (!tx_shm_) {
    // The handshake's last frame is not on the socket yet: the bell must not go before it.
    bell_owed_ = true;
    return;
  }
  if (!fd_.valid() || peer_eof_) return;
  const unsigned char bell = 0;
  // A full socket already holds a doorbell the peer has not read: this one is not needed.
  [[maybe_unused]] ssize_t n = send(fd_.get(), &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace fabq::xport
