// Linked into every tests/api and tests/system binary: the environment an application selecting
// fabq has, and the sanitizer suppressions. ctest sets FI_PROVIDER_PATH.
//
// No leak in libfabric is suppressed: what libfabric allocates for the process stays reachable
// until fi_fini, which runs after LeakSanitizer's check at exit, and an fi_info that fabq makes
// with fi_dupinfo and loses (an unread FI_CONNREQ's, say) must show as the leak it is.
#include <cstdlib>

namespace {

struct SelectFabq {
  SelectFabq() { setenv("FI_PROVIDER", "fabq", /*overwrite=*/0); }
} select_fabq;

}  // namespace

extern "C" {
// Read by ThreadSanitizer at start-up when the binary is built with it: libfabric is not built
// with it, so its own synchronisation is invisible.
const char* __tsan_default_suppressions() {
  return "race:libfabric.so\n";
}
}
