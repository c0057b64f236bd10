// fabq provider: what endpoints and queues ask of a transport, and what a transport may ask of
// them. The provider layer declares; the transport layer (src/xport) implements. The provider
// never includes a transport header: it reaches the TCP transport only through these types and
// the entry points at the end of this file, which src/xport defines.
//
// Progress model (fi_domain(3) FI_PROGRESS_MANUAL, the default): bytes move when the
// application calls into fabq. Every read of a CQ, EQ or counter calls Transport::progress(),
// which does non-blocking socket I/O for every connection of the fabric. A thread about to
// block (fi_cq_sread, fi_eq_sread, fi_cntr_wait, fi_wait, or epoll on a queue's fd after
// fi_trywait) announces itself with begin_wait(); while anybody waits, a progress thread
// sleeps in epoll on all of the fabric's sockets and moves bytes as they arrive, so the waiter
// is woken by the completion or event they produce. When nobody waits, that thread sleeps on
// its own eventfd and costs nothing. FI_PROGRESS_AUTO, when an application asks for it, keeps
// the progress thread running for the life of the domain.
//
// Lock order (outer first): Domain::mu_, the transport's engine lock, a connection's lock, a
// listener's (acceptor's) lock, an endpoint's lock, an SRX's lock, the channel's lock. A
// transport never calls raise() with any of them held: it hands asynchronous events to
// raise_later(), which raises them once its locks are released, and only on objects that are
// still open.
#pragma once

#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_endpoint.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace fabq::prov {

class Connection;
class Endpoint;
class Fabric;
struct Unexpected;

inline constexpr size_t kMaxIov = 4;        // tx_attr/rx_attr iov_limit
inline constexpr size_t kInjectSize = 64;   // tx_attr inject_size
inline constexpr size_t kCmDataSize = 256;  // FI_OPT_CM_DATA_SIZE: connect/accept/reject data

// When a send completes (fi_cq(3) COMPLETION EVENT SEMANTICS).
enum class TxLevel : uint8_t {
  kInject,    // the data has left the application's buffer (fabq's default)
  kTransmit,  // the peer's transport has acknowledged it
  kDelivery,  // the peer has placed it in a receive buffer
};

// One send, from post to completion. Slots live in the endpoint's transmit ring; the
// transport holds a pointer from submit() until it reports the send written or failed.
struct TxOp {
  // Written by the endpoint before submit():
  void* context = nullptr;
  uint64_t cq_flags = 0;  // FI_SEND | FI_MSG or FI_TAGGED, for the completion
  bool tagged = false;
  bool has_data = false;
  bool report = true;  // a CQ entry on success (selective completion may say no)
  TxLevel level = TxLevel::kInject;
  uint64_t tag = 0;
  uint64_t data = 0;
  uint32_t seq = 0;
  size_t len = 0;
  size_t iov_count = 0;
  iovec iov[kMaxIov] = {};
  Connection* conn = nullptr;  // the connection it is submitted to (an RDM endpoint has many)
  unsigned char inject[kInjectSize] = {};  // fi_inject / FI_INJECT: the data, copied
  // Owned by the transport while submitted:
  bool accepted = false;  // the connection took it (set under its lock in submit())
  unsigned char header[32] = {};
  size_t written = 0;  // header and payload bytes handed to the kernel
};

// Which acknowledgement a sender asked for.
enum class AckWanted : uint8_t { kNone, kReceived, kDelivered };

// A message arriving on a connection, as its header describes it.
struct Incoming {
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
};

// A receive an application posted, as endpoints and SRX contexts keep it.
struct PostedRecv {
  void* context = nullptr;
  uint64_t flags = 0;          // FI_COMPLETION, FI_CLAIM, FI_DISCARD as posted
  bool default_flags = false;  // fi_recv & co.: the endpoint's rx op_flags apply
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  size_t iov_count = 0;
  iovec iov[kMaxIov] = {};
  size_t len = 0;
  Endpoint* owner = nullptr;  // the endpoint whose receive CQ holds its credit (null: none yet)
};

// Where an endpoint wants an arriving message's payload: up to `capacity` bytes into `iov`;
// the rest is read and discarded (truncation). The connection keeps it from place() to
// placed(); the fields after `capacity` are the endpoint's record of what it chose, opaque to
// the transport (one message at a time per connection, many at once per RDM endpoint).
struct Placement {
  iovec iov[kMaxIov + 1] = {};
  size_t iov_count = 0;
  size_t capacity = 0;
  enum class Kind : uint8_t { kNone, kPosted, kUnexpected, kDiscard };
  Kind kind = Kind::kNone;
  PostedRecv recv;                   // kPosted: the receive it fills
  Unexpected* unexpected = nullptr;  // kUnexpected: the buffer it fills
};

// A connection as an endpoint sees it. Implemented by the transport; owned by the endpoint.
// Every call may come from any thread; none may be made holding the endpoint's lock.
class Connection {
 public:
  virtual ~Connection() = default;
  // fi_connect: starts connecting; the outcome arrives on the endpoint's EQ.
  virtual int connect(const sockaddr_in& peer, const void* data, size_t len) = 0;
  // fi_accept on an endpoint opened from a CONNREQ.
  virtual int accept(const void* data, size_t len) = 0;
  // fi_shutdown: sends what is queued, then closes the sending side.
  virtual int shutdown() = 0;
  // A send from the endpoint's transmit ring. 0, or -FI_ENOTCONN / -FI_EOPBADSTATE when the
  // connection cannot carry it (the op stays the endpoint's).
  virtual int submit(TxOp* op) = 0;
  // The endpoint placed a message it had buffered: send the delivery acknowledgement.
  virtual void ack_delivered(uint32_t seq) = 0;
  // The same from a caller that may hold another connection's lock: the acknowledgement is
  // queued and sent at this connection's next progress round.
  virtual void ack_delivered_later(uint32_t seq) = 0;
  // Receives were posted or buffered messages consumed: a stalled connection may go on.
  virtual void resume() = 0;
  virtual int getname(void* addr, size_t* len) = 0;
  virtual int getpeer(void* addr, size_t* len) = 0;
  virtual bool connected() const = 0;
  // False once the connection has closed, failed or been refused: it carries nothing more.
  virtual bool open() const = 0;
};

// An RDM endpoint's listening socket. Every connection it accepts is an RDM endpoint's
// connection to this one: it is accepted at once (no CM events), carries the peer's messages
// into the endpoint, and lives until the listener is destroyed or the peer goes away.
// Owned by the endpoint; calls as for Connection.
class Listener {
 public:
  virtual ~Listener() = default;
  virtual int getname(void* addr, size_t* len) = 0;
  // Frees the accepted connections that closed and that nothing refers to any more.
  virtual void sweep() = 0;
};

// One per fabric: the progress engine of every connection and listener on it.
class Transport {
 public:
  virtual ~Transport() = default;
  // Non-blocking I/O on every connection of the fabric. Returns at once if another thread is
  // already doing it.
  virtual void progress() = 0;
  // A thread is about to block on a queue of this fabric / has stopped blocking.
  virtual void begin_wait() = 0;
  virtual void end_wait() = 0;
};

// What an fi_info's `handle` names.
enum class HandleKind : uint8_t {
  kNone,       // no handle
  kConnReq,    // a connection request (FI_CONNREQ's info)
  kPassiveEp,  // an open passive endpoint, whose address an active endpoint may take over
  kUnknown,    // nothing the transport has open: foreign, or an object already closed
};

// Entry points the transport layer defines.
// The fabric's transport, created on first use; never null.
Transport* make_transport(Fabric* fabric);
// What `handle` names, found by looking it up among the transport's requests and open passive
// endpoints, so that a stale or foreign handle is never read. For kPassiveEp, *pep_name is its
// address.
HandleKind classify_handle(fid_t handle, sockaddr_in* pep_name);
// A connection for `ep`: fresh (for fi_connect), or adopting the pending request `handle`
// (the fi_info handle of an FI_CONNREQ). Null with *err set on failure.
Connection* make_connection(Endpoint* ep, fid_t handle, int* err);
// fi_passive_ep.
int open_passive_ep(fid_fabric* fabric, fi_info* info, fid_pep** pep, void* context);
// The provider is being unloaded: stops and joins every progress thread of every fabric, open
// or not (their code is about to be unmapped), and frees what the transport keeps for the whole
// process. Fabrics left open make no more progress of their own; nothing of the transport may be
// used afterwards.
void unload_transport();
// An RDM endpoint's listener at `addr` (port 0: one the kernel picks). Null with *err set
// (-FI_EADDRINUSE, -FI_EINVAL, -FI_EIO) on failure.
Listener* open_listener(Endpoint* ep, const sockaddr_in& addr, int* err);

}  // namespace fabq::prov
