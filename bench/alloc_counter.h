// Heap allocations made by this process so far (malloc, calloc, realloc and the aligned
// variants; operator new goes through malloc). Defined by alloc_counter.cc, which replaces the
// C allocator's entry points with counting wrappers around glibc's own.
#pragma once

#include <cstdint>

namespace fabq::bench {

uint64_t heap_allocations();

}  // namespace fabq::bench
