// fabq transport: FI_EP_MSG and FI_EP_RDM connections over TCP (prov/transport.h).
//
//   Engine      one per fabric: an epoll set of every socket of the fabric, the progress
//               thread that runs only while somebody blocks (or for FI_PROGRESS_AUTO), and the
//               connect timers.
//   Conn        one TCP connection: the connection protocol of wire.h, framing, placing
//               payloads where the endpoint says, the send queue and acknowledgements.
//   Acceptor    a listening socket and the connections it accepted, until they are handed over
//               or end; what PassiveEp and RdmListener share (backlog, reaping, backing off).
//   PassiveEp   fi_passive_ep: each accepted socket is a Conn that waits for its kConnReq and
//               then for the application's fi_accept or fi_reject (a ConnReq names it).
//   RdmListener an RDM endpoint's listening socket: each accepted socket is a Conn that
//               accepts the peer's kConnReq itself and carries the peer's messages in.
//
// RDM connections speak the same protocol; what differs is who hears of it. The connect data
// of an RDM kConnReq is the connecting endpoint's name (sockaddr_in, for FI_SOURCE); nothing
// goes to an EQ; a connection that fails or is refused fails the sends submitted to it
// (Endpoint::abort_sends) and nothing else. Data flows one way on each: from the endpoint that
// connected to the one that accepted (acknowledgements flow back), so two endpoints that send
// to each other hold two connections, and messages between them keep their order.
//
// Two endpoints of one host move their frames through shared memory once connected
// (xport/shm.h): the same Conn, the same frames; only where the bytes go changes. The engine
// then looks at those rings every round, without a system call, and a sleeping progress
// thread is woken by the doorbell the peer writes to the socket.
//
// Locks: Engine::mu_ (the engine lock) guards the epoll set's membership and the dispatch of
// readiness; Conn::mu_ guards one connection; Acceptor::mu_ an acceptor's connections. Order:
// engine, connection, acceptor, endpoint (see prov/transport.h). A connection's owed
// acknowledgements and the connection requests have locks of their own, taken last; the list of
// open passive endpoints has one taken before a passive endpoint's own. Callbacks into
// endpoints are made holding the connection's lock; events go through prov::raise_later().
#pragma once

#include <netinet/in.h>
#include <rdma/fabric.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "core/hmac.h"
#include "core/unique_fd.h"
#include "prov/transport.h"
#include "xport/shm.h"
#include "xport/wire.h"

namespace fabq::prov {
class Eq;
class Fabric;
}  // namespace fabq::prov

namespace fabq::xport {

// Something whose fd is in the engine's epoll set. Called with the engine lock held.
class Pollable {
 public:
  virtual ~Pollable() = default;
  virtual void on_ready(uint32_t events) = 0;
  // A deadline passed (see Engine::set_deadline).
  virtual void on_deadline() {}
};

class Conn;

class Engine final : public prov::Transport {
 public:
  Engine();
  ~Engine() override;

  void progress() override;
  void begin_wait() override;
  void end_wait() override;

  // Membership of the epoll set; any thread. Taking a socket out does not free its Pollable:
  // an object is destroyed only under the engine lock (or retired), so that no readiness
  // report of a round in progress can name it. remove() also forgets its scheduled calls.
  bool add(int fd, Pollable* p, uint32_t events);
  void modify(int fd, Pollable* p, uint32_t events);
  void remove(int fd, Pollable* p);
  void remove_fd(int fd);
  // Forgets p's scheduled calls and deadline.
  void unschedule(Pollable* p);
  // Frees p at the end of the current round (callbacks may retire objects of the same round).
  void retire(std::unique_ptr<Pollable> p);
  // Asks for p->on_ready(EPOLLIN) at the next progress (a stalled connection may go on).
  void schedule(Pollable* p);
  // p->on_deadline() once monotonic time passes `ns` (0 cancels).
  void set_deadline(Pollable* p, int64_t ns);
  std::recursive_mutex& mu() { return mu_; }

  // Connections with a shared-memory ring, looked at every round. Any thread, with or without
  // the connection's lock; forget_shm() only under the engine lock (from ~Conn).
  void add_shm(Conn* c);
  void remove_shm(Conn* c);
  void forget_shm(Conn* c);
  // Wakes the progress thread if somebody waits (a ring it does not watch yet may fill).
  void kick_if_waiting();
  // Stops and joins the progress thread for good (the destructor, and the provider's unload);
  // any thread but that one.
  void stop_thread();

 private:
  void run_locked();
  void refresh_shm_locked();
  void poll_shm_locked();
  // Before the progress thread sleeps: asks every ring for a doorbell. True if one has work
  // already (do not sleep).
  bool arm_shm_locked();
  void start_thread();
  void thread_main();
  void kick();

  std::recursive_mutex mu_;  // recursive: a callback may destroy a connection
  core::UniqueFd epfd_;
  core::UniqueFd kick_fd_;
  static constexpr size_t kScheduleRoom = 16;
  std::mutex sched_mu_;  // guards scheduled_, deadlines_
  std::vector<Pollable*> scheduled_;
  std::vector<Pollable*> running_;  // scheduled_ being run; guarded by mu_
  struct Deadline {
    Pollable* p;
    int64_t ns;
  };
  std::vector<Deadline> deadlines_;
  std::vector<std::unique_ptr<Pollable>> graveyard_;
  std::mutex shm_mu_;  // guards shm_; taken after a connection's lock, never before
  std::vector<Conn*> shm_;
  std::atomic<bool> shm_changed_{false};
  std::atomic<bool> has_shm_{false};  // shm_ is not empty: a hint for the progress thread
  std::vector<Conn*> shm_run_;        // shm_ as of this round; guarded by mu_ (null: destroyed)
  std::atomic<bool> has_scheduled_{false};
  std::atomic<bool> has_deadlines_{false};  // hints that spare the common round a lock
  std::atomic<bool> has_graves_{false};
  std::atomic<int> waiters_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> thread_started_{false};
  std::mutex thread_mu_;  // guards thread_ (started on the first wait, joined once)
  std::thread thread_;
};

class Acceptor;
class PassiveEp;
struct ConnReq;

class Conn final : public prov::Connection, public Pollable {
 public:
  Conn(Engine* engine, prov::Endpoint* ep, core::UniqueFd fd, size_t max_payload);
  ~Conn() override;

  // Connection.
  int connect(const sockaddr_in& peer, const void* data, size_t len) override;
  int accept(const void* data, size_t len) override;
  int shutdown() override;
  int submit(prov::TxOp* op) override;
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

  // The engine, holding its lock, every round: moves ring bytes if there are any to move.
  void poll_shm();
  // The engine before its thread sleeps: asks the peer for a doorbell; true if there is work.
  bool arm_shm();

  // A connection accepted by `owner` (a PassiveEp when `passive`, else the RDM listener of the
  // endpoint it was made for), waiting for its kConnReq. Until it is handed over (adopt(),
  // reject()) an accepted connection that ends asks its owner to reap it.
  void start_accepted(Acceptor* owner, bool passive);
  // fi_endpoint from the CONNREQ: `ep` takes this connection over. False if it ended meanwhile.
  bool adopt(prov::Endpoint* ep);
  // fi_reject, or a request its passive endpoint cannot queue: kConnReject, then closed.
  int reject(const void* data, size_t len);
  bool closed() const { return state() == State::kClosed; }
  // Accepted and not yet connected: counted against its owner's backlog.
  bool in_handshake() const;

 private:
  enum class State : uint8_t {
    kIdle,        // made for fi_connect, nothing sent
    kConnecting,  // TCP connect in progress
    kRequested,   // kConnReq sent, waiting for accept or reject
    kIncoming,    // passive: waiting for the peer's kConnReq
    kProving,     // passive: kChallenge sent, waiting for the peer's kProof
    kPending,     // passive: kConnReq reported; waiting for fi_accept / fi_reject
    kAccepted,    // passive: kConnAccept sent, waiting for kConnReady
    kConnected,
    kClosed,  // shut down, refused or failed: nothing more moves
  };
  void set_state(State s) { state_.store(s, std::memory_order_release); }
  State state() const { return state_.load(std::memory_order_acquire); }
  // Under mu_:
  void read_locked();
  bool handle_bytes_locked(const unsigned char* p, size_t n, size_t* used);
  bool frame_done_locked();
  void queue_ctrl_locked(wire::Op op, uint32_t seq, const void* data, size_t len,
                         uint32_t flags = 0, uint64_t tag = 0, uint64_t hdata = 0);
  bool flush_locked();
  void want_write_locked(bool on);
  void update_interest_locked();
  void fail_locked(int err, uint32_t event, const char* why);
  // kConnReject with `data`, then closed.
  int reject_locked(const void* data, size_t len);
  // A request (authenticated, if this side has a secret): reported or accepted.
  bool take_request_locked(const wire::Header& h, const unsigned char* data, size_t len);
  // Authentication (xport/wire.h): the passive side challenges, the active side proves.
  bool challenge_locked(const wire::Header& h);
  bool prove_locked();
  core::Digest auth_mac_locked(std::string_view label) const;
  // The connection did not come up (refused, timed out, unreachable): an MSG endpoint hears of
  // it on its EQ; an RDM endpoint's sends to it fail.
  void refused_locked(int err, const void* data, size_t len);
  void peer_closed_locked();
  void close_socket_locked();
  // Shared memory (xport/shm.h).
  bool is_local(const sockaddr_in& peer) const;
  // The accepting side: maps the segment a kConnReq offers (seg_ stays invalid otherwise).
  void map_offer_locked(const wire::Header& req);
  // kConnAccept with `data`, taking the mapped offer if there is one.
  void queue_accept_locked(const void* data, size_t len);
  // Both sides agreed on seg_: its rings are this connection's, the engine polls them, and
  // this side's frames move to its ring once what ctrl_ holds now is on the socket.
  void shm_agreed_locked(bool connecting);
  void read_shm_locked();
  void drain_doorbells_locked();
  void doorbell_locked();

  Engine* const engine_;
  prov::Endpoint* ep_;  // null while passive and not adopted
  const bool rdm_;      // an RDM endpoint's connection
  // The secret this side proves in the handshake (its endpoint's or passive endpoint's, which
  // outlive it); null: peers are not authenticated.
  const core::HmacSha256* auth_ = nullptr;
  bool inbound_ = false;       // RDM: accepted by the endpoint's listener (data flows in)
  Acceptor* owner_ = nullptr;  // accepted and not handed over: reaped by it once closed
  PassiveEp* pep_ = nullptr;   // owner_, when a passive endpoint
  ConnReq* req_ = nullptr;     // the request reported for it (passive, kPending)
  core::UniqueFd fd_;
  std::mutex mu_;
  std::atomic<State> state_{State::kIdle};
  bool registered_ = false;
  bool writing_ = false;        // EPOLLOUT requested
  uint32_t interest_ = 0;       // the events registered
  bool stalled_ = false;        // a payload has no place yet
  bool shutting_ = false;       // fi_shutdown: kShutdown goes after the queued sends
  bool shut_queued_ = false;    // ... and is queued
  bool shut_done_ = false;      // ... and is written; the sending side is closed
  bool comm_est_ = false;       // COMM_EST raised
  bool reported_ = false;       // FI_SHUTDOWN or an error was reported for this connection
  bool was_connected_ = false;  // FI_CONNECTED was reported
  sockaddr_in peer_{};
  sockaddr_in peer_name_{};  // RDM inbound: the name the peer endpoint announced
  wire::Framer framer_;
  std::unique_ptr<unsigned char[]> rbuf_;
  size_t rpos_ = 0;
  size_t rlen_ = 0;
  // The frame being read.
  prov::Incoming in_;
  prov::Placement place_;
  bool have_place_ = false;
  size_t placed_ = 0;  // payload bytes of this frame consumed so far
  unsigned char cm_buf_[wire::kMaxConnReq];
  // Authentication: the nonces, the request both MACs vouch for, and (passive) the request
  // held until the proof arrives.
  bool auth_sent_ = false;   // active: kConnReq carried kAuth
  bool challenged_ = false;  // active: the peer proved the secret; kProof sent
  unsigned char nonce_c_[wire::kNonceSize] = {};
  unsigned char nonce_s_[wire::kNonceSize] = {};
  core::Digest req_digest_{};
  wire::Header held_req_{};
  unsigned char held_data_[wire::kMaxCmData];
  // Sends: a ring of submitted ops, then control frames written between data frames.
  std::vector<prov::TxOp*> sendq_;
  size_t send_head_ = 0;
  size_t send_count_ = 0;
  std::vector<unsigned char> ctrl_;
  size_t ctrl_off_ = 0;
  bool mid_frame_ = false;  // the head op is partly written
  // Shared memory: the segment (offered, or mapped from the peer's offer), its rings once both
  // sides agreed, and which directions moved to them. The mapping lives as long as the Conn:
  // the engine looks at the rings without the connection's lock.
  shm::Segment seg_;
  bool shm_agreed_ = false;
  shm::Ring tx_ring_;
  shm::Ring rx_ring_;
  bool tx_shm_ = false;
  bool rx_shm_ = false;
  bool tx_switch_pending_ = false;  // the handshake's last frame goes to the socket first
  size_t tx_switch_at_ = 0;         // ... ending at this offset of ctrl_
  bool peer_eof_ = false;           // the socket ended; what is left of the peer is in the ring
  bool bell_owed_ = false;          // a doorbell waits for this side's switch to the ring
  // Delivery acknowledgements queued by ack_delivered_later(), sent by the next on_ready().
  std::mutex owed_mu_;  // innermost
  std::vector<uint32_t> owed_acks_;
  std::atomic<bool> acks_owed_{false};
  // Hints for the engine (relaxed; written under mu_).
  std::atomic<bool> shm_rx_open_{false};     // the ring may be read (not stalled, not closed)
  std::atomic<bool> shm_tx_blocked_{false};  // the ring was full with bytes left to write

  friend class Acceptor;
  friend class PassiveEp;
  friend prov::Connection* prov::make_connection(prov::Endpoint*, fid_t, int*);
};

// A listening socket and the connections it accepted, until each is handed over or ends.
//
// Backlog: at most FI_FABQ_CM_BACKLOG of its connections may be in their handshake (or, for a
// passive endpoint, awaiting fi_accept / fi_reject) at once; a connection accepted beyond that
// is closed at once, which its peer sees as a refusal. So a flood of connections costs a
// bounded number of descriptors, and a legitimate peer is refused, not left waiting.
//
// Out of descriptors (EMFILE, ENFILE) or kernel memory, accept4 keeps failing while the
// level-triggered listening socket stays readable: the acceptor then stops listening for
// kBackoff and tries again, so the progress engine neither spins nor stops serving the
// connections it has. The first such failure is logged.
//
// Reaping: a connection that ends before it is handed over (its peer closed or never sent its
// request in time) is freed by the progress round that notices it (reap()), through the
// engine, when the owner says it may be (may_free_locked()).
//
// Threads: on_ready() and on_deadline() run under the engine lock; reap() under the
// connection's lock (lock order: engine, connection, acceptor, endpoint).
class Acceptor : public Pollable {
 public:
  void on_ready(uint32_t events) override;
  void on_deadline() override;
  // `c`, one of this acceptor's connections, has closed.
  void reap(Conn* c);
  // The secret its connections prove (prov/auth.h); null when none.
  virtual const core::HmacSha256* auth_key() const = 0;

 protected:
  explicit Acceptor(Engine* engine) : engine_(engine) {}
  // Binds and listens at `at` (port 0: one the kernel picks) and joins the epoll set; *bound is
  // the address it got. 0 or -FI_EADDRINUSE, -FI_EINVAL, -FI_EIO.
  int listen_at(const sockaddr_in& at, sockaddr_in* bound);
  // Leaves the epoll set and frees every connection not handed over. Called by the derived
  // destructor, under the engine lock.
  void close_locked();
  // A new connection for an accepted socket, and the start of its handshake.
  virtual std::unique_ptr<Conn> make_conn(core::UniqueFd fd) = 0;
  virtual void start(Conn* c) = 0;
  // Under mu_: whether closed connection `c` may be freed now.
  virtual bool may_free_locked(Conn* c) = 0;
  // Under mu_: frees the closed connections that may be.
  void sweep_locked();

  Engine* const engine_;
  std::mutex mu_;  // guards conns_ and the members of derived classes that say so
  std::vector<std::unique_ptr<Conn>> conns_;

 private:
  core::UniqueFd fd_;
  bool backing_off_ = false;  // out of the epoll set until the deadline; engine lock
  bool warned_ = false;
};

class PassiveEp final : public Acceptor {
 public:
  static PassiveEp* from_fid(const fid* f);
  PassiveEp(prov::Fabric* fabric, Engine* engine, const fi_info& info, void* context);
  ~PassiveEp() override;
  fid_pep* handle();
  const core::HmacSha256* auth_key() const override { return auth_ ? &*auth_ : nullptr; }

  // A Conn got its kConnReq: report FI_CONNREQ. False when the request cannot be queued (no EQ,
  // or the EQ has no room for it): the connection is then refused.
  bool request(Conn* conn, const void* data, size_t len);
  // The connection of a pending request of this passive endpoint, taken out of it (fi_endpoint
  // or fi_reject); null if it is not one of its own.
  std::unique_ptr<Conn> take(Conn* conn);
  // If `handle` is an open passive endpoint's fid: true, and its address in *name. `handle` is
  // compared, never read. Any thread.
  static bool name_if_open(fid_t handle, sockaddr_in* name);

 private:
  friend struct PepOps;
  std::unique_ptr<Conn> make_conn(core::UniqueFd fd) override;
  void start(Conn* c) override;
  bool may_free_locked(Conn* c) override;
  int bind(fid* bfid, uint64_t flags);
  int listen();
  int getname(void* addr, size_t* len);
  int setname(const void* addr, size_t len);
  int reject(fid_t handle, const void* data, size_t len);

  struct {
    fid_pep pep;
    PassiveEp* owner;
  } box_{};
  prov::Fabric* const fabric_;
  fi_info* info_;
  const std::optional<core::HmacSha256> auth_;
  prov::Eq* eq_ = nullptr;  // mu_
  sockaddr_in addr_{};      // mu_
  bool listening_ = false;  // mu_
};

class RdmListener final : public prov::Listener, public Acceptor {
 public:
  RdmListener(Engine* engine, prov::Endpoint* ep);
  ~RdmListener() override;
  // Binds and listens at `addr`; 0 or a negative FI_E* code.
  int open(const sockaddr_in& addr);

  int getname(void* addr, size_t* len) override;
  void sweep() override;
  const core::HmacSha256* auth_key() const override;

 private:
  std::unique_ptr<Conn> make_conn(core::UniqueFd fd) override;
  void start(Conn* c) override;
  bool may_free_locked(Conn* c) override;

  prov::Endpoint* const ep_;
  sockaddr_in addr_{};
};

}  // namespace fabq::xport
