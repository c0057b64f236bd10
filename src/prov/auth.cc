#include "prov/auth.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "prov/provider.h"

namespace fabq::prov {

bool has_auth_key(const fi_info& info) {
  return (info.ep_attr != nullptr && info.ep_attr->auth_key != nullptr &&
          info.ep_attr->auth_key_size > 0) ||
         (info.domain_attr != nullptr && info.domain_attr->auth_key != nullptr &&
          info.domain_attr->auth_key_size > 0) ||
         !params().auth_key.empty();
}

std::optional<core::HmacSha256> auth_key_of(const fi_info& info) {
  if (info.ep_attr != nullptr && info.ep_attr->auth_key != nullptr &&
      info.ep_attr->auth_key_size > 0) {
    return core::HmacSha256(info.ep_attr->auth_key, info.ep_attr->auth_key_size);
  }
  if (info.domain_attr != nullptr && info.domain_attr->auth_key != nullptr &&
      info.domain_attr->auth_key_size > 0) {
    return core::HmacSha256(info.domain_attr->auth_key, info.domain_attr->auth_key_size);
  }
  const std::string& key = params().auth_key;
  if (!key.empty()) return core::HmacSha256(key.data(), key.size());
  return std::nullopt;
}

}  // namespace fabq::prov
