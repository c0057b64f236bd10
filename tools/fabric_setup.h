// The libfabric steps that open one side of a connection over 127.0.0.1, as an application
// takes them: fi_getinfo with the hints a side needs, its fabric and domain, a passive endpoint
// listening at a port the system picks, an endpoint bound and enabled, and CM events read in
// bounded slices.
//
// `fabq bench`'s MSG scenarios (tools/bench/msg_peer.cc) and the tests' harness (tests/support)
// open their endpoints with these, so the tool and the tests take the same steps. Nothing here
// knows GoogleTest or the bench's samples: a step that fails names the call and its return code,
// and the caller decides what that means (a test failure, a FAILED or unsupported figure).
//
// No step waits without a bound.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

namespace fabq::setup {

inline constexpr uint32_t kApiVersion = FI_VERSION(1, 17);

// What a step returns: rc 0, or the call that failed and the (negative) code it returned.
struct Result {
  int rc = 0;
  std::string call;  // "fi_getinfo(127.0.0.1, 0, FI_SOURCE)", "fi_ep_bind(cq)", ...
  bool ok() const { return rc == 0; }
};

// What fi_getinfo is asked for, besides FI_SOCKADDR_IN addresses and the modes FI_CONTEXT and
// FI_CONTEXT2 (every operation the callers post carries a struct fi_context2).
struct Hints {
  std::string provider = "fabq";  // only this provider's own answers are taken
  fi_ep_type type = FI_EP_MSG;
  uint64_t caps = FI_MSG;
  fi_progress data_progress = FI_PROGRESS_UNSPEC;
  std::string auth_key;  // the bytes of domain_attr->auth_key, when not empty
};

// fi_getinfo(node, service, flags) for `hints`. The first answer of hints.provider itself (not,
// say, "tcp;ofi_rxm" for "tcp") goes to *out, the caller's to fi_freeinfo; -FI_ENODATA when
// there is none.
Result getinfo(const Hints& hints, const char* node, const char* service, uint64_t flags,
               fi_info** out);

// fi_fabric and fi_domain for `info`. What opened before a failure stays in the outputs, for
// the caller to close.
Result open_fabric(fi_info* info, fid_fabric** fabric, fid_domain** domain);

// fi_passive_ep for `info`, bound to `eq`, listening. *port: the IPv4 port fi_getname says it
// listens on, in host order.
Result listen(fid_fabric* fabric, fi_info* info, fid_eq* eq, fid_pep** pep, uint16_t* port);

// One fi_ep_bind: the endpoint to `to` with `flags`; `what` names it in a failure.
struct Bind {
  fid* to;
  uint64_t flags;
  const char* what;
};

// fi_endpoint for `info` in `domain` with `context`, bound to each of `binds` in order (one
// with a null `to` is skipped), enabled. An endpoint that opened stays in *ep also when a later
// call fails.
Result open_endpoint(fid_domain* domain, fi_info* info, void* context,
                     std::initializer_list<Bind> binds, fid_ep** ep);

// A CM event as fi_eq_read returns it: the entry, then up to 1024 bytes of connection data.
struct CmEvent {
  alignas(fi_eq_cm_entry) uint8_t bytes[sizeof(fi_eq_cm_entry) + 1024] = {};
  fi_eq_cm_entry& entry() { return *reinterpret_cast<fi_eq_cm_entry*>(bytes); }
  const char* data() const { return reinterpret_cast<const char*>(bytes) + sizeof(fi_eq_cm_entry); }
};
inline constexpr size_t kCmEntrySize = sizeof(fi_eq_cm_entry);

// What read_event returns when `between` ended the wait; outside libfabric's error codes.
inline constexpr ssize_t kStopped = -1'000'001;

// The next event of `eq`, within timeout_ms: fi_eq_sread(flags) in slices of at most slice_ms,
// and before each slice between(), which may progress other queues or end the wait (false).
// Returns the event's byte count (its type in *event, its bytes in *ev); -FI_EAVAIL when an
// error entry heads the EQ (left there for fi_eq_readerr); -FI_ETIMEDOUT when nothing came in
// time; kStopped; or any other error fi_eq_sread gave.
ssize_t read_event(fid_eq* eq, uint32_t* event, CmEvent* ev, int timeout_ms, int slice_ms,
                   uint64_t flags, const std::function<bool()>& between);

}  // namespace fabq::setup
