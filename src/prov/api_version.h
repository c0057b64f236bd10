// fabq provider: which libfabric API an application speaks, and what that changes.
//
// One libfabq-fi.so serves libfabric 1.17 and 2.x cores. fi_prov_ini declares the loading
// core's own version (provider.cc), so a core passes fabq every request up to that; from then
// on each application is answered by the version *it* asked for: fi_getinfo's `version`, then
// fabric_attr->api_version, which fi_fabric gives the fabric (Fabric::api()) and every object
// under it reads. A version newer than the newest fabq knows (2.6) is answered as that one.
//
// fabq is compiled against libfabric 1.17's headers: a provider built against 2.x's binds
// fi_dupinfo@FABRIC_1.9, which a 1.17 core does not have, and would not load there. So the 2.x
// values and struct tails fabq uses are spelled out below, each with the release that added it.
// A struct member added after 1.17 is read or written only when the application's version has
// it: the version asked for is never newer than the core, and the core allocates every fi_info
// fabq returns (fi_allocinfo) and every hint of such an application at its own size.
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_eq.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

static_assert(FI_MAJOR_VERSION == 1,
              "fabq is built against libfabric 1.x headers so that it loads into 1.x and 2.x "
              "cores alike (src/prov/api_version.h)");

namespace fabq::prov {

class ApiVersion {
 public:
  constexpr explicit ApiVersion(uint32_t v) : v_(v) {}
  constexpr uint32_t raw() const { return v_; }
  constexpr bool at_least(uint32_t major, uint32_t minor) const {
    return v_ >= FI_VERSION(major, minor);
  }

  // < 1.5: readerr's err_data is always provider-owned and the error entry ends before
  // err_data_size.
  constexpr bool legacy_err_data() const { return !at_least(1, 5); }
  // >= 1.10: fi_mr_attr has iface and device.
  constexpr bool mr_iface() const { return at_least(1, 10); }
  // >= 1.20: fi_cq_err_entry ends with src_addr; fi_domain_attr has max_ep_auth_key.
  constexpr bool cq_err_src_addr() const { return at_least(1, 20); }
  constexpr bool max_ep_auth_key() const { return at_least(1, 20); }
  // >= 1.21: FI_PROGRESS_CONTROL_UNIFIED.
  constexpr bool control_unified() const { return at_least(1, 21); }
  // >= 1.22: the endpoint options FI_OPT_MAX_*_SIZE and FI_OPT_INJECT_*_SIZE.
  constexpr bool size_options() const { return at_least(1, 22); }
  // >= 2.0: caps bits 45, 46 and 48 are FI_TAGGED_DIRECTED_RECV, FI_TAGGED_MULTI_RECV and
  // FI_EXACT_DIRECTED_RECV (48 was FI_VARIABLE_MSG); a mem_tag_format below FI_TAG_MAX_FORMAT
  // names a format; FI_THREAD_FID and FI_THREAD_ENDPOINT are gone; fi_domain_attr has
  // max_group_id.
  constexpr bool v2() const { return at_least(2, 0); }
  // >= 2.5: fi_domain_attr has max_cntr_value and max_err_cntr_value.
  constexpr bool counter_limits() const { return at_least(2, 5); }

 private:
  uint32_t v_;
};

// Values of libfabric 2.x's headers that 1.17's lack.
namespace abi2 {

inline constexpr int kProgressControlUnified = 3;            // enum fi_progress, 1.21
inline constexpr uint64_t kTaggedDirectedRecv = 1ULL << 45;  // caps, 2.0
inline constexpr uint64_t kExactDirectedRecv = 1ULL << 48;   // caps, 2.0
// ep_attr->mem_tag_format, 2.0. From kTagMaxFormat up, the value is 1.x's bit fields.
inline constexpr uint64_t kTagBits = 0;
inline constexpr uint64_t kTagMpi = 1;
inline constexpr uint64_t kTagCcl = 2;
inline constexpr uint64_t kTagMaxFormat = 1ULL << 16;
// fi_setopt/fi_getopt names at FI_OPT_ENDPOINT, 1.22; each a size_t.
enum SizeOption : int {
  kOptMaxMsgSize = 12,
  kOptMaxTaggedSize = 13,
  kOptMaxRmaSize = 14,
  kOptMaxAtomicSize = 15,
  kOptInjectMsgSize = 16,
  kOptInjectTaggedSize = 17,
  kOptInjectRmaSize = 18,
  kOptInjectAtomicSize = 19,
};

// fi_domain_attr's members after 1.17's last one, in 2.x's layout.
struct DomainAttrTail {
  size_t max_ep_auth_key = 0;       // 1.20
  uint32_t max_group_id = 0;        // 2.0
  uint64_t max_cntr_value = 0;      // 2.5; 0: no limit
  uint64_t max_err_cntr_value = 0;  // 2.5; 0: no limit
};
static_assert(sizeof(fi_domain_attr) == 192 && offsetof(DomainAttrTail, max_group_id) == 8 &&
              offsetof(DomainAttrTail, max_cntr_value) == 16 &&
              offsetof(DomainAttrTail, max_err_cntr_value) == 24 && sizeof(DomainAttrTail) == 32);

// The members of `a`'s tail that `api` has; the others read as 0. `a` must have been allocated
// by a core at least as new as `api` (see the top of this file).
inline DomainAttrTail read_tail(const fi_domain_attr* a, ApiVersion api) {
  DomainAttrTail t;
  const auto* base = reinterpret_cast<const unsigned char*>(a) + sizeof(fi_domain_attr);
  if (api.max_ep_auth_key()) std::memcpy(&t.max_ep_auth_key, base, sizeof(t.max_ep_auth_key));
  if (api.v2()) {
    std::memcpy(&t.max_group_id, base + offsetof(DomainAttrTail, max_group_id),
                sizeof(t.max_group_id));
  }
  if (api.counter_limits()) {
    std::memcpy(&t.max_cntr_value, base + offsetof(DomainAttrTail, max_cntr_value),
                sizeof(t.max_cntr_value));
    std::memcpy(&t.max_err_cntr_value, base + offsetof(DomainAttrTail, max_err_cntr_value),
                sizeof(t.max_err_cntr_value));
  }
  return t;
}

// Writes the members of the tail that `api` has, and no byte beyond them.
inline void write_tail(fi_domain_attr* a, ApiVersion api, const DomainAttrTail& t) {
  auto* base = reinterpret_cast<unsigned char*>(a) + sizeof(fi_domain_attr);
  if (api.max_ep_auth_key()) std::memcpy(base, &t.max_ep_auth_key, sizeof(t.max_ep_auth_key));
  if (api.v2()) {
    std::memcpy(base + offsetof(DomainAttrTail, max_group_id), &t.max_group_id,
                sizeof(t.max_group_id));
  }
  if (api.counter_limits()) {
    std::memcpy(base + offsetof(DomainAttrTail, max_cntr_value), &t.max_cntr_value,
                sizeof(t.max_cntr_value));
    std::memcpy(base + offsetof(DomainAttrTail, max_err_cntr_value), &t.max_err_cntr_value,
                sizeof(t.max_err_cntr_value));
  }
}

// fi_cq_err_entry's src_addr (1.20) follows 1.17's last member. FI_ADDR_NOTAVAIL unless the
// endpoint uses FI_AV_AUTH_KEY, which fabq does not offer (fi_cq(3)).
inline void write_cq_err_src_addr(fi_cq_err_entry* e, fi_addr_t addr) {
  static_assert(sizeof(fi_cq_err_entry) == 80);
  std::memcpy(reinterpret_cast<unsigned char*>(e) + sizeof(fi_cq_err_entry), &addr, sizeof(addr));
}

}  // namespace abi2
}  // namespace fabq::prov
