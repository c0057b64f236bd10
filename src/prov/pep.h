// fabq provider: passive endpoints (fi_passive_ep(3), fi_cm(3)) and the connection requests they
// report.
//
// A passive endpoint binds an EQ, listens (fi_listen) at its address through the transport's
// PassiveListener, and reports every authenticated request it hears of as FI_CONNREQ on that
// EQ, with an fi_info whose `handle` names the request. fi_endpoint with that info adopts the
// pending connection (fi_accept then completes it); fi_reject refuses it with the application's
// data. Requests may fill at most half of the EQ: one that finds no room is refused at once, so
// a flood of them cannot overrun the EQ or crowd out the events of connections already made.
//
// A request's handle stays valid (as memory) for as long as the provider is loaded, and what it
// names is looked up, never read: fi_endpoint or fi_reject after the request was taken, refused
// or its passive endpoint closed fails with -FI_EINVAL or -FI_ECONNABORTED.
//
// Closing the passive endpoint ends its pending requests (-FI_ECONNABORTED from then on),
// purges its unread events from the EQ (freeing the infos of its unread FI_CONNREQs), and
// closes every connection not taken, which its peer sees as a refusal.
//
// Threads: any thread may call anything. Locks (docs/locking.md): the list of open passive
// endpoints, then a passive endpoint's own, then the requests' pool, then the transport's
// listener lock.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_endpoint.h>

#include <memory>
#include <optional>

#include "core/hmac.h"
#include "core/mutex.h"
#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

class Eq;
class Fabric;
struct ConnReq;

class PassiveEp final : public Object, public xport::PassiveOwner {
 public:
  static PassiveEp* from_fid(const fid* f);
  PassiveEp(Fabric* fabric, const fi_info& info, void* context);
  ~PassiveEp() override;
  fid_pep* handle() { return &box_.fid; }

  // xport::PassiveOwner: report FI_CONNREQ; false when it cannot be queued (no EQ, no room, the
  // passive endpoint is closing).
  bool request(xport::Connection* pending, const sockaddr_in& peer, const void* data,
               size_t len) override FABQ_EXCLUDES(mu_);

  // If `handle` is an open passive endpoint's fid: true, and its address in *name. `handle` is
  // compared, never read.
  static bool name_if_open(fid_t handle, sockaddr_in* name);

 private:
  friend struct PepOps;
  friend struct ConnReq;
  int bind(fid* bfid, uint64_t flags) FABQ_EXCLUDES(mu_);
  int listen() FABQ_EXCLUDES(mu_);
  int getname(void* addr, size_t* len) FABQ_EXCLUDES(mu_);
  int setname(const void* addr, size_t len) FABQ_EXCLUDES(mu_);
  int reject(fid_t handle, const void* data, size_t len) FABQ_EXCLUDES(mu_);

  FidBox<fid_pep> box_;
  Fabric* const fabric_;
  fi_info* const info_;
  const std::optional<core::HmacSha256> auth_;
  std::unique_ptr<xport::PassiveListener> listener_;  // made at open, listening from fi_listen
  // After the list of open passive endpoints, before the requests' pool (docs/locking.md).
  core::Mutex mu_;
  Eq* eq_ FABQ_GUARDED_BY(mu_) = nullptr;
  sockaddr_in addr_ FABQ_GUARDED_BY(mu_){};
  bool listening_ FABQ_GUARDED_BY(mu_) = false;
  bool closing_ FABQ_GUARDED_BY(mu_) = false;  // the destructor runs: requests are refused
};

// What an fi_info's `handle` names.
enum class HandleKind : uint8_t {
  kNone,       // no handle
  kConnReq,    // a connection request (FI_CONNREQ's info)
  kPassiveEp,  // an open passive endpoint, whose address an active endpoint may take over
  kUnknown,    // nothing fabq has open: foreign, or an object already closed
};

// What `handle` names, found by looking it up among the requests and the open passive endpoints,
// so that a stale or foreign handle is never read. For kPassiveEp, *pep_name is its address.
HandleKind classify_handle(fid_t handle, sockaddr_in* pep_name);

// fi_endpoint from an FI_CONNREQ: the pending connection `handle` names, taken for `owner` and
// adopted. Null with *err: -FI_EINVAL (not a request, or taken already, or of another fabric),
// -FI_ECONNABORTED (its passive endpoint closed, or the peer gave up).
std::unique_ptr<xport::Connection> take_request(Fabric* fabric, fid_t handle, xport::Owner* owner,
                                                const xport::ConnParams& params, int* err);

int open_passive_ep(fid_fabric* fabric, fi_info* info, fid_pep** pep, void* context);

// The provider is being unloaded: frees the requests' pool and the list of passive endpoints.
void unload_passive_eps();

}  // namespace fabq::prov
