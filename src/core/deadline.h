// fabq core: Deadline, a point on CLOCK_MONOTONIC derived from a libfabric timeout.
//
// libfabric timeouts are milliseconds; a negative value means wait forever, zero means do not
// block at all. Plain value; thread safe to copy.
#pragma once

#include <time.h>

#include <cstdint>

namespace fabq::core {

inline int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// A span of `ns` (>= 0) nanoseconds as the timespec that ppoll(2) and futex(2) take, or an
// absolute CLOCK_MONOTONIC time for FUTEX_WAIT_BITSET.
inline timespec timespec_of_ns(int64_t ns) {
  return {static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

class Deadline {
 public:
  static Deadline never() { return Deadline(-1); }
  static Deadline after_ns(int64_t ns) { return Deadline(monotonic_ns() + ns); }
  // From a libfabric millisecond timeout: negative = never.
  static Deadline from_timeout_ms(int timeout_ms) {
    return timeout_ms < 0 ? never() : after_ns(int64_t{timeout_ms} * 1'000'000);
  }

  bool is_never() const { return at_ns_ < 0; }
  bool expired() const { return !is_never() && monotonic_ns() >= at_ns_; }
  // Nanoseconds left (0 when expired); only meaningful when !is_never().
  int64_t remaining_ns() const {
    const int64_t left = at_ns_ - monotonic_ns();
    return left > 0 ? left : 0;
  }

 private:
  explicit Deadline(int64_t at_ns) : at_ns_(at_ns) {}
  int64_t at_ns_;
};

}  // namespace fabq::core
