// What libfabric 2.x's headers define and 1.17's (which the tests are built against) do not,
// spelled out from 2.x's fabric.h, fi_endpoint.h and fi_eq.h for the tests of applications that
// ask for a newer API version. Kept apart from src/prov/api_version.h on purpose: a wrong value
// there must not be repeated here.
#pragma once

#include <dlfcn.h>
#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace fabq::testing::lf2 {

// The running core's version: what fabq declares, and the newest an application may ask for.
inline uint32_t core_version() {
  return fi_version();
}
inline bool core_has(uint32_t version) {
  return !FI_VERSION_LT(core_version(), version);
}

// An application built against 2.x's headers binds fi_getinfo and fi_dupinfo (so
// fi_allocinfo) at symbol version FABRIC_1.9, which pass fi_info at 2.x's size; the tests, built
// against 1.17's, bind FABRIC_1.3, through which a 2.x core drops every member added since 1.3.
// getinfo_as and allocinfo_as call what an application asking for `version` calls: for a
// version newer than 1.17, one built against the newest headers (FABRIC_1.9, where the core has
// it); else the entry points the tests bind.
struct Abi19 {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**);
  fi_info* (*dupinfo)(const fi_info*);
};
inline const Abi19& abi19() {
  static const Abi19 a = {
      reinterpret_cast<decltype(Abi19::getinfo)>(dlvsym(RTLD_DEFAULT, "fi_getinfo", "FABRIC_1.9")),
      reinterpret_cast<decltype(Abi19::dupinfo)>(dlvsym(RTLD_DEFAULT, "fi_dupinfo", "FABRIC_1.9")),
  };
  return a;
}
inline bool uses_abi19(uint32_t version) {
  return FI_VERSION_LT(FI_VERSION(1, 17), version) && abi19().getinfo != nullptr &&
         abi19().dupinfo != nullptr;
}
inline int getinfo_as(uint32_t version, const char* node, const char* service, uint64_t flags,
                      const fi_info* hints, fi_info** info) {
  return uses_abi19(version) ? abi19().getinfo(version, node, service, flags, hints, info)
                             : fi_getinfo(version, node, service, flags, hints, info);
}
inline fi_info* allocinfo_as(uint32_t version) {
  return uses_abi19(version) ? abi19().dupinfo(nullptr) : fi_allocinfo();
}

inline constexpr int kProgressControlUnified = 3;
inline constexpr uint64_t kTaggedDirectedRecv = 1ULL << 45;
inline constexpr uint64_t kTaggedMultiRecv = 1ULL << 46;
inline constexpr uint64_t kExactDirectedRecv = 1ULL << 48;
inline constexpr uint64_t kTagMpi = 1;
inline constexpr uint64_t kTagCcl = 2;
inline constexpr uint64_t kTagMaxFormat = 1ULL << 16;
inline constexpr int kOptMaxMsgSize = 12;
inline constexpr int kOptMaxTaggedSize = 13;
inline constexpr int kOptMaxRmaSize = 14;
inline constexpr int kOptMaxAtomicSize = 15;
inline constexpr int kOptInjectMsgSize = 16;
inline constexpr int kOptInjectTaggedSize = 17;
inline constexpr int kOptInjectRmaSize = 18;
inline constexpr int kOptInjectAtomicSize = 19;

// fi_tag_mpi() and its ignore masks (2.x fi_tagged.h).
inline constexpr uint64_t kMpiIgnoreTag = UINT32_MAX;
inline constexpr uint64_t kMpiIgnorePayload = uint64_t{UINT8_MAX} << 32;
inline constexpr uint64_t tag_mpi(int tag, uint8_t payload_id) {
  return (uint64_t{payload_id} << 32) | static_cast<uint32_t>(tag);
}

// fi_domain_attr after 1.17's 192 bytes: max_ep_auth_key (1.20), max_group_id (2.0),
// max_cntr_value and max_err_cntr_value (2.5). Only a 2.5 or newer core allocates all of them.
inline constexpr size_t kDomainAttrSize117 = 192;
struct DomainTail {
  size_t max_ep_auth_key;
  uint32_t max_group_id;
  uint64_t max_cntr_value;
  uint64_t max_err_cntr_value;
};
inline DomainTail tail_of(const fi_domain_attr* a) {
  DomainTail t;
  std::memcpy(&t, reinterpret_cast<const unsigned char*>(a) + kDomainAttrSize117, sizeof(t));
  return t;
}
inline void set_tail(fi_domain_attr* a, const DomainTail& t) {
  std::memcpy(reinterpret_cast<unsigned char*>(a) + kDomainAttrSize117, &t, sizeof(t));
}

// fi_cq_err_entry's src_addr (1.20) follows 1.17's 80 bytes.
inline constexpr size_t kCqErrSrcAddrOffset = 80;

}  // namespace fabq::testing::lf2
