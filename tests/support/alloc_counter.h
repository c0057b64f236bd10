// Test support: heap allocations made by this process so far, for the tests that check a path
// allocates nothing. A binary that counts links fabq_test_alloc_counter (CMakeLists.txt), the
// counting replacements of malloc & co. in bench/alloc_counter.cc, which `fabq bench` and
// core_bench count with too; the provider loaded into the process is counted along. Not in the
// sanitizer builds, whose runtimes replace malloc themselves.
#pragma once

#include "bench/alloc_counter.h"

namespace fabq::testing {

using bench::heap_allocations;

}  // namespace fabq::testing
