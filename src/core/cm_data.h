// fabq core: the one limit on connection data.
//
// fi_connect, fi_accept and fi_reject carry at most this many bytes of application data
// (FI_OPT_CM_DATA_SIZE), an FI_CONNREQ or FI_CONNECTED event delivers them after its
// fi_eq_cm_entry, and the wire's connection frames carry them (xport/wire.h). One constant, so
// that the three can never disagree.
#pragma once

#include <cstddef>

namespace fabq::core {

inline constexpr size_t kCmDataSize = 256;

}  // namespace fabq::core
