// What the shared-memory tests (shm_*_test.cc) share: the bytes they move, the names of
// segments as /dev/shm shows them, and the two ends of a Ring.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "xport/shm.h"

namespace fabq::xport::shm {

// For readable failure messages (found by argument-dependent lookup).
inline void PrintTo(Status s, std::ostream* os) {
  *os << (s == Status::kOk ? "kOk" : s == Status::kCorrupt ? "kCorrupt" : "Status(?)");
}

using Bytes = std::vector<unsigned char>;

// n pseudo-random bytes: a byte lost, repeated or out of place shows.
inline Bytes pattern(size_t n, unsigned seed = 1) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (unsigned char& c : b) c = static_cast<unsigned char>(rng());
  return b;
}

// The file behind a segment's POSIX shm name "/fabq-<pid>-<n>" (shm.cc, name_of).
inline std::string shm_path(uint64_t id) {
  return "/dev/shm/fabq-" + std::to_string(id >> 32) + "-" + std::to_string(id & 0xffffffffu);
}

inline bool name_exists(uint64_t id) {
  struct stat st {};
  return ::stat(shm_path(id).c_str(), &st) == 0;
}

inline size_t write_bytes(Ring& r, const Bytes& b, bool* bell = nullptr) {
  iovec iov{const_cast<unsigned char*>(b.data()), b.size()};
  size_t written = 0;
  bool rang = false;
  EXPECT_EQ(r.write(&iov, 1, &written, &rang), Status::kOk);
  if (bell != nullptr) *bell = rang;
  return written;
}

// Takes everything the ring holds, in the two pieces of a wrap-around if there are two, and
// returns it. *bell: whether a consume() said the producer was owed a doorbell.
inline Bytes read_all(Ring& r, bool* bell = nullptr) {
  Bytes out;
  bool rang = false;
  for (int piece = 0; piece < 2; ++piece) {
    const unsigned char* p = nullptr;
    size_t contiguous = 0;
    size_t avail = 0;
    EXPECT_EQ(r.peek(&p, &contiguous, &avail), Status::kOk);
    if (avail == 0) break;
    out.insert(out.end(), p, p + contiguous);
    if (r.consume(contiguous)) rang = true;
  }
  if (bell != nullptr) *bell = rang;
  return out;
}

}  // namespace fabq::xport::shm
