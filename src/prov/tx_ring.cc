#include "prov/tx_ring.h"

namespace fabq::prov {

TxRing::TxRing(size_t size)
    : ops_(size), free_(size), state_(size, Slot::kFree), reserved_(size, 0), room_(size) {
  // The lowest index on top: the first sends take slots 0, 1, 2...
  for (size_t i = size; i-- > 0;) free_[free_top_++] = static_cast<uint32_t>(i);
}

void TxRing::unshare() {
  if (shared_ == nullptr) return;
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (state_[i] != Slot::kFree) shared_->give();
  }
  shared_ = nullptr;
}

size_t TxRing::reserved_count() const {
  size_t held = 0;
  for (size_t i = 0; i < ops_.size(); ++i) held += state_[i] != Slot::kFree && reserved_[i];
  return held;
}

}  // namespace fabq::prov
