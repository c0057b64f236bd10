#include "prov/outbox.h"

#include "prov/domain.h"
#include "prov/events.h"

namespace fabq::prov {

Outbox::Outbox() {
  // Both, since they swap: the first batches allocate nothing either.
  entries_.reserve(kRoom);
  spare_.reserve(kRoom);
}

void Outbox::add(const Domain* domain, const AsyncTarget* target, uint32_t type) {
  if (domain == nullptr || target == nullptr) return;
  core::MutexLock lock(mu_);
  entries_.push_back({domain->id(), target->serial(), type});
  any_.store(true, std::memory_order_relaxed);
}

void Outbox::add_all(const Domain* domain, const AsyncTarget* target,
                     const std::vector<uint32_t>& types) {
  if (domain == nullptr || target == nullptr) return;
  core::MutexLock lock(mu_);
  for (uint32_t type : types) entries_.push_back({domain->id(), target->serial(), type});
  any_.store(true, std::memory_order_relaxed);
}

bool Outbox::take(std::vector<Entry>* batch, bool publisher) {
  core::MutexLock lock(mu_);
  if (publisher) {
    spare_.swap(*batch);
  } else if (publishing_) {
    return false;  // the publisher finds what this thread added before it stops
  }
  if (entries_.empty()) {
    // Stopping and finding nothing left are one step under mu_: an entry added after this finds
    // no publisher, and the publish() after its add() takes it.
    publishing_ = false;
    any_.store(false, std::memory_order_relaxed);
    return false;
  }
  publishing_ = true;
  batch->swap(entries_);
  entries_.swap(spare_);
  return true;
}

void Outbox::publish() {
  if (!any_.load(std::memory_order_relaxed)) [[likely]]
    return;
  std::vector<Entry> batch;
  for (bool publisher = false; take(&batch, publisher); publisher = true) {
    for (const Entry& e : batch) Registry::get().raise_on(e.domain_id, e.serial, e.type);
    batch.clear();
  }
}

}  // namespace fabq::prov
