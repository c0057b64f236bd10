// Linked into every tests/api binary: the environment an application selecting fabq has, and
// the sanitizer suppressions for libfabric itself (not built with sanitizers, and it keeps
// provider state for the life of the process). ctest sets FI_PROVIDER_PATH.
#include <cstdlib>

namespace {

struct SelectFabq {
  SelectFabq() { setenv("FI_PROVIDER", "fabq", /*overwrite=*/0); }
} select_fabq;

}  // namespace

extern "C" {
// Read by LeakSanitizer and ThreadSanitizer at start-up when the binary is built with them.
const char* __lsan_default_suppressions() {
  return "leak:libfabric.so\n";
}
const char* __tsan_default_suppressions() {
  return "race:libfabric.so\n";
}
}
