#include "prov/auth.h"

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "prov/provider.h"

namespace fabq::prov {

namespace {

bool ep_key(const fi_info& info) {
  return info.ep_attr != nullptr && info.ep_attr->auth_key != nullptr &&
         info.ep_attr->auth_key_size > 0;
}

bool domain_key(const fi_info& info) {
  return info.domain_attr != nullptr && info.domain_attr->auth_key != nullptr &&
         info.domain_attr->auth_key_size > 0;
}

}  // namespace

bool has_auth_key(const fi_info& info, const core::HmacSha256* domain_default) {
  return ep_key(info) || domain_default != nullptr || domain_key(info) ||
         !params().auth_key.empty();
}

std::optional<core::HmacSha256> domain_auth_key_of(const fi_info& info) {
  if (!domain_key(info)) return std::nullopt;
  return core::HmacSha256(info.domain_attr->auth_key, info.domain_attr->auth_key_size);
}

std::optional<core::HmacSha256> auth_key_of(const fi_info& info,
                                            const core::HmacSha256* domain_default) {
  if (ep_key(info)) return core::HmacSha256(info.ep_attr->auth_key, info.ep_attr->auth_key_size);
  if (domain_default != nullptr) return *domain_default;
  if (domain_key(info)) return domain_auth_key_of(info);
  const std::string& key = params().auth_key;
  if (!key.empty()) return core::HmacSha256(key.data(), key.size());
  return std::nullopt;
}

}  // namespace fabq::prov
