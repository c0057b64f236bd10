// fabq TCP transport: listening sockets (xport/transport.h Listener, PassiveListener).
//
//   Acceptor         a listening socket and the connections it accepted, until they are handed
//                    over or end: what both listeners share (backlog, reaping, backing off).
//   PassiveAcceptor  a passive endpoint's: each accepted socket is a Conn that waits for its
//                    kConnReq, which goes to the PassiveOwner, and then for take().
//   RdmListener      an RDM endpoint's: each accepted socket is a Conn that accepts the peer's
//                    kConnReq itself and carries the peer's messages in.
#pragma once

#include <netinet/in.h>

#include <memory>
#include <vector>

#include "core/hmac.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "core/unique_fd.h"
#include "xport/conn.h"
#include "xport/engine.h"
#include "xport/transport.h"

namespace fabq::xport {

// A listening socket and the connections it accepted, until each is handed over or ends.
//
// Backlog: at most FI_FABQ_CM_BACKLOG of its connections may be in their handshake (or, for a
// passive endpoint, awaiting fi_accept / fi_reject) at once; a connection accepted beyond that
// is closed at once, which its peer sees as a refusal. So a flood of connections costs a
// bounded number of descriptors, and a legitimate peer is refused, not left waiting.
//
// Bound (an RDM listener's, bound()): at most FI_FABQ_INBOUND_MAX connections up at once, and
// never more than half the process's descriptor limit (descriptor_cap()). One that comes up
// beyond it takes the place of one that costs least to close (make_room(), Conn::shed()): the
// least recently active that holds nothing in flight; failing that, one whose message waits
// for room and whose peer has left; failing that, the least recently active that has waited
// longer than the connect timeout (inside a frame or for room); the one that just came up goes
// only if none of those can. A connection in its handshake takes no one's place: the backlog bounds
// those, and with a secret a stranger never gets further, so it cannot close a peer's connection.
// Only when the connections in their handshake and up reach the descriptor cap does one that
// arrives take another's place as above (with a secret: only one whose peer left, or one in its
// handshake that has waited longer than the connect timeout), or, failing that, it is closed at
// once. So strangers can hold no more descriptors than these bounds, and cannot keep a peer out by
// holding them: an RDM peer whose idle connection was closed connects anew at its next send.
//
// Out of descriptors (EMFILE, ENFILE) or kernel memory, accept4 keeps failing while the
// level-triggered listening socket stays readable: the acceptor closes a connection as above if
// it can (its descriptor comes back after the round, and the next round accepts), else it stops
// listening for kBackoff and tries again, so the progress engine neither spins nor stops
// serving the connections it has. The first such failure is logged.
//
// Reaping: a connection that ends before it is handed over (its peer closed or never sent its
// request in time) is freed by the progress round that notices it (reap()), through the
// engine, when the owner says it may be (may_free_locked()).
//
// Threads: on_ready() and on_deadline() run under the engine lock; reap() under the
// connection's lock (docs/locking.md).
class Acceptor : public Pollable {
 public:
  void on_ready(uint32_t events) override;
  void on_deadline() override;
  // `c`, one of this acceptor's connections, has closed.
  void reap(Conn* c);
  // `c`, one of this acceptor's connections, came up: the acceptor looks at its bound at the
  // next round. Under the connection's lock.
  void came_up(const Conn* c);
  // The secret its connections prove; null when none.
  virtual const core::HmacSha256* auth_key() const = 0;

 protected:
  explicit Acceptor(Engine* engine) : engine_(engine) {}
  // Binds and listens at `at` (port 0: one the kernel picks) and joins the epoll set; *bound is
  // the address it got. 0 or -FI_EADDRINUSE, -FI_EINVAL, -FI_EIO.
  int listen_at(const sockaddr_in& at, sockaddr_in* bound);
  // Leaves the epoll set and frees every connection not handed over. Called by the derived
  // destructor, under the engine lock.
  void close_locked() FABQ_REQUIRES(engine_->mu());
  // A new connection for an accepted socket, and the start of its handshake.
  virtual std::unique_ptr<Conn> make_conn(core::UniqueFd fd) = 0;
  virtual void start(Conn* c) = 0;
  // Under mu_: whether closed connection `c` may be freed now.
  virtual bool may_free_locked(Conn* c) FABQ_REQUIRES(mu_) = 0;
  // Under mu_: frees the closed connections that may be.
  void sweep_locked() FABQ_REQUIRES(mu_);
  // How many connections may be up at once, and held at all (see above); SIZE_MAX: no bound
  // but the backlog.
  virtual size_t bound() const { return SIZE_MAX; }
  virtual size_t descriptor_cap() const { return SIZE_MAX; }
  // Closes one of its connections to make room for another (see above): true if it did.
  // kStrangers spares the connections up that are active or hold something. Engine lock held
  // (the connections it looks at stay allocated), not mu_.
  // `spare`: connections it closes none of (those that just came up, which are why room is
  // made).
  enum class Room : uint8_t { kAny, kStrangers };
  bool make_room(Room which, const std::vector<const Conn*>& spare = {});

  Engine* const engine_;
  core::Mutex mu_;  // docs/locking.md #8
  std::vector<std::unique_ptr<Conn>> conns_ FABQ_GUARDED_BY(mu_);
  std::vector<const Conn*> fresh_ FABQ_GUARDED_BY(mu_);  // came_up() since the last look

 private:
  core::UniqueFd fd_;
  bool backing_off_ = false;  // out of the epoll set until the deadline; engine lock
  bool warned_ = false;
};

class PassiveAcceptor final : public PassiveListener, public Acceptor {
 public:
  PassiveAcceptor(Engine* engine, PassiveOwner* owner, const core::HmacSha256* auth);
  ~PassiveAcceptor() override;

  // PassiveListener.
  int listen(const sockaddr_in& at, sockaddr_in* bound) override;
  std::unique_ptr<Connection> take(Connection* pending) override;
  const core::HmacSha256* auth_key() const override { return auth_; }

  // A Conn got its request: the owner reports it. False when it cannot: the Conn refuses it.
  // Under the connection's lock.
  bool request(Conn* conn, const sockaddr_in& peer, const void* data, size_t len);

 private:
  std::unique_ptr<Conn> make_conn(core::UniqueFd fd) override;
  void start(Conn* c) override;
  bool may_free_locked(Conn* c) FABQ_REQUIRES(mu_) override;

  PassiveOwner* const owner_;
  const core::HmacSha256* const auth_;
};

class RdmListener final : public Listener, public Acceptor {
 public:
  RdmListener(Engine* engine, Owner* owner, const ConnParams& params);
  ~RdmListener() override;
  // Binds and listens at `addr`; 0 or a negative FI_E* code.
  int open(const sockaddr_in& addr);

  int getname(void* addr, size_t* len) override;
  void sweep() override;
  void release(Owner* owner) override;
  const core::HmacSha256* auth_key() const override;

 private:
  std::unique_ptr<Conn> make_conn(core::UniqueFd fd) override;
  void start(Conn* c) override;
  bool may_free_locked(Conn* c) FABQ_REQUIRES(mu_) override;

  size_t bound() const override;
  size_t descriptor_cap() const override;

  Owner* const owner_;
  const ConnParams params_;
  sockaddr_in addr_{};
};

}  // namespace fabq::xport
