#include "core/atomic_op.h"

#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>

#include <bit>
#include <complex>
#include <cstring>
#include <type_traits>

#include "core/spinlock.h"

namespace fabq::core {
namespace {

#ifdef __SIZEOF_INT128__
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;
#endif

enum class TypeClass : uint8_t { kNone, kInteger, kReal, kComplex };

TypeClass type_class(int datatype) {
  switch (datatype) {
    case FI_INT8:
    case FI_UINT8:
    case FI_INT16:
    case FI_UINT16:
    case FI_INT32:
    case FI_UINT32:
    case FI_INT64:
    case FI_UINT64:
      return TypeClass::kInteger;
#ifdef __SIZEOF_INT128__
    case FI_INT128:
    case FI_UINT128:
      return TypeClass::kInteger;
#endif
    case FI_FLOAT:
    case FI_DOUBLE:
    case FI_LONG_DOUBLE:
      return TypeClass::kReal;
    case FI_FLOAT_COMPLEX:
    case FI_DOUBLE_COMPLEX:
    case FI_LONG_DOUBLE_COMPLEX:
      return TypeClass::kComplex;
    default:
      return TypeClass::kNone;
  }
}

bool op_of_kind(AtomicKind kind, int op) {
  switch (op) {
    case FI_MIN:
    case FI_MAX:
    case FI_SUM:
    case FI_PROD:
    case FI_LOR:
    case FI_LAND:
    case FI_BOR:
    case FI_BAND:
    case FI_LXOR:
    case FI_BXOR:
    case FI_ATOMIC_WRITE:
      return kind == AtomicKind::kPlain || kind == AtomicKind::kFetch;
    case FI_ATOMIC_READ:
      return kind == AtomicKind::kFetch;
    case FI_CSWAP:
    case FI_CSWAP_NE:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
    case FI_MSWAP:
      return kind == AtomicKind::kCompare;
    default:
      return false;
  }
}

bool op_on_class(int op, TypeClass c) {
  switch (op) {
    case FI_BOR:
    case FI_BAND:
    case FI_BXOR:
    case FI_MSWAP:
      return c == TypeClass::kInteger;
    case FI_MIN:
    case FI_MAX:
    case FI_CSWAP_LE:
    case FI_CSWAP_LT:
    case FI_CSWAP_GE:
    case FI_CSWAP_GT:
      return c == TypeClass::kInteger || c == TypeClass::kReal;
    default:
      return c != TypeClass::kNone;
  }
}

// --- What an op makes of one element ------------------------------------------------------------

template <class T>
inline constexpr bool kComplex = false;
template <class T>
inline constexpr bool kComplex<std::complex<T>> = true;
template <class T>
inline constexpr bool kInteger = !kComplex<T> && !std::is_floating_point_v<T>;

// Integer arithmetic in the unsigned type of T's width (at least unsigned int, so that narrow
// types are not promoted to int and cannot overflow it): it wraps instead of being undefined.
template <class T>
struct Unsigned {
  using type = std::make_unsigned_t<T>;
};
#ifdef __SIZEOF_INT128__
template <>
struct Unsigned<Int128> {
  using type = UInt128;
};
template <>
struct Unsigned<UInt128> {
  using type = UInt128;
};
#endif
template <class T>
using Wrapping = decltype(typename Unsigned<T>::type{} + 0u);

template <class T>
T logical(bool v) {
  return v ? T(1) : T(0);
}

// The value `op` leaves in an element that holds `cur`; false when it leaves it as it is.
template <class T>
bool next_value(int op, const T& cur, const T& operand, const T& compare, T& next) {
  if constexpr (kInteger<T>) {
    using W = Wrapping<T>;
    switch (op) {
      case FI_SUM:
        next = static_cast<T>(static_cast<W>(cur) + static_cast<W>(operand));
        return true;
      case FI_PROD:
        next = static_cast<T>(static_cast<W>(cur) * static_cast<W>(operand));
        return true;
      case FI_BOR:
        next = static_cast<T>(cur | operand);
        return true;
      case FI_BAND:
        next = static_cast<T>(cur & operand);
        return true;
      case FI_BXOR:
        next = static_cast<T>(cur ^ operand);
        return true;
      case FI_MSWAP:
        next = static_cast<T>((operand & compare) | (cur & ~compare));
        return true;
    }
  } else {
    switch (op) {
      case FI_SUM:
        next = cur + operand;
        return true;
      case FI_PROD:
        next = cur * operand;
        return true;
    }
  }
  if constexpr (!kComplex<T>) {
    bool swap = false;
    switch (op) {
      case FI_MIN:
        swap = operand < cur;
        break;
      case FI_MAX:
        swap = operand > cur;
        break;
      case FI_CSWAP_LE:
        swap = compare <= cur;
        break;
      case FI_CSWAP_LT:
        swap = compare < cur;
        break;
      case FI_CSWAP_GE:
        swap = compare >= cur;
        break;
      case FI_CSWAP_GT:
        swap = compare > cur;
        break;
    }
    if (swap) {
      next = operand;
      return true;
    }
  }
  const bool a = cur != T(0);
  const bool b = operand != T(0);
  switch (op) {
    case FI_LOR:
      next = logical<T>(a || b);
      return true;
    case FI_LAND:
      next = logical<T>(a && b);
      return true;
    case FI_LXOR:
      next = logical<T>(a != b);
      return true;
    case FI_ATOMIC_WRITE:
      next = operand;
      return true;
    case FI_CSWAP:
      if (!(compare == cur)) return false;
      next = operand;
      return true;
    case FI_CSWAP_NE:
      if (!(compare != cur)) return false;
      next = operand;
      return true;
  }
  return false;
}

// --- Lock-free elements -------------------------------------------------------------------------

template <size_t N>
struct BitsOf {};
template <>
struct BitsOf<1> {
  using type = uint8_t;
};
template <>
struct BitsOf<2> {
  using type = uint16_t;
};
template <>
struct BitsOf<4> {
  using type = uint32_t;
};
template <>
struct BitsOf<8> {
  using type = uint64_t;
};

template <size_t N>
inline constexpr bool kLockFreeSize = (N == 1 || N == 2 || N == 4 || N == 8) &&
                                      __atomic_always_lock_free(N, nullptr);

template <class T>
bool lock_free_at(const void* p) {
  if constexpr (kLockFreeSize<sizeof(T)>) {
    return reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0;
  } else {
    return false;
  }
}

template <class To, class From>
To same_bits(const From& from) {
  return std::bit_cast<To>(from);
}

// Returns the element's value from before the op. Integer ops with an instruction of their own
// use it; every other op is a compare-exchange loop on the element's bits (compared as bits, so a
// NaN in memory cannot make it spin).
template <class T>
T update_lock_free(int op, void* addr, const T& operand, const T& compare) {
  using Bits = typename BitsOf<sizeof(T)>::type;
  Bits* p = static_cast<Bits*>(addr);
  if constexpr (kInteger<T>) {
    const Bits b = same_bits<Bits>(operand);
    switch (op) {
      case FI_SUM:
        return same_bits<T>(__atomic_fetch_add(p, b, __ATOMIC_SEQ_CST));
      case FI_BOR:
        return same_bits<T>(__atomic_fetch_or(p, b, __ATOMIC_SEQ_CST));
      case FI_BAND:
        return same_bits<T>(__atomic_fetch_and(p, b, __ATOMIC_SEQ_CST));
      case FI_BXOR:
        return same_bits<T>(__atomic_fetch_xor(p, b, __ATOMIC_SEQ_CST));
      case FI_CSWAP: {
        Bits expected = same_bits<Bits>(compare);
        __atomic_compare_exchange_n(p, &expected, b, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        return same_bits<T>(expected);
      }
    }
  }
  switch (op) {
    case FI_ATOMIC_READ:
      return same_bits<T>(__atomic_load_n(p, __ATOMIC_SEQ_CST));
    case FI_ATOMIC_WRITE:
      return same_bits<T>(__atomic_exchange_n(p, same_bits<Bits>(operand), __ATOMIC_SEQ_CST));
  }
  Bits old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  for (;;) {
    const T cur = same_bits<T>(old);
    T next{};
    if (!next_value(op, cur, operand, compare, next)) return cur;
    if (__atomic_compare_exchange_n(p, &old, same_bits<Bits>(next), true, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST)) {
      return cur;
    }
  }
}

// Elements in buffers of any alignment are copied bytewise.
template <class T>
void copy_in(T& value, const void* from) {
  std::memcpy(static_cast<void*>(&value), from, sizeof(T));
}
template <class T>
void copy_out(void* to, const T& value) {
  std::memcpy(to, static_cast<const void*>(&value), sizeof(T));
}

// --- Locked elements ----------------------------------------------------------------------------

// 64 spin locks, each on its own cache line, chosen by a Fibonacci hash of the element's address:
// neighbouring elements take different locks. One lock is held at a time, for one element.
constexpr int kStripeBits = 6;
struct alignas(64) Stripe {
  SpinLock lock;
};
static_assert(std::is_trivially_destructible_v<Stripe>);  // nothing runs at exit
constinit Stripe g_stripes[1 << kStripeBits];

SpinLock& stripe_for(const void* addr) {
  const uint64_t a = reinterpret_cast<uintptr_t>(addr);
  return g_stripes[(a * 0x9E3779B97F4A7C15ull) >> (64 - kStripeBits)].lock;
}

// Copies the element's bytes from before the op to `prev` (if not null) as they were: a long
// double passed by value goes through an x87 register, which keeps 10 of its 16 bytes.
template <class T>
void update_locked(int op, void* addr, const T& operand, const T& compare, unsigned char* prev) {
  SpinLockHolder hold(stripe_for(addr));
  if (prev != nullptr) std::memcpy(prev, addr, sizeof(T));
  T cur;
  copy_in(cur, addr);
  T next{};
  if (next_value(op, cur, operand, compare, next)) copy_out(addr, next);
}

// --- Arrays -------------------------------------------------------------------------------------

template <class T>
void apply_elements(int op, void* target, const void* operand, const void* compare, void* result,
                    size_t count) {
  auto* t = static_cast<unsigned char*>(target);
  auto* r = static_cast<unsigned char*>(result);
  const auto* o = static_cast<const unsigned char*>(operand);
  const auto* c = static_cast<const unsigned char*>(compare);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = i * sizeof(T);
    T a{};
    T b{};
    if (o != nullptr) copy_in(a, o + at);
    if (c != nullptr) copy_in(b, c + at);
    void* addr = t + at;
    unsigned char* const prev = r != nullptr ? r + at : nullptr;
    if constexpr (kLockFreeSize<sizeof(T)>) {
      if (lock_free_at<T>(addr)) {
        const T was = update_lock_free<T>(op, addr, a, b);  // 8 bytes at most: in a GPR or SSE
        if (prev != nullptr) copy_out(prev, was);
        continue;
      }
    }
    update_locked<T>(op, addr, a, b, prev);
  }
}

}  // namespace

size_t atomic_datatype_size(int datatype) {
  switch (datatype) {
    case FI_INT8:
    case FI_UINT8:
      return 1;
    case FI_INT16:
    case FI_UINT16:
      return 2;
    case FI_INT32:
    case FI_UINT32:
      return 4;
    case FI_INT64:
    case FI_UINT64:
      return 8;
#ifdef __SIZEOF_INT128__
    case FI_INT128:
    case FI_UINT128:
      return sizeof(Int128);
#endif
    case FI_FLOAT:
      return sizeof(float);
    case FI_DOUBLE:
      return sizeof(double);
    case FI_LONG_DOUBLE:
      return sizeof(long double);
    case FI_FLOAT_COMPLEX:
      return sizeof(std::complex<float>);
    case FI_DOUBLE_COMPLEX:
      return sizeof(std::complex<double>);
    case FI_LONG_DOUBLE_COMPLEX:
      return sizeof(std::complex<long double>);
    default:
      return 0;
  }
}

bool atomic_valid(AtomicKind kind, int op, int datatype) {
  return op_of_kind(kind, op) && op_on_class(op, type_class(datatype));
}

bool atomic_lock_free(const void* target, int datatype) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(target);
  switch (atomic_datatype_size(datatype)) {
    case 1:
      return kLockFreeSize<1>;
    case 2:
      return kLockFreeSize<2> && a % 2 == 0;
    case 4:
      return kLockFreeSize<4> && a % 4 == 0;
    case 8:
      return kLockFreeSize<8> && a % 8 == 0;
    default:
      return false;
  }
}

void atomic_apply(AtomicKind kind, int op, int datatype, void* target, const void* operand,
                  const void* compare, void* result, size_t count) {
  if (!atomic_valid(kind, op, datatype)) return;
  if (op == FI_ATOMIC_READ) operand = nullptr;
  if (kind != AtomicKind::kCompare) compare = nullptr;
  switch (datatype) {
    case FI_INT8:
      return apply_elements<int8_t>(op, target, operand, compare, result, count);
    case FI_UINT8:
      return apply_elements<uint8_t>(op, target, operand, compare, result, count);
    case FI_INT16:
      return apply_elements<int16_t>(op, target, operand, compare, result, count);
    case FI_UINT16:
      return apply_elements<uint16_t>(op, target, operand, compare, result, count);
    case FI_INT32:
      return apply_elements<int32_t>(op, target, operand, compare, result, count);
    case FI_UINT32:
      return apply_elements<uint32_t>(op, target, operand, compare, result, count);
    case FI_INT64:
      return apply_elements<int64_t>(op, target, operand, compare, result, count);
    case FI_UINT64:
      return apply_elements<uint64_t>(op, target, operand, compare, result, count);
#ifdef __SIZEOF_INT128__
    case FI_INT128:
      return apply_elements<Int128>(op, target, operand, compare, result, count);
    case FI_UINT128:
      return apply_elements<UInt128>(op, target, operand, compare, result, count);
#endif
    case FI_FLOAT:
      return apply_elements<float>(op, target, operand, compare, result, count);
    case FI_DOUBLE:
      return apply_elements<double>(op, target, operand, compare, result, count);
    case FI_LONG_DOUBLE:
      return apply_elements<long double>(op, target, operand, compare, result, count);
    case FI_FLOAT_COMPLEX:
      return apply_elements<std::complex<float>>(op, target, operand, compare, result, count);
    case FI_DOUBLE_COMPLEX:
      return apply_elements<std::complex<double>>(op, target, operand, compare, result, count);
    case FI_LONG_DOUBLE_COMPLEX:
      return apply_elements<std::complex<long double>>(op, target, operand, compare, result, count);
  }
}

}  // namespace fabq::core
