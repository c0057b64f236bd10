// fabq core: error strings for fi_eq_strerror / fi_cq_strerror.
//
// Every function here writes at most `len` bytes into `buf`, always NUL-terminates when
// len > 0, and never reads err_data beyond what it is told. With buf == nullptr or len == 0
// nothing is written and a pointer to a static string is returned instead.
//
// Thread safety: all functions are safe to call concurrently (no shared mutable state).
#pragma once

#include <cstddef>

namespace fabq::core {

// The symbolic name of a positive fabric errno ("FI_EAGAIN"), or nullptr if unknown.
const char* fi_errno_name(int err);
// A short English message for a positive fabric errno (libfabric's and the system's).
const char* fi_errno_message(int err);

// Copies `text` into buf (truncating, always terminated). Returns buf, or `text` when buf is
// null or len is 0.
const char* copy_message(const char* text, char* buf, size_t len);

// Describes a provider error code as fabq reports it in `prov_errno`:
//   0                          "no provider-specific error"
//   a positive fabric errno    its message, e.g. "Queue has been overrun (FI_EOVERRUN)"
//   an FI_FABQ_EVENT_* kind    its name and meaning, e.g. "FI_FABQ_EVENT_PORT_ERR: port down"
//   anything else              "fabq provider error <n>"
// Returns buf (or a static string, see above).
const char* describe_prov_errno(int prov_errno, char* buf, size_t len);

}  // namespace fabq::core
