// libFuzzer target for the check every process makes of a named AV's shared table before it
// trusts a byte of it (prov/shared_av_header.h): the header any process of the user may have
// written, and the size of the object that holds it. Any broken invariant traps.
//
// Input layout (shorter inputs are padded with zeros):
//   bytes 0..63   the header's bytes, as the table holds them
//   bytes 64..71  the object's size (u64, little-endian)
//
// Invariants checked:
//   - read_header() reads each field at the offset of prov/shared_av.h's layout;
//   - table_bytes(c) is 64 + 32 * c for 1 <= c <= 65536 and nothing otherwise, computed here in
//     128 bits so that no wrap can hide (2^59 + 1024 entries would wrap to 32832 bytes in 64);
//   - check_header() accepts exactly the headers of the layout: the magic, a capacity of 1 to
//     65536, an object exactly table_bytes(capacity) long, count <= capacity, the removal flag 0
//     or 1, the pad and reserved fields 0; and it names the first rule broken, in that order;
//   - for an accepted header, a table laid out in an object of exactly that many bytes (on the
//     heap, where AddressSanitizer sees past its end) holds the last entry and the last
//     fi_addr_t that its capacity makes a process touch, and the fi_addr_t array ends at the
//     object's end.
#include <rdma/fabric.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "prov/shared_av_header.h"

namespace fabq::prov::av_table {
namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

uint64_t u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint32_t u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The rules of the layout, restated: which one `raw` breaks first, in check_header()'s order.
HeaderFault expected(const unsigned char* raw, uint64_t object_bytes) {
  if (u64(raw) != 0x6661627161763031ULL) return HeaderFault::kMagic;
  const uint64_t capacity = u64(raw + 8);
  if (capacity == 0 || capacity > 65536) return HeaderFault::kCapacity;
  const unsigned __int128 bytes = 64 + static_cast<unsigned __int128>(capacity) * 32;
  if (bytes != object_bytes) return HeaderFault::kSize;
  if (u64(raw + 16) > capacity) return HeaderFault::kCount;
  if (u32(raw + 24) > 1) return HeaderFault::kRemoved;
  if (u32(raw + 28) != 0) return HeaderFault::kReserved;
  for (size_t at = 32; at < 64; at += 8) {
    if (u64(raw + at) != 0) return HeaderFault::kReserved;
  }
  return HeaderFault::kNone;
}

void run(const uint8_t* data, size_t size) {
  unsigned char in[72] = {};
  std::memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
  const unsigned char* raw = in;
  const uint64_t object_bytes = u64(in + 64);

  const HeaderFields h = read_header(raw);
  check(h.magic == u64(raw) && h.capacity == u64(raw + 8) && h.count == u64(raw + 16));
  check(h.removed == u32(raw + 24) && h.pad == u32(raw + 28));
  for (size_t i = 0; i < 4; ++i) check(h.reserved[i] == u64(raw + 32 + 8 * i));

  const std::optional<uint64_t> bytes = table_bytes(h.capacity);
  check(bytes.has_value() == (h.capacity >= 1 && h.capacity <= kMaxCapacity));
  if (bytes) {
    check(*bytes == 64 + static_cast<unsigned __int128>(h.capacity) * 32);
  }

  const HeaderFault fault = check_header(h, object_bytes);
  check(fault == expected(raw, object_bytes));
  check(describe(fault) != nullptr);
  if (fault != HeaderFault::kNone) return;

  // Everything a process with this capacity touches lies inside the object.
  const uint64_t capacity = h.capacity;
  check(map_offset(capacity) + capacity * sizeof(fi_addr_t) == object_bytes);
  std::vector<unsigned char> table(object_bytes);
  const uint64_t last_entry = kHeaderBytes + (capacity - 1) * sizeof(Entry);
  check(last_entry + sizeof(Entry) <= map_offset(capacity));
  std::memset(table.data() + last_entry, 0xa5, sizeof(Entry));
  const uint64_t last_addr = map_offset(capacity) + (capacity - 1) * sizeof(fi_addr_t);
  const fi_addr_t index = capacity - 1;
  std::memcpy(table.data() + last_addr, &index, sizeof(index));
  check(last_addr + sizeof(fi_addr_t) == table.size());
}

}  // namespace
}  // namespace fabq::prov::av_table

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::prov::av_table::run(data, size);
  return 0;
}
