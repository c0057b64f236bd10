// fabq provider: FI_EP_MSG endpoints and shared receive contexts (fi_endpoint(3)), before the
// transport.
//
// What works now: fi_endpoint / fi_srx_context with fabq's fi_info; fi_ep_bind of an EQ (flags
// 0), CQs (FI_TRANSMIT, FI_RECV, FI_SELECTIVE_COMPLETION), counters (FI_SEND, FI_RECV) and an
// SRX; fi_enable (-FI_ENOEQ without an EQ, -FI_ENOCQ without a CQ or counter for receives);
// posting receives (fi_recv, fi_recvv, fi_recvmsg), which wait for a sender; fi_cancel, which
// completes a posted receive with an FI_ECANCELED error completion. Sends and connection
// management need a connected peer and the TCP transport: sends return -FI_ENOTCONN, the CM
// calls -FI_ENOSYS.
//
// Limits: rx_attr.size receives posted per endpoint or SRX (more: -FI_EAGAIN); each posted
// receive holds a slot of the receive CQ (a full CQ: -FI_EAGAIN), so its completion can never
// be lost. Posting before fi_enable, or on an endpoint that has an SRX bound: -FI_EOPBADSTATE.
//
// Asynchronous events (fi_fabq.h): an endpoint after EP_FATAL, EP_REQ_ERR or EP_ACCESS_ERR
// completes every posted receive in error (err FI_EIO, prov_errno = the event) and refuses
// posts with -FI_EOPBADSTATE. An SRX after SRX_ERR refuses posts; its receives stay posted
// until it closes (as verbs' SRQ). The SRX's armed limit raises SRX_LIMIT_REACHED when its
// posted receives drop below it.
//
// Threads: every call may come from any thread (FI_THREAD_SAFE); each object has one mutex.
#pragma once

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "prov/events.h"
#include "prov/object.h"

namespace fabq::prov {

class Cntr;
class Cq;
class Domain;
class Eq;
class Srx;

// A receive waiting for a message.
struct PostedRecv {
  void* context;
  void* buf;
  size_t len;
};

class Endpoint final : public Object, public AsyncTarget {
 public:
  static Endpoint* from_fid(const fid* f);
  Endpoint(Domain* domain, const fi_info& info, void* context);
  ~Endpoint() override;
  fid_ep* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  Eq* eq();
  Srx* srx();
  // Without the endpoint's lock: an SRX asks while holding its own (lock order: endpoint, SRX).
  Cq* rx_cq() const { return rx_cq_.load(std::memory_order_acquire); }
  // Puts the endpoint in the error state and fails its posted receives with `type` as
  // prov_errno. True the first time.
  bool fail(uint32_t type);

 private:
  friend struct EpOps;
  template <class T>
  friend struct Receives;
  ssize_t post_recv(void* buf, size_t len, void* context);
  ssize_t cancel(void* context);

  FidBox<fid_ep> box_;
  Domain* const domain_;
  const size_t rx_size_;
  const size_t iov_limit_;
  std::mutex mu_;
  bool enabled_ = false;
  bool failed_ = false;
  Eq* eq_ = nullptr;
  Cq* tx_cq_ = nullptr;
  std::atomic<Cq*> rx_cq_{nullptr};  // set once at bind (release), under mu_
  Cntr* tx_cntr_ = nullptr;
  Cntr* rx_cntr_ = nullptr;
  Srx* srx_ = nullptr;
  std::vector<PostedRecv> posted_;
};

class Srx final : public Object, public AsyncTarget {
 public:
  static Srx* from_fid(const fid* f);
  Srx(Domain* domain, const fi_rx_attr& attr, void* context);
  fid_ep* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  std::vector<Endpoint*> endpoints();
  bool fail();
  void arm_limit(size_t limit);
  void attach(Endpoint* ep);
  void detach(Endpoint* ep);

 private:
  friend struct SrxOps;
  template <class T>
  friend struct Receives;
  ssize_t post_recv(void* buf, size_t len, void* context);
  ssize_t cancel(void* context);

  FidBox<fid_ep> box_;
  Domain* const domain_;
  const size_t size_;
  const size_t iov_limit_;
  std::mutex mu_;
  bool failed_ = false;
  size_t limit_ = 0;
  std::vector<PostedRecv> posted_;
  std::vector<Endpoint*> endpoints_;
};

int open_endpoint(fid_domain* domain, fi_info* info, fid_ep** ep, void* context);
int open_srx(fid_domain* domain, fi_rx_attr* attr, fid_ep** srx, void* context);

}  // namespace fabq::prov
