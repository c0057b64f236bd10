// fabq provider: memory regions (fi_mr(3)) and the remote access they grant.
//
// fabq moves data with the CPU, so a local buffer needs no registration (no FI_MR_LOCAL: a
// descriptor is accepted and not read wherever a call takes one). A region is what RMA and
// atomics from peers (fi_rma(3), fi_atomic(3)) may touch, and nothing else of the process is:
//
// - fi_mr_reg / fi_mr_regv / fi_mr_regattr: at most the domain's mr_iov_limit (1) buffers, each
//   with a length and, if it has one, a non-null address from which that length does not run
//   past the end of the address space (a region that wrapped would put every address below it
//   at a peer's reach); offset 0 (fi_mr(3): reserved, must be 0); access a subset of FI_SEND,
//   FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE; flags 0 or FI_RMA_EVENT; host
//   memory only. Else -FI_EINVAL (-FI_EBADFLAGS for flags, -FI_ENOSYS for another memory
//   interface), and nothing is registered.
// - Keys. With FI_MR_PROV_KEY in the domain's mr_mode (FI_MR_BASIC before 1.5) the key is 64
//   random bits from the kernel (getrandom), drawn again on the rare clash: a peer cannot guess
//   one. Otherwise it is the application's requested_key, unique in the domain (a key another
//   live region holds: -FI_ENOKEY; FI_KEY_NOTAVAIL, which fi_mr_key returns for a region without
//   a key: -FI_EKEYREJECTED). fi_mr_key returns it; fi_mr_desc a descriptor.
// - Addresses. With FI_MR_VIRT_ADDR (or FI_MR_BASIC) peers name a byte of the region by its
//   virtual address in this process, otherwise by its offset from the region's start.
// - FI_MR_ENDPOINT: the region is reachable only through the endpoint it is bound to
//   (fi_mr_bind with FI_CLASS_EP), and only after fi_mr_enable; until then fi_mr_key is
//   FI_KEY_NOTAVAIL. Without it, any endpoint of the domain reaches every region. The binding
//   holds the endpoint: its fi_close is -FI_EBUSY until every region bound to it is closed
//   (as for a counter bound to a region, and as libfabric's cxi provider does), so a key never
//   names an endpoint that is gone, nor a later one opened in its place.
// - fi_mr_bind of a counter with FI_REMOTE_WRITE and/or FI_REMOTE_READ: the counter counts the
//   remote writes (and atomics) / reads that complete in the region; it cannot close before the
//   region is freed (-FI_EBUSY). fi_mr_refresh is accepted (host memory never moves) and
//   fi_mr_enable is 0 (it is what FI_MR_ENDPOINT asks for).
// - With the domain's EQ bound with FI_REG_MR, each registration completes there as an
//   FI_MR_COMPLETE event (fid = the region's, context = its context). The event's slot is
//   reserved before anything is registered: with no room in that EQ the registration fails
//   with -FI_EAGAIN, nothing is registered and the EQ is untouched (read it and register
//   again); an EQ already overrun fails it with -FI_EOVERRUN. Closing a region purges its
//   unread event from that EQ.
// - fi_close ends remote access at once: a request that arrives later finds no key and fails at
//   its initiator. An access already placing bytes when the region closes may still finish
//   (fi_mr(3): the application closes a region only once nothing uses it); the provider's own
//   record of the region lives until then. A domain with live regions cannot close (-FI_EBUSY).
//
// Remote access (Domain::acquire_region): a request names a key, an address, a length and the
// access it needs (FI_REMOTE_READ or FI_REMOTE_WRITE), all of them the peer's choice. It is
// granted only when a live (enabled) region of the domain has the key, grants the access, lies
// wholly around the range (checked without computing addr + len, which a peer can make wrap)
// and, with FI_MR_ENDPOINT, is bound to the endpoint the request came to. Anything else is
// refused with a reason (xport::RmaStatus) and touches no memory.
//
// Threads: any. A region's record is immutable once it is reachable, but for its bindings,
// which change under the domain's region lock.
#pragma once

#include <rdma/fi_domain.h>

#include <atomic>

#include "prov/object.h"
#include "xport/transport.h"

namespace fabq::prov {

class Cntr;
class Domain;
class Endpoint;

// What the domain's table holds for a key. Reference counted: the Mr holds one reference until
// it closes, and every remote access holds one while it touches the memory.
struct Region {
  uint64_t key = 0;
  unsigned char* base = nullptr;
  size_t len = 0;
  uint64_t access = 0;
  uint64_t first = 0;  // how peers name base: its address (FI_MR_VIRT_ADDR) or 0
  // Bindings, under the domain's region lock.
  // FI_MR_ENDPOINT: held (its fi_close is -FI_EBUSY) until the region leaves the domain's table.
  Endpoint* ep = nullptr;
  bool enabled = true;
  Cntr* write_cntr = nullptr;  // fi_mr_bind FI_REMOTE_WRITE (held)
  Cntr* read_cntr = nullptr;   // fi_mr_bind FI_REMOTE_READ (held)
  std::atomic<uint32_t> refs{1};
};

// A granted access: the region held, the first byte it touches, and the counter it counts on.
struct RegionUse {
  Region* region = nullptr;
  unsigned char* at = nullptr;
  Cntr* cntr = nullptr;
};
// Drops a reference taken by Domain::acquire_region (the last one frees the record and lets go
// of its counters).
void release_region(Region* r);

class Mr final : public Object {
 public:
  static Mr* from_fid(const fid* f);
  Mr(Domain* domain, Region* region, void* context);
  ~Mr() override;
  fid_mr* handle() { return &box_.fid; }
  Region* region() const { return region_; }

 private:
  friend struct MrOps;
  FidBox<fid_mr> box_;
  Domain* const domain_;
  Region* const region_;
};

int mr_regattr(fid* domain, const fi_mr_attr* attr, uint64_t flags, fid_mr** mr);
int mr_reg(fid* domain, const void* buf, size_t len, uint64_t access, uint64_t offset,
           uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context);
int mr_regv(fid* domain, const iovec* iov, size_t count, uint64_t access, uint64_t offset,
            uint64_t requested_key, uint64_t flags, fid_mr** mr, void* context);

}  // namespace fabq::prov
