// fabq core: whether a file found at a name in a directory every user may write (/dev/shm) is
// this user's own: a regular file that it owns and that no other user may read or write.
//
// Whatever is at such a name may have been put there by anybody: another user (a file of theirs,
// writable by all, that would let them read and rewrite what this process keeps there; a FIFO
// that blocks the open; a directory), or a process of this user by mistake. The named AV tables
// of the provider (prov/shared_av.h) and the shared-memory segments of the transport
// (xport/shm.h) open such names without following links (O_NOFOLLOW) and without blocking
// (O_NONBLOCK), then ask this of what fstat(2) says of the descriptor, before they map a byte.
//
// Pure: no I/O. Header-only, any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>

namespace fabq::core {

enum class FileFault : uint8_t {
  kNone,
  kNotRegular,    // a directory, FIFO, socket or device
  kNotOwner,      // another user's
  kOpenToOthers,  // its group or other users may read or write it
};

// `mode` and `owner` as fstat(2) gave them for the open descriptor; `me`: the effective uid,
// which owns what this process creates.
constexpr FileFault private_file_fault(mode_t mode, uid_t owner, uid_t me) {
  if (!S_ISREG(mode)) return FileFault::kNotRegular;
  if (owner != me) return FileFault::kNotOwner;
  if ((mode & (S_IRWXG | S_IRWXO)) != 0) return FileFault::kOpenToOthers;
  return FileFault::kNone;
}

// For log lines: "is not a regular file", ...
constexpr const char* describe(FileFault f) {
  switch (f) {
    case FileFault::kNone:
      return "is this user's own";
    case FileFault::kNotRegular:
      return "is not a regular file";
    case FileFault::kNotOwner:
      return "belongs to another user";
    case FileFault::kOpenToOthers:
      return "may be read or written by other users";
  }
  return "is unknown";
}

}  // namespace fabq::core
