#include "prov/provider.h"

#include <algorithm>

#include "prov/events.h"
#include "prov/fabric.h"
#include "prov/getinfo.h"
#include "prov/pep.h"
#include "xport/transport.h"

namespace fabq::prov {
namespace {

Params g_params;

// Sizes and counts must be positive; spin_us may be 0 (sleep at once).
void define_and_read(const char* name, size_t* value, const char* help, bool allow_zero = false) {
  fi_param_define(&g_provider, name, FI_PARAM_SIZE_T, "%s (default: %zu)", help, *value);
  size_t v;
  if (fi_param_get_size_t(&g_provider, name, &v) == FI_SUCCESS) {
    if (v == 0 && !allow_zero) {
      FABQ_WARN(FI_LOG_CORE, "FI_FABQ_%s=0 ignored; keeping %zu\n", name, *value);
    } else {
      *value = v;
    }
  }
}

// libfabric calls this before it unloads the provider (fi_fini, at exit): no thread fabq started
// may run its code after that, whatever the application left open.
void cleanup() {
  xport::unload_tcp();
  unload_passive_eps();
  Registry::unload();
}

}  // namespace

const Params& params() {
  return g_params;
}

fi_provider g_provider = {
    .version = kProviderVersion,
    .fi_version = kApiVersion,
    .context = {},
    .name = kProviderName,
    .getinfo = getinfo,
    .fabric = open_fabric,
    .cleanup = cleanup,
};

}  // namespace fabq::prov

extern "C" FI_EXT_INI {
  using fabq::prov::define_and_read;
  using fabq::prov::g_params;
  static bool initialised = false;
  if (initialised) return &fabq::prov::g_provider;
  initialised = true;
  fabq::prov::g_provider.fi_version = std::max(fabq::prov::kApiVersion, fi_version());
  fabq::prov::set_transport_factory(&fabq::xport::make_tcp_transport);
  define_and_read("eq_max_size", &g_params.eq_max_size,
                  "Largest event queue size fi_eq_open accepts (larger: -FI_EINVAL)");
  define_and_read("eq_max_count", &g_params.eq_max_count,
                  "Most event queues open at once on one fabric (more: -FI_ENOSPC)");
  define_and_read("eq_default_size", &g_params.eq_default_size,
                  "Event queue size used when fi_eq_attr.size is 0");
  define_and_read("cq_max_size", &g_params.cq_max_size,
                  "Largest completion queue size fi_cq_open accepts (larger: -FI_EINVAL)");
  define_and_read("cq_max_count", &g_params.cq_max_count,
                  "Most completion queues open at once on one domain (domain_attr.cq_cnt)");
  define_and_read("cq_default_size", &g_params.cq_default_size,
                  "Completion queue size used when fi_cq_attr.size is 0");
  define_and_read("cntr_max_count", &g_params.cntr_max_count,
                  "Most counters open at once on one domain (domain_attr.cntr_cnt)");
  define_and_read("spin_us", &g_params.spin_us,
                  "Microseconds a blocking read spins before it sleeps (FI_WAIT_UNSPEC, FD, "
                  "POLLFD, MUTEX_COND)",
                  /*allow_zero=*/true);
  define_and_read("unexpected_bytes", &g_params.unexpected_bytes,
                  "Bytes of messages that arrived before their receive, buffered per endpoint or "
                  "SRX; beyond it the sender waits (TCP back-pressure)");
  define_and_read("unexpected_peer_bytes", &g_params.unexpected_peer_bytes,
                  "Bytes of messages from one connection (one peer endpoint) that arrived before "
                  "their receive, buffered per RDM endpoint or SRX (an MSG endpoint's one peer "
                  "has all of FI_FABQ_UNEXPECTED_BYTES), counting 320 bytes of bookkeeping each; "
                  "beyond it that peer waits (TCP back-pressure) and the others go on");
  define_and_read("unexpected_total_bytes", &g_params.unexpected_total_bytes,
                  "Bytes of messages that arrived before their receive, buffered by all the "
                  "endpoints and SRX contexts of a fabric together, counting 320 bytes of "
                  "bookkeeping each; beyond it their senders wait (TCP back-pressure) until "
                  "buffered messages are received");
  define_and_read("connect_timeout_ms", &g_params.connect_timeout_ms,
                  "Milliseconds fi_connect waits for the peer's answer before an FI_ETIMEDOUT "
                  "error entry");
  define_and_read("keepalive_ms", &g_params.keepalive_ms,
                  "Milliseconds after which a connection whose peer stopped answering TCP "
                  "keep-alive probes fails with FI_FABQ_EVENT_EP_FATAL");
  define_and_read("shm", &g_params.shm,
                  "1: a connection between two endpoints of one host moves its frames through "
                  "shared memory, the socket only waking and closing it; 0: always the socket",
                  /*allow_zero=*/true);
  define_and_read("shm_direct_min", &g_params.shm_direct_min,
                  "Bytes from which an RMA write or read between processes of one host is "
                  "copied directly between their memories (process_vm_readv/writev) instead of "
                  "through the shared ring; 0: never. Where the kernel does not allow it, "
                  "transfers go through the ring",
                  /*allow_zero=*/true);
  define_and_read("shm_direct_msg_min", &g_params.shm_direct_msg_min,
                  "Bytes from which a message between processes of one host is copied by its "
                  "receiver straight from the sender's buffers instead of through the shared "
                  "ring; 0: never. Where the kernel does not allow it, messages go through the "
                  "ring",
                  /*allow_zero=*/true);
  define_and_read("shm_direct_msg_idle_min", &g_params.shm_direct_msg_idle_min,
                  "Bytes from which a message between processes of one host is copied that way "
                  "when it answers one of the peer's and nothing else is on its way to it (no "
                  "send queued, all written before read by the peer but an acknowledgement); 0: "
                  "only from shm_direct_msg_min",
                  /*allow_zero=*/true);
  define_and_read("shm_share_min", &g_params.shm_share_min,
                  "Bytes from which the target of such a direct copy lets the initiator's "
                  "process copy the second half itself, so that both processes copy at once; "
                  "0: the target copies it all",
                  /*allow_zero=*/true);
  define_and_read("shm_adapt", &g_params.shm_adapt,
                  "1: a message or RMA write that the sizes above let go direct takes the shared "
                  "ring instead wherever its receiver measured the ring faster on this machine "
                  "(it keeps measuring both ways); 0: direct whenever those sizes say",
                  /*allow_zero=*/true);
  define_and_read("cm_backlog", &g_params.cm_backlog,
                  "Connections a passive endpoint or RDM endpoint holds at once between their "
                  "arrival and the end of their handshake (for a passive endpoint: until "
                  "fi_accept or fi_reject); one more is closed at once, which its peer sees as a "
                  "refusal");
  define_and_read("rma_read_piece", &g_params.rma_read_piece,
                  "Bytes of a peer's RMA read that the target copies and holds at once for one "
                  "connection: a longer read is answered in pieces of this size, each copied "
                  "from the region once the one before it is on its way (so a later write may "
                  "change the rest: ep_attr->max_order_war_size is this size); at most 16 MiB");
  define_and_read("dgram_senders", &g_params.dgram_senders,
                  "With a shared secret: the senders (each sending endpoint, once for the "
                  "endpoint and once per group it sends to) a datagram endpoint remembers at "
                  "once, so as to take each datagram once; under 140 bytes each, allocated at "
                  "fi_enable; at most 65536. When one more sends, the one heard from least "
                  "recently is forgotten, and a sender not remembered is heard only in "
                  "datagrams sent later than the last one taken from any sender forgotten");
  define_and_read("inbound_max", &g_params.inbound_max,
                  "Connections an RDM endpoint holds up at once from peers that connected to "
                  "it, and never more than half the process's descriptor limit (RLIMIT_NOFILE); "
                  "one that comes up beyond it replaces the least recently active that holds "
                  "nothing in flight (its peer reconnects at its next send), else one whose peer "
                  "left while its message waited for room, else one silent for longer than "
                  "FI_FABQ_CONNECT_TIMEOUT_MS");
  define_and_read("mr_scalable", &g_params.mr_scalable,
                  "0: an application whose hints' mr_mode accepts FI_MR_PROV_KEY, "
                  "FI_MR_VIRT_ADDR or FI_MR_ENDPOINT gets them (keys a peer cannot guess); 1: no "
                  "mr_mode bits, whatever the hints accept: regions keep the application's keys, "
                  "are addressed by offset and reached by every endpoint of the domain, as in "
                  "libfabric's tcp and sockets providers",
                  /*allow_zero=*/true);
  fi_param_define(&fabq::prov::g_provider, "auth_key", FI_PARAM_STRING,
                  "A secret shared by every process of the job: connections are made only "
                  "between endpoints that prove they hold it (without sending it), and datagram "
                  "endpoints take only datagrams authenticated with it, unless an fi_info's "
                  "auth_key says otherwise (default: none, peers are not authenticated)");
  if (char* key = nullptr;
      fi_param_get_str(&fabq::prov::g_provider, "auth_key", &key) == 0 && key != nullptr) {
    g_params.auth_key = key;
  }
  // Read at every fi_domain (so that it can differ between domains); defined here so that
  // `fi_info -e` lists it. Grammar: include/fabq/fi_fabq.h, docs/fi_fabq.7.md.
  fi_param_define(&fabq::prov::g_provider, "faults", FI_PARAM_STRING,
                  "Fault rules applied to every domain opened while set, e.g. "
                  "'event=ep_fatal,on=ep:0,ops=3; event=port_err,ms=100' (default: none)");
  // What one connection holds for a peer's reads: a bound, not a buffer to grow as asked.
  using fabq::prov::kMaxReadPiece;
  if (g_params.rma_read_piece > kMaxReadPiece) {
    FABQ_WARN(FI_LOG_CORE, "FI_FABQ_RMA_READ_PIECE=%zu: at most %zu\n", g_params.rma_read_piece,
              kMaxReadPiece);
    g_params.rma_read_piece = kMaxReadPiece;
  }
  g_params.eq_default_size = std::min(g_params.eq_default_size, g_params.eq_max_size);
  g_params.cq_default_size = std::min(g_params.cq_default_size, g_params.cq_max_size);
  return &fabq::prov::g_provider;
}
