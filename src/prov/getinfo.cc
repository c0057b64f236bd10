#include "prov/getinfo.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "core/cq.h"
#include "core/unique_fd.h"
#include "prov/api_version.h"
#include "prov/auth.h"
#include "prov/domain.h"
#include "prov/object.h"
#include "prov/provider.h"
#include "prov/sep.h"
#include "xport/transport.h"

namespace fabq::prov {
namespace {

// What fabq provides: connected (FI_EP_MSG) and reliable unconnected (FI_EP_RDM) endpoints
// over TCP with messages and tagged messages (prov/endpoint.h), and multi-receive buffers
// (FI_MULTI_RECV); RDM receives can name their source (FI_SOURCE), report a source not in the
// AV (FI_SOURCE_ERR) and select messages by source (FI_DIRECTED_RECV).
// One-sided operations (fi_rma(3), fi_atomic(3)) on regions of the peer's domain (prov/mr.h);
// FI_RMA_EVENT (counters of peers' accesses, fi_ep_bind and fi_mr_bind) when asked for.
constexpr uint64_t kOneSided = FI_RMA | FI_ATOMIC;
constexpr uint64_t kTxCaps = FI_MSG | FI_TAGGED | FI_SEND | kOneSided | FI_READ | FI_WRITE;
constexpr uint64_t kRxCaps =
    FI_MSG | FI_TAGGED | FI_RECV | kOneSided | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT;
// FI_SHARED_AV: named AVs every process of the host that opens the name shares (prov/av.h).
constexpr uint64_t kDomainCaps = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV;
constexpr uint64_t kCaps = kTxCaps | kRxCaps | kDomainCaps;
constexpr uint64_t kRdmOnlyRxCaps = FI_SOURCE | FI_SOURCE_ERR | FI_DIRECTED_RECV;
// FI_NAMED_RX_CTX: an initiator names a scalable endpoint's receive context with fi_rx_addr
// (prov/sep.h); a transmit capability, as libfabric's own providers and fabtests count it.
constexpr uint64_t kRdmOnlyTxCaps = FI_NAMED_RX_CTX;
constexpr uint64_t kMsgCaps = kCaps | FI_MULTI_RECV;
constexpr uint64_t kRdmCaps = kMsgCaps | kRdmOnlyRxCaps | kRdmOnlyTxCaps;
// Datagram endpoints (FI_EP_DGRAM over UDP): messages, sources, multicast groups (prov/mc.h).
// No tags, no one-sided operations, no multi-receive buffers. FI_MULTICAST is a transmit
// attribute only (fi_endpoint(3) lists it among the transmit capabilities, not the receive
// ones); joining and receiving from a group follow the endpoint's caps.
constexpr uint64_t kDgramTxCaps = FI_MSG | FI_SEND | FI_MULTICAST;
constexpr uint64_t kDgramRxCaps = FI_MSG | FI_RECV | FI_SOURCE;
constexpr uint64_t kDgramCaps = kDgramTxCaps | kDgramRxCaps | kDomainCaps;
constexpr uint64_t kRdmRxCaps = kRxCaps | FI_MULTI_RECV | kRdmOnlyRxCaps;
// What an info carries when the hints name no capability. FI_DIRECTED_RECV is a primary
// capability, enabled only when asked for (fi_getinfo(3)): it changes what a receive's
// src_addr means. FI_SOURCE_ERR turns unknown senders into error completions. FI_MULTI_RECV
// is reported when asked for (receives take the flag either way).
constexpr uint64_t kDefaultCaps = kCaps & ~(FI_RMA_EVENT | FI_SHARED_AV);
constexpr uint64_t kRdmDefaultCaps = kDefaultCaps | FI_SOURCE;
// ep_attr->mem_tag_format: fabq matches all 64 tag bits, in whatever fields the application
// divides them. Reported as libfabric's own providers report "any 64-bit format".
constexpr uint64_t kMemTagFormat = 0xAAAAAAAAAAAAAAAAULL;

// libfabric 2's variants of FI_DIRECTED_RECV (RDM): for tagged receives only, and without
// FI_ADDR_UNSPEC. Caps bit 48 was FI_VARIABLE_MSG before 2.0, which fabq does not offer.
constexpr uint64_t kV2DirectedCaps = abi2::kTaggedDirectedRecv | abi2::kExactDirectedRecv;

uint64_t rdm_rx_caps(ApiVersion api) {
  return kRdmRxCaps | (api.v2() ? kV2DirectedCaps : 0);
}

// The capabilities an endpoint type supports.
uint64_t caps_of(fi_ep_type type, ApiVersion api) {
  switch (type) {
    case FI_EP_RDM:
      return kRdmCaps | (api.v2() ? kV2DirectedCaps : 0);
    case FI_EP_DGRAM:
      return kDgramCaps;
    default:
      return kMsgCaps;
  }
}
uint64_t default_caps_of(fi_ep_type type) {
  switch (type) {
    case FI_EP_RDM:
      return kRdmDefaultCaps;
    case FI_EP_DGRAM:
      return kDgramCaps & ~FI_SHARED_AV;
    default:
      return kDefaultCaps;
  }
}
// Every request to a peer travels on one connection and the peer acts on each before the next
// (a write is in memory before a later read reads it), so sends, reads and writes keep their
// order among each other, at any size.
constexpr uint64_t kMsgOrder = FI_ORDER_SAS | FI_ORDER_SAR | FI_ORDER_SAW | FI_ORDER_RAS |
                               FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAS | FI_ORDER_WAR |
                               FI_ORDER_WAW;
constexpr uint64_t kCompOrder = FI_ORDER_NONE;
constexpr uint64_t kTxOpFlags =
    FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
constexpr uint64_t kRxOpFlags = FI_COMPLETION | FI_MULTI_RECV;
// DGRAM: nothing acknowledges a datagram (no delivery completion); FI_MULTICAST marks sends to
// a group (fi_cm(3) fi_mc_addr) and receives from one.
constexpr uint64_t kDgramTxOpFlags =
    FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_MULTICAST;
constexpr uint64_t kDgramRxOpFlags = FI_COMPLETION | FI_MULTICAST;
constexpr size_t kQueueDepth = 1024;
constexpr size_t kIovLimit = xport::kMaxIov;
constexpr size_t kMaxMsgSize = size_t{1} << 30;
constexpr size_t kEpCount = 1024;
constexpr size_t kCqDataSize = 8;
constexpr size_t kMrKeySize = 8;
// FI_MSG_PREFIX: what fabq asks in front of each message buffer when the application supports
// the mode (fi_getinfo(3): a multiple of 8). fabq writes nothing there.
constexpr size_t kMsgPrefixSize = 8;
// The wire protocol is fabq's own.
constexpr uint32_t kProtocol = FI_PROV_SPECIFIC | 1;
constexpr uint32_t kProtocolVersion = 1;
// OFI_CORE_PROV_ONLY: libfabric's flag for the core query of a utility provider.
constexpr uint64_t kCoreProvOnly = 1ULL << 59;

struct Iface {
  std::string name;
  in_addr addr;
  std::string fabric;
  bool loopback = false;
};

std::string subnet_name(in_addr addr, in_addr mask) {
  in_addr net{addr.s_addr & mask.s_addr};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &net, buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(std::popcount(ntohl(mask.s_addr)));
}

std::vector<Iface> list_ifaces() {
  std::vector<Iface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || i->ifa_netmask == nullptr) {
      continue;
    }
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    const auto* m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask);
    out.push_back({i->ifa_name, a->sin_addr, subnet_name(a->sin_addr, m->sin_addr),
                   (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  // Loopback last, as libfabric's tcp provider lists it: applications that take the first info
  // (Open MPI's ofi MTL does) publish an address other hosts can reach.
  std::stable_partition(out.begin(), out.end(), [](const Iface& i) { return !i.loopback; });
  return out;
}

bool subset(uint64_t want, uint64_t have) {
  return (want & ~have) == 0;
}

// getaddrinfo for IPv4. nullopt when the name does not resolve.
std::optional<sockaddr_in> resolve(const char* node, const char* service, bool passive,
                                   uint64_t flags) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags |= AI_PASSIVE;
  if ((flags & FI_NUMERICHOST) != 0) hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(node, service, &hints, &res) != 0 || res == nullptr) return std::nullopt;
  sockaddr_in sin;
  std::memcpy(&sin, res->ai_addr, sizeof(sin));
  freeaddrinfo(res);
  return sin;
}

// The local address the kernel would use to reach `dest`.
std::optional<in_addr> route_source(const sockaddr_in& dest) {
  core::UniqueFd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return std::nullopt;
  sockaddr_in probe = dest;
  if (probe.sin_port == 0) probe.sin_port = htons(9);  // any port: UDP connect sends nothing
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&probe), sizeof(probe)) != 0) {
    return std::nullopt;
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) return std::nullopt;
  return local.sin_addr;
}

std::optional<sockaddr_in> hint_addr(const void* addr, size_t len) {
  if (addr == nullptr) return std::nullopt;
  sockaddr_in sin{};
  if (len < sizeof(sin)) return sockaddr_in{.sin_family = AF_UNSPEC};
  std::memcpy(&sin, addr, sizeof(sin));
  return sin;
}

void* dup_addr(const sockaddr_in& a, size_t* len) {
  void* p = std::malloc(sizeof(a));
  if (p != nullptr) std::memcpy(p, &a, sizeof(a));
  *len = p != nullptr ? sizeof(a) : 0;
  return p;
}

// Threading models fabq can honour: all of them (its objects are thread safe), but those
// libfabric 2 no longer has.
bool threading_ok(int t, ApiVersion api) {
  if (api.v2() && (t == FI_THREAD_FID || t == FI_THREAD_ENDPOINT)) return false;
  return t >= FI_THREAD_UNSPEC && t <= FI_THREAD_ENDPOINT;
}

// FI_PROGRESS_CONTROL_UNIFIED is manual progress whose control calls the application
// serialises: fabq's are thread safe anyway.
bool progress_ok(int p, ApiVersion api) {
  return p == FI_PROGRESS_UNSPEC || p == FI_PROGRESS_AUTO || p == FI_PROGRESS_MANUAL ||
         (api.control_unified() && p == abi2::kProgressControlUnified);
}

// A libfabric 2 tag format fabq's 64-bit matching serves: FI_TAG_BITS, FI_TAG_MPI (a 32-bit tag
// and an 8-bit payload id, each matched or ignored as a field), FI_TAG_CCL (exact match) and
// 1.x's bit fields. Below 2.0 every value is bit fields.
bool tag_format_ok(uint64_t f, ApiVersion api) {
  return !api.v2() || f == abi2::kTagBits || f == abi2::kTagMpi || f == abi2::kTagCcl ||
         f >= abi2::kTagMaxFormat;
}

bool resource_mgmt_ok(int r) {
  return r >= FI_RM_UNSPEC && r <= FI_RM_ENABLED;
}

bool av_type_ok(int a) {
  return a >= FI_AV_UNSPEC && a <= FI_AV_TABLE;
}

bool tx_ok(const fi_tx_attr* h) {
  if (h == nullptr) return true;
  return subset(h->caps, kTxCaps | kRdmOnlyTxCaps | kDgramTxCaps | kDomainCaps) &&
         subset(h->op_flags, kTxOpFlags | kDgramTxOpFlags) && subset(h->msg_order, kMsgOrder) &&
         subset(h->comp_order, kCompOrder) && h->inject_size <= xport::kInjectSize &&
         h->size <= kQueueDepth && h->iov_limit <= kIovLimit && h->rma_iov_limit <= 1;
}

bool rx_ok(const fi_rx_attr* h, ApiVersion api) {
  if (h == nullptr) return true;
  // Receive hints may copy the endpoint's caps: its domain bits and FI_MULTICAST are taken and
  // left out of rx_attr->caps, as the receive capabilities do not include them.
  return subset(h->caps, rdm_rx_caps(api) | kDgramRxCaps | FI_MULTICAST | kDomainCaps) &&
         subset(h->op_flags, kRxOpFlags | kDgramRxOpFlags) && subset(h->msg_order, kMsgOrder) &&
         subset(h->comp_order, kCompOrder) && h->total_buffered_recv <= kMaxMsgSize &&
         h->size <= kQueueDepth && h->iov_limit <= kIovLimit;
}

// An auth_key fabq takes: none, or bytes that authenticate connections (prov/auth.h).
bool auth_key_ok(const uint8_t* key, size_t size) {
  return size <= kMaxAuthKeySize && (size == 0 || key != nullptr);
}

// A copy of the hints' key for the fi_info fabq returns (fi_freeinfo frees it); false when out
// of memory.
bool copy_auth_key(const uint8_t* key, size_t size, uint8_t** out, size_t* out_size) {
  *out = nullptr;
  *out_size = 0;
  if (key == nullptr || size == 0) return true;
  *out = static_cast<uint8_t*>(std::malloc(size));
  if (*out == nullptr) return false;
  std::memcpy(*out, key, size);
  *out_size = size;
  return true;
}

// The most transmit or receive contexts the hints ask of one endpoint: 1 for 0 and for
// FI_SHARED_CONTEXT (fi_stx_context, fi_srx_context). More than 1: a scalable endpoint (RDM).
size_t asked_contexts(const fi_ep_attr* h) {
  if (h == nullptr) return 1;
  auto one = [](size_t n) { return n == static_cast<size_t>(FI_SHARED_CONTEXT) ? 1 : n; };
  return std::max<size_t>({1, one(h->tx_ctx_cnt), one(h->rx_ctx_cnt)});
}

// A read up to this size is copied at the target when its request arrives, so a write posted
// after it cannot change what it returns; a longer one is copied piece by piece
// (FI_FABQ_RMA_READ_PIECE, xport/transport.h TransportConfig::read_piece).
size_t war_size() {
  return std::min(params().rma_read_piece, kMaxMsgSize);
}

bool ep_ok(const fi_ep_attr* h, ApiVersion api) {
  if (h == nullptr) return true;
  const bool one_ctx = asked_contexts(h) <= Sep::kMaxContexts;
  const int type = raw_enum(h->type);
  return (type == FI_EP_UNSPEC || type == FI_EP_MSG || type == FI_EP_RDM || type == FI_EP_DGRAM) &&
         (h->protocol == FI_PROTO_UNSPEC || h->protocol == kProtocol) &&
         h->protocol_version <= kProtocolVersion && h->max_msg_size <= kMaxMsgSize &&
         (h->msg_prefix_size == 0 || h->msg_prefix_size == kMsgPrefixSize) &&
         h->max_order_raw_size <= kMaxMsgSize && h->max_order_war_size <= war_size() &&
         h->max_order_waw_size <= kMaxMsgSize && one_ctx &&
         auth_key_ok(h->auth_key, h->auth_key_size) && tag_format_ok(h->mem_tag_format, api);
}

// The largest message of a datagram endpoint opened with `info` (or hints that carry the same
// secret): a datagram's payload, less its authentication when there is a secret (the hints' or
// FI_FABQ_AUTH_KEY).
size_t dgram_max_msg(const fi_info& info) {
  return has_auth_key(info) ? xport::kMaxAuthDgramPayload : xport::kMaxDgramPayload;
}

// What the hints ask of one endpoint type beyond what every type takes (tx_ok, rx_ok, ep_ok).
bool type_fits(fi_ep_type t, const fi_info* hints, ApiVersion api) {
  if (hints == nullptr) return true;
  if (!subset(hints->caps, caps_of(t, api))) return false;
  const fi_ep_attr* e = hints->ep_attr;
  const fi_tx_attr* tx = hints->tx_attr;
  const fi_rx_attr* rx = hints->rx_attr;
  const uint64_t tx_flags = tx != nullptr ? tx->op_flags : 0;
  const uint64_t rx_flags = rx != nullptr ? rx->op_flags : 0;
  if (t != FI_EP_DGRAM) {
    // Several contexts per endpoint: scalable endpoints, which are RDM.
    if (t != FI_EP_RDM && asked_contexts(e) != 1) return false;
    return ((tx_flags | rx_flags) & FI_MULTICAST) == 0;
  }
  // DGRAM: one context of each kind, no shared ones; no order, no delivery completion, no
  // multi-receive buffers; messages that fit a datagram (less its authentication with a secret).
  const auto one = [](size_t n) { return n <= 1; };
  const size_t max_msg = dgram_max_msg(*hints);
  if (e != nullptr &&
      (!one(e->tx_ctx_cnt) || !one(e->rx_ctx_cnt) || e->max_msg_size > max_msg ||
       e->max_order_raw_size != 0 || e->max_order_war_size != 0 || e->max_order_waw_size != 0)) {
    return false;
  }
  if (tx != nullptr && (tx->msg_order != 0 || !subset(tx_flags, kDgramTxOpFlags))) return false;
  if (rx != nullptr && (rx->msg_order != 0 || !subset(rx_flags, kDgramRxOpFlags))) return false;
  return true;
}

// What fabq's domains have of the members libfabric added after 1.17: one authorization key
// per endpoint, no groups, 64-bit counters.
constexpr abi2::DomainAttrTail kDomainTail = {.max_ep_auth_key = 1,
                                              .max_group_id = 0,
                                              .max_cntr_value = UINT64_MAX,
                                              .max_err_cntr_value = UINT64_MAX};

bool domain_tail_ok(const fi_domain_attr* h, ApiVersion api) {
  const abi2::DomainAttrTail t = abi2::read_tail(h, api);
  return t.max_ep_auth_key <= kDomainTail.max_ep_auth_key &&
         t.max_group_id <= kDomainTail.max_group_id;
}

bool domain_ok(const fi_domain_attr* h, const Iface& iface, ApiVersion api) {
  if (h == nullptr) return true;
  const Params& p = params();
  if (h->name != nullptr && iface.name != h->name) return false;
  return threading_ok(raw_enum(h->threading), api) &&
         progress_ok(raw_enum(h->control_progress), api) &&
         progress_ok(raw_enum(h->data_progress), api) && domain_tail_ok(h, api) &&
         resource_mgmt_ok(raw_enum(h->resource_mgmt)) && av_type_ok(raw_enum(h->av_type)) &&
         h->mr_key_size <= kMrKeySize && h->cq_data_size <= kCqDataSize &&
         h->cq_cnt <= p.cq_max_count && h->ep_cnt <= kEpCount && h->tx_ctx_cnt <= kEpCount &&
         h->rx_ctx_cnt <= kEpCount && h->max_ep_tx_ctx <= Sep::kMaxContexts &&
         h->max_ep_rx_ctx <= Sep::kMaxContexts && h->max_ep_stx_ctx <= 1 &&
         h->max_ep_srx_ctx <= 1 && h->cntr_cnt <= p.cntr_max_count && h->mr_iov_limit <= 1 &&
         subset(h->caps, kDomainCaps) && auth_key_ok(h->auth_key, h->auth_key_size) &&
         h->max_err_data <= core::kCqMaxErrData && h->mr_cnt <= Domain::kMrCount;
}

bool fabric_ok(const fi_fabric_attr* h, const Iface& iface) {
  if (h == nullptr) return true;
  if (h->name != nullptr && iface.fabric != h->name) return false;
  return h->prov_name == nullptr || strcasecmp(h->prov_name, kProviderName) == 0;
}

// mr_mode: fabq needs no registration for local buffers, and serves remote access either way
// (prov/mr.h), so it reports what the application can handle of what changes that: provider
// keys (FI_MR_PROV_KEY), virtual addresses (FI_MR_VIRT_ADDR), regions bound to an endpoint
// (FI_MR_ENDPOINT); none of them with FI_FABQ_MR_SCALABLE=1. Old (< 1.5) callers
// speak in FI_MR_BASIC (provider keys at virtual
// addresses) or FI_MR_SCALABLE (their keys, offsets; the answer when they ask for neither), and
// FI_MR_BASIC or FI_MR_SCALABLE alone in a newer caller's mr_mode mean the same.
bool pick_mr_mode(uint32_t version, const fi_info* hints, int* out) {
  const int asked = hints && hints->domain_attr ? hints->domain_attr->mr_mode : 0;
  if (asked == FI_MR_BASIC || asked == FI_MR_SCALABLE) {
    *out = asked;
    return asked == FI_MR_SCALABLE || params().mr_scalable == 0;
  }
  if (FI_VERSION_LT(version, FI_VERSION(1, 5))) {
    *out = FI_MR_SCALABLE;
    return true;
  }
  int offered = params().mr_scalable == 0 ? FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT : 0;
  // A scalable endpoint's regions serve all its contexts: no FI_MR_ENDPOINT for hints that ask
  // for named receive contexts or several contexts (prov/sep.h).
  if (hints != nullptr &&
      ((hints->caps & FI_NAMED_RX_CTX) != 0 || asked_contexts(hints->ep_attr) > 1)) {
    offered &= ~FI_MR_ENDPOINT;
  }
  *out = asked & offered;
  return true;
}

// fi_getinfo(3): FI_MSG or FI_TAGGED without FI_SEND or FI_RECV means both; FI_RMA or FI_ATOMIC
// without FI_READ, FI_WRITE, FI_REMOTE_READ or FI_REMOTE_WRITE means all four. The info says so,
// as libfabric's own providers' do, so that an application can bind a counter for what it has.
uint64_t with_directions(uint64_t caps) {
  constexpr uint64_t kMsgDirections = FI_SEND | FI_RECV;
  constexpr uint64_t kRmaDirections = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  if ((caps & (FI_MSG | FI_TAGGED)) != 0 && (caps & kMsgDirections) == 0) caps |= kMsgDirections;
  if ((caps & kOneSided) != 0 && (caps & kRmaDirections) == 0) caps |= kRmaDirections;
  return caps;
}

// The progress model an info reports for the hints' `asked`: AUTO and CONTROL_UNIFIED when
// asked for, else MANUAL.
fi_progress answer_progress(int asked) {
  if (asked == FI_PROGRESS_AUTO || asked == abi2::kProgressControlUnified) {
    return static_cast<fi_progress>(asked);
  }
  return FI_PROGRESS_MANUAL;
}

fi_info* make_info(ApiVersion api, const fi_info* hints, fi_ep_type type, const Iface& iface,
                   const std::optional<sockaddr_in>& src, const std::optional<sockaddr_in>& dest,
                   int mr_mode) {
  fi_info* info = fi_allocinfo();
  if (info == nullptr) return nullptr;
  const uint64_t asked_caps = hints != nullptr ? hints->caps : 0;
  info->caps = with_directions(asked_caps != 0 ? asked_caps : default_caps_of(type));
  // Prefix mode for an application that supports it, but not with multi-receive buffers or a
  // shared receive context, whose receives it would not fit.
  const uint64_t asked_mode = hints != nullptr ? hints->mode : 0;
  const bool shared_rx = hints != nullptr && hints->ep_attr != nullptr &&
                         hints->ep_attr->rx_ctx_cnt == FI_SHARED_CONTEXT;
  const bool prefix =
      (asked_mode & FI_MSG_PREFIX) != 0 && (info->caps & FI_MULTI_RECV) == 0 && !shared_rx;
  info->mode = prefix ? FI_MSG_PREFIX : 0;
  info->addr_format = FI_SOCKADDR_IN;
  // A passive endpoint (or a CONNREQ) named in the hints goes on to the endpoint it opens.
  info->handle = hints != nullptr ? hints->handle : nullptr;
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr = iface.addr;
  if (src) s.sin_port = src->sin_port;
  info->src_addr = dup_addr(s, &info->src_addrlen);
  if (dest) info->dest_addr = dup_addr(*dest, &info->dest_addrlen);

  const bool dgram = type == FI_EP_DGRAM;
  fi_tx_attr* tx = info->tx_attr;
  tx->caps =
      info->caps & (dgram ? kDgramTxCaps : kTxCaps | (type == FI_EP_RDM ? kRdmOnlyTxCaps : 0));
  tx->mode = info->mode;
  tx->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
  // Datagrams may be reordered on the way (FI_ORDER_NONE).
  tx->msg_order = dgram ? FI_ORDER_NONE : kMsgOrder;
  tx->comp_order = kCompOrder;
  tx->inject_size = xport::kInjectSize;
  tx->size = kQueueDepth;
  tx->iov_limit = kIovLimit;
  tx->rma_iov_limit = 1;

  fi_rx_attr* rx = info->rx_attr;
  rx->caps = info->caps & (dgram ? kDgramRxCaps : rdm_rx_caps(api));
  rx->mode = info->mode;
  rx->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
  rx->msg_order = dgram ? FI_ORDER_NONE : kMsgOrder;
  rx->comp_order = kCompOrder;
  rx->total_buffered_recv = 0;
  rx->size = kQueueDepth;
  rx->iov_limit = kIovLimit;

  fi_ep_attr* ep = info->ep_attr;
  ep->type = type;
  ep->protocol = kProtocol;
  ep->protocol_version = kProtocolVersion;
  ep->max_msg_size = dgram ? xport::kMaxDgramPayload : kMaxMsgSize;
  ep->msg_prefix_size = prefix ? kMsgPrefixSize : 0;
  ep->max_order_raw_size = dgram ? 0 : kMaxMsgSize;
  ep->max_order_war_size = dgram ? 0 : war_size();
  ep->max_order_waw_size = dgram ? 0 : kMaxMsgSize;
  const fi_ep_attr* he = hints ? hints->ep_attr : nullptr;
  // An application's own tag format is kept: every format fits in fabq's 64 bits.
  ep->mem_tag_format = dgram                                      ? 0
                       : he != nullptr && he->mem_tag_format != 0 ? he->mem_tag_format
                                                                  : kMemTagFormat;
  // FI_SHARED_CONTEXT, or as many contexts as asked (a scalable endpoint, RDM), or 1.
  auto contexts = [he](size_t fi_ep_attr::*m) -> size_t {
    return he != nullptr && (he->*m == FI_SHARED_CONTEXT || he->*m > 1) ? he->*m : 1;
  };
  ep->tx_ctx_cnt = contexts(&fi_ep_attr::tx_ctx_cnt);
  ep->rx_ctx_cnt = contexts(&fi_ep_attr::rx_ctx_cnt);
  const bool ep_key = he == nullptr || copy_auth_key(he->auth_key, he->auth_key_size, &ep->auth_key,
                                                     &ep->auth_key_size);

  const Params& p = params();
  const fi_domain_attr* hd = hints ? hints->domain_attr : nullptr;
  fi_domain_attr* d = info->domain_attr;
  d->name = strdup(iface.name.c_str());
  d->threading = hd && hd->threading != FI_THREAD_UNSPEC ? hd->threading : FI_THREAD_SAFE;
  // libfabric 2 has one progress model, `progress` (data_progress's place), for both.
  d->control_progress = hd && raw_enum(hd->data_progress) == abi2::kProgressControlUnified
                            ? static_cast<fi_progress>(abi2::kProgressControlUnified)
                            : answer_progress(hd ? raw_enum(hd->control_progress) : 0);
  d->data_progress = answer_progress(hd ? raw_enum(hd->data_progress) : 0);
  d->resource_mgmt = hd && hd->resource_mgmt != FI_RM_UNSPEC ? hd->resource_mgmt : FI_RM_ENABLED;
  d->av_type = hd ? hd->av_type : FI_AV_UNSPEC;
  d->mr_mode = mr_mode;
  d->mr_key_size = kMrKeySize;
  d->cq_data_size = kCqDataSize;
  d->cq_cnt = p.cq_max_count;
  d->ep_cnt = kEpCount;
  d->tx_ctx_cnt = kEpCount;
  d->rx_ctx_cnt = kEpCount;
  d->max_ep_tx_ctx = type == FI_EP_RDM ? Sep::kMaxContexts : 1;
  d->max_ep_rx_ctx = type == FI_EP_RDM ? Sep::kMaxContexts : 1;
  d->max_ep_stx_ctx = dgram ? 0 : 1;
  d->max_ep_srx_ctx = dgram ? 0 : 1;
  d->cntr_cnt = p.cntr_max_count;
  d->mr_iov_limit = 1;
  d->caps = kDomainCaps;
  d->mode = 0;
  d->max_err_data = core::kCqMaxErrData;
  d->mr_cnt = Domain::kMrCount;
  const bool domain_key = hd == nullptr || copy_auth_key(hd->auth_key, hd->auth_key_size,
                                                         &d->auth_key, &d->auth_key_size);
  abi2::write_tail(d, api, kDomainTail);

  fi_fabric_attr* f = info->fabric_attr;
  f->name = strdup(iface.fabric.c_str());
  f->prov_name = nullptr;  // libfabric fills in the provider's name
  f->prov_version = kProviderVersion;
  f->api_version = api.raw();

  if (d->name == nullptr || f->name == nullptr || info->src_addr == nullptr ||
      (dest && info->dest_addr == nullptr) || !ep_key || !domain_key) {
    fi_freeinfo(info);
    return nullptr;
  }
  // The truth for the secret the info carries (its keys are the hints'), or FI_FABQ_AUTH_KEY.
  if (dgram) ep->max_msg_size = dgram_max_msg(*info);
  return info;
}

}  // namespace

bool fabric_exists(const std::string& name) {
  for (const Iface& i : list_ifaces()) {
    if (i.fabric == name) return true;
  }
  return false;
}

bool domain_exists(const std::string& fabric, const std::string& domain) {
  for (const Iface& i : list_ifaces()) {
    if (i.fabric == fabric && i.name == domain) return true;
  }
  return false;
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  if (info == nullptr) return -FI_EINVAL;
  *info = nullptr;
  if ((flags & kCoreProvOnly) != 0) return -FI_ENODATA;
  if (FI_VERSION_LT(g_provider.fi_version, version)) return -FI_ENODATA;
  const ApiVersion api(version);

  if (hints != nullptr) {
    if (!subset(hints->caps, caps_of(FI_EP_RDM, api) | caps_of(FI_EP_DGRAM, api))) {
      return -FI_ENODATA;
    }
    // "Must be paired with FI_SOURCE" (fi_getinfo(3)).
    if ((hints->caps & FI_SOURCE_ERR) != 0 && (hints->caps & FI_SOURCE) == 0) return -FI_ENODATA;
    if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_SOCKADDR &&
        hints->addr_format != FI_SOCKADDR_IN) {
      return -FI_ENODATA;
    }
    if (hints->nic != nullptr) return -FI_ENODATA;
    if (!tx_ok(hints->tx_attr) || !rx_ok(hints->rx_attr, api) || !ep_ok(hints->ep_attr, api)) {
      return -FI_ENODATA;
    }
  }
  int mr_mode = 0;
  if (!pick_mr_mode(version, hints, &mr_mode)) return -FI_ENODATA;

  std::optional<sockaddr_in> src;
  std::optional<sockaddr_in> dest;
  if (node != nullptr || service != nullptr) {
    const bool local = (flags & FI_SOURCE) != 0 || node == nullptr;
    auto a = resolve(node, service, local, flags);
    if (!a) return -FI_ENODATA;
    (local ? src : dest) = a;
  }
  if (hints != nullptr) {
    if (!src) src = hint_addr(hints->src_addr, hints->src_addrlen);
    if (!dest) dest = hint_addr(hints->dest_addr, hints->dest_addrlen);
    if ((src && src->sin_family != AF_INET) || (dest && dest->sin_family != AF_INET)) {
      return -FI_ENODATA;
    }
  }
  std::optional<in_addr> local_ip;
  if (src && src->sin_addr.s_addr != htonl(INADDR_ANY)) {
    local_ip = src->sin_addr;
  } else if (dest) {
    local_ip = route_source(*dest);
  }

  // The endpoint types asked for, MSG first, then RDM, then DGRAM.
  std::vector<fi_ep_type> types;
  const int asked_type =
      hints != nullptr && hints->ep_attr != nullptr ? raw_enum(hints->ep_attr->type) : FI_EP_UNSPEC;
  for (fi_ep_type t : {FI_EP_MSG, FI_EP_RDM, FI_EP_DGRAM}) {
    if ((asked_type == FI_EP_UNSPEC || asked_type == t) && type_fits(t, hints, api)) {
      types.push_back(t);
    }
  }
  fi_info* head = nullptr;
  fi_info** tail = &head;
  for (const Iface& iface : list_ifaces()) {
    if (local_ip && local_ip->s_addr != iface.addr.s_addr) continue;
    if (hints != nullptr &&
        (!domain_ok(hints->domain_attr, iface, api) || !fabric_ok(hints->fabric_attr, iface))) {
      continue;
    }
    for (fi_ep_type t : types) {
      fi_info* one = make_info(api, hints, t, iface, src, dest, mr_mode);
      if (one == nullptr) {
        fi_freeinfo(head);
        return -FI_ENOMEM;
      }
      *tail = one;
      tail = &one->next;
    }
  }
  if (head == nullptr) return -FI_ENODATA;
  *info = head;
  return 0;
}

}  // namespace fabq::prov
