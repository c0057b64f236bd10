#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include <cstdlib>
#include <cstring>

#include "tools/bench/bench.h"

namespace fabq::tools::bench {

const std::vector<ProviderSpec>& known_providers() {
  // The libfabric core stacks ofi_rxm over tcp for FI_EP_RDM; asking for prov_name "tcp" with
  // FI_EP_MSG returns tcp alone, which is what FI_PROVIDER='^ofi_rxm,ofi_rxd,ofi_mrail' does for
  // a whole process. Both live in one process that way.
  static const std::vector<ProviderSpec> all = {
      {"fabq", "fabq", FI_EP_MSG, "fabq (this project)"},
      {"tcp", "tcp;ofi_rxm", FI_EP_RDM, "tcp as applications get it: ofi_rxm over tcp"},
      {"tcp-core", "tcp", FI_EP_MSG, "core tcp alone (no ofi_rxm)"},
      {"sockets", "sockets", FI_EP_MSG, "sockets"},
      {"udp", "udp", FI_EP_DGRAM, "udp"},
      {"shm", "shm", FI_EP_RDM, "shm"},
  };
  return all;
}

const ProviderSpec* find_provider(const std::string& name) {
  for (const ProviderSpec& p : known_providers()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::unique_ptr<Provider> Provider::open(const ProviderSpec& spec, std::string* why) {
  std::unique_ptr<Provider> p(new Provider(spec));
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) {
    *why = "fi_allocinfo failed";
    return nullptr;
  }
  // No endpoint is opened: accept every mode and memory-registration requirement.
  hints->mode = ~0ULL;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW;
  hints->ep_attr->type = static_cast<fi_ep_type>(spec.ep_type);
  hints->fabric_attr->prov_name = strdup(spec.prov_name.c_str());
  fi_info* list = nullptr;
  int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) {
    *why = std::string("fi_getinfo: ") + fi_strerror(-rc);
    return nullptr;
  }
  for (fi_info* i = list; i != nullptr; i = i->next) {
    if (i->fabric_attr->prov_name != nullptr && spec.prov_name == i->fabric_attr->prov_name) {
      p->info_ = fi_dupinfo(i);
      break;
    }
  }
  fi_freeinfo(list);
  if (p->info_ == nullptr) {
    *why = "fi_getinfo lists no " + spec.prov_name;
    return nullptr;
  }
  rc = fi_fabric(p->info_->fabric_attr, &p->fabric_, nullptr);
  if (rc != 0) {
    *why = std::string("fi_fabric: ") + fi_strerror(-rc);
    return nullptr;
  }
  rc = fi_domain(p->fabric_, p->info_, &p->domain_, nullptr);
  if (rc != 0) {
    *why = std::string("fi_domain: ") + fi_strerror(-rc);
    return nullptr;
  }
  return p;
}

Provider::~Provider() {
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

}  // namespace fabq::tools::bench
