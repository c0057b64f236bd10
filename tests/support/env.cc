// Linked into every tests/api and tests/system binary: the environment an application
// selecting the provider under test has, and the sanitizer suppressions. ctest sets
// FI_PROVIDER_PATH.
//
// No leak in libfabric is suppressed: what libfabric allocates for the process stays reachable
// until fi_fini, which runs after LeakSanitizer's check at exit, and an fi_info that fabq makes
// with fi_dupinfo and loses (an unread FI_CONNREQ's, say) must show as the leak it is.
#include <cstdlib>

#include "support/provider.h"

namespace {

// libfabric reads FI_PROVIDER once, at the first fi_getinfo: set before any test runs.
struct SelectProvider {
  SelectProvider() { setenv("FI_PROVIDER", fabq::testing::provider(), /*overwrite=*/1); }
} select_provider;

}  // namespace

extern "C" {
// Read by ThreadSanitizer at start-up when the binary is built with it: libfabric is not built
// with it, so its own synchronisation is invisible.
const char* __tsan_default_suppressions() {
  return "race:libfabric.so\n";
}
}
