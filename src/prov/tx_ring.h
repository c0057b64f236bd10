// fabq provider: an endpoint's transmit ring: the slots its sends live in from post to
// completion (fi_endpoint(3) tx_attr.size), which of them are free, and the sequence number
// that names each send in the peer's acknowledgements.
//
// A slot is free, submitted (a post took it; the transport may hold its op from submit() on),
// or written (written whole to the kernel, awaiting the acknowledgement its completion level
// asks for). A send's sequence number is a generation counter above its slot's index, so an
// acknowledgement for a send whose slot was freed and taken again names no send.
//
// Memory: every slot is allocated when the ring is made; taking and freeing one allocates
// nothing. An op's address stays the same for the ring's life (the transport keeps it). A slot
// whose send copies more than its op holds (inject_room()) gets kInjectSize bytes of its own the
// first time, and keeps them for the ring's life. A freed slot is the next one taken, so a ring
// holds at most as many of those as the most sends it ever had in flight.
//
// Thread safety: none; the endpoint's lock guards it (TxCredits, shared between endpoints, is
// atomic).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "xport/transport.h"

namespace fabq::prov {

using xport::TxOp;

// The transmit slots of a shared transmit context (fi_stx_context): every endpoint bound to it
// takes one for each send it posts, besides a slot of its own ring, and gives it back when the
// send is freed. Any thread: a CAS loop on one atomic. Acquire on take pairs with the release on
// give, so a slot's previous user is done with it before its next one starts.
class TxCredits {
 public:
  explicit TxCredits(size_t n) : free_(n) {}
  TxCredits(const TxCredits&) = delete;
  TxCredits& operator=(const TxCredits&) = delete;
  // false when none is free.
  bool take() {
    size_t f = free_.load(std::memory_order_relaxed);
    do {
      if (f == 0) return false;
    } while (!free_.compare_exchange_weak(f, f - 1, std::memory_order_acquire,
                                          std::memory_order_relaxed));
    return true;
  }
  void give() { free_.fetch_add(1, std::memory_order_release); }
  size_t free_count() const { return free_.load(std::memory_order_relaxed); }

 private:
  std::atomic<size_t> free_;
};

class TxRing {
 public:
  enum class Slot : uint8_t {
    kFree,
    kSubmitted,  // taken by a post
    kWritten,    // written whole: awaits the peer's acknowledgement
  };

  // `size` slots (at most 1 << kIndexBits), all free.
  explicit TxRing(size_t size);
  TxRing(const TxRing&) = delete;
  TxRing& operator=(const TxRing&) = delete;
  ~TxRing() { unshare(); }

  // From now on every slot taken also takes one of `shared` (a shared transmit context's),
  // which must outlive the ring, or unshare(). Before the first take.
  void share(TxCredits* shared) { shared_ = shared; }
  // Gives the shared context back the slots still taken, and draws on it no more.
  void unshare();

  size_t size() const { return ops_.size(); }
  // Free slots (fi_tx_size_left): the ring's, or the shared context's if it has fewer.
  size_t free_count() const {
    return shared_ != nullptr ? std::min(free_top_, shared_->free_count()) : free_top_;
  }

  // Takes a free slot and returns its op, reset but for its new sequence number; the slot is
  // submitted. Null when the ring, or the shared context it draws on, has none free.
  // `reserved`: the send holds a transmit CQ slot.
  TxOp* take(bool reserved) {
    if (free_top_ == 0 || (shared_ != nullptr && !shared_->take())) return nullptr;
    const uint32_t index = free_[--free_top_];
    TxOp* op = &ops_[index];
    *op = TxOp{};
    op->seq = (gen_++ << kIndexBits) | index;
    state_[index] = Slot::kSubmitted;
    reserved_[index] = reserved;
    return op;
  }
  // Frees `op`'s slot.
  void release(TxOp* op) {
    const uint32_t index = index_of(op);
    state_[index] = Slot::kFree;
    reserved_[index] = 0;
    free_[free_top_++] = index;
    if (shared_ != nullptr) shared_->give();
  }
  // Where `op` keeps n copied bytes (n <= xport::kInjectSize) until its slot is freed: its own
  // inject[] when they fit, else the slot's storage. Null when that cannot be allocated.
  unsigned char* inject_room(TxOp* op, size_t n) {
    if (n <= sizeof(op->inject)) return op->inject;
    auto& room = room_[index_of(op)];
    if (room == nullptr) room.reset(new (std::nothrow) unsigned char[xport::kInjectSize]);
    return room.get();
  }
  // `op` is written whole and awaits an acknowledgement.
  void mark_written(TxOp* op) { state_[index_of(op)] = Slot::kWritten; }
  // Whether `op`'s send holds a slot of the transmit CQ.
  bool reserved(const TxOp* op) const { return reserved_[index_of(op)] != 0; }

  // The written op whose sequence number is `seq`; null when `seq` names none (no such slot,
  // not written, or taken again since).
  TxOp* find_written(uint32_t seq) {
    const uint32_t index = seq & ((1u << kIndexBits) - 1);
    if (index >= ops_.size() || state_[index] != Slot::kWritten || ops_[index].seq != seq) {
      return nullptr;
    }
    return &ops_[index];
  }

  // The op in slot `index` (< size()) if the slot is not free, else null: a loop over every
  // index visits each taken op once, and may release the op it is given.
  TxOp* taken(size_t index) { return state_[index] != Slot::kFree ? &ops_[index] : nullptr; }
  // Slots not free that hold a transmit CQ slot: what a closing endpoint gives back to the CQ.
  size_t reserved_count() const;

 private:
  static constexpr uint32_t kIndexBits = 16;
  uint32_t index_of(const TxOp* op) const { return static_cast<uint32_t>(op - ops_.data()); }

  std::vector<TxOp> ops_;
  std::vector<uint32_t> free_;     // the free slots' indices: a stack, free_[0, free_top_)
  size_t free_top_ = 0;            // its height
  std::vector<Slot> state_;        // per slot
  std::vector<uint8_t> reserved_;  // per slot: holds a transmit CQ slot
  std::vector<std::unique_ptr<unsigned char[]>> room_;  // per slot: inject_room() beyond inject[]
  uint32_t gen_ = 0;                                    // the next sequence number's generation
  TxCredits* shared_ = nullptr;  // a shared transmit context's slots, if bound
};

}  // namespace fabq::prov
