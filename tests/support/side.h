// Test support: one side of a connection, through the libfabric API only, as an application
// opens it: fi_getinfo -> fi_fabric -> fi_domain -> EQ, CQs (and counters) -> a passive
// endpoint that listens and accepts, an endpoint that connects (FI_EP_MSG), or an endpoint
// with an address vector (FI_EP_RDM). Everything listens on 127.0.0.1 at a port the system
// picks. The libfabric steps themselves are tools/fabric_setup.h's, which `fabq bench` takes
// too.
//
// A Side is one process's (two processes: peer.h), or one of two in one process (pair.h),
// which may share one fabric and domain. Every wait has a bound: Options::timeout_ms unless
// the call says otherwise. A step that fails records a test failure and returns false (or
// nullptr, or the error code), so that a test never hangs on it.
//
// Progress: fabq progresses only inside the calls that read its queues (FI_PROGRESS_MANUAL),
// so a Side reads its own CQs while it waits for an event, for the peer (await) or for a full
// queue to drain (retry); completions read that way are kept, and next() returns them first,
// in order.
//
// Thread safety: none; a Side belongs to one thread, except where a test hands it over.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "support/provider.h"
#include "tools/fabric_setup.h"

namespace fabq::testing {

class Link;

// As a timeout argument: the Side's Options::timeout_ms.
inline constexpr int kSideTimeout = -1;

struct Options {
  const char* provider = nullptr;  // nullptr: provider(), the provider under test
  fi_ep_type type = FI_EP_MSG;
  uint64_t caps = FI_MSG;
  fi_progress data_progress = FI_PROGRESS_UNSPEC;  // the hints' domain_attr->data_progress
  fi_cq_format cq_format = FI_CQ_FORMAT_DATA;
  fi_wait_obj cq_wait = FI_WAIT_UNSPEC;
  size_t cq_size = 256;                // 0: the provider's default
  bool one_cq = false;                 // one CQ for both directions: tx_cq() == rx_cq()
  uint64_t tx_cq_flags = FI_TRANSMIT;  // | FI_SELECTIVE_COMPLETION
  uint64_t rx_cq_flags = FI_RECV;      // | FI_SELECTIVE_COMPLETION
  bool counters = false;               // a send counter (FI_SEND) and a receive counter (FI_RECV)
  const char* auth_key = nullptr;      // hints' domain_attr->auth_key (its bytes), when set
  Shm shm = Shm::kAsConfigured;        // shared memory between endpoints of one host, or not
  int timeout_ms = kTimeoutMs;         // the bound of every wait that names no other
};

// An FI_EP_RDM side: FI_TAGGED | FI_MSG | FI_SOURCE, one CQ of 1024 tagged entries for both
// directions, completions read with their source.
Options rdm_options(const char* auth_key = nullptr);

using setup::CmEvent;
using setup::kCmEntrySize;

// An EQ error entry with room for its err_data.
struct CmError {
  fi_eq_err_entry entry{};
  uint8_t data[1024] = {};
};

// One completion, or the error entry that was next.
struct Completion {
  // 1: `entry`; -FI_EAVAIL: `err`; -FI_ETIMEDOUT: nothing came; else the call's failure.
  ssize_t rc = -FI_ETIMEDOUT;
  fi_cq_tagged_entry entry{};
  fi_cq_err_entry err{};
  fi_addr_t src = FI_ADDR_NOTAVAIL;  // the sender, on a side with FI_SOURCE
  const void* context() const { return rc == 1 ? entry.op_context : err.op_context; }
};

std::string cq_str(const Completion& c);
std::string addr_str(const sockaddr_in& a);
bool same_addr(const sockaddr_in& a, const sockaddr_in& b);
// Bytes of a recognisable pattern: message `seed`, byte i.
std::string pattern(size_t len, unsigned seed);

// One completion from `cq` within timeout_ms by fi_cq_sread: 1, or -FI_EAVAIL with the error
// entry in *err (when given), or what fi_cq_sread returned. For the tests that read a CQ
// themselves, with nothing kept and nothing allocated.
ssize_t wait_cq(fid_cq* cq, fi_cq_tagged_entry* entry, fi_cq_err_entry* err = nullptr,
                int timeout_ms = kTimeoutMs);

class Side {
 public:
  // `domain_of`: open this side's objects in that side's fabric and domain instead of its own
  // (two endpoints of one domain, as fabq's fault injection counts them). That side must
  // outlive this one and have opened them first.
  explicit Side(Options opts = {}, Side* domain_of = nullptr);
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;
  virtual ~Side();

  // ---- getinfo
  // fi_getinfo for opts.provider (the provider under test unless named): opts.type, opts.caps,
  // FI_SOCKADDR_IN. Records no failure: the caller decides what a missing match means.
  int getinfo(const char* node, const char* service, uint64_t flags, fi_info** out) const;

  // ---- passive side (FI_EP_MSG)
  // fi_getinfo(127.0.0.1, "0", FI_SOURCE) -> fabric, EQ, domain, a passive endpoint bound to
  // the EQ, listening. Returns the port the system chose (host order), 0 on failure.
  uint16_t listen();
  // Waits for the next FI_CONNREQ; returns its info (the caller's: fi_freeinfo, or give it to
  // open_endpoint) and its connection data.
  fi_info* wait_connreq(std::string* data = nullptr, int timeout_ms = kSideTimeout);
  // Opens, binds and enables the endpoint for `info` (a CONNREQ's, or the side's own): to the
  // EQ, the CQs and the counters the side opened with listen, open_active or open. Frees info
  // unless told not to, or it is the side's own.
  bool open_endpoint(fi_info* info, bool free_info = true);
  bool accept(const void* data = nullptr, size_t len = 0);
  // Listens, sends the port over the link, accepts the first connection request (with
  // accept_data) and waits for FI_CONNECTED. The connect data arrives in *connect_data.
  bool serve(Link& link, std::string* connect_data = nullptr,
             const std::string& accept_data = std::string());
  // Closes the passive endpoint alone.
  int close_pep();

  // ---- active side (FI_EP_MSG)
  // fi_getinfo(127.0.0.1, port) -> fabric, domain, EQ, the endpoint bound and enabled.
  bool open_active(uint16_t port);
  // fi_connect to the port open_active was given.
  int connect(const void* data = nullptr, size_t len = 0);
  // Receives the port over the link, connects with connect_data, waits for FI_CONNECTED and
  // returns the accept data in *accept_data.
  bool dial(Link& link, const std::string& connect_data = std::string(),
            std::string* accept_data = nullptr);

  // ---- unconnected side (FI_EP_RDM)
  // fi_getinfo(127.0.0.1, "0", FI_SOURCE) -> fabric, domain, AV (FI_AV_TABLE), CQs, the
  // endpoint bound and enabled, listening at a port the system picks (address()).
  bool open();
  const sockaddr_in& address() const { return address_; }
  // Inserts `a` into the AV.
  fi_addr_t insert(const sockaddr_in& a);
  // Sends this endpoint's address over the link / inserts the one that comes.
  bool tell(Link& link);
  fi_addr_t learn(Link& link);

  // ---- events
  // The next EQ event within timeout_ms: its type in *event and its bytes in *ev; returns the
  // number of bytes. An error entry is read into *err (when given) and gives -FI_EAVAIL;
  // without `err` it is a failure. Nothing within the timeout: -FI_EAGAIN and a failure
  // unless quiet. The CQs are read too between short waits on the EQ (completions kept for
  // next()): a provider may learn of a disconnect on its data path. msg_progress_test checks
  // what a wait on the EQ alone wakes for.
  ssize_t read_event(uint32_t* event, CmEvent* ev, int timeout_ms = kSideTimeout,
                     CmError* err = nullptr, uint64_t flags = 0, bool quiet = false);
  ssize_t read_eq_error(CmError* e);
  // Waits for FI_CONNECTED on this side's endpoint; its data into *data.
  bool wait_connected(std::string* data = nullptr, int timeout_ms = kSideTimeout);

  // ---- completions
  // The next completion of cq within timeout_ms (kept ones first, see progress).
  Completion next(fid_cq* cq, int timeout_ms = kSideTimeout);
  Completion next_tx(int timeout_ms = kSideTimeout) { return next(tx_cq_, timeout_ms); }
  Completion next_rx(int timeout_ms = kSideTimeout) { return next(rx_cq_, timeout_ms); }
  // On a side with one CQ: its next completion, whichever way.
  Completion next(int timeout_ms = kSideTimeout) { return next(rx_cq_, timeout_ms); }
  // The next completion of `ctx`, on either CQ, keeping the others in order for next().
  Completion next_for(const void* ctx, int timeout_ms = kSideTimeout);
  ssize_t read_cq_error(fid_cq* cq, fi_cq_err_entry* err);
  // True when cq gives nothing for ms milliseconds (it is read, so it progresses).
  bool quiet_for(fid_cq* cq, int ms);

  // One round of progress: reads the CQs (keeping what comes for next()), counters and the EQ
  // (FI_PEEK: events stay queued); when nothing came, pauses 50 us, so that a loop of them
  // leaves the CPU to the peer now and then.
  void progress();
  void progress_cqs();
  // Calls op() (a post) until it gives something other than -FI_EAGAIN, progressing this side
  // in between: a full queue drains as the peer takes messages. Returns op()'s last result.
  ssize_t retry(const std::function<ssize_t()>& op, int timeout_ms = kSideTimeout);
  ssize_t send(const void* buf, size_t len, void* ctx);
  ssize_t recv(void* buf, size_t len, void* ctx);
  ssize_t tsend(const void* buf, size_t len, fi_addr_t to, uint64_t tag, void* ctx);
  ssize_t trecv(void* buf, size_t len, uint64_t tag, void* ctx);

  // Waits for `step` from the peer while progressing this side.
  bool await(Link& link, char step, int timeout_ms = kSideTimeout);

  // ---- names
  sockaddr_in name(fid_t fid);
  sockaddr_in peer_name();

  // Closes the endpoint alone (its CQs, counters, EQ and domain stay).
  int close_ep();
  void close_all();

  const Options& opts() const { return opts_; }
  fi_info* info() const { return info_; }
  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }
  fid_eq* eq() const { return eq_; }
  fid_pep* pep() const { return pep_; }
  fid_ep* ep() const { return ep_; }
  fid_av* av() const { return av_; }
  fid_cq* tx_cq() const { return tx_cq_; }
  fid_cq* rx_cq() const { return rx_cq_; }
  fid_cntr* tx_cntr() const { return tx_cntr_; }
  fid_cntr* rx_cntr() const { return rx_cntr_; }

  // For two sides of one process: `also` runs whenever this side waits between two looks at
  // its queues, so that the other side's queues are read too.
  void while_waiting(std::function<void()> also) { also_ = std::move(also); }

 private:
  int bound(int timeout_ms) const {
    return timeout_ms == kSideTimeout ? opts_.timeout_ms : timeout_ms;
  }
  bool check(int rc, const char* what);
  bool check(const setup::Result& r);
  int close_fid(fid_t* f);
  bool start(const char* node, const char* service, uint64_t flags);
  bool open_queues();
  bool bind_and_enable(fi_info* info);
  // One fi_cq_read (fi_cq_readfrom with FI_SOURCE) of `cq`: true with a completion or an
  // error entry in *c, false when it had neither.
  bool read_one(fid_cq* cq, Completion* c);
  // The CQs, each once: {tx, rx}, or {the one, nullptr}.
  std::array<fid_cq*, 2> cqs() const { return {tx_cq_, rx_cq_ != tx_cq_ ? rx_cq_ : nullptr}; }
  void idle();

  Options opts_;
  setup::Hints hints_;
  Side* domain_of_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_eq* eq_ = nullptr;
  fid_pep* pep_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* tx_cq_ = nullptr;
  fid_cq* rx_cq_ = nullptr;
  fid_cntr* tx_cntr_ = nullptr;
  fid_cntr* rx_cntr_ = nullptr;
  fi_context2 ep_ctx_{};
  sockaddr_in address_{};
  std::map<fid_cq*, std::deque<Completion>> kept_;
  std::function<void()> also_;
};

// An FI_EP_RDM side, opened at construction (rdm_options).
class Rdm : public Side {
 public:
  explicit Rdm(const char* auth_key = nullptr) : Side(rdm_options(auth_key)) { ok_ = open(); }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

}  // namespace fabq::testing
