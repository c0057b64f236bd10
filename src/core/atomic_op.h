// fabq core: the atomic operations of fi_atomic(3), executed on local memory.
//
// What the target of a remote atomic runs on the registered memory it names, and what the
// provider's fi_query_atomic / fi_*atomicvalid report. `op` is an enum fi_op and `datatype` an
// enum fi_datatype, passed as int so that values off the wire can be checked before use.
//
// Semantics, per element i (fi_atomic(3); `operand` is the initiator's buf):
//   FI_MIN    if (operand[i] < addr[i]) addr[i] = operand[i]
//   FI_MAX    if (operand[i] > addr[i]) addr[i] = operand[i]
//   FI_SUM, FI_PROD                 addr[i] = addr[i] + / * operand[i]
//   FI_LOR, FI_LAND, FI_LXOR        addr[i] = 1 or 0, the logical ||, && or xor of the two
//   FI_BOR, FI_BAND, FI_BXOR        addr[i] = addr[i] | & ^ operand[i]
//   FI_ATOMIC_READ                  addr[i] unchanged (operand ignored, may be null)
//   FI_ATOMIC_WRITE                 addr[i] = operand[i]
//   FI_CSWAP, _NE, _LE, _LT, _GE, _GT
//             if (compare[i] == != <= < >= > addr[i]) addr[i] = operand[i]: the compare value
//             is on the left, so FI_CSWAP_LE swaps when compare <= addr.
//   FI_MSWAP  addr[i] = (operand[i] & compare[i]) | (addr[i] & ~compare[i])
// Integer arithmetic wraps (two's complement, signed types too). Floating-point and complex
// values compare and compute with the type's own operators: -0.0 == 0.0, a NaN equals nothing
// (FI_CSWAP on a NaN never swaps), complex ops are C's (_Complex). A complex value is "true"
// for the logical ops when either part is non-zero; their result is (1, 0) or (0, 0).
//
// Validity (atomic_valid), as libfabric's util atomics (prov/util/src/util_atomic.c) define it
// in full (its builds on compiler atomics drop the 16- and 32-byte types, which fabq serves under
// locks):
//   kPlain    FI_MIN..FI_BXOR, FI_ATOMIC_WRITE
//   kFetch    FI_MIN..FI_BXOR, FI_ATOMIC_READ, FI_ATOMIC_WRITE
//   kCompare  FI_CSWAP..FI_MSWAP
// and by datatype:
//   integers  FI_INT8..FI_UINT64, and FI_INT128, FI_UINT128 where the compiler has __int128:
//             every op
//   FI_FLOAT, FI_DOUBLE, FI_LONG_DOUBLE        all but FI_BOR, FI_BAND, FI_BXOR, FI_MSWAP
//   FI_FLOAT_COMPLEX, FI_DOUBLE_COMPLEX, FI_LONG_DOUBLE_COMPLEX
//             FI_SUM, FI_PROD, FI_LOR, FI_LAND, FI_LXOR, FI_ATOMIC_READ, FI_ATOMIC_WRITE,
//             FI_CSWAP, FI_CSWAP_NE (complex numbers have no order and no bits to mask)
// Anything else, including FI_VOID and the collective ops, is not valid.
//
// Atomicity: each element's read-modify-write is atomic with respect to every other
// atomic_apply on the same element (same address, same datatype) from any thread of the
// process; a count of n is n such operations, not one. Elements of 1, 2, 4 or 8 bytes at an
// address that is a multiple of their size are updated lock-free with __atomic builtins (a
// compare-exchange loop on the bit pattern where no single instruction does the op). Every
// other element, 16- and 32-byte types and any misaligned element, is updated under one of a
// fixed table of spin locks, chosen by the element's address: misaligned targets are safe and
// need no check by the caller, only slower. Accesses to the same memory as another datatype,
// or by anything but atomic_apply, are not atomic with these (fi_atomic(3): one actor at a time).
//
// Memory ordering: lock-free elements are read and written __ATOMIC_SEQ_CST, as libfabric's util
// atomics do: the element's update is in the single total order of seq_cst operations and orders
// the caller's accesses before and after it. Locked elements are ordered by the lock (acquire on
// taking it, release on dropping it). A call on n elements is n updates, one after the other:
// another thread may see some done and the rest not yet.
//
// Threads: every function may be called from any thread. Nothing allocates; atomic_apply may
// spin (yielding the CPU) while another thread holds a locked element's stripe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabq::core {

// Which call family an operation comes from: fi_atomic, fi_fetch_atomic, fi_compare_atomic.
enum class AtomicKind : uint8_t { kPlain, kFetch, kCompare };

// Bytes of one element of `datatype` (fi_atomic_attr.size); 0 for a datatype fabq does not know.
// FI_LONG_DOUBLE is sizeof(long double) of this compiler (16 on x86-64).
[[nodiscard]] size_t atomic_datatype_size(int datatype);

// Whether atomic_apply(kind, op, datatype, ...) is defined: the answer fi_query_atomic (flags 0,
// FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC) and the fi_*atomicvalid calls report. See the table above;
// false for an unknown op, datatype or kind.
[[nodiscard]] bool atomic_valid(AtomicKind kind, int op, int datatype);

// True when atomic_apply updates the element of `datatype` at `target` lock-free, false when it
// takes a stripe lock (or the datatype is unknown). For tests and statistics only: callers need
// not check it.
[[nodiscard]] bool atomic_lock_free(const void* target, int datatype);

// Performs `op` on `count` consecutive elements of `datatype` at `target`, element by element.
// Preconditions: atomic_valid(kind, op, datatype), which the caller checks on values off the
// wire (the call does nothing when it does not hold).
//   target    count elements, read and written; any alignment. Not owned.
//   operand   count elements; ignored (may be null) for FI_ATOMIC_READ.
//   compare   count elements for kCompare; ignored otherwise.
//   result    receives each element's value from before the op: required for kFetch and
//             kCompare; may be null for kPlain (when given, it is written too).
// operand, compare and result may have any alignment and must not overlap target.
void atomic_apply(AtomicKind kind, int op, int datatype, void* target, const void* operand,
                  const void* compare, void* result, size_t count);

}  // namespace fabq::core
