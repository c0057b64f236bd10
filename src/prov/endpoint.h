// fabq provider: FI_EP_MSG and FI_EP_RDM endpoints (fi_endpoint(3), fi_cm(3), fi_msg(3),
// fi_tagged(3)). Shared receive contexts: prov/srx.h; the op tables: ep_ops.cc.
//
// An endpoint is the libfabric object: its bindings (EQ, AV, CQs, counters, SRX), its transmit
// ring, its receive queue (or its SRX's), matching, completions and counters. Bytes move in
// the transport (xport/transport.h), whose Owner it is: an MSG endpoint through its one Connection;
// an RDM endpoint through one outgoing Connection per peer it sends to, made on its first send to
// that peer's fi_addr_t, and the connections its Listener accepts from peers that send to it.
//
// RDM (reliable, unconnected): fi_enable opens the listener at the endpoint's source address
// (fi_getname gives it). A send to an fi_addr_t of the bound AV is queued on the connection to
// that peer and written once it is established; messages from one endpoint to another arrive in
// order. A peer that cannot be reached, refuses, or goes away fails the sends queued to it (an
// error completion: FI_ECONNREFUSED, FI_ETIMEDOUT, FI_EHOSTUNREACH, FI_ECONNABORTED); the
// endpoint itself stays usable, and the next send to that peer connects anew. With FI_SOURCE,
// a receive completion's source is the sender's fi_addr_t in the AV (FI_ADDR_NOTAVAIL when the
// AV does not hold it).
//
// Sends: fi_send, sendv, sendmsg, inject, senddata, injectdata and the tagged equivalents. A
// send takes a slot of the transmit ring (tx_attr.size; none free: -FI_EAGAIN) and, when a
// transmit CQ is bound, a slot of that CQ (full: -FI_EAGAIN), so its completion can never be
// lost. fi_inject and FI_INJECT copy the data (at most inject_size bytes); fi_inject writes no
// completion. Completion levels: FI_INJECT_COMPLETE (the default), FI_TRANSMIT_COMPLETE,
// FI_DELIVERY_COMPLETE (xport/transport.h TxLevel). With FI_SELECTIVE_COMPLETION bound, only
// sends with FI_COMPLETION write a successful completion; failures always do.
//
// One-sided (prov/rma_ops.cc, fi_rma(3), fi_atomic(3)): reads, writes and atomics take a slot
// of the transmit ring as sends do and complete when the target has answered (delivery
// complete). As a target, the endpoint checks every peer's request against its domain's regions
// (prov/mr.h) and its own capabilities before it touches memory (place(), remote_access()).
//
// Receives: fi_recv, recvv, recvmsg, trecv, trecvv, trecvmsg (FI_PEEK, FI_CLAIM, FI_DISCARD).
// Each posted receive holds a slot of the receive CQ. A message longer than its receive
// buffer completes in error: err FI_ETRUNC, olen = the bytes that did not fit. fi_cancel
// completes a posted receive with FI_ECANCELED.
//
// Asynchronous events (fi_fabq.h): an endpoint after EP_FATAL, EP_REQ_ERR or EP_ACCESS_ERR
// completes every posted receive in error (err FI_EIO, prov_errno = the event) and refuses
// posts with -FI_EOPBADSTATE.
//
// Threads: every call may come from any thread (FI_THREAD_SAFE); each object has one mutex.
// Lock order (docs/locking.md): the endpoint's lock (Endpoint::mu_) after the transport's, then
// its SRX's (Srx::mu_); under them only leaves (a CQ's, the fabric's outbox).
#pragma once

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "core/hmac.h"
#include "core/mutex.h"
#include "prov/events.h"
#include "prov/mr.h"
#include "prov/object.h"
#include "prov/recv_queue.h"
#include "prov/tx_ring.h"
#include "xport/transport.h"

namespace fabq::core {
struct CompletionError;
}  // namespace fabq::core

namespace fabq::prov {

class Av;
class Cntr;
class Cq;
class Domain;
class Eq;
class Mc;
class Outbox;
class Sep;
class Srx;
class Stx;

// What an endpoint is: a plain endpoint (fi_endpoint), or one of a scalable endpoint's transmit
// or receive contexts (fi_tx_context, fi_rx_context; prov/sep.h). A transmit context sends
// (and reads, writes, atomics) and receives nothing: its receive calls are -FI_ENOSYS. A
// receive context receives, and is what peers' messages to fi_rx_addr(addr, index, bits)
// reach: its send calls are -FI_ENOSYS. Both take the AV bound to their scalable endpoint and
// speak under its name.
enum class EpRole : uint8_t { kEndpoint, kTxContext, kRxContext };
struct EpContext {
  Sep* sep = nullptr;  // held while the context is open
  EpRole role = EpRole::kEndpoint;
  uint32_t index = 0;
};

// The sum of the `count` buffers' lengths in *total; false (and *total unspecified) when it
// wraps the address space.
inline bool iov_total(const iovec* iov, size_t count, size_t* total) {
  *total = 0;
  for (size_t i = 0; i < count; ++i) {
    if (__builtin_add_overflow(*total, iov[i].iov_len, total)) return false;
  }
  return true;
}

// Whether the `count` buffers are ones the application could have: each no bytes, or some at an
// address, and all of them together fewer than the address space holds. A null address with a
// length would be written to (or read from) only when a message moves, far from the call; lengths
// whose sum wraps would make a long buffer list look short. Sends and one-sided operations check
// their buffers with it.
inline bool valid_buffers(const iovec* iov, size_t count) {
  if (count > 0 && iov == nullptr) return false;
  for (size_t i = 0; i < count; ++i) {
    if (iov[i].iov_base == nullptr && iov[i].iov_len > 0) return false;
  }
  size_t total = 0;
  return iov_total(iov, count, &total);
}

using xport::TxKind;

// FI_MSG_PREFIX: moves `first`, a message's first buffer, past the `prefix` bytes in front of
// the message; false (nothing changed) when it is shorter than that.
inline bool skip_prefix(iovec* first, size_t prefix) {
  if (first->iov_len < prefix) return false;
  first->iov_base = static_cast<char*>(first->iov_base) + prefix;
  first->iov_len -= prefix;
  return true;
}

// The error completion of the posted receive `r` (err, prov_errno), an endpoint's or an SRX's.
core::CompletionError recv_error(const PostedRecv& r, int err, int prov_errno);

// One send as fi_send, fi_tsend and the rest of fi_msg(3) and fi_tagged(3) ask for it. The iov
// array is the caller's and is read during the call only; so are the buffers it names when the
// data is copied (FI_INJECT, inject_call), else they stay the application's until the send
// completes.
struct SendRequest {
  const iovec* iov = nullptr;  // iov_count buffers, at most kMaxIov
  size_t iov_count = 0;
  fi_addr_t dest = FI_ADDR_UNSPEC;  // RDM: the peer's fi_addr_t in the bound AV; MSG: ignored
  void* context = nullptr;          // the completion's op_context
  uint64_t flags = 0;               // FI_INJECT, FI_COMPLETION, a completion level
  bool tagged = false;              // fi_tsend & co.
  uint64_t tag = 0;                 // tagged only
  bool has_data = false;            // remote CQ data goes with it
  uint64_t data = 0;                // has_data only
  bool inject_call = false;         // fi_inject & co.: copied, no completion, no CQ slot
  // One-sided (fi_rma(3), fi_atomic(3)): what it asks of the peer's region `key` at `addr`.
  // iov is what a write writes or an atomic's operands; a read reads result_len bytes into
  // `result`, and an atomic's fetch and compare forms put the previous values there.
  xport::TxKind kind = xport::TxKind::kSend;
  uint64_t key = 0;
  uint64_t addr = 0;
  const iovec* result = nullptr;  // result_count buffers, at most kMaxIov
  size_t result_count = 0;
  const iovec* compare = nullptr;  // kCompare: as many bytes as iov
  size_t compare_count = 0;
  // kAtomic:
  xport::AtomicKind atomic_kind = xport::AtomicKind::kPlain;
  int atomic_op = 0;
  int datatype = 0;
  size_t count = 0;  // elements
};

// The most bytes an endpoint's transfers of each kind carry, and copy when injected:
// ep_attr->max_msg_size (an atomic's also at most xport::kMaxAtomicBytes) and inject_size at
// open, which the application may lower, never raise, with FI_OPT_MAX_*_SIZE and
// FI_OPT_INJECT_*_SIZE (libfabric >= 1.22). Any thread; relaxed: a post racing fi_setopt
// checks against the old limit or the new one.
class OpLimits {
 public:
  enum class Kind : uint8_t { kMsg, kTagged, kRma, kAtomic };
  static constexpr size_t kKinds = 4;
  static Kind of(const SendRequest& req) {
    switch (req.kind) {
      case xport::TxKind::kSend:
        return req.tagged ? Kind::kTagged : Kind::kMsg;
      case xport::TxKind::kWrite:
      case xport::TxKind::kRead:
        return Kind::kRma;
      case xport::TxKind::kAtomic:
        return Kind::kAtomic;
    }
    return Kind::kMsg;
  }

  OpLimits(size_t max_msg_size, size_t inject_size);
  size_t max(Kind k) const { return max_[index(k)].load(std::memory_order_relaxed); }
  size_t inject(Kind k) const { return inject_[index(k)].load(std::memory_order_relaxed); }
  // false (and nothing changes) when `bytes` is above the limit at open.
  bool set_max(Kind k, size_t bytes);
  bool set_inject(Kind k, size_t bytes);

 private:
  static size_t index(Kind k) { return static_cast<size_t>(k); }
  std::array<size_t, kKinds> max_ceiling_;
  size_t inject_ceiling_;
  std::array<std::atomic<size_t>, kKinds> max_;
  std::array<std::atomic<size_t>, kKinds> inject_;
};

// What an endpoint notes of a placement (Placement::record): the receive it chose, or the buffer.
struct PlaceRecord {
  enum class Kind : uint8_t {
    kNone,
    kPosted,
    kUnexpected,
    kDiscard,
    kRemoteWrite,  // a peer's write into a region (granted, or refused with Placement::status)
    kAnswer,       // the answer to this endpoint's read or atomic `op`
  };
  Kind kind = Kind::kNone;
  PostedRecv recv;                   // kPosted: the receive it fills
  Unexpected* unexpected = nullptr;  // kUnexpected: the buffer it fills
  // kRemoteWrite: the region it writes into (held until placed), whether its CQ data takes a
  // receive CQ slot (reserved), and the CQ data, read into here.
  RegionUse use;
  bool cq_slot = false;
  uint64_t cq_data = 0;
  xport::TxOp* op = nullptr;  // kAnswer
};

class Endpoint final : public Object, public AsyncTarget, public xport::Owner {
 public:
  static Endpoint* from_fid(const fid* f);
  Endpoint(Domain* domain, const fi_info& info, void* context, EpContext ctx = {});
  ~Endpoint() override;
  fid_ep* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  Eq* eq() FABQ_EXCLUDES(mu_);
  Srx* srx() FABQ_EXCLUDES(mu_);
  // Without the endpoint's lock: an SRX asks while holding its own (lock order: endpoint, SRX).
  Cq* rx_cq() const { return rx_cq_.load(std::memory_order_acquire); }
  // What fail() did: whether the endpoint was failed now (not before), and the events the
  // error completions of its receives raise on its receive CQ (CQ fault rules), which the
  // caller raises: it holds the domain's lock (Domain::raise_locked).
  // FI_OPT_MIN_MULTI_RECV's default, as libfabric's tcp provider has it.
  static constexpr size_t kDefaultMinMultiRecv = 16384;
  struct Failure {
    bool first = false;
    Cq* cq = nullptr;
    std::vector<uint32_t> cq_events;
  };
  // Puts the endpoint in the error state and fails its posted receives with `type` as
  // prov_errno. Takes the endpoint's lock; raises nothing.
  [[nodiscard]] Failure fail(uint32_t type) FABQ_EXCLUDES(mu_);
  // The largest message it accepts (ep_attr->max_msg_size), whatever FI_OPT_MAX_MSG_SIZE says
  // of what it sends.
  size_t max_msg_size() const { return max_msg_size_; }
  OpLimits& limits() { return limits_; }
  bool rdm() const { return rdm_; }
  bool dgram() const { return dgram_; }
  // fi_join (DGRAM with FI_MULTICAST, prov/mc.h): 0 with *mc set and the outcome on the EQ
  // later (FI_JOIN_COMPLETE or an error entry), or -FI_EINVAL (a null argument, an address that
  // is not an IPv4 multicast group with a port, a direction the endpoint lacks), -FI_EBADFLAGS
  // (flags other than 0, FI_SEND, FI_RECV), -FI_EOPNOTSUPP (no FI_MULTICAST), -FI_ENOEQ,
  // -FI_EOPBADSTATE (not enabled, or failed), -FI_ENOMEM, -FI_EAGAIN (the EQ has no room for
  // the outcome, whose slot is reserved first: nothing joined, the EQ untouched), -FI_EOVERRUN
  // (the EQ is overrun).
  int join(const void* addr, uint64_t flags, fid_mc** mc, void* context) FABQ_EXCLUDES(mu_);
  // A membership is closing: sends to its fi_addr_t are refused from now on.
  void leave(const Mc* mc) FABQ_EXCLUDES(mu_);
  // The secret its connections prove (prov/auth.h); null when none. Fixed at open.
  const core::HmacSha256* auth_key() const { return auth_ ? &*auth_ : nullptr; }

  // What its connections are made with (xport/transport.h ConnParams): its source address
  // (fi_setname may change it until fi_enable) among them.
  xport::ConnParams conn_params_locked() const FABQ_REQUIRES(mu_);

  // --- xport::Owner: called by the transport holding the connection's lock. Each takes mu_
  // (and its SRX's lock after it) and queues the events it causes in the outbox.
  // Where `in`'s payload goes. False: no room now (the connection stalls and asks again).
  bool place(const Incoming& in, Placement* p) override;
  // `in`'s payload has arrived whole. True: send the delivery acknowledgement now.
  bool placed(const Incoming& in, Placement* p) override;
  bool deliver(const Incoming& in, const unsigned char* bytes) override;
  // The connection ended inside the message `p` was placing: its receive goes back (a buffered
  // part is dropped), as if the message had never come: to the oldest message buffered
  // meanwhile that it matches, else to the head of the queue.
  void unplace(Placement* p) override;
  // After place() refused: true when only a full CQ stood in the way, which no post will
  // change: the endpoint waits for the CQ's room (Fabric::wait_for_room()) and resumes the
  // connection then.
  bool take_retry() override;
  // RDM: the peer named `name` connected to this endpoint's listener through `c`: sends to that
  // peer go through `c` while this endpoint has no connection of its own to it.
  void inbound_ready(Connection* c, const sockaddr_in& name) override;
  // A peer's remote read or atomic on this endpoint's domain's regions (prov/mr.h).
  xport::RmaStatus remote_access(const xport::RemoteAccess& a, void* out) override;
  // The peer's answer to one of this endpoint's writes: the write completes (in error unless
  // kOk). False for a number that names no write awaiting its answer.
  bool rma_acked(const Connection* c, uint32_t seq, xport::RmaStatus status) override;
  // A send is written whole to the kernel / acknowledged by the peer. tx_acked() is false for a
  // sequence number that names no send awaiting that acknowledgement (a protocol violation).
  void tx_written(TxOp* op) override;
  // A send the connection will not carry (a net=drop fault): it completes as if the peer never
  // answered: successfully at the inject level, with `err` at the others.
  void tx_lost(TxOp* op, int err) override;
  bool tx_acked(const Connection* c, uint32_t seq, bool delivered) override;
  // Connection `c` is gone or never came up (called holding its lock): every send it accepted
  // in submit() and did not complete yet completes with `err`.
  void abort_sends(Connection* c, int err) override;
  // FI_CONNECTED (with the peer's data) or FI_SHUTDOWN for the EQ, or an error entry.
  void cm_event(const CmEvent& e) override;
  // MSG: the connection is over (the peer closed it, or it never came up), so nothing more can
  // arrive: the posted receives complete in error with FI_ECANCELED, and so does every receive
  // posted from now on that no buffered message matches. Shared receives stay with their SRX.
  void connection_ended() override;
  // Queued in the fabric's outbox, raised once the transport's locks are released.
  void async_event(uint32_t type) override;
  core::NetFault take_net_fault() override { return AsyncTarget::take_net_fault(); }
  // The listener may free a closed connection it accepted: no thread holds it outside the
  // endpoint's lock. Its buffered messages forget it (RecvQueue::forget()).
  bool can_free(const Connection* c) override;
  // A thread borrowed one of its connections, or a buffered message owes a delivery
  // acknowledgement through `c`.
  bool holds(const Connection* c) override;

  // The connections that stalled in place() (no receive, no room to buffer) are resumed by a
  // post that changes that, or by a receive given back (unplace). Each stall is recorded under
  // the endpoint's lock and taken under it to be resumed, so no resume is lost.
  void resume_if_stalled() FABQ_EXCLUDES(mu_);
  // Held by a thread about to call it without its lock (Fabric::resume_room_waiters()): it is
  // not destroyed until unborrow(). Unlike borrowed_, keeps no connection from being freed.
  void borrow() { held_.fetch_add(1, std::memory_order_relaxed); }
  void unborrow() { held_.fetch_sub(1, std::memory_order_release); }

 private:
  friend struct EpOps;
  friend struct RmaOps;
  template <class T>
  friend struct Receives;
  friend class Srx;
  friend int open_endpoint(fid_domain*, fi_info*, fid_ep**, void*);
  // Fills box_: the fid's common part, its op tables (ep_ops.cc) and its owner.
  void init_box(void* context);
  // `c` closed: its buffered messages forget it; true when no thread borrows a connection.
  // Takes the SRX's lock if there is one.
  bool unreferenced_locked(const Connection* c) FABQ_REQUIRES(mu_);
  // A slot of the receive CQ `cq` (null: none needed) for a message: true, or false when it has
  // none, and then the endpoint waits for its room (Fabric::wait_for_room()). Under mu_ (and
  // the SRX's lock for a shared receive); touches nothing it guards.
  bool rx_slot(Cq* cq);
  // Buffers `in` in `q` (the endpoint's queue, or its SRX's whose lock is held) if the bounds
  // let it (RecvQueue::try_add()); when the fabric's budget is what is full, the endpoint waits
  // for it as for a CQ's room.
  Unexpected* buffer_locked(RecvQueue& q, const Incoming& in) FABQ_REQUIRES(mu_);
  // Takes mu_. `src`: the receive's src_addr; where directed_ applies to the receive (RDM),
  // anything but FI_ADDR_UNSPEC selects that sender's messages only, and an fi_addr_t the AV
  // does not hold, or FI_ADDR_UNSPEC under FI_EXACT_DIRECTED_RECV, is -FI_EINVAL. An FI_CLAIM
  // receive finds its message by context; `src` is not read. `r` is the caller's scratch: it is
  // changed on the way (flags, owner).
  ssize_t post_recv(PostedRecv& r, fi_addr_t src);
  ssize_t cancel(void* context);
  // Takes mu_. 0: posted (or failed at once by an injected fault, its error completion written).
  // Else nothing is posted: -FI_EINVAL (more than kMaxIov buffers, a null one with a length,
  // RDM: dest not in the AV), -FI_EMSGSIZE (longer than max_msg_size, or a copied send longer
  // than kInjectSize), -FI_EOPBADSTATE (not enabled, or failed), -FI_ENOTCONN (MSG: not
  // connected), -FI_EAGAIN (no free slot in the ring; RDM: the peer's connection closed
  // meanwhile), the transmit CQ's refusal of a slot (full: -FI_EAGAIN), or the transport's error.
  // With FI_MSG_PREFIX, the first prefix bytes of a message's buffers are the prefix, not sent:
  // -FI_EINVAL when iov[0] is shorter.
  ssize_t post_send(const SendRequest& req) {
    if (prefix_ == 0 || req.kind != TxKind::kSend) [[likely]] {
      return post_payload(req);
    }
    return post_prefixed(req);
  }
  // post_send's fast path for a message of at most kInlineSendMax bytes at the default
  // completion level (FI_INJECT_COMPLETE) to a peer whose connection moves frames through shared
  // memory: written into the ring at once, with no transmit slot and no upcall, then completed
  // (fi_inject & co.: counted only). kNotInline when the ordinary path must take it (no
  // connection yet, a higher completion level, a fault rule armed, no CQ slot free, the ring
  // busy or full, any error), having done nothing.
  static constexpr ssize_t kNotInline = 1;
  static constexpr size_t kInlineSendMax = 8192;
  ssize_t post_payload(const SendRequest& req);
  ssize_t post_prefixed(const SendRequest& req);
  ssize_t send_inline(const SendRequest& req, size_t len) FABQ_EXCLUDES(mu_);
  // DGRAM: the whole of a send (len: its payload), handed to the kernel at once and completed
  // (or refused) before it returns.
  ssize_t send_dgram(const SendRequest& req, size_t len) FABQ_EXCLUDES(mu_);
  // RDM: the connection to `dest` (made if there is none, or the last one closed), under mu_.
  // *fresh says it is new and must be connected once mu_ is released; a closed one it replaces
  // goes to *dead, to be destroyed then too.
  // With FI_NAMED_RX_CTX, `dest` may name a receive context of a scalable endpoint (the AV's
  // rx_ctx_bits): the connection is to that context. *hello is what a fresh connection tells
  // its peer (xport::rdm_connect_data): this endpoint's name and that context; a transmit
  // context's carry its scalable endpoint's name and take nothing back, and are
  // -FI_EOPBADSTATE until that endpoint is enabled.
  Connection* peer_locked(fi_addr_t dest, bool* fresh, sockaddr_in* peer,
                          std::vector<std::unique_ptr<Connection>>* dead, int* err,
                          xport::RdmConnectData* hello) FABQ_REQUIRES(mu_);
  // The peers_ entry for address `sa` and receive context `rx`, added if there is none.
  struct Peer;
  Peer& peer_entry_locked(const sockaddr_in& sa, uint32_t rx) FABQ_REQUIRES(mu_);
  int enable() FABQ_EXCLUDES(mu_);
  // Records that the connection `in` came through stalled; returns false (place() refuses).
  bool stall_locked(const Incoming& in) FABQ_REQUIRES(mu_);
  // A buffered message was consumed by a receive posted now: its delivery acknowledgement, if
  // the sender asked for one, is owed through the connection it came on (*ack_conn, borrowed
  // until sent, and *ack_seq), and a connection that stalled may go on (*resume).
  void consumed_locked(const Unexpected* u, Connection** ack_conn, uint32_t* ack_seq, bool* resume)
      FABQ_REQUIRES(mu_);
  // The rest of the buffered message `u` of queue `q` has arrived: a receive waiting for it
  // completes. False: none waits, its acknowledgement is owed when one takes it. Under mu_
  // and, when q is its SRX's, the SRX's lock.
  bool arrived_locked(Unexpected* u, RecvQueue& q, std::vector<uint32_t>* events)
      FABQ_REQUIRES(mu_);
  // unplace() with the locks taken: q is the queue its messages go to, the SRX's when `shared`
  // (whose lock the caller holds too).
  void unplace_locked(Placement* p, RecvQueue& q, bool shared) FABQ_REQUIRES(mu_);
  // Completes a receive with the message `in` whose payload is in `p` (placed bytes `placed`).
  // Under the lock of the receive's queue: the endpoint's, or its SRX's (an SRX completes its
  // receives on the endpoint whose message they take, without that endpoint's lock). What it
  // reads of the endpoint is fixed once it is enabled.
  // `release`: the last completion of a multi-receive buffer (FI_MULTI_RECV set; written even
  // when selective completion would suppress it).
  void complete_recv(const PostedRecv& r, const Incoming& in, size_t placed,
                     std::vector<uint32_t>* events, bool release = false);
  // post_recv()'s usual case: a plain receive (no multi-receive, peek, claim or armed fault)
  // for which nothing is buffered waits in the queue. nullopt when the whole path must decide
  // (directed receives, a buffered message, an ended connection); else what post_recv returns.
  std::optional<ssize_t> post_waiting(PostedRecv& r) FABQ_EXCLUDES(mu_);
  // A slice of a multi-receive buffer of this endpoint's queue or its SRX's (whose lock it
  // takes) completed: whether its completion releases the buffer (RecvQueue::slice_done).
  // False for any other receive.
  bool released_here_locked(const PostedRecv& r) FABQ_REQUIRES(mu_);
  // A receive left the queue without a message (cancel, failure): its error completion
  // releases its multi-receive buffer if no slice of it is being filled.
  void mark_release_locked(const PostedRecv& r, core::CompletionError* e) FABQ_REQUIRES(mu_);
  // FI_SOURCE: the sender's fi_addr_t, or FI_ADDR_NOTAVAIL.
  fi_addr_t source_of(const Incoming& in) const;
  // The error completion of a receive that held no CQ slot (it waited for a message). Adds the
  // CQ's events to raise to *events: CQ_ERR, once, when there is no room (the CQ overruns).
  void write_unreserved_error_locked(Cq* cq, const core::CompletionError& e,
                                     std::vector<uint32_t>* events) FABQ_REQUIRES(mu_);
  // FI_SOURCE_ERR: `in` came from a sender the AV does not name (`named`: source_of(in)).
  bool unknown_sender(const Incoming& in, fi_addr_t named) const;
  // Copies a buffered message into `r` and completes it.
  void deliver_unexpected(const PostedRecv& r, const Unexpected& u, std::vector<uint32_t>* events,
                          bool release = false);
  // A multi-receive buffer posted: takes the buffered messages it can hold (each a slice with
  // its CQ slot; the first uses `slot`, the one post_recv reserved) and posts what is left.
  // True when one of them used it up. Under mu_.
  bool post_multi_locked(PostedRecv& r, bool slot, std::vector<uint32_t>* events, bool* resume)
      FABQ_REQUIRES(mu_);
  // A receive given back (its message broke off, or the endpoint whose message it waited for
  // closed) goes where one posted now would: to the oldest buffered message of `q` it matches,
  // else to the head of `q` (its old place). Under the lock of q's owner (an endpoint, and the
  // SRX's when `shared`: q is an SRX's, whose receives take a CQ slot when a message picks them).
  static void give_back_locked(RecvQueue& q, PostedRecv r);
  // Completes the send in `op` (`err` 0: successfully) on the transmit CQ and counter, and frees
  // its slot.
  void finish_send(TxOp* op, int err, std::vector<uint32_t>* events,
                   xport::RmaStatus status = xport::RmaStatus::kOk) FABQ_REQUIRES(mu_);
  // place() under mu_.
  bool place_locked(const Incoming& in, Placement* p) FABQ_REQUIRES(mu_);
  // placed() under mu_; the CQ events it causes are added to the outbox, *events is scratch.
  bool placed_locked(const Incoming& in, Placement* p, std::vector<uint32_t>* events)
      FABQ_REQUIRES(mu_);
  // place() of a peer's write and of the answer to this endpoint's read or atomic.
  bool place_write_locked(const Incoming& in, Placement* p) FABQ_REQUIRES(mu_);
  bool place_answer_locked(const Incoming& in, Placement* p) FABQ_REQUIRES(mu_);
  // A peer's write is in the region: its counters, its CQ data's completion.
  void wrote_locked(const Incoming& in, PlaceRecord& rec, std::vector<uint32_t>* events)
      FABQ_REQUIRES(mu_);
  // Whether the endpoint lets peers read / write its domain's regions (FI_REMOTE_READ /
  // FI_REMOTE_WRITE among its capabilities, or FI_RMA/FI_ATOMIC with neither named).
  bool grants(uint64_t remote_access) const;
  // Whether a read longer than FI_FABQ_RMA_READ_PIECE is outstanding (FI_FENCE waits for it).
  bool long_read_pending_locked() FABQ_REQUIRES(mu_);
  // A peer's one-sided request was refused: on an MSG endpoint, the access error of its queue
  // pair (FI_FABQ_EVENT_EP_ACCESS_ERR, which fails the endpoint as verbs fails the QP); on RDM
  // a warning, since one peer must not bring down an endpoint every other peer shares.
  void refused_locked(xport::RmaStatus status) FABQ_REQUIRES(mu_);
  Connection* connection() FABQ_EXCLUDES(mu_);
  // Its fabric's (prov/outbox.h): where code under its lock, or in an upcall, queues the
  // asynchronous events it causes; published after each downcall that may have queued some.
  Outbox& outbox() const;

  FidBox<fid_ep> box_;
  Domain* const domain_;
  const size_t rx_size_;
  const size_t tx_size_;
  const size_t iov_limit_;
  const size_t max_msg_size_;
  // FI_MSG_PREFIX (info mode and ep_attr->msg_prefix_size): the prefix in front of every
  // message buffer, sent and received; 0 without the mode.
  const size_t prefix_;
  OpLimits limits_;
  const uint64_t tx_op_flags_;
  const uint64_t rx_op_flags_;
  // After the transport's locks, before its SRX's (docs/locking.md).
  core::Mutex mu_;
  sockaddr_in src_ FABQ_GUARDED_BY(mu_){};
  std::optional<sockaddr_in> dest_ FABQ_GUARDED_BY(mu_);
  // The CONNREQ this endpoint was opened from: set at open, before the endpoint is handed out.
  fid_t conn_handle_ = nullptr;
  bool enabled_ FABQ_GUARDED_BY(mu_) = false;
  bool failed_ FABQ_GUARDED_BY(mu_) = false;
  bool ended_ FABQ_GUARDED_BY(mu_) = false;    // MSG: connection_ended()
  bool closing_ FABQ_GUARDED_BY(mu_) = false;  // the destructor runs: nothing more is placed
  bool tx_selective_ FABQ_GUARDED_BY(mu_) = false;
  static constexpr size_t kStallRoom = 4;
  // Those place() refused a message.
  std::vector<Connection*> stalled_ FABQ_GUARDED_BY(mu_);
  // Empty, with capacity, for stalled_.
  std::vector<Connection*> spare_stalled_ FABQ_GUARDED_BY(mu_);
  bool retry_ FABQ_GUARDED_BY(mu_) = false;  // ... because the receive CQ was full
  // DGRAM: a datagram waits for the receive CQ's room (DgramSocket keeps it): resumed with
  // the connections.
  bool dgram_stalled_ FABQ_GUARDED_BY(mu_) = false;
  Eq* eq_ FABQ_GUARDED_BY(mu_) = nullptr;
  Cq* tx_cq_ FABQ_GUARDED_BY(mu_) = nullptr;
  Cntr* tx_cntr_ FABQ_GUARDED_BY(mu_) = nullptr;
  // fi_ep_bind with FI_WRITE / FI_READ: this endpoint's writes (and atomics) / reads (and
  // fetching atomics) complete there. Fixed once enabled.
  Cntr* write_cntr_ FABQ_GUARDED_BY(mu_) = nullptr;
  Cntr* read_cntr_ FABQ_GUARDED_BY(mu_) = nullptr;
  // ... FI_REMOTE_WRITE / FI_REMOTE_READ: peers' accesses to its regions. Fixed once enabled,
  // read in upcalls without mu_.
  Cntr* rem_write_cntr_ = nullptr;
  Cntr* rem_read_cntr_ = nullptr;
  Srx* srx_ FABQ_GUARDED_BY(mu_) = nullptr;
  // A shared transmit context whose slots its sends also take (tx_ring_ draws on it).
  Stx* stx_ FABQ_GUARDED_BY(mu_) = nullptr;
  std::atomic<Cq*> rx_cq_{nullptr};  // set once at bind (release), under mu_
  // What a receive's completion reads (complete_recv), also under an SRX's lock only: set under
  // mu_ at bind, which is refused once the endpoint is enabled, and fixed after that, when
  // messages can come.
  bool rx_selective_ = false;
  Cntr* rx_cntr_ = nullptr;
  Av* av_ = nullptr;  // RDM
  const bool rdm_;
  const bool dgram_;             // FI_EP_DGRAM: an AV, a UDP socket, no connections
  const bool source_;            // FI_SOURCE asked for (RDM, DGRAM)
  const bool source_err_;        // FI_SOURCE_ERR too: unknown senders are error completions
  const DirectedRecv directed_;  // RDM: which receives select their sender
  const uint64_t caps_;          // info->caps
  const EpContext ctx_;          // a scalable endpoint's context, or a plain endpoint
  const std::optional<core::HmacSha256> auth_;
  sockaddr_in rdm_name_ FABQ_GUARDED_BY(mu_){};
  RecvQueue queue_ FABQ_GUARDED_BY(mu_);
  // FI_OPT_MIN_MULTI_RECV: copied into each multi-receive buffer when it is posted.
  size_t min_multi_recv_ FABQ_GUARDED_BY(mu_) = kDefaultMinMultiRecv;
  // Messages being placed into posted receives now (each holds a receive CQ slot).
  size_t placing_ FABQ_GUARDED_BY(mu_) = 0;
  // The sends from post to completion.
  TxRing tx_ring_ FABQ_GUARDED_BY(mu_);
  // MSG: created by fi_connect, or at open for an endpoint opened from a CONNREQ. RDM: the
  // listener, opened by fi_enable, and one connection per peer address that its sends go
  // through: every fi_addr_t an AV gives the same address sends through it, so messages to one
  // endpoint keep their order whichever of its names they use. That is the peer's own
  // connection to this endpoint (`in`, accepted by the listener, which owns it) when it made one
  // before this endpoint sent to it, else one this endpoint makes (`conn`); either is kept
  // while it is open. All destroyed first.
  struct Peer {
    sockaddr_in to{};
    uint32_t rx = 0;  // the peer's receive context (FI_NAMED_RX_CTX)
    std::unique_ptr<Connection> conn;
    Connection* in = nullptr;  // cleared by can_free() before the listener may free it
    bool routed = false;       // route_ names it: it stays this address's for good
  };
  std::unique_ptr<Connection> conn_ FABQ_GUARDED_BY(mu_);
  std::unique_ptr<Listener> listener_ FABQ_GUARDED_BY(mu_);
  std::vector<Peer> peers_ FABQ_GUARDED_BY(mu_);
  // DGRAM: the socket, opened by fi_enable and fixed from then on (a send takes the pointer
  // under mu_ and sends without it), destroyed with the endpoint; and the memberships whose
  // join succeeded, whose fi_addr_t (Mc::kAddrTag | id) sends go to.
  std::unique_ptr<xport::Datagram> dgram_sock_ FABQ_GUARDED_BY(mu_);
  std::vector<Mc*> mcs_ FABQ_GUARDED_BY(mu_);
  uint64_t next_mc_id_ FABQ_GUARDED_BY(mu_) = 0;
  // fi_addr_t -> 1 + its index in peers_ (0: not sent to yet). An AV never hands out an index
  // twice, so an index always names one address.
  std::vector<uint32_t> route_ FABQ_GUARDED_BY(mu_);
  // Replaced outgoing connections, freed once no thread borrows one and no buffered message
  // came through it.
  std::vector<std::unique_ptr<Connection>> retired_ FABQ_GUARDED_BY(mu_);
  // Threads using a connection they found under mu_ after releasing it (a send submitting, a
  // delivery acknowledgement going out). Incremented under mu_ (or the SRX's lock); a
  // connection is freed only while it is zero, looked at under the same locks.
  std::atomic<int> borrowed_{0};
  std::atomic<int> held_{0};  // borrow(): the endpoint itself, not its connections
};

// fi_endpoint: 0 with *ep set, or -FI_EINVAL (a null argument, a domain not fabq's, an endpoint
// type other than MSG and RDM, a handle that names nothing open, more than one transmit or
// receive context, which is fi_scalable_ep's), -FI_EOPBADSTATE (the domain failed), -FI_ENOMEM,
// or the transport's error taking over a CONNREQ. The endpoint belongs to the application until
// fi_close.
int open_endpoint(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);

}  // namespace fabq::prov
