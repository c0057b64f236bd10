#include "prov/shared_av_header.h"

#include <rdma/fabric.h>

#include <cstring>

namespace fabq::prov::av_table {

std::optional<uint64_t> table_bytes(uint64_t capacity) {
  // Checked first: with capacity bounded, no product below can wrap (at most 64 + 2^16 * 32).
  if (capacity == 0 || capacity > kMaxCapacity) return std::nullopt;
  return map_offset(capacity) + capacity * sizeof(fi_addr_t);
}

HeaderFields read_header(const unsigned char* raw) {
  HeaderFields h;
  auto u64 = [raw](size_t at) {
    uint64_t v;
    std::memcpy(&v, raw + at, sizeof(v));
    return v;
  };
  auto u32 = [raw](size_t at) {
    uint32_t v;
    std::memcpy(&v, raw + at, sizeof(v));
    return v;
  };
  h.magic = u64(offsetof(Header, magic));
  h.capacity = u64(offsetof(Header, capacity));
  h.count = u64(offsetof(Header, count));
  h.removed = u32(offsetof(Header, removed));
  h.pad = u32(offsetof(Header, pad));
  for (size_t i = 0; i < 4; ++i) h.reserved[i] = u64(offsetof(Header, reserved) + 8 * i);
  return h;
}

HeaderFault check_header(const HeaderFields& h, uint64_t object_bytes) {
  if (h.magic != kMagic) return HeaderFault::kMagic;
  const std::optional<uint64_t> bytes = table_bytes(h.capacity);
  if (!bytes) return HeaderFault::kCapacity;
  if (object_bytes != *bytes) return HeaderFault::kSize;
  if (h.count > h.capacity) return HeaderFault::kCount;
  if (h.removed > 1) return HeaderFault::kRemoved;
  if (h.pad != 0) return HeaderFault::kReserved;
  for (uint64_t r : h.reserved) {
    if (r != 0) return HeaderFault::kReserved;
  }
  return HeaderFault::kNone;
}

const char* describe(HeaderFault f) {
  switch (f) {
    case HeaderFault::kNone:
      return "is a table's";
    case HeaderFault::kMagic:
      return "is not a fabq table's (magic)";
    case HeaderFault::kCapacity:
      return "has a capacity of 0 or above 65536";
    case HeaderFault::kSize:
      return "has a capacity that is not the table's size";
    case HeaderFault::kCount:
      return "counts more entries than its capacity";
    case HeaderFault::kRemoved:
      return "has a removal flag neither 0 nor 1";
    case HeaderFault::kReserved:
      return "has a reserved field that is not 0";
  }
  return "is unknown";
}

}  // namespace fabq::prov::av_table
