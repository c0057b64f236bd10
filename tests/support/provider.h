// Test support: the provider under test, the API version, and the bound of every wait.
//
// The provider is $FABQ_TEST_PROVIDER, "fabq" when unset, so that the tests written for fabq
// can run against libfabric's own providers (FABQ_TEST_PROVIDER=tcp) to check the tests
// themselves. env.cc, linked into every test binary of tests/api and tests/system, sets
// FI_PROVIDER to it at start-up.
#pragma once

#include <chrono>
#include <cstdint>

#include "tools/fabric_setup.h"

namespace fabq::testing {

inline constexpr uint32_t kVersion = setup::kApiVersion;  // FI_VERSION(1, 17)
// Any single wait for a peer, an event or a completion, unless a test says otherwise.
inline constexpr int kTimeoutMs = 5000;

using Clock = std::chrono::steady_clock;
int ms_since(Clock::time_point t0);

const char* provider();
bool provider_is_fabq();

// Where fabq moves the data of two endpoints of one host: through shared memory (its default)
// or over the socket. fabq reads FI_FABQ_SHM once, when libfabric loads it; the harness sets it
// before its first fi_getinfo of the process, and a later Side that asks for the other path
// fails its test. kAsConfigured leaves the environment alone (ctest runs the data tests a
// second time with FI_FABQ_SHM=0).
enum class Shm { kAsConfigured, kOn, kOff };

// Applies `shm` before the process's first fi_getinfo through the harness; false (and a test
// failure) when that is too late for it.
bool select_shm(Shm shm);

}  // namespace fabq::testing
