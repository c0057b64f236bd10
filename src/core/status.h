// fabq core: typed results.
//
// In the core (src/core) a call that can fail with a fabric errno returns a `Status` (no value) or
// a `Result<T>` (a value or a status). A status is one of libfabric's positive fabric errno values
// (`FI_EAGAIN`, `FI_EAVAIL`, ...) wrapped in an enum so that it cannot be confused with a count or
// a flag. The provider and the transports (src/prov, src/xport) mostly keep libfabric's convention
// instead, an int that is 0 or a negative fabric errno; `to_fi()` turns a core status into that
// where they call the core.
//
// Thread safety: plain values; copy freely.
#pragma once

#include <rdma/fi_errno.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace fabq::core {

// The fabric errno values the core produces. Values are libfabric's own, so conversion is a
// sign change.
enum class Code : int {
  kOk = 0,
  kAgain = FI_EAGAIN,        // nothing to read / no room right now
  kAvail = FI_EAVAIL,        // an error entry is at the head: use the readerr call
  kTooSmall = FI_ETOOSMALL,  // caller's buffer cannot hold the entry; nothing consumed
  kOverrun = FI_EOVERRUN,    // the queue is in the overrun state
  kInval = FI_EINVAL,        // invalid argument
  kNoSys = FI_ENOSYS,        // operation not supported by this configuration
  kNoSpace = FI_ENOSPC,      // a resource limit was reached
  kNoMem = FI_ENOMEM,        // allocation failed (only at construction)
  kBusy = FI_EBUSY,          // object still in use
  kBadFlags = FI_EBADFLAGS,  // flags not supported
  kIntr = FI_EINTR,          // interrupted by a signal
  kIo = FI_EIO,              // an operating-system call failed
  kTimedOut = FI_ETIMEDOUT,  // a wait that reports timeouts as errors (fi_cntr_wait)
};

class [[nodiscard]] Status {
 public:
  constexpr Status() = default;
  constexpr Status(Code c) : code_(c) {}  // NOLINT: implicit by design
  constexpr bool ok() const { return code_ == Code::kOk; }
  constexpr Code code() const { return code_; }
  // The negative fabric errno libfabric returns for this status (0 for success).
  constexpr int to_fi() const { return -static_cast<int>(code_); }
  friend constexpr bool operator==(Status a, Status b) { return a.code_ == b.code_; }

 private:
  Code code_ = Code::kOk;
};

inline constexpr Status OkStatus() {
  return Status();
}

// A value or a non-ok status. `T` must be cheap to copy (counts, pointers, small structs).
template <class T>
class [[nodiscard]] Result {
 public:
  constexpr Result(T v) : value_(std::move(v)) {}  // NOLINT: implicit by design
  constexpr Result(Code c) : status_(c) {}         // NOLINT
  constexpr Result(Status s) : status_(s) {}       // NOLINT
  constexpr bool ok() const { return status_.ok(); }
  constexpr Status status() const { return status_; }
  constexpr const T& value() const& { return value_; }
  constexpr T& value() & { return value_; }
  constexpr T&& value() && { return std::move(value_); }
  constexpr const T& operator*() const { return value_; }
  // For ssize_t-returning libfabric calls: the value, or the negative errno.
  constexpr long to_fi() const { return ok() ? static_cast<long>(value_) : status_.to_fi(); }

 private:
  T value_{};
  Status status_{};
};

}  // namespace fabq::core
