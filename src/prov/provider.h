// fabq provider: the provider descriptor, its parameters and logging.
//
// fi_prov_ini() (provider.cc) defines the parameters with fi_param_define, so `fi_info -e`
// lists them as FI_FABQ_*, reads them once, and returns `g_provider`. Every other file reads
// the parameters through params(), which is immutable after initialisation and so safe from
// any thread.
#pragma once

#include <rdma/fabric.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace fabq::prov {

extern fi_provider g_provider;

inline constexpr const char* kProviderName = "fabq";
inline constexpr uint32_t kProviderVersion = FI_VERSION(0, 1);
// The API version of the headers fabq is built against (1.17). fi_prov_ini declares the newer of
// this and the loading core's fi_version() as g_provider.fi_version: a core hands a provider only
// requests up to what it declares, and fabq answers each by the version asked for
// (prov/api_version.h).
inline constexpr uint32_t kApiVersion = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

struct Params {
  size_t eq_max_size = 65536;          // FI_FABQ_EQ_MAX_SIZE
  size_t eq_max_count = 256;           // FI_FABQ_EQ_MAX_COUNT (per fabric)
  size_t eq_default_size = 1024;       // FI_FABQ_EQ_DEFAULT_SIZE
  size_t cq_max_size = 65536;          // FI_FABQ_CQ_MAX_SIZE
  size_t cq_max_count = 256;           // FI_FABQ_CQ_MAX_COUNT (per domain; domain_attr->cq_cnt)
  size_t cq_default_size = 1024;       // FI_FABQ_CQ_DEFAULT_SIZE
  size_t cntr_max_count = 256;         // FI_FABQ_CNTR_MAX_COUNT (per domain; domain_attr->cntr_cnt)
  size_t spin_us = 20;                 // FI_FABQ_SPIN_US: how long blocking calls spin first
  size_t unexpected_bytes = 16 << 20;  // FI_FABQ_UNEXPECTED_BYTES: buffered per receive queue
  // FI_FABQ_UNEXPECTED_PEER_BYTES: ... of them from one connection (bookkeeping counted)
  size_t unexpected_peer_bytes = 4 << 20;
  // FI_FABQ_UNEXPECTED_TOTAL_BYTES: ... by every receive queue of a fabric together
  size_t unexpected_total_bytes = 128 << 20;
  size_t connect_timeout_ms = 10000;       // FI_FABQ_CONNECT_TIMEOUT_MS
  size_t keepalive_ms = 30000;             // FI_FABQ_KEEPALIVE_MS: a silent peer is gone after this
  size_t shm = 1;                          // FI_FABQ_SHM: same-host connections move data in shm
  size_t shm_direct_min = 16384;           // FI_FABQ_SHM_DIRECT_MIN: RMA copied directly from here
  size_t shm_direct_msg_min = 256 * 1024;  // FI_FABQ_SHM_DIRECT_MSG_MIN: messages, from here
  size_t shm_direct_msg_idle_min = 16384;  // FI_FABQ_SHM_DIRECT_MSG_IDLE_MIN: ... when idle
  size_t shm_share_min = 256 * 1024;       // FI_FABQ_SHM_SHARE_MIN: both processes copy from here
  size_t shm_adapt = 1;         // FI_FABQ_SHM_ADAPT: ring or direct by what each costs here
  size_t cm_backlog = 1024;     // FI_FABQ_CM_BACKLOG: per listener, in handshake at once
  size_t inbound_max = 1024;    // FI_FABQ_INBOUND_MAX: connections per RDM endpoint's listener
  size_t dgram_senders = 1024;  // FI_FABQ_DGRAM_SENDERS: per keyed DGRAM endpoint, tracked
  size_t mr_scalable = 0;       // FI_FABQ_MR_SCALABLE: no mr_mode bits, whatever the hints accept
  std::string auth_key;         // FI_FABQ_AUTH_KEY: the shared secret (empty: none)
  // FI_FABQ_RMA_READ_PIECE: bytes of a peer's read copied and held at once per connection
  size_t rma_read_piece = 64 * 1024;
};
inline constexpr size_t kMaxReadPiece = size_t{16} << 20;  // FI_FABQ_RMA_READ_PIECE at most

const Params& params();

}  // namespace fabq::prov

#define FABQ_WARN(subsys, ...) FI_WARN(&::fabq::prov::g_provider, subsys, __VA_ARGS__)
#define FABQ_INFO(subsys, ...) FI_INFO(&::fabq::prov::g_provider, subsys, __VA_ARGS__)
#define FABQ_DBG(subsys, ...) FI_DBG(&::fabq::prov::g_provider, subsys, __VA_ARGS__)
