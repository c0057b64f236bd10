// fabq transport seam: the one header the provider (src/prov) includes from src/xport, and the
// only thing of the provider a transport knows. Downcalls (Transport, Connection, Listener,
// PassiveListener) are implemented here, in src/xport; upcalls (Owner, PassiveOwner) are
// implemented by the provider's endpoints and passive endpoints. Everything else a transport
// needs comes in a TransportConfig. A transport library links against src/core only
// (tests/check_layering.sh checks its undefined symbols), so it can be tested, and a second one
// written, without the provider: tests/xport drive this one through a fake owner.
//
// Progress model (fi_domain(3) FI_PROGRESS_MANUAL, the default): bytes move when the
// application calls into fabq. Every read of a CQ, EQ or counter calls Transport::progress(),
// which does non-blocking I/O for every connection of the fabric. A thread about to block
// (fi_cq_sread, fi_eq_sread, fi_cntr_wait, fi_wait, or epoll on a queue's fd after fi_trywait)
// announces itself with begin_wait(); while anybody waits, a progress thread sleeps on all of
// the fabric's sockets and rings and moves bytes as they arrive, so the waiter is woken by the
// completion or event they produce. When nobody waits, that thread sleeps on its own eventfd
// and costs nothing. FI_PROGRESS_AUTO keeps it running for the life of the domain (begin_wait()
// without end_wait()).
//
// Threads and locks: every downcall may come from any thread, holding none of the owner's locks.
// Upcalls come from the thread that moves the bytes (an application thread in progress(), or the
// progress thread), holding the transport's locks for that connection; an owner takes its own
// lock inside an upcall and never calls down from one, except where a call says it may. The
// whole lock order is written once, in docs/locking.md.
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "core/atomic_op.h"
#include "core/fault_spec.h"
#include "core/hmac.h"

namespace fabq::xport {

inline constexpr size_t kMaxIov = 4;         // tx_attr/rx_attr iov_limit
inline constexpr size_t kInjectSize = 4096;  // tx_attr inject_size
// Injected bytes a TxOp holds itself; more go to storage its slot keeps (prov/tx_ring.h).
inline constexpr size_t kInjectInline = 64;
// A one-sided request's buffers: its prefix (CQ data, a read's length, an atomic's description),
// then up to kMaxIov operand buffers and kMaxIov compare buffers.
inline constexpr size_t kMaxTxIov = 2 * kMaxIov + 1;
// Operand bytes of one atomic (count * datatype size), each of operands and compare values.
inline constexpr size_t kMaxAtomicBytes = 4096;

class Connection;

// --- Configuration: the provider's parameters a transport obeys, passed in once per fabric.

enum class LogLevel : uint8_t { kWarn, kInfo };

struct TransportConfig {
  size_t connect_timeout_ms = 10000;  // a connection attempt (or accepted request) gives up
  size_t keepalive_ms = 30000;        // a silent peer is gone after this (0: no keep-alive)
  bool shm = true;                    // same-host connections move their frames in shared memory
  // Through shared memory, an RMA write or read of at least this many bytes is copied directly
  // between the two processes' memory (DirectCopy) instead of through the ring; 0: never.
  size_t direct_min = 16384;
  // ... and a message of at least this many bytes (0: never). Higher than direct_min: in a
  // stream of messages the ring's two copies run on both cores at once, where a direct copy
  // below share_min is the receiver's alone.
  size_t direct_msg_min = 256 * 1024;
  // ... and from this many bytes on (0: only from direct_msg_min), a message that answers the
  // peer (a message came from it since this side last sent) with nothing else on its way to it:
  // no send queued, the ring read to its end but for an acknowledgement. Alone, a message may be
  // faster copied once than twice; the next one sent without an answer in between (a stream)
  // goes through the ring.
  size_t direct_msg_idle_min = 16384;
  // From this many bytes on, the target of a direct copy offers the initiator's process a part
  // of it to copy, so both copy at once (shm.h "Sharing a copy"); 0: never.
  size_t share_min = 256 * 1024;
  // A message or write that may go direct by the sizes above takes the ring or the direct way
  // by what each costs here, as its receiver measures them (xport/copy_choice.h); false: always
  // direct, as those sizes say.
  bool adapt_copies = true;
  size_t cm_backlog = 1024;  // per listener: connections in their handshake at once
  // A peer's remote read longer than this is answered in pieces of at most this many bytes
  // (wire.h), each copied from the region only once the one before it has left: what one
  // connection's reads make this side hold. A read up to this size is copied at once, so a
  // later write cannot change what it returns (fi_endpoint(3) max_order_war_size).
  size_t read_piece = 64 * 1024;
  // Per datagram endpoint with a secret: the senders its replay guard tracks at once
  // (xport/dgram_wire.h ReplayGuard).
  size_t dgram_senders = 1024;
  // Per RDM listener: connections up at once, and never more than half the process's
  // descriptor limit (RLIMIT_NOFILE). One that comes up beyond it takes the place of the least
  // recently active one that holds nothing in flight (or, if none does, of one whose message
  // waits for room and whose peer left, or of one that waited longer than connect_timeout_ms
  // for its peer or for room); its peer connects anew at its next send. Connections in their
  // handshake (at most cm_backlog) take no one's place unless, with those up, they reach half
  // the descriptor limit (xport/listener.h).
  size_t inbound_max = 1024;
  // Called with after_round_arg after every progress round, holding none of the transport's
  // locks: the provider publishes there what its owners' upcalls left in its outbox (the
  // asynchronous events they caused). Null: nothing.
  void (*after_round)(void* arg) = nullptr;
  void* after_round_arg = nullptr;
  // Where the transport's warnings go. Null: nowhere.
  void (*log)(LogLevel level, const char* message) = nullptr;
};

// What a connection is made for: the endpoint's side of it, fixed when it is made or adopted.
struct ConnParams {
  bool rdm = false;         // an RDM endpoint's connection: no CM events, made by the first send
  size_t max_msg_size = 0;  // the largest payload it accepts
  sockaddr_in src{};        // MSG: connect from this address when its port is not 0
  // The secret both ends prove in the handshake (core/hmac.h); null: peers are not
  // authenticated. Must outlive the connection.
  const core::HmacSha256* auth = nullptr;
};

// An RDM connection's connect data (Connection::connect): the connecting endpoint's name (its
// listener's address, which the peer's FI_SOURCE reports), the peer's receive context it is for
// (a scalable endpoint's fi_rx_context; 0 for an endpoint), and whether it takes no message
// back through the connection (a scalable endpoint's transmit context, which receives nothing:
// the peer connects to its name to answer). xport/wire.h kRdmRequestLong.
struct RdmConnectData {
  unsigned char bytes[20];
  size_t len;
};
RdmConnectData rdm_connect_data(const sockaddr_in& name, uint32_t rx, bool one_way);

// --- Sends

// What a TxOp asks of the peer.
enum class TxKind : uint8_t {
  kSend,    // a message (fi_msg(3), fi_tagged(3))
  kWrite,   // fi_write & co.: iov into the peer's region; completes on the peer's kRmaAck
  kRead,    // fi_read & co.: the peer's region into `result`
  kAtomic,  // fi_atomic & co.: executed on the peer's region; fetch forms fill `result`
};

// The forms of fi_atomic(3) (fi_atomic, fi_fetch_atomic, fi_compare_atomic).
using AtomicKind = core::AtomicKind;

// The target's answer to a one-sided request (the wire's Status): kOk, or why it touched no
// memory. The initiator's error completion reports it as prov_errno (fi_fabq.h).
enum class RmaStatus : uint8_t {
  kOk = 0,
  kBadKey = 1,        // no region of the target's domain has that key (or it was closed)
  kOutOfBounds = 2,   // the range is not inside the region
  kNotGranted = 3,    // the region, or the target endpoint, does not allow that access
  kBadAtomic = 4,     // an operation or datatype the target does not perform
  kTargetFailed = 5,  // the target endpoint is in its error state or closing
  kCopyFailed = 6,    // a direct copy (DirectCopy) was refused by the kernel, or some of the
                      // initiator's buffers were not mapped: the region may be partly written
};
inline constexpr uint8_t kLastRmaStatus = static_cast<uint8_t>(RmaStatus::kCopyFailed);

// When a send completes (fi_cq(3) COMPLETION EVENT SEMANTICS).
enum class TxLevel : uint8_t {
  kInject,    // the data has left the application's buffer (fabq's default)
  kTransmit,  // the peer's transport has acknowledged it
  kDelivery,  // the peer has placed it in a receive buffer
};

// One send, from post to completion. Slots live in the owner's transmit ring; the transport
// holds a pointer from submit() until it reports the send written, lost or aborted.
struct TxOp {
  // Written by the owner before submit():
  TxKind kind = TxKind::kSend;
  void* context = nullptr;
  uint64_t cq_flags = 0;  // FI_SEND | FI_MSG or FI_TAGGED, for the completion
  bool tagged = false;
  bool has_data = false;
  bool report = true;  // a CQ entry on success (selective completion may say no)
  TxLevel level = TxLevel::kInject;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint32_t seq = 0;
  size_t len = 0;  // the frame's payload: the sum of iov's lengths
  size_t iov_count = 0;
  iovec iov[kMaxTxIov] = {};
  Connection* conn = nullptr;  // the connection it is submitted to (an RDM endpoint has many)
  unsigned char inject[kInjectInline] = {};  // fi_inject / FI_INJECT: the data, copied, if it fits
  // One-sided (kWrite, kRead, kAtomic): the peer's region and the address in it. A kWrite with
  // has_data, a kRead and a kAtomic begin their iov with `prefix` (the CQ data, the length to
  // read, the atomic's description), which the owner fills with the helpers below.
  uint64_t key = 0;
  uint64_t addr = 0;
  unsigned char prefix[8] = {};
  // kRead, and kAtomic's fetch and compare forms: where the answer's bytes go (result_len of
  // them, which is what the peer must send).
  iovec result[kMaxIov] = {};
  size_t result_count = 0;
  size_t result_len = 0;
  // Owned by the transport while submitted:
  bool accepted = false;  // the connection took it (set under its lock in submit())
  // The connection sent it as a direct request or message (DirectCopy, wire.h kDirect): the
  // frame carries where its buffers are, `direct_desc` holds that description, and iov/len
  // were rewritten to it. Set before tx_written().
  bool direct = false;
  unsigned char direct_desc[16 * kMaxIov] = {};
  // ... and this process copied a part of it, which the target offered (shm.h "Sharing a
  // copy"). Set before the answer arrives; for statistics and tests.
  bool shared = false;
  // A read submitted before its connection was up: whether it goes direct is decided when it
  // is first written, once the connection knows whether it has shared memory.
  bool decide_later = false;
  unsigned char header[32] = {};
  size_t written = 0;  // header and payload bytes handed to the kernel
};

// --- Receives

// Which acknowledgement a sender asked for.
enum class AckWanted : uint8_t { kNone, kReceived, kDelivered };

// Writes the 8 prefix bytes of a one-sided TxOp: the CQ data of a kWrite, the length of a kRead.
void put_prefix_u64(TxOp* op, uint64_t v);
// ... the description of a kAtomic.
void put_prefix_atomic(TxOp* op, uint8_t fi_op, uint8_t datatype, AtomicKind kind, uint32_t count);

// What an arriving frame whose payload the owner places is.
enum class InKind : uint8_t {
  kMsg,         // a message for a receive
  kWrite,       // a remote write into the owner's region (key, addr); with has_data, the first
                // 8 payload bytes are its CQ data
  kReadResp,    // the answer to the owner's kRead `seq`
  kAtomicResp,  // the answer to the owner's kAtomic `seq`
};

// A message arriving on a connection, as its header describes it.
struct Incoming {
  InKind kind = InKind::kMsg;
  bool tagged = false;
  bool has_data = false;
  AckWanted ack = AckWanted::kNone;
  uint32_t seq = 0;
  uint64_t tag = 0;
  uint64_t data = 0;
  size_t len = 0;
  // RDM: the name (listening address) the sending endpoint announced when it connected, for
  // FI_SOURCE; family AF_UNSPEC on MSG connections.
  sockaddr_in from{};
  // RDM: the connection it arrived on, for its delivery acknowledgement.
  Connection* via = nullptr;
  // kWrite: the region and address it targets. kReadResp, kAtomicResp: the target's answer.
  uint64_t key = 0;
  uint64_t addr = 0;
  RmaStatus status = RmaStatus::kOk;
  // kReadResp: the answer to a direct read (TxOp::direct), whose bytes the target already
  // copied into the result buffers: no payload.
  bool direct = false;
  // kReadResp: a piece of an answer (wire.h): its bytes go at `offset` of the result, and
  // `more` pieces follow. The connection checks that the pieces of one answer come in order
  // and without a gap; the owner checks them against the request's length.
  bool more = false;
  // A datagram (Datagram) that came to a multicast group the owner joined (FI_MULTICAST).
  bool multicast = false;
  uint64_t offset = 0;  // kReadResp: see `more`
};

// The initiator's side of a direct request: its buffers stay in its own address space (a peer
// process of the same host whose memory the kernel lets this process reach, xport/shm.h), and
// the transport copies between them and the target's memory once the owner has checked the
// access. Valid only during the remote_access() call it is passed to.
class DirectCopy {
 public:
  // Moves the access's len bytes between the initiator's buffers and [at, at + len) of this
  // process: into it for a write, out of it for a read. False when the kernel refused or some
  // of the initiator's buffers were not mapped (some bytes may have moved).
  virtual bool copy(void* at) const = 0;

 protected:
  ~DirectCopy() = default;
};

// Which part of a remote read a RemoteAccess is: a read longer than TransportConfig::read_piece
// is checked whole first, then copied piece by piece, each piece checked again (its region may
// have been closed meanwhile). Only a whole access or the last piece counts as done (counters).
enum class AccessPart : uint8_t {
  kWhole,  // check, copy (or perform) and count
  kCheck,  // check only: touches no memory, counts nothing (`out` is null)
  kPiece,  // check and copy these len bytes; more pieces follow
  kLast,   // check, copy and count: the last piece
};

// A remote read or atomic for the owner's memory (kReadReq, kAtomic), or a direct write,
// handed over whole (or a read in parts: `part`).
struct RemoteAccess {
  uint64_t key = 0;
  uint64_t addr = 0;
  size_t len = 0;  // bytes of the region it touches
  Connection* via = nullptr;
  // A direct read or write: the owner checks the access, then calls direct->copy() instead of
  // copying into `out` (which is null). `write`: a kWrite (FI_REMOTE_WRITE), not a read.
  const DirectCopy* direct = nullptr;
  bool write = false;
  AccessPart part = AccessPart::kWhole;  // a plain read only; kWhole for everything else
  // kAtomic only:
  bool atomic = false;
  uint8_t op = 0;
  uint8_t datatype = 0;
  AtomicKind kind = AtomicKind::kPlain;
  uint32_t count = 0;
  const void* operand = nullptr;  // count values
  const void* compare = nullptr;  // kCompare: count values
};

// Where the owner wants an arriving message's payload: up to `capacity` bytes into `iov`; the
// rest is read and discarded (truncation). For a piece of a read's answer (Incoming::offset)
// the placement describes the whole result: the piece's bytes go at [offset, offset + len) of
// it, and capacity (at least offset + len) counts from its start. The connection keeps it from
// place() to placed() or unplace(), one message at a time per connection. `record` is the owner's
// note of what it chose: the transport keeps it with the placement and never reads it.
struct Placement {
  iovec iov[kMaxIov + 1] = {};
  size_t iov_count = 0;
  size_t capacity = 0;
  // kWrite: what the target answers (set in place() or placed()).
  RmaStatus status = RmaStatus::kOk;
  // kReadResp, kAtomicResp: the answer names no request awaiting it, or has the wrong length.
  // The connection fails (a protocol violation).
  bool bad = false;
  static constexpr size_t kRecordSize = 256;
  alignas(std::max_align_t) unsigned char record[kRecordSize] = {};

  // The record as the owner's type T: an implicit-lifetime type (trivially copyable, no larger
  // than the room), which the zeroed bytes hold as a value-initialised T until written.
  template <class T>
  T& as() {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kRecordSize &&
                  alignof(T) <= alignof(std::max_align_t));
    return *std::launder(reinterpret_cast<T*>(record));
  }
};

// Copies bytes[0..n) into p's buffers in order (n at most p.capacity).
inline void copy_into(const Placement& p, const unsigned char* bytes, size_t n) {
  for (size_t i = 0; i < p.iov_count && n > 0; ++i) {
    const size_t c = std::min(n, p.iov[i].iov_len);
    if (c > 0) std::memcpy(p.iov[i].iov_base, bytes, c);
    bytes += c;
    n -= c;
  }
}

// --- Upcalls

// What owns connections: an endpoint. The transport calls it, holding the connection's lock, as
// the connection's messages, acknowledgements and events arrive.
class Owner {
 public:
  // Where `in`'s payload goes. False: no room now (the connection stalls until resume()).
  virtual bool place(const Incoming& in, Placement* p) = 0;
  // `in`'s payload has arrived whole. True: send the delivery acknowledgement now. A kWrite is
  // answered with p->status whatever this returns.
  virtual bool placed(const Incoming& in, Placement* p) = 0;
  // A message (kMsg) that asks for no acknowledgement, whose whole payload is `bytes`
  // (in.len of them, readable for the call): what place(), copying and placed() do, in one
  // call; an owner may do it all under one lock. False: refused as place() refuses.
  virtual bool deliver(const Incoming& in, const unsigned char* bytes) {
    Placement p;
    if (!place(in, &p)) return false;
    copy_into(p, bytes, std::min(in.len, p.capacity));
    placed(in, &p);
    return true;
  }
  // The connection ended (or was destroyed) inside the message `p` was placing: its receive
  // goes back as if the message had never come.
  virtual void unplace(Placement* p) = 0;
  // After place() refused: true when only a full completion queue stood in the way. The owner
  // resumes the connection once the queue has room, as it does one refused for want of a
  // receive once one is posted (Connection::resume); nothing retries meanwhile, and a stalled
  // connection listens only for its peer's leaving. A datagram (Datagram) refused with false
  // is dropped.
  virtual bool take_retry() = 0;
  // RDM listener: whether the owner holds anything through open connection `c` that closing
  // it would lose: a delivery acknowledgement it owes through it, a thread that borrowed it.
  // False lets the listener close an idle `c` to make room for another (FI_FABQ_INBOUND_MAX);
  // its peer connects anew at its next send.
  virtual bool holds(const Connection* c) = 0;

  // RDM: connection `c`, accepted by the owner's listener, is up, and `name` is what its peer
  // announced (the peer endpoint's listening address). The owner may submit its own sends to
  // that peer through `c` (messages flow both ways on an RDM connection, so a reply carries the
  // transport's acknowledgement of the request) until `c` stops being open; `c` stays valid
  // at least until can_free(c) returns true.
  virtual void inbound_ready(Connection* c, const sockaddr_in& name) = 0;
  // A remote read (kReadReq): copies the access's len bytes into `out` and returns kOk, or
  // returns why not and copies nothing; a.part says whether that is the whole read, a check of
  // it before its pieces (nothing copied), or one of its pieces. A remote atomic (kAtomic):
  // performs it, writing the previous values into `out` (count * datatype size bytes) for the fetch
  // and compare forms. A direct read or write (a.direct): checks it as the others, then
  // a.direct->copy() moves the bytes (kCopyFailed when it returns false).
  virtual RmaStatus remote_access(const RemoteAccess& a, void* out) = 0;
  // The peer answered kWrite `seq` of `c` with `status`. False for a number that names no write
  // awaiting it (a protocol violation: the connection fails).
  virtual bool rma_acked(const Connection* c, uint32_t seq, RmaStatus status) = 0;
  // A send is written whole to the kernel (or the shared ring). A direct send (op->direct) is
  // not over then, whatever its level: its receiver copies from its buffers afterwards, and
  // acknowledges it (tx_acked: received, or delivered when its level asked for that).
  virtual void tx_written(TxOp* op) = 0;
  // A send the connection will not carry (an injected net=drop fault): it completes as if the
  // peer never answered, with `err` at the levels that wait for the peer.
  virtual void tx_lost(TxOp* op, int err) = 0;
  // The peer acknowledged send `seq` of `c`. False for a number that names no send awaiting
  // that acknowledgement (a protocol violation: the connection fails).
  virtual bool tx_acked(const Connection* c, uint32_t seq, bool delivered) = 0;
  // `c` is gone or never came up: every send it accepted and did not complete ends with `err`.
  virtual void abort_sends(Connection* c, int err) = 0;

  // MSG connection management, for the endpoint's EQ: FI_CONNECTED (with the peer's accept
  // data) or FI_SHUTDOWN when err is 0; else an error entry with err (FI_ECONNREFUSED with the
  // peer's reject data, FI_ETIMEDOUT, FI_ECONNABORTED, ...). Never for RDM connections.
  struct CmEvent {
    uint32_t event = 0;
    int err = 0;
    const void* data = nullptr;
    size_t len = 0;
  };
  virtual void cm_event(const CmEvent& e) = 0;
  // MSG: the connection is over, so nothing more can arrive (the owner ends its receives).
  virtual void connection_ended() = 0;
  // An asynchronous event the connection caused (fi_fabq.h: COMM_EST, SQ_DRAINED, EP_FATAL,
  // EP_REQ_ERR), raised once the caller's locks are released.
  virtual void async_event(uint32_t type) = 0;
  // A net= fault armed on the endpoint, consumed by the connection that applies it.
  virtual core::NetFault take_net_fault() = 0;
  // RDM listener: whether a closed connection it accepted may be freed (nothing the owner
  // keeps refers to it). Never called for connections the owner holds itself.
  virtual bool can_free(const Connection* c) = 0;
  // RDM listener: the owner of a connection it accepted whose peer connects to receive context
  // `rx` (wire::kRdmRequestLong), asked, holding the connection's lock, once its request is in
  // and before any message: this owner (an endpoint: rx 0), one of its receive contexts (a
  // scalable endpoint, whose listener it is), or null, and the request is refused. From then
  // on that owner gets the connection's upcalls; until the listener's release() for it.
  virtual Owner* route(uint32_t rx) { return rx == 0 ? this : nullptr; }

 protected:
  ~Owner() = default;
};

// What owns a passive listener: a passive endpoint.
class PassiveOwner {
 public:
  // A connection `pending` got its (authenticated) request from `peer` with connect data: the
  // owner reports it (FI_CONNREQ) and later adopts or rejects it through its PassiveListener.
  // False: it cannot be queued, and the connection is refused at once.
  virtual bool request(Connection* pending, const sockaddr_in& peer, const void* data,
                       size_t len) = 0;

 protected:
  ~PassiveOwner() = default;
};

// --- Downcalls

// A connection as an owner sees it. Owned by whoever holds the unique_ptr; destroying it closes
// the socket (and gives back a receive it was filling through unplace()).
// A message written into a shared-memory ring at once (Connection::send_inline()): no transmit
// slot; the caller's buffers are free on return.
struct InlineSend {
  const iovec* iov = nullptr;
  size_t iov_count = 0;
  size_t len = 0;  // of iov
  bool tagged = false;
  uint64_t tag = 0;
  bool has_data = false;
  uint64_t data = 0;
};

enum class InlineResult : uint8_t {
  kSent,   // its frame is in the ring
  kQueue,  // nothing was done: submit it as a TxOp
};

class Connection {
 public:
  virtual ~Connection() = default;
  // fi_connect: starts connecting; the outcome arrives through cm_event() (MSG) or
  // abort_sends() (RDM). 0, -FI_EISCONN, -FI_EADDRINUSE, -FI_EINVAL, -FI_EIO.
  virtual int connect(const sockaddr_in& peer, const void* data, size_t len) = 0;
  // A pending connection taken from a PassiveListener: `owner` takes it over. False if it ended
  // meanwhile (then nothing more comes of it).
  virtual bool adopt(Owner* owner, const ConnParams& params) = 0;
  // fi_accept on an adopted connection. 0, -FI_EOPBADSTATE, or -FI_ECONNABORTED when the peer
  // left meanwhile.
  virtual int accept(const void* data, size_t len) = 0;
  // fi_reject of a pending connection taken from a PassiveListener: kConnReject with `data`,
  // then closed. 0 or -FI_EOPBADSTATE.
  virtual int reject(const void* data, size_t len) = 0;
  // fi_shutdown: sends what is queued, then closes the sending side.
  virtual int shutdown() = 0;
  // A send from the owner's transmit ring. 0, or -FI_ENOTCONN / -FI_EOPBADSTATE when the
  // connection cannot carry it (the op stays the owner's).
  virtual int submit(TxOp* op) = 0;
  // A send's fast path (its owner completes it, if at all, once this returns kSent): writes its
  // frame into the shared-memory ring at once, if the connection moves its frames there,
  // nothing is queued before it and the ring has room for all of it. kQueue otherwise (on TCP,
  // during the handshake, behind other sends, ring full, closed): the caller submits it, which also
  // says why a connection cannot carry it. Applies no injected network fault: while its owner may
  // have one armed (take_net_fault()), the owner submits instead. Takes the connection's lock;
  // makes no upcall.
  virtual InlineResult send_inline(const InlineSend& s) = 0;
  // The owner placed a message it had buffered: send the delivery acknowledgement.
  virtual void ack_delivered(uint32_t seq) = 0;
  // The same from inside an upcall of another connection: queued and sent at this connection's
  // next progress round.
  virtual void ack_delivered_later(uint32_t seq) = 0;
  // Receives were posted or buffered messages consumed: a stalled connection may go on.
  virtual void resume() = 0;
  virtual int getname(void* addr, size_t* len) = 0;
  virtual int getpeer(void* addr, size_t* len) = 0;
  virtual bool connected() const = 0;
  // False once the connection has closed, failed or been refused: it carries nothing more.
  virtual bool open() const = 0;
};

// --- Datagrams (FI_EP_DGRAM): unreliable, unordered messages over UDP (xport/dgram_wire.h).

// The most payload one datagram carries (ep_attr->max_msg_size of FI_EP_DGRAM): the largest
// UDP payload over IPv4, 65507 bytes, less fabq's 24-byte header (xport/dgram_wire.h).
inline constexpr size_t kMaxDgramPayload = 65483;
// ... and with a shared secret, whose authentication takes 40 bytes more of each datagram.
inline constexpr size_t kMaxAuthDgramPayload = 65443;

// One message for Datagram::send(). The iov array and its buffers are read during the call only.
struct DgramSend {
  const iovec* iov = nullptr;
  size_t iov_count = 0;  // at most kMaxIov
  size_t len = 0;        // of iov
  bool has_data = false;
  uint64_t data = 0;
};

// Membership of a multicast group (Datagram::join()). Destroying it leaves the group: once the
// destructor returns, nothing sent to the group reaches the owner through it. The destructor
// takes the engine lock: not from an upcall.
class Membership {
 public:
  virtual ~Membership() = default;
};

// A datagram endpoint's UDP socket. Each datagram that arrives whole and well-formed goes to its
// Owner's deliver() (Incoming: kMsg, `from` the sender's address, `multicast` when it came to a
// joined group, `via` null), called by the thread that moves the bytes, holding the engine
// lock. One the owner refuses (deliver() false) waits if take_retry() then says only a full CQ
// stood in the way: nothing more is read from the socket (or its memberships') until the owner
// calls resume(), once the CQ has room, and it is offered again. Refused otherwise (no receive and
// no room to buffer it) it is dropped, as a full socket buffer drops one; so is one that is not
// fabq's or is damaged. Any thread may call send() and join(). Destroying it takes the engine lock
// and ends its upcalls; its memberships must be destroyed first.
//
// With a shared secret (open_datagram()'s `auth`) every datagram it sends, to an endpoint or a
// group, is authenticated (xport/dgram_wire.h: a MAC over its header, its payload and both
// addresses, and a sequence number), and it delivers only datagrams so authenticated under the
// same secret, each at most once; the rest are dropped (and logged, at most once a second).
// Without one, it sends and takes datagrams without authentication, and drops those that have
// it.
class Datagram {
 public:
  virtual ~Datagram() = default;
  // The address it is bound to.
  virtual sockaddr_in name() const = 0;
  // The most payload one datagram carries: kMaxDgramPayload, or kMaxAuthDgramPayload with a
  // secret.
  virtual size_t max_payload() const = 0;
  // Sends one datagram to `to` (an endpoint's address, or a multicast group) now, whole or not
  // at all. 0: handed to the kernel; with `fault` kDrop, dropped on purpose instead; with
  // kCorrupt, sent with a damaged header, which its receiver drops. -FI_EMSGSIZE (more than
  // max_payload() bytes), -FI_EAGAIN (the socket's buffer is full), -FI_EHOSTUNREACH,
  // -FI_ENETUNREACH, -FI_EIO.
  virtual int send(const sockaddr_in& to, const DgramSend& s, core::NetFault fault) = 0;
  // Joins the multicast group `group` (its address and port) on the interface of this socket's
  // address (the kernel's choice when that is INADDR_ANY): from now on the owner receives what
  // is sent there. Null with *err: -FI_EINVAL (not a multicast address, or port 0),
  // -FI_EADDRINUSE, -FI_EADDRNOTAVAIL (no interface to join it on), -FI_EIO.
  virtual std::unique_ptr<Membership> join(const sockaddr_in& group, int* err) = 0;
  // The datagram that waits for room (take_retry()) is offered again at the next progress
  // round. Takes only the engine's scheduling lock (a leaf): any thread, under any lock.
  virtual void resume() = 0;
};

// An RDM endpoint's listening socket. Every connection it accepts is another endpoint's
// connection to its owner: accepted at once (no CM events), it carries the peer's messages in
// (and, once inbound_ready() named it, the owner's messages back) and lives until the listener
// is destroyed or the peer goes away.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual int getname(void* addr, size_t* len) = 0;
  // Frees the accepted connections that closed and that the owner no longer refers to.
  virtual void sweep() = 0;
  // Closes and frees every connection it accepted that Owner::route() gave to `owner`: no
  // upcall reaches `owner` through them once this returns. Takes the engine lock; call it
  // holding no connection's or owner's lock, and only once route() no longer gives `owner`.
  virtual void release(Owner* owner) = 0;
};

// A passive endpoint's listening socket: each accepted connection waits for its request, which
// goes to the PassiveOwner, then for take() (to be adopted or rejected). Destroying it refuses
// every connection not taken.
class PassiveListener {
 public:
  virtual ~PassiveListener() = default;
  // Binds and listens at `at` (port 0: the kernel picks); *bound is the address it got.
  // 0, -FI_EADDRINUSE, -FI_EINVAL or -FI_EIO.
  virtual int listen(const sockaddr_in& at, sockaddr_in* bound) = 0;
  // The pending connection `pending` (as request() named it), taken out of the listener for
  // Connection::adopt() or Connection::reject(). Null if it is not one of its own any more.
  virtual std::unique_ptr<Connection> take(Connection* pending) = 0;
};

// One per fabric: the progress engine of every connection and listener on it, and the factory
// of both. Destroy it only after everything it made.
class Transport {
 public:
  virtual ~Transport() = default;
  // Non-blocking I/O on every connection of the fabric. Returns at once if another thread is
  // already doing it.
  virtual void progress() = 0;
  // A thread is about to block on a queue of this fabric / has stopped blocking.
  virtual void begin_wait() = 0;
  virtual void end_wait() = 0;
  // A progress round (and the after_round call after it) soon: wakes the progress thread if
  // somebody waits; otherwise the next progress() is that round. Takes no lock: any thread,
  // under any lock.
  virtual void wake() = 0;
  // A fresh connection of `owner`, for connect().
  virtual std::unique_ptr<Connection> make_connection(Owner* owner, const ConnParams& params) = 0;
  // An RDM endpoint's listener at `at` (port 0: one the kernel picks). Null with *err set
  // (-FI_EADDRINUSE, -FI_EINVAL, -FI_EIO) on failure.
  virtual std::unique_ptr<Listener> open_listener(Owner* owner, const ConnParams& params,
                                                  const sockaddr_in& at, int* err) = 0;
  // A passive endpoint's listener; it listens from listen() on. `auth` as for ConnParams.
  virtual std::unique_ptr<PassiveListener> open_passive(PassiveOwner* owner,
                                                        const core::HmacSha256* auth) = 0;
  // A datagram endpoint's socket, bound at `at` (port 0: one the kernel picks), whose datagrams
  // are authenticated under `auth` (the shared secret, read during the call only; null: none).
  // Null with *err set on failure: -FI_EADDRINUSE, -FI_EIO, -FI_EMFILE, -FI_EINVAL (also: a
  // secret with `at` INADDR_ANY, since the MAC covers the address a datagram leaves from).
  virtual std::unique_ptr<Datagram> open_datagram(Owner* owner, const sockaddr_in& at,
                                                  const core::HmacSha256* auth, int* err) = 0;
};

// --- The TCP transport (src/xport/tcp_*.cc), the one this library provides.

// A transport over TCP (and shared memory between endpoints of one host).
std::unique_ptr<Transport> make_tcp_transport(const TransportConfig& config);
// The provider is being unloaded: stops and joins every progress thread of every TCP transport,
// open or not (their code is about to be unmapped), and frees what the transport keeps for the
// whole process. Nothing of it may be used afterwards.
void unload_tcp();

}  // namespace fabq::xport
