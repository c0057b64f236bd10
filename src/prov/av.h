// fabq provider: address vectors (fi_av(3)).
//
// An AV is a table of peer addresses, IPv4 `struct sockaddr_in` (the domain's addr_format
// FI_SOCKADDR_IN), for the RDM endpoints bound to it. Every fi_addr_t it hands out is an index
// into that table, for FI_AV_TABLE and FI_AV_MAP alike: 0 for the first address inserted, then
// one more for each address inserted successfully, across calls, in the order the calls are
// made. An index removed with fi_av_remove is never handed out again, so a stale fi_addr_t
// never names a newer peer. Duplicates are allowed: inserting an address already present gives
// it a new index, and both stay valid until removed.
//
// fi_av_open: attr, av and domain not null (-FI_EINVAL); flags other than FI_EVENT, FI_READ and
// FI_SYMMETRIC (-FI_EBADFLAGS); rx_ctx_bits != 0, no scalable endpoints (-FI_EINVAL); a type
// that is not FI_AV_UNSPEC, FI_AV_MAP or FI_AV_TABLE, or one other than the domain's av_type
// when that is not FI_AV_UNSPEC (-FI_EINVAL); FI_READ without a name (-FI_EINVAL); a failed
// domain (-FI_EOPBADSTATE). FI_AV_UNSPEC becomes the domain's av_type, or FI_AV_TABLE, and is
// written back to attr->type. `count` is a hint: that many entries (at most 65536) are
// reserved. FI_SYMMETRIC and ep_per_node are accepted and ignored.
//
// A name (FI_SHARED_AV) opens the table every process of the user on the host that opens that
// name shares (prov/shared_av.h), creating it if nobody holds it; with FI_READ, only an existing
// one (else -FI_EINVAL). What is at the name and is not this user's private table is refused
// (-FI_EACCES), and so is a table whose header no table could have (-FI_EINVAL). Its `count`
// entries (0: 1024; at most 65536) are all it ever holds: an insert past them fails with FI_ENOSPC.
// An fi_addr_t names the same entry in every process, and attr->map_addr is set to the table's
// fi_addr_t array (the given map_addr is not used): map_addr[i] is i while entry i is valid, else
// FI_ADDR_NOTAVAIL. An insert into a read-only AV inserts nothing: it finds each address among the
// table's valid entries (the lowest index holding it; not there: FI_EADDRNOTAVAIL); fi_av_remove on
// it is -FI_EOPNOTSUPP. Removing an entry removes it for every process.
//
// fi_av_bind(av, eq, 0): the EQ for FI_EVENT inserts. Not a fabq EQ, or one of another fabric
// (-FI_EINVAL); flags (-FI_EBADFLAGS); an EQ already bound (-FI_EBUSY). The AV holds the EQ
// until it closes (the EQ's fi_close gives -FI_EBUSY meanwhile). An EQ bound to an AV opened
// without FI_EVENT receives nothing.
//
// Inserts (fi_av_insert, fi_av_insertsvc, fi_av_insertsym). Flags FI_MORE (ignored) and
// FI_SYNC_ERR; others (FI_AV_USER_ID included) give -FI_EBADFLAGS. An address fails when its
// family is not AF_INET, or its name does not resolve (FI_EADDRNOTAVAIL), or memory runs out
// (FI_ENOMEM); its fi_addr[i] is FI_ADDR_NOTAVAIL and it takes no index. fi_addr may be null.
//   - count above INT_MAX (the result could not say how many): -FI_EINVAL; addr null with
//     count > 0: -FI_EINVAL.
//   - Synchronous AV: returns the number of addresses inserted. With FI_SYNC_ERR, `context` is
//     an int array of `count` entries receiving 0 or the positive error of each address (null:
//     -FI_EINVAL).
//   - FI_EVENT AV: returns 0 (-FI_ENOEQ without a bound EQ; FI_SYNC_ERR is -FI_EBADFLAGS), with
//     every address inserted before it returns; on the EQ, one fi_eq_err_entry per failed
//     address (fid = the AV, context, data = the address's position in the call, err), then one
//     FI_AV_COMPLETE fi_eq_entry (fid = the AV, context, data = the number inserted), even when
//     nothing was. Those events get their room in the EQ before anything is inserted: count + 1
//     slots (the whole EQ when it is smaller). Without that room now: -FI_EAGAIN, nothing
//     inserted and the EQ untouched (read it and insert again); an EQ already overrun:
//     -FI_EOVERRUN. Only the error entries of a call with more addresses than the EQ holds can
//     overrun it (fi_eq(3)), which reports itself; the insert still returns 0. Closing the AV
//     purges its unread events from the EQ.
//   - fi_av_insertsvc: getaddrinfo(node, service) for AF_INET, one address. node may also be an
//     FI_ADDR_STR "fi_sockaddr_in://A.B.C.D:PORT" with service null. Both null: -FI_EINVAL.
//   - fi_av_insertsym: nodecnt x svccnt addresses, node-major. A numeric IPv4 node is
//     incremented as a 32-bit address; a host name's numeric suffix is incremented, keeping its
//     width ("n09", "n10"); a numeric service is incremented as a port. node or service null,
//     nodecnt > 1 with a host name without a numeric suffix, svccnt > 1 with a non-numeric
//     service, or a range past 255.255.255.255 or port 65535: -FI_EINVAL, nothing inserted.
//
// fi_av_remove: flags (-FI_EBADFLAGS); fi_addr null with count > 0, or any fi_addr that names
// no entry (-FI_EINVAL, nothing removed). An fi_addr twice in one call is removed once.
//
// fi_av_lookup: fi_addr names no entry, addrlen null, or addr null with *addrlen > 0
// (-FI_EINVAL). Otherwise copies min(*addrlen, sizeof(sockaddr_in)) bytes of the address, sets
// *addrlen to sizeof(sockaddr_in) and returns 0, as libfabric's own IP AVs do: a short buffer
// truncates (fi_av(3)), it is not an error; compare *addrlen with what was passed.
//
// fi_av_straddr: "fi_sockaddr_in://A.B.C.D:PORT", as libfabric's ofi_straddr. Writes at most
// *len bytes, always NUL-terminated when *len > 0, sets *len to the full size with the NUL and
// returns buf. NULL for a bad AV, a null addr or len, buf null with *len > 0, or a family that
// is not AF_INET. The address need not be in the AV. buf null with *len 0 is a size query: *len
// is set and NULL (buf) returned.
//
// fi_close: -FI_EBUSY while endpoints are bound (they hold() the AV). Closing frees every
// entry; events already on the EQ stay there. fi_av_set: -FI_ENOSYS.
//
// Threads: every call may come from any thread; the table is behind one reader-writer lock
// (lookups share it, inserts and removals take it alone). getaddrinfo runs outside it.
#pragma once

#include <netinet/in.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "prov/object.h"
#include "prov/shared_av.h"

namespace fabq::prov {

class Domain;
class Eq;

// fi_av(3): a table of peer addresses (struct sockaddr_in) for RDM endpoints. Thread safe.
class Av final : public Object {
 public:
  // Null unless f is one of fabq's AVs.
  static Av* from_fid(const fid* f);

  // `type` is FI_AV_MAP or FI_AV_TABLE; `flags` the attr's. Holds `domain` (as its parent)
  // until destroyed.
  Av(Domain* domain, fi_av_type type, uint64_t flags, void* context);
  ~Av() override;
  fid_av* handle() { return &box_.fid; }
  Domain* domain() const { return domain_; }
  fi_av_type type() const { return type_; }
  // Room for `n` entries without reallocating; false when memory ran out. Before sharing.
  bool reserve(size_t n);

  // The address behind `addr`; false when `addr` names no entry (never inserted, removed, out
  // of range, FI_ADDR_UNSPEC / FI_ADDR_NOTAVAIL). `out` is written only on true, as
  // AF_INET, the port and the address, sin_zero cleared. Any thread; takes the AV's lock
  // (shared).
  bool lookup(fi_addr_t addr, sockaddr_in* out) const;
  // The fi_addr_t under which `sa` (family, IPv4 address and port compared; sin_zero not) is
  // inserted, or FI_ADDR_NOTAVAIL. With duplicates, the lowest one still valid. Any thread;
  // takes the AV's lock (shared); O(1) expected (hash map).
  fi_addr_t reverse_lookup(const sockaddr_in& sa) const;
  // Whether fi_av_remove ever removed an entry of this AV. While it has not, an index that
  // lookup() once accepted still names the same address, so a caller that remembers the
  // answer need not ask again. Any thread; acquire, pairing with the release in the remove.
  bool ever_removed() const {
    return removed_.load(std::memory_order_acquire) ||
           (shared_ != nullptr && shared_->ever_removed());
  }
  // FI_NAMED_RX_CTX (fi_av(3) rx_ctx_bits): the top `bits` bits of an fi_addr_t (fi_rx_addr)
  // name a receive context of the scalable endpoint at the entry the other bits name. 0: none.
  // Set before the AV is handed out; at most kMaxRxCtxBits.
  static constexpr int kMaxRxCtxBits = 31;
  void set_rx_ctx_bits(int bits) { rx_ctx_bits_ = bits; }
  int rx_ctx_bits() const { return rx_ctx_bits_; }
  // `addr` as an entry and a receive context: {addr, 0} without rx_ctx_bits, and for
  // FI_ADDR_UNSPEC and FI_ADDR_NOTAVAIL.
  struct RxAddr {
    fi_addr_t entry;
    uint32_t rx;
  };
  RxAddr split(fi_addr_t addr) const {
    if (rx_ctx_bits_ == 0 || addr == FI_ADDR_UNSPEC || addr == FI_ADDR_NOTAVAIL) return {addr, 0};
    const int shift = 64 - rx_ctx_bits_;
    return {addr & ((fi_addr_t{1} << shift) - 1), static_cast<uint32_t>(addr >> shift)};
  }
  // A named AV: its table is `table`'s, shared with the other processes that open the name.
  // Before the AV is handed out.
  void share(std::unique_ptr<SharedAvTable> table) { shared_ = std::move(table); }
  const SharedAvTable* shared() const { return shared_.get(); }

 private:
  friend struct AvOps;
  static constexpr fi_addr_t kNone = FI_ADDR_NOTAVAIL;
  struct Entry {
    sockaddr_in sa;
    fi_addr_t next_dup;  // the next valid entry with the same address, or kNone
    bool valid;
  };
  // One address to insert: `sa` when err == 0, else the positive error it failed with.
  struct Candidate {
    sockaddr_in sa;
    int err;
  };

  int rx_ctx_bits_ = 0;
  static uint64_t key(const sockaddr_in& sa);
  // Appends `sa` (normalized) and links it into the hash map; returns its index, or kNone
  // when memory ran out. Holds mu_ exclusively.
  fi_addr_t insert_locked(const sockaddr_in& sa);
  void remove_locked(fi_addr_t addr);
  // The common body of every insert, arguments validated: `source(i)` gives the i-th
  // candidate; `eq` is check_insert's. Fills fi_addr (and FI_SYNC_ERR's array), writes the EQ
  // entries, and returns the insert call's result.
  template <class Source>
  int insert_batch(size_t count, Source source, fi_addr_t* fi_addr, uint64_t flags, void* context,
                   Eq* eq);
  // -FI_ENOEQ / -FI_EBADFLAGS / -FI_EINVAL as the header says, else 0; `*eq` is the EQ to
  // report to (null for a synchronous AV).
  int check_insert(uint64_t flags, void* context, Eq** eq);
  // A named AV's reverse lookup: the lowest valid index holding `sa`, from a cache of the
  // shared table (first_, rebuilt from the table as it grows or when an entry it names was
  // removed). Holds mu_ exclusively.
  fi_addr_t shared_find_locked(const sockaddr_in& sa);

  FidBox<fid_av> box_;
  Domain* const domain_;
  const fi_av_type type_;
  const uint64_t flags_;
  mutable std::shared_mutex mu_;
  // Guarded by mu_:
  std::vector<Entry> entries_;                     // index = fi_addr_t
  std::unordered_map<uint64_t, fi_addr_t> first_;  // key() -> lowest valid index
  Eq* eq_ = nullptr;                               // held
  std::atomic<bool> removed_{false};               // set (release) before the first removal
  // A named AV's table (null otherwise): entries_ is then unused, first_ a cache of it.
  std::unique_ptr<SharedAvTable> shared_;
  size_t scanned_ = 0;  // shared entries first_ has seen; guarded by mu_
};

int open_av(fid_domain* domain, fi_av_attr* attr, fid_av** av, void* context);

}  // namespace fabq::prov
