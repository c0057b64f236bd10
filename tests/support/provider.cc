#include "support/provider.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace fabq::testing {

int ms_since(Clock::time_point t0) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count());
}

const char* provider() {
  const char* p = std::getenv("FABQ_TEST_PROVIDER");
  return p != nullptr && *p != '\0' ? p : "fabq";
}

bool provider_is_fabq() {
  return std::strcmp(provider(), "fabq") == 0;
}

namespace {

std::mutex g_shm_mutex;
bool g_loaded = false;  // the harness has called fi_getinfo in this process

// kOn or kOff: what fabq reads from the environment (shared memory unless FI_FABQ_SHM=0).
Shm configured() {
  const char* v = std::getenv("FI_FABQ_SHM");
  return v != nullptr && std::strcmp(v, "0") == 0 ? Shm::kOff : Shm::kOn;
}

}  // namespace

bool select_shm(Shm shm) {
  std::lock_guard<std::mutex> lock(g_shm_mutex);
  if (!g_loaded) {
    g_loaded = true;
    if (shm != Shm::kAsConfigured) setenv("FI_FABQ_SHM", shm == Shm::kOn ? "1" : "0", 1);
    return true;
  }
  if (shm == Shm::kAsConfigured || shm == configured()) return true;
  ADD_FAILURE() << "FI_FABQ_SHM is read once per process, and this one opened its first "
                   "endpoint with the other setting";
  return false;
}

}  // namespace fabq::testing
