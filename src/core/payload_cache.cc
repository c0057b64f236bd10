#include "core/payload_cache.h"

#include <algorithm>
#include <bit>
#include <new>
#include <utility>

namespace fabq::core {

PayloadCache::~PayloadCache() {
  for (Free*& head : free_) {
    while (head != nullptr) ::operator delete(std::exchange(head, head->next));
  }
}

size_t PayloadCache::class_size(size_t n) {
  // n in (2^lg, 2^(lg+1)]: up to a multiple of 2^(lg-2). lg >= 2 since n >= 8.
  const unsigned lg = static_cast<unsigned>(std::bit_width(n - 1)) - 1;
  const size_t step = size_t{1} << (lg - 2);
  return (n + step - 1) & ~(step - 1);
}

size_t PayloadCache::class_index(size_t size) {
  // size = 2^lg * (1 + q/4), q in 0..3.
  const unsigned lg = static_cast<unsigned>(std::bit_width(size)) - 1;
  return 4 * lg + ((size >> (lg - 2)) & 3);
}

size_t PayloadCache::class_bytes(size_t index) {
  return (size_t{4} + (index & 3)) << (index / 4 - 2);
}

unsigned char* PayloadCache::take(size_t n) {
  const size_t size = class_size(n);
  Free*& head = free_[class_index(size)];
  if (head == nullptr) return static_cast<unsigned char*>(::operator new(size));
  kept_ -= size;
  return reinterpret_cast<unsigned char*>(std::exchange(head, head->next));
}

void PayloadCache::give(unsigned char* p, size_t n) {
  const size_t size = class_size(n);
  if (size > keep_) {
    ::operator delete(p);
    return;
  }
  // Room is made by freeing kept buffers of other sizes, the largest first: the size just given
  // back is the one in use now.
  const size_t index = class_index(size);
  for (size_t i = free_.size(); kept_ + size > keep_ && i-- > 0;) {
    while (i != index && free_[i] != nullptr && kept_ + size > keep_) {
      ::operator delete(std::exchange(free_[i], free_[i]->next));
      kept_ -= class_bytes(i);
    }
  }
  if (kept_ + size > keep_) {
    ::operator delete(p);
    return;
  }
  free_[index] = new (p) Free{free_[index]};
  kept_ += size;
}

}  // namespace fabq::core
