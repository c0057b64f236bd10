// fabq core: the table of asynchronous event kinds (include/fabq/fi_fabq.h).
//
// One row per fi_fabq_event_type: its name, the kind of object it is about, whether it is an
// error kind (also reported on an EQ) and the fabric errno that EQ entry carries.
//
// Thread safety: constant data; any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "fabq/fi_fabq.h"

namespace fabq::core {

enum class AsyncObject { kEndpoint, kCq, kSrx, kPort, kDevice };

struct AsyncKind {
  uint32_t type;           // FI_FABQ_EVENT_*
  const char* name;        // "FI_FABQ_EVENT_PORT_ERR"
  const char* short_name;  // "port_err": the name fault specs use
  AsyncObject object;
  bool error;  // reported on the EQ as well
  int err;     // positive fabric errno of that EQ entry (0 for info kinds)
  const char* description;
};

// The row for `type`, or nullptr when it is not an event kind.
const AsyncKind* async_kind(uint32_t type);
// The row whose short name matches `name` (case-insensitive, with or without the
// "FI_FABQ_EVENT_" prefix), or nullptr.
const AsyncKind* async_kind_by_name(std::string_view name);
// "FI_FABQ_EVENT_..." or "unknown".
const char* async_event_type_str(uint32_t type);
inline bool is_async_event_type(uint32_t type) {
  return type >= FI_FABQ_EVENT_FIRST && type <= FI_FABQ_EVENT_LAST;
}

}  // namespace fabq::core
