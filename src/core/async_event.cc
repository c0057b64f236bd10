#include "core/async_event.h"

#include <rdma/fi_errno.h>
#include <strings.h>

#include <iterator>

namespace fabq::core {
namespace {

constexpr AsyncKind kKinds[] = {
    {FI_FABQ_EVENT_COMM_EST, "FI_FABQ_EVENT_COMM_EST", "comm_est", AsyncObject::kEndpoint, false, 0,
     "communication established"},
    {FI_FABQ_EVENT_SQ_DRAINED, "FI_FABQ_EVENT_SQ_DRAINED", "sq_drained", AsyncObject::kEndpoint,
     false, 0, "send queue drained"},
    {FI_FABQ_EVENT_PATH_MIG, "FI_FABQ_EVENT_PATH_MIG", "path_mig", AsyncObject::kEndpoint, false, 0,
     "path migrated"},
    {FI_FABQ_EVENT_LAST_WQE_REACHED, "FI_FABQ_EVENT_LAST_WQE_REACHED", "last_wqe_reached",
     AsyncObject::kEndpoint, false, 0, "last receive of a shared context reached"},
    {FI_FABQ_EVENT_EP_FATAL, "FI_FABQ_EVENT_EP_FATAL", "ep_fatal", AsyncObject::kEndpoint, true,
     FI_EIO, "endpoint fatal error"},
    {FI_FABQ_EVENT_EP_REQ_ERR, "FI_FABQ_EVENT_EP_REQ_ERR", "ep_req_err", AsyncObject::kEndpoint,
     true, FI_EREMOTEIO, "endpoint request error (protocol violation)"},
    {FI_FABQ_EVENT_EP_ACCESS_ERR, "FI_FABQ_EVENT_EP_ACCESS_ERR", "ep_access_err",
     AsyncObject::kEndpoint, true, FI_EACCES, "endpoint access error"},
    {FI_FABQ_EVENT_PATH_MIG_ERR, "FI_FABQ_EVENT_PATH_MIG_ERR", "path_mig_err",
     AsyncObject::kEndpoint, true, FI_EHOSTUNREACH, "path migration failed"},
    {FI_FABQ_EVENT_CQ_ERR, "FI_FABQ_EVENT_CQ_ERR", "cq_err", AsyncObject::kCq, true, FI_EOVERRUN,
     "completion queue error (overrun)"},
    {FI_FABQ_EVENT_SRX_LIMIT_REACHED, "FI_FABQ_EVENT_SRX_LIMIT_REACHED", "srx_limit_reached",
     AsyncObject::kSrx, false, 0, "shared receive context below its limit"},
    {FI_FABQ_EVENT_SRX_ERR, "FI_FABQ_EVENT_SRX_ERR", "srx_err", AsyncObject::kSrx, true, FI_EIO,
     "shared receive context error"},
    {FI_FABQ_EVENT_PORT_ACTIVE, "FI_FABQ_EVENT_PORT_ACTIVE", "port_active", AsyncObject::kPort,
     false, 0, "port active"},
    {FI_FABQ_EVENT_PORT_ERR, "FI_FABQ_EVENT_PORT_ERR", "port_err", AsyncObject::kPort, true,
     FI_ENETDOWN, "port down"},
    {FI_FABQ_EVENT_ADDR_CHANGE, "FI_FABQ_EVENT_ADDR_CHANGE", "addr_change", AsyncObject::kPort,
     false, 0, "port address changed"},
    {FI_FABQ_EVENT_KEY_TABLE_CHANGE, "FI_FABQ_EVENT_KEY_TABLE_CHANGE", "key_table_change",
     AsyncObject::kPort, false, 0, "port key table changed"},
    {FI_FABQ_EVENT_GID_CHANGE, "FI_FABQ_EVENT_GID_CHANGE", "gid_change", AsyncObject::kPort, false,
     0, "port GID table changed"},
    {FI_FABQ_EVENT_SM_CHANGE, "FI_FABQ_EVENT_SM_CHANGE", "sm_change", AsyncObject::kPort, false, 0,
     "subnet manager changed"},
    {FI_FABQ_EVENT_CLIENT_REREGISTER, "FI_FABQ_EVENT_CLIENT_REREGISTER", "client_reregister",
     AsyncObject::kPort, false, 0, "client reregistration requested"},
    {FI_FABQ_EVENT_DEVICE_FATAL, "FI_FABQ_EVENT_DEVICE_FATAL", "device_fatal", AsyncObject::kDevice,
     true, FI_ENODEV, "device fatal error"},
};
static_assert(std::size(kKinds) == FI_FABQ_EVENT_LAST - FI_FABQ_EVENT_FIRST + 1);

constexpr std::string_view kPrefix = "fi_fabq_event_";

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

const AsyncKind* async_kind(uint32_t type) {
  if (!is_async_event_type(type)) return nullptr;
  const AsyncKind* k = &kKinds[type - FI_FABQ_EVENT_FIRST];
  return k->type == type ? k : nullptr;
}

const AsyncKind* async_kind_by_name(std::string_view name) {
  if (name.size() > kPrefix.size() && iequal(name.substr(0, kPrefix.size()), kPrefix)) {
    name.remove_prefix(kPrefix.size());
  }
  for (const AsyncKind& k : kKinds) {
    if (iequal(name, k.short_name)) return &k;
  }
  return nullptr;
}

const char* async_event_type_str(uint32_t type) {
  const AsyncKind* k = async_kind(type);
  return k != nullptr ? k->name : "unknown";
}

}  // namespace fabq::core
