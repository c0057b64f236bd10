// fabq provider: multicast memberships of datagram endpoints (fi_cm(3) fi_join, fi_mc_addr,
// FI_CLASS_MC).
//
// fi_join(ep, &group, flags, &mc, context) on an enabled FI_EP_DGRAM endpoint with
// FI_MULTICAST, bound to an EQ: `group` is a sockaddr_in naming an IPv4 multicast address and a
// port. fi_join returns 0 with the fid_mc, and the outcome comes on the endpoint's EQ: an
// fi_eq_entry of FI_JOIN_COMPLETE (fid: the fid_mc, context: fi_join's), or an error entry
// (the same fid and context; err FI_EADDRNOTAVAIL when no interface can join the group, and
// FI_ECONNREFUSED or FI_ETIMEDOUT when a net=reject or net=timeout fault rule on the endpoint
// fails it). Either way the application closes the fid_mc, which purges that event if it is
// still unread. The event's slot in the EQ is reserved before anything joins: an EQ with no
// room fails fi_join with -FI_EAGAIN (an overrun one with -FI_EOVERRUN), and nothing joins.
//
// A member that receives (flags 0 or FI_RECV) gets what is sent to the group on the endpoint's
// interface: each receive completion has FI_MULTICAST set (and the sender's fi_addr_t with
// FI_SOURCE). A member that sends (flags 0 or FI_SEND) sends to the group through
// fi_mc_addr(mc): every member of the group on that network receives it, this endpoint too
// when it also receives. fi_close(mc) leaves the group: once it returns, nothing more of the
// group reaches the endpoint, and a send to its fi_addr_t is -FI_EINVAL.
//
// Lifetime: an fid_mc holds its endpoint (fi_close of the endpoint before its memberships is
// -FI_EBUSY). Threads: any.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_cm.h>

#include <memory>

#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

class Endpoint;

class Mc final : public Object {
 public:
  // The fi_addr_t of a membership is kAddrTag | its id (below 2^62): AV addresses never have
  // bit 62 set, and FI_ADDR_UNSPEC / FI_ADDR_NOTAVAIL have bit 63.
  static constexpr fi_addr_t kAddrTag = fi_addr_t{1} << 62;
  static bool is_mc_addr(fi_addr_t a) { return (a >> 62) == 1; }

  static Mc* from_fid(const fid* f);
  Mc(Endpoint* ep, const sockaddr_in& group, uint64_t id, bool sends, void* context);
  ~Mc() override;
  fid_mc* handle() { return &box_.fid; }
  const sockaddr_in& group() const { return group_; }
  fi_addr_t addr() const { return box_.fid.fi_addr; }
  // It joined to send (flags 0 or FI_SEND).
  bool sends() const { return sends_; }
  // Set once by fi_join, before the fid_mc is handed out.
  void set_membership(std::unique_ptr<xport::Membership> m) { membership_ = std::move(m); }

 private:
  FidBox<fid_mc> box_;
  Endpoint* const ep_;
  const sockaddr_in group_;
  const bool sends_;
  std::unique_ptr<xport::Membership> membership_;  // null: it does not receive
};

}  // namespace fabq::prov
