// fabq TCP transport: one connection (xport/transport.h Connection).
//
// The connection protocol of wire.h over one TCP socket: the handshake (with its authentication
// and its shared-memory offer), framing, placing payloads where the owner says, the send queue
// and acknowledgements. Once both sides agreed on a shared-memory segment (xport/shm.h) the same
// frames go through its rings (conn_shm.cc) and the socket carries doorbells and the close.
//
// RDM connections speak the same protocol; what differs is who hears of it. The connect data
// of an RDM kConnReq is the connecting endpoint's name (sockaddr_in, for FI_SOURCE); no CM event
// is reported; a connection that fails or is refused fails the sends submitted to it
// (Owner::abort_sends) and nothing else. Data flows both ways: the endpoint that accepted hears
// of the connection once it is up (Owner::inbound_ready) and answers its peer through it rather
// than making a second one, so in a request/reply exchange each reply carries TCP's
// acknowledgement of the request instead of a packet of its own. Each side sends through one
// connection per peer for as long as it is open, so messages between two endpoints keep their
// order.
//
// The handshake's rules (which frame may come when, what each one means, the authentication
// arithmetic) are xport/handshake.h's: the connection asks its Handshake and does what it says.
//
// Files: conn.cc (set-up, sending, reading, framing), conn_handshake.cc (the handshake's I/O:
// connecting, accepting, rejecting, and acting on the Handshake's decisions), conn_shm.cc (the
// shared-memory side).
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "core/unique_fd.h"
#include "xport/copy_choice.h"
#include "xport/engine.h"
#include "xport/handshake.h"
#include "xport/shm.h"
#include "xport/transport.h"
#include "xport/wire.h"

namespace fabq::xport {

class Acceptor;
class PassiveAcceptor;

class Conn final : public Connection, public Pollable {
 public:
  // `owner` null: a passive listener's connection, until adopted.
  Conn(Engine* engine, Owner* owner, const ConnParams& params, core::UniqueFd fd);
  ~Conn() override;

  // Connection.
  int connect(const sockaddr_in& peer, const void* data, size_t len) override;
  bool adopt(Owner* owner, const ConnParams& params) override;
  int accept(const void* data, size_t len) override;
  int reject(const void* data, size_t len) override;
  int shutdown() override;
  int submit(TxOp* op) override;
  InlineResult send_inline(const InlineSend& s) override;
  void ack_delivered(uint32_t seq) override;
  void ack_delivered_later(uint32_t seq) override;
  void resume() override;
  int getname(void* addr, size_t* len) override;
  int getpeer(void* addr, size_t* len) override;
  bool connected() const override {
    return state_.load(std::memory_order_acquire) == State::kConnected;
  }
  bool open() const override { return state() != State::kClosed; }

  // Pollable.
  void on_ready(uint32_t events) override;
  void on_deadline() override;
  bool direct_read() const override { return true; }
  // Reads what its socket holds without epoll having said it is readable: the engine does this
  // instead of epoll_wait() for the one socket that is busy (Engine::run_locked). False when it
  // cannot be read that way now (not a connected socket, a ring's connection, stalled, waiting
  // to write): then the engine goes back to epoll. Engine lock held.
  bool poll_read() override;

  // The engine, holding its lock, every round: moves ring bytes if there are any to move, and
  // says whether there were.
  bool poll_shm();
  // The engine before its thread sleeps: asks the peer for a doorbell; true if there is work.
  // Sets *armed_now if the receiving ring was armed afresh (shm::Armed::kNow): the ring is owed
  // a look again (shm::RecheckTimer).
  bool arm_shm(bool* armed_now);
  // Whether the receiving ring holds bytes (a relaxed hint: Ring::readable()).
  bool shm_readable() const {
    return shm_rx_open_.load(std::memory_order_relaxed) && rx_ring_.readable();
  }

  // A connection accepted by `acceptor` (a PassiveAcceptor, or the RDM listener of the
  // endpoint it was made for), waiting for its kConnReq. Until it is handed over (adopt(),
  // reject()) an accepted connection that ends asks its acceptor to reap it.
  void start_accepted(Acceptor* acceptor, PassiveAcceptor* passive);
  // Takes the connection out of `engine` (its own: its socket, its calls, its ring) and gives
  // back the receive it was filling: what the destructor does, for a caller that holds the
  // engine lock already (a listener closing). The destructor then takes no lock.
  void leave_engine_locked(Engine* engine) FABQ_REQUIRES(engine->mu());
  bool closed() const { return state() == State::kClosed; }
  // The owner now: null while passive and not adopted. Set under mu_ (an RDM connection's at
  // its request, when its listener's owner routes it to a receive context, Owner::route()); a
  // listener deciding whether to free a closed connection reads it without mu_ (release /
  // acquire).
  Owner* owner() const { return owner_.load(std::memory_order_acquire); }
  // Accepted and not yet connected: counted against its owner's backlog.
  bool in_handshake() const;
  // An RDM listener's connection, and what closing it costs (Acceptor, FI_FABQ_INBOUND_MAX):
  // when it last moved anything (Engine::round_ns()), and the closing itself. kIdle closes it
  // only if it holds nothing in flight: up, not inside a frame, nothing read and not taken,
  // nothing to write, no message of its peer's waiting for room, and nothing its owner holds
  // through it (Owner::holds()). kGone also closes one whose message waits for room (or a
  // receive) and whose peer has left: the rest of that peer's messages is dropped. kStale also
  // closes one that nothing moved on since `stale_before` (ns), whatever it or its owner holds
  // (a send of its peer's that waits for the owner's delivery acknowledgement then fails), and
  // one still in its handshake. Never one that owes its peer what this side sends itself (its
  // sends, answers, acknowledgements queued). True when it closed: its peer sees the
  // connection end, and connects anew at its next send. Engine lock held; takes the
  // connection's.
  enum class Shed : uint8_t { kIdle, kGone, kStale };
  int64_t last_active_ns() const { return last_active_ns_.load(std::memory_order_relaxed); }
  bool shed(Shed how, int64_t stale_before);
  // Its request went to the passive endpoint, which adopts or rejects it: not freed before.
  bool requested() const { return requested_.load(std::memory_order_acquire); }

 private:
  using State = handshake::State;
  // state_ mirrors hs_.state() for the threads that look without mu_: published where the
  // connection has done what the transition asks (hs_ may be a step ahead until then).
  void set_state(State s) { state_.store(s, std::memory_order_release); }
  State state() const { return state_.load(std::memory_order_acquire); }
  // Under mu_:
  void read_locked() FABQ_REQUIRES(mu_);
  bool handle_bytes_locked(const unsigned char* p, size_t n, size_t* used) FABQ_REQUIRES(mu_);
  void incoming_locked(const wire::Header& h) FABQ_REQUIRES(mu_);
  bool frame_done_locked() FABQ_REQUIRES(mu_);
  // Asks the owner where in_'s payload goes (place_). Refused: the connection stalls until
  // resume() and this returns false.
  bool place_locked() FABQ_REQUIRES(mu_);
  // A whole message (in_) that wants no acknowledgement, its payload at `bytes`: given to the
  // owner in one upcall (Owner::deliver). Refused: stalls as place_locked() does; false.
  bool deliver_locked(const unsigned char* bytes) FABQ_REQUIRES(mu_);
  // The owner refused a message: reading stops until resume() (the owner's, once a receive
  // is posted or the CQ has room). Returns false.
  bool stall_locked() FABQ_REQUIRES(mu_);
  // The peer left (EPOLLRDHUP, a reset) while the connection waits for its owner: it stops
  // listening for that (epoll would report it again and again), reads the rest once resumed,
  // and is the first to go when its listener needs room (shed()).
  void left_while_stalled_locked() FABQ_REQUIRES(mu_);
  void touch() { last_active_ns_.store(engine_->round_ns(), std::memory_order_relaxed); }
  // Does what the Handshake says about a whole frame of the handshake (or kShutdown).
  bool handshake_frame_locked(const wire::Header& h) FABQ_REQUIRES(mu_);
  // A whole kReadReq, kAtomic or direct kWrite (its payload in req_buf_): the owner performs
  // it, the answer is queued; a read longer than a piece is checked and queued in reads_.
  bool answer_request_locked(const wire::Header& h) FABQ_REQUIRES(mu_);
  // A read of `len` bytes (h its kReadReq): checked, and answered at once if refused, else
  // queued and answered in pieces by pump_read_locked(). False when the connection failed.
  bool queue_read_locked(const wire::Header& h, size_t len) FABQ_REQUIRES(mu_);
  // Copies the next piece of the oldest queued read into ctrl_ (which holds nothing unwritten):
  // at most one piece waits there at a time.
  void pump_read_locked() FABQ_REQUIRES(mu_);
  // Answers owed to the peer are more than this side keeps: it stops taking the peer's frames
  // until they are written (stop_for_answers_locked()), and takes them again after.
  bool answers_backlogged_locked() const FABQ_REQUIRES(mu_);
  bool stop_for_answers_locked() FABQ_REQUIRES(mu_);
  // The initiator's side: whether kReadResp `h` continues the answer this side is receiving in
  // pieces, or begins one when none is open (wire.h). Notes where the next piece begins.
  bool answer_in_order_locked(const wire::Header& h) FABQ_REQUIRES(mu_);
  // A whole direct message (its entries in req_buf_): placed like any other, its bytes copied
  // from the peer's buffers. False when the connection ended or stalled (no room: the frame is
  // taken again on resume()).
  bool deliver_direct_locked(const wire::Header& h) FABQ_REQUIRES(mu_);
  // submit(): makes `op` a direct request (wire.h kDirect) when it may be one; true if so.
  bool go_direct_locked(TxOp* op, wire::Header* h) FABQ_REQUIRES(mu_);
  // The same for an op submitted before the connection was up (TxOp::decide_later), before its
  // first byte is written: its header is decoded, made direct if it may be, and encoded again.
  void decide_direct_locked(TxOp* op) FABQ_REQUIRES(mu_);
  // Copy choice (xport/copy_choice.h), the receiver's side. Whether a frame of `op` that brings
  // len bytes `path`'s way is timed for the advisor: a message or write, from the smallest size
  // that may go direct, that the advisor wants a sample of. note_*_copy_locked() record one
  // that took ns (a direct one into the destination named `dest`, CopyAdvisor::record_direct())
  // and publish the advice if that changed it (advice_changed_locked()).
  bool timed_locked(wire::Op op, CopyPath path, size_t len) FABQ_REQUIRES(mu_);
  void note_ring_copy_locked(size_t len, int64_t ns) FABQ_REQUIRES(mu_);
  void note_direct_copy_locked(size_t len, uint64_t dest, int64_t ns) FABQ_REQUIRES(mu_);
  void advice_changed_locked() FABQ_REQUIRES(mu_);
  // Sharing a copy (shm.h). The initiator's side: remembers a direct request the peer may offer
  // a part of; copies the part the peer offers, if it is one of those; forgets the request
  // answered now.
  void record_share_locked(TxOp* op) FABQ_REQUIRES(mu_);
  void take_share_locked() FABQ_REQUIRES(mu_);
  void forget_share_locked(uint32_t seq) FABQ_REQUIRES(mu_);
  void queue_ctrl_locked(wire::Op op, uint32_t seq, const void* data, size_t len,
                         uint32_t flags = 0, uint64_t tag = 0, uint64_t hdata = 0)
      FABQ_REQUIRES(mu_);
  bool flush_locked() FABQ_REQUIRES(mu_);
  void want_write_locked(bool on) FABQ_REQUIRES(mu_);
  void update_interest_locked() FABQ_REQUIRES(mu_);
  void fail_locked(int err, uint32_t event, const char* why) FABQ_REQUIRES(mu_);
  // kConnReject with `data`, then closed.
  int reject_locked(const void* data, size_t len) FABQ_REQUIRES(mu_);
  // A request (authenticated, if this side has a secret): reported or accepted.
  bool take_request_locked(const handshake::Next& next) FABQ_REQUIRES(mu_);
  // The passive side of an authenticated request: challenges the peer to prove the secret.
  bool challenge_locked() FABQ_REQUIRES(mu_);
  // The connection did not come up (refused, timed out, unreachable): an MSG endpoint hears of
  // it on its EQ; an RDM endpoint's sends to it fail.
  void refused_locked(int err, const void* data, size_t len) FABQ_REQUIRES(mu_);
  void peer_closed_locked() FABQ_REQUIRES(mu_);
  void close_socket_locked() FABQ_REQUIRES(mu_);
  // Shared memory (xport/shm.h).
  bool is_local(const sockaddr_in& peer) const;
  // The accepting side: maps the segment a kConnReq offers (seg_ stays invalid otherwise).
  void map_offer_locked(const wire::Header& req) FABQ_REQUIRES(mu_);
  // kConnAccept with `data`, taking the mapped offer if there is one.
  void queue_accept_locked(const void* data, size_t len) FABQ_REQUIRES(mu_);
  // Both sides agreed on seg_: its rings are this connection's, the engine polls them, and
  // this side's frames move to its ring once what ctrl_ holds now is on the socket.
  void shm_agreed_locked(bool connecting) FABQ_REQUIRES(mu_);
  void read_shm_locked() FABQ_REQUIRES(mu_);
  void drain_doorbells_locked() FABQ_REQUIRES(mu_);
  void doorbell_locked() FABQ_REQUIRES(mu_);

  Engine* const engine_;
  std::atomic<Owner*> owner_;
  ConnParams params_;
  const bool rdm_;  // an RDM endpoint's connection
  // The protocol's side of the connection: its state, the secret it proves (params_.auth, or
  // the passive listener's), what the authentication has seen.
  handshake::Handshake hs_ FABQ_GUARDED_BY(mu_);
  Acceptor* acceptor_ = nullptr;        // accepted and not handed over: reaped by it once closed
  PassiveAcceptor* passive_ = nullptr;  // acceptor_, when a passive endpoint's
  std::atomic<bool> requested_{false};  // see requested(); set by passive_
  core::UniqueFd fd_;
  core::Mutex mu_;            // docs/locking.md #4
  bool left_engine_ = false;  // leave_engine_locked() ran
  std::atomic<State> state_{State::kIdle};
  bool registered_ FABQ_GUARDED_BY(mu_) = false;
  bool writing_ FABQ_GUARDED_BY(mu_) = false;   // EPOLLOUT requested
  uint32_t interest_ FABQ_GUARDED_BY(mu_) = 0;  // the events registered
  bool stalled_ FABQ_GUARDED_BY(mu_) = false;   // a payload has no place yet
  // ... and only a full CQ stood in the way (Owner::take_retry()).
  bool stalled_for_cq_ FABQ_GUARDED_BY(mu_) = false;
  // The peer's end of the socket closed while stalled: not listened for any more.
  bool peer_hup_ FABQ_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> last_active_ns_{0};  // see last_active_ns()
  bool shutting_ FABQ_GUARDED_BY(mu_) =
      false;  // fi_shutdown: kShutdown goes after the queued sends
  bool shut_queued_ FABQ_GUARDED_BY(mu_) = false;  // ... and is queued
  bool shut_done_ FABQ_GUARDED_BY(mu_) = false;    // ... and is written; the sending side is closed
  bool comm_est_ FABQ_GUARDED_BY(mu_) = false;     // COMM_EST raised
  bool reported_ FABQ_GUARDED_BY(mu_) =
      false;  // FI_SHUTDOWN or an error was reported for this connection
  bool was_connected_ FABQ_GUARDED_BY(mu_) = false;  // FI_CONNECTED was reported
  sockaddr_in peer_ FABQ_GUARDED_BY(mu_){};
  sockaddr_in peer_name_
      FABQ_GUARDED_BY(mu_){};  // RDM inbound: the name the peer endpoint announced
  // RDM inbound: the peer takes no messages back through it (a scalable endpoint's transmit
  // context, wire::kRdmOneWay).
  bool one_way_ FABQ_GUARDED_BY(mu_) = false;
  wire::Framer framer_ FABQ_GUARDED_BY(mu_);
  std::unique_ptr<unsigned char[]> rbuf_;
  // The payload of the kReadReq or kAtomic being read (written under mu_).
  std::unique_ptr<unsigned char[]> req_buf_;
  size_t rpos_ FABQ_GUARDED_BY(mu_) = 0;
  size_t rlen_ FABQ_GUARDED_BY(mu_) = 0;
  // The frame being read.
  Incoming in_ FABQ_GUARDED_BY(mu_);
  Placement place_ FABQ_GUARDED_BY(mu_);
  bool have_place_ FABQ_GUARDED_BY(mu_) = false;
  size_t placed_ FABQ_GUARDED_BY(mu_) = 0;  // payload bytes of this frame consumed so far
  unsigned char cm_buf_[wire::kMaxConnReq] FABQ_GUARDED_BY(
      mu_);  // the payload of a handshake frame
  // Sends: a ring of submitted ops, then control frames written between data frames.
  std::vector<TxOp*> sendq_ FABQ_GUARDED_BY(mu_);
  size_t send_head_ FABQ_GUARDED_BY(mu_) = 0;
  size_t send_count_ FABQ_GUARDED_BY(mu_) = 0;
  std::vector<unsigned char> ctrl_ FABQ_GUARDED_BY(mu_);
  size_t ctrl_off_ FABQ_GUARDED_BY(mu_) = 0;
  // The peer's reads longer than a piece, checked, oldest first, each answered in pieces
  // (pump_read_locked()). As many as a legitimate peer can have outstanding: fabq's endpoints
  // report a transmit queue of kQueuedReads (tx_attr->size); a peer with more waits, its frames
  // unread, until the oldest is answered.
  struct QueuedRead {
    uint32_t seq = 0;
    uint64_t key = 0;
    uint64_t addr = 0;
    size_t len = 0;
    size_t sent = 0;  // bytes copied into pieces so far
  };
  static constexpr size_t kQueuedReads = 1024;
  std::unique_ptr<QueuedRead[]> reads_ FABQ_GUARDED_BY(mu_);  // made for the first one
  size_t reads_head_ FABQ_GUARDED_BY(mu_) = 0;
  size_t reads_count_ FABQ_GUARDED_BY(mu_) = 0;
  // Reading stopped because of answers_backlogged_locked(); flush_locked() resumes it.
  bool held_for_answers_ FABQ_GUARDED_BY(mu_) = false;
  // The answer to one of this side's reads that is arriving in pieces: its seq, and the offset
  // its next piece must have.
  bool rx_piece_open_ FABQ_GUARDED_BY(mu_) = false;
  uint32_t rx_piece_seq_ FABQ_GUARDED_BY(mu_) = 0;
  uint64_t rx_piece_next_ FABQ_GUARDED_BY(mu_) = 0;
  bool mid_frame_ FABQ_GUARDED_BY(mu_) = false;  // the head op is partly written
  // Shared memory: the segment (offered, or mapped from the peer's offer), its rings once both
  // sides agreed, and which directions moved to them. The mapping lives as long as the Conn:
  // the engine looks at the rings without the connection's lock.
  shm::Segment seg_;
  bool shm_agreed_ FABQ_GUARDED_BY(mu_) = false;
  bool shm_connecting_ FABQ_GUARDED_BY(mu_) = false;  // this side created seg_
  // A message came from the peer since this side last sent anything: the two take turns, as
  // in a request and its reply, rather than one streaming to the other (go_direct_locked()).
  bool heard_ FABQ_GUARDED_BY(mu_) = false;
  // Copy choice (xport/copy_choice.h): this side's measurements of the peer's large frames
  // and the advice they give it; this side's turns in following the peer's advice.
  CopyAdvisor advisor_ FABQ_GUARDED_BY(mu_);
  CopyPlanner planner_ FABQ_GUARDED_BY(mu_);
  // The ring frame being timed: when its header was read (now_ns(); 0: none is) and how many
  // of its payload bytes were in the ring then.
  int64_t rx_timed_at_ FABQ_GUARDED_BY(mu_) = 0;
  size_t rx_timed_seen_ FABQ_GUARDED_BY(mu_) = 0;
  // The peer's pid, proved (shm.h): this side serves its direct requests. 0: it does not.
  int direct_peer_pid_ FABQ_GUARDED_BY(mu_) = 0;
  // The direct requests sent and not answered whose part the peer may offer, in the order of
  // their seqs. A record goes when its answer comes, in whatever order answers come (before the
  // op completes), when an offer names a later seq, and with the connection. Beyond
  // kShareRecords a request is not shared.
  static constexpr size_t kShareRecords = 64;
  struct ShareRecord {
    uint32_t seq = 0;
    TxOp* op = nullptr;  // alive while its record is: its answer removes the record first
  };
  ShareRecord shares_[kShareRecords] FABQ_GUARDED_BY(mu_);
  size_t share_head_ FABQ_GUARDED_BY(mu_) = 0;
  size_t share_count_ FABQ_GUARDED_BY(mu_) = 0;
  std::atomic<bool> shares_waiting_{false};  // share_count_ != 0; a hint for poll_shm()
  shm::Ring tx_ring_;
  shm::Ring rx_ring_;
  bool tx_shm_ FABQ_GUARDED_BY(mu_) = false;
  bool rx_shm_ FABQ_GUARDED_BY(mu_) = false;
  bool tx_switch_pending_ FABQ_GUARDED_BY(mu_) =
      false;  // the handshake's last frame goes to the socket first
  size_t tx_switch_at_ FABQ_GUARDED_BY(mu_) = 0;  // ... ending at this offset of ctrl_
  bool peer_eof_ FABQ_GUARDED_BY(mu_) =
      false;  // the socket ended; what is left of the peer is in the ring
  bool bell_owed_ FABQ_GUARDED_BY(mu_) =
      false;  // a doorbell waits for this side's switch to the ring
  // Delivery acknowledgements queued by ack_delivered_later(), sent by the next on_ready().
  core::Mutex owed_mu_;  // leaf
  std::vector<uint32_t> owed_acks_ FABQ_GUARDED_BY(owed_mu_);
  std::atomic<bool> acks_owed_{false};
  // Hints for the engine (relaxed; written under mu_).
  std::atomic<bool> shm_rx_open_{false};     // the ring may be read (not stalled, not closed)
  std::atomic<bool> shm_tx_blocked_{false};  // the ring was full with bytes left to write

  friend class Acceptor;
  friend class PassiveAcceptor;
};

}  // namespace fabq::xport
