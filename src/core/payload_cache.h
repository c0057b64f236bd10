// fabq core: PayloadCache, buffers of a few KiB and more that are taken and given back over and
// over (the payloads of messages that wait for their receives), kept for the next take() of
// their size instead of going back to the heap.
//
// Sizes: take(n) gives a buffer of n rounded up to the next of 1, 1.25, 1.5 and 1.75 times a
// power of two (class_size()), so a buffer is less than a quarter larger than asked for, and a
// buffer given back serves any later take() that rounds to the same size.
//
// Memory: the buffers kept hold at most `keep` bytes in all. A buffer given back that would
// exceed it is kept in place of kept buffers of other sizes, which are freed, the largest first
// (the size given back now is the size in use); if its own size's kept buffers fill the limit,
// or it is larger than the limit, it is freed. The cache frees what it keeps when destroyed;
// buffers taken and not given back are the taker's to give back first (giving back after the
// cache is gone is undefined).
//
// Thread safety: none; the owner serialises calls. Not copyable.
#pragma once

#include <array>
#include <cstddef>

namespace fabq::core {

class PayloadCache {
 public:
  explicit PayloadCache(size_t keep) : keep_(keep) {}
  PayloadCache(const PayloadCache&) = delete;
  PayloadCache& operator=(const PayloadCache&) = delete;
  ~PayloadCache();

  // A buffer of at least n >= 8 bytes, aligned as operator new aligns: a kept one of n's class
  // if there is one (no allocation), else a new one. Throws std::bad_alloc as operator new.
  unsigned char* take(size_t n);
  // Gives back p, which take(n) returned: kept, or freed (Memory, above).
  void give(unsigned char* p, size_t n);
  // Bytes of the buffers kept now.
  size_t kept() const { return kept_; }

  // n >= 8 rounded up to its class.
  static size_t class_size(size_t n);

 private:
  struct Free {
    Free* next;
  };
  static size_t class_index(size_t size);
  static size_t class_bytes(size_t index);  // class_index()'s inverse

  const size_t keep_;
  size_t kept_ = 0;
  std::array<Free*, 4 * 64> free_{};  // a list per class: four per power of two
};

}  // namespace fabq::core
