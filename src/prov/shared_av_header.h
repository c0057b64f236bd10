// fabq provider: the layout of a named AV's shared table (prov/shared_av.h), and the check of
// its header that every process makes before it trusts a byte of the table.
//
// Any process of the user may write into the table at any time (a bug, or a forgery), so an
// opener reads the header once (read_header(): a copy of its 64 bytes), checks the copy
// (check_header()) against the size of the object it is about to map, and from then on uses only
// the capacity it checked: every offset into the table is computed from it, and a count read
// later is clamped to it. The arithmetic cannot overflow: capacities are at most kMaxCapacity,
// checked before any size is computed from them.
//
// Pure: no I/O, no shared memory, no libfabric calls, so that fuzz/av_header_fuzz.cc drives it
// without the provider. Its own library (fabq_av_header), which the provider links.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace fabq::prov::av_table {

inline constexpr uint64_t kMagic = 0x66616271'61763031ULL;  // "fabqav01"
inline constexpr size_t kHeaderBytes = 64;
inline constexpr size_t kMaxCapacity = 65536;

// In the shared mapping, at offset 0 (little-endian, the offsets of shared_av.h).
struct Header {
  uint64_t magic;
  uint64_t capacity;
  std::atomic<uint64_t> count;    // entries claimed
  std::atomic<uint32_t> removed;  // an entry was ever removed
  uint32_t pad;
  uint64_t reserved[4];
};
// At kHeaderBytes + index * sizeof(Entry).
struct Entry {
  sockaddr_in sa;
  std::atomic<uint32_t> state;  // SharedAvTable::State; written last (release) when valid
  uint32_t pad;
};
static_assert(sizeof(Header) == kHeaderBytes && sizeof(Entry) == 24, "the layout of shared_av.h");
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the table is shared between processes");

// The bytes of a table of `capacity` entries (the header, the entries, then the fi_addr_t
// array); nullopt for a capacity of 0 or above kMaxCapacity.
std::optional<uint64_t> table_bytes(uint64_t capacity);
// Where the fi_addr_t array of a table of `capacity` entries (one table_bytes() accepts) begins.
constexpr uint64_t map_offset(uint64_t capacity) {
  return kHeaderBytes + capacity * sizeof(Entry);
}

// A header's fields, as one process read them.
struct HeaderFields {
  uint64_t magic = 0;
  uint64_t capacity = 0;
  uint64_t count = 0;
  uint32_t removed = 0;
  uint32_t pad = 0;
  uint64_t reserved[4] = {};
};
// The fields of the header whose bytes are raw[0..kHeaderBytes).
HeaderFields read_header(const unsigned char* raw);

enum class HeaderFault : uint8_t {
  kNone,
  kMagic,     // not a fabq table, or of another layout
  kCapacity,  // 0, or above kMaxCapacity
  kSize,      // the object is not exactly table_bytes(capacity) long
  kCount,     // more entries claimed than the capacity
  kRemoved,   // the flag is neither 0 nor 1
  kReserved,  // a reserved field is not 0
};
// What makes `h` a header no table of `object_bytes` (the size of the object that holds it)
// could have; kNone if none.
HeaderFault check_header(const HeaderFields& h, uint64_t object_bytes);
// For log lines: "has a capacity of 0 or above 65536", ...
const char* describe(HeaderFault f);

}  // namespace fabq::prov::av_table
