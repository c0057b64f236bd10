// fabq core: BoundedRing, a fixed-capacity multi-producer ring of slots.
//
// The storage under every EQ and CQ. Capacity is a power of two fixed at construction; nothing
// is allocated afterwards.
//
// Producers (any number of threads, lock-free):
//   auto pos = ring.claim();            // reserve the slot at `pos`, or nullopt when full
//   fill(ring.at(*pos));                // write the payload
//   ring.publish(*pos, tag);            // make it visible to the consumer
// Consumer (one thread at a time; callers serialize, e.g. with a SpinLock):
//   if (const Slot* s = ring.peek(ring.head() + i, &tag)) ...   // published slot i, or null
//   ring.consume(n);                                           // release n slots to producers
//
// Indices are 64-bit and never wrap in practice. The producer index (`tail_`) and the consumer
// index (`head_`) live on separate cache lines; each side keeps a cached copy of the other's
// index so the common case reads only its own line:
//   - producers compare against `cached_head_` and reload `head_` only when the ring looks full;
//   - the consumer compares against `cached_tail_` and reloads `tail_` only when it looks empty.
// A claimed slot becomes readable when its `seq` word holds ((pos + 1) << 1) | tag. Slots are
// consumed strictly in order, so one slow producer delays readers of later slots but never
// loses or reorders them.
//
// Memory ordering:
//   - claim(): CAS on tail_ is seq_cst. Wait gates rely on it: a waiter that announces itself
//     (seq_cst RMW on its gate) and then loads tail_ (seq_cst) either sees the claim or is seen
//     by the producer's later seq_cst load of the gate (see wait.h).
//   - claim() loads head_ with acquire: the consumer's reads of a slot happen before a producer
//     reuses it (consume() stores head_ with release). cached_head_ passes such a head on to
//     other producers, so it is stored with release and loaded with acquire too.
//   - publish() stores seq with release; peek() loads it with acquire: the payload written
//     before publish() is visible to the consumer that sees the seq.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace fabq::core {

inline constexpr size_t kCacheLine = 64;

// Smallest power of two >= n (and >= 1).
constexpr size_t round_up_pow2(size_t n) {
  return n <= 1 ? 1 : std::bit_ceil(n);
}

// `Slot` must be cache-line aligned and have a member `std::atomic<uint64_t> seq`
// initialised to 0.
template <class Slot>
class BoundedRing {
 public:
  // Capacity is `min_capacity` rounded up to a power of two.
  explicit BoundedRing(size_t min_capacity)
      : capacity_(round_up_pow2(min_capacity)),
        mask_(capacity_ - 1),
        slots_(new Slot[capacity_]()) {
    static_assert(alignof(Slot) >= kCacheLine, "slots must not share cache lines");
  }

  BoundedRing(const BoundedRing&) = delete;
  BoundedRing& operator=(const BoundedRing&) = delete;

  size_t capacity() const { return capacity_; }

  // Producer: reserve the next slot. Returns its position, or nullopt when the ring is full, or
  // when claiming it would leave fewer than `keep_free` slots free (room kept for others).
  std::optional<uint64_t> claim(size_t keep_free = 0) {
    const uint64_t limit = keep_free >= capacity_ ? 0 : capacity_ - keep_free;
    uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      uint64_t head = cached_head_.load(std::memory_order_acquire);
      if (pos - head >= limit) {
        head = head_.load(std::memory_order_acquire);
        // Racing producers may store an older head here; it is never newer than the real one,
        // so the worst case is one more reload.
        cached_head_.store(head, std::memory_order_release);
        if (pos - head >= limit) {
          const uint64_t now = tail_.load(std::memory_order_relaxed);
          if (now == pos) return std::nullopt;
          pos = now;  // our view of tail was stale; try again from the current one
          continue;
        }
      }
      if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
        return pos;
      }
    }
  }

  Slot& at(uint64_t pos) { return slots_[pos & mask_]; }
  const Slot& at(uint64_t pos) const { return slots_[pos & mask_]; }

  // Producer: make the slot at `pos` readable. `tag` is one bit the consumer gets back.
  void publish(uint64_t pos, bool tag) {
    at(pos).seq.store(((pos + 1) << 1) | (tag ? 1u : 0u), std::memory_order_release);
  }

  // Consumer: the published slot at `pos` (head() <= pos), or nullptr if it is not readable
  // yet. `tag` receives the bit given to publish().
  const Slot* peek(uint64_t pos, bool* tag) {
    if (pos >= cached_tail_) {
      cached_tail_ = tail_.load(std::memory_order_acquire);
      if (pos >= cached_tail_) return nullptr;
    }
    const Slot& s = at(pos);
    const uint64_t seq = s.seq.load(std::memory_order_acquire);
    if ((seq >> 1) != pos + 1) return nullptr;  // claimed, not yet published
    *tag = (seq & 1u) != 0;
    return &s;
  }

  // Consumer: the index of the oldest unconsumed slot.
  uint64_t head() const { return head_.load(std::memory_order_relaxed); }

  // Consumer: release `n` slots (all must have been peeked) back to producers.
  void consume(uint64_t n) {
    head_.store(head_.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  // Any thread: number of claimed slots not yet consumed (published or not). seq_cst so that
  // wait gates can pair it with their own seq_cst announcement.
  // Head first: the tail read after it can only be >= it, so the difference never wraps.
  uint64_t claimed() const {
    const uint64_t head = head_.load(std::memory_order_acquire);
    return tail_.load(std::memory_order_seq_cst) - head;
  }

 private:
  const size_t capacity_;
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;

  alignas(kCacheLine) std::atomic<uint64_t> tail_{0};
  std::atomic<uint64_t> cached_head_{0};
  alignas(kCacheLine) std::atomic<uint64_t> head_{0};
  uint64_t cached_tail_ = 0;
  alignas(kCacheLine) char end_[1] = {};  // keeps the next object off the consumer's line
};

}  // namespace fabq::core
