#include "tools/fabric_setup.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace fabq::setup {

Result getinfo(const Hints& hints, const char* node, const char* service, uint64_t flags,
               fi_info** out) {
  *out = nullptr;
  const std::string call = std::string("fi_getinfo(") + (node != nullptr ? node : "NULL") + ", " +
                           (service != nullptr ? service : "NULL") +
                           (flags & FI_SOURCE ? ", FI_SOURCE)" : ")");
  fi_info* h = fi_allocinfo();
  if (h == nullptr) return {-FI_ENOMEM, "fi_allocinfo"};
  h->fabric_attr->prov_name = strdup(hints.provider.c_str());
  h->ep_attr->type = hints.type;
  h->caps = hints.caps;
  h->addr_format = FI_SOCKADDR_IN;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->domain_attr->data_progress = hints.data_progress;
  if (!hints.auth_key.empty()) {
    h->domain_attr->auth_key = static_cast<uint8_t*>(std::malloc(hints.auth_key.size()));
    std::memcpy(h->domain_attr->auth_key, hints.auth_key.data(), hints.auth_key.size());
    h->domain_attr->auth_key_size = hints.auth_key.size();
  }
  fi_info* list = nullptr;
  const int rc = fi_getinfo(kApiVersion, node, service, flags, h, &list);
  fi_freeinfo(h);
  if (rc != 0) return {rc, call};
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (i->fabric_attr->prov_name != nullptr && hints.provider == i->fabric_attr->prov_name) {
      *out = fi_dupinfo(i);
      break;
    }
  }
  fi_freeinfo(list);
  if (*out == nullptr) return {-FI_ENODATA, call};
  return {};
}

Result open_fabric(fi_info* info, fid_fabric** fabric, fid_domain** domain) {
  if (int rc = fi_fabric(info->fabric_attr, fabric, nullptr); rc != 0) return {rc, "fi_fabric"};
  if (int rc = fi_domain(*fabric, info, domain, nullptr); rc != 0) return {rc, "fi_domain"};
  return {};
}

Result listen(fid_fabric* fabric, fi_info* info, fid_eq* eq, fid_pep** pep, uint16_t* port) {
  if (int rc = fi_passive_ep(fabric, info, pep, nullptr); rc != 0) return {rc, "fi_passive_ep"};
  if (int rc = fi_pep_bind(*pep, &eq->fid, 0); rc != 0) return {rc, "fi_pep_bind"};
  if (int rc = fi_listen(*pep); rc != 0) return {rc, "fi_listen"};
  sockaddr_storage addr{};
  size_t len = sizeof(addr);
  if (int rc = fi_getname(&(*pep)->fid, &addr, &len); rc != 0) return {rc, "fi_getname"};
  const auto* sin = reinterpret_cast<const sockaddr_in*>(&addr);
  if (len < sizeof(sockaddr_in) || sin->sin_family != AF_INET || sin->sin_port == 0) {
    return {-FI_EADDRNOTAVAIL, "fi_getname (no IPv4 port)"};
  }
  *port = ntohs(sin->sin_port);
  return {};
}

Result open_endpoint(fid_domain* domain, fi_info* info, void* context,
                     std::initializer_list<Bind> binds, fid_ep** ep) {
  if (int rc = fi_endpoint(domain, info, ep, context); rc != 0) return {rc, "fi_endpoint"};
  for (const Bind& b : binds) {
    if (b.to == nullptr) continue;
    if (int rc = fi_ep_bind(*ep, b.to, b.flags); rc != 0) {
      return {rc, std::string("fi_ep_bind(") + b.what + ")"};
    }
  }
  if (int rc = fi_enable(*ep); rc != 0) return {rc, "fi_enable"};
  return {};
}

ssize_t read_event(fid_eq* eq, uint32_t* event, CmEvent* ev, int timeout_ms, int slice_ms,
                   uint64_t flags, const std::function<bool()>& between) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (between && !between()) return kStopped;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const int slice = static_cast<int>(std::clamp<int64_t>(left, 0, slice_ms));
    const ssize_t n = fi_eq_sread(eq, event, ev->bytes, sizeof(ev->bytes), slice, flags);
    if (n >= 0 || n == -FI_EAVAIL) return n;
    if (n != -FI_EAGAIN && n != -FI_EINTR && n != -FI_ETIMEDOUT) return n;
    if (Clock::now() >= deadline) return -FI_ETIMEDOUT;
  }
}

}  // namespace fabq::setup
