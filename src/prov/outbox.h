// fabq provider: Outbox, the asynchronous events one fabric's code caused where it could not
// raise them.
//
// prov/events.h raise() takes the registry's lock and a domain's, which come before the
// transport's and the endpoints' (docs/locking.md). So an upcall (the transport calling an
// endpoint, under the connection's lock and, from a progress round, the engine's), or code that
// holds an endpoint's or an SRX's lock, adds the events it caused to its fabric's outbox, and
// publish() raises them once no such lock is held:
//   - by the transport after each progress round (TransportConfig::after_round, which
//     Fabric::transport() points at its fabric's outbox);
//   - by the provider after a downcall that may have added some (a send, a posted receive).
//
// Entries are addresses, not pointers: (domain id, target serial, type), resolved through the
// registry when published (Registry::raise_on), so the entries of a domain or an object closed
// meanwhile are dropped, and an outbox never refers to freed memory.
//
// Order: one outbox's entries are raised in the order they were added, by one publisher at a
// time. A publish() that finds another thread publishing returns at once and leaves its entries
// to that one, which drains the outbox until it finds it empty. Whether it is empty and whether
// a thread publishes are decided together under the outbox's lock, so an entry added while the
// publisher gives up is either taken by it or finds no publisher, and then the publish() that
// follows its add() (the adder's, or the transport's after the round) takes it.
//
// Cost: publish() on an empty outbox is one atomic load. add() and publish() allocate nothing
// once the outbox's two buffers have grown to the largest batch: they swap, keeping capacity.
//
// Threads and locks: add() from any thread, under any lock (the outbox's own is a leaf).
// publish() from any thread holding no provider lock (registry, domain, endpoint, SRX, passive
// endpoint) and none of the transport's, as raise() requires.
//
// Lifetime: owned by its fabric, destroyed after the fabric's transport (whose progress thread
// publishes it); entries still queued then are dropped with it (their domains are closed: a
// fabric closes after its domains).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/mutex.h"

namespace fabq::prov {

class AsyncTarget;
class Domain;

class Outbox {
 public:
  Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Queues `type` on `target` of `domain`; a null domain or target: nothing. The events of one
  // call are queued in order.
  void add(const Domain* domain, const AsyncTarget* target, uint32_t type) FABQ_EXCLUDES(mu_);
  void add(const Domain* domain, const AsyncTarget* target, const std::vector<uint32_t>& types)
      FABQ_EXCLUDES(mu_) {
    if (!types.empty()) add_all(domain, target, types);  // inline: the usual list is empty
  }

  // Raises every queued event, in order, on the objects that are still open, and returns once
  // it finds the outbox empty. When another thread is publishing it, or has taken every entry
  // to raise, returns at once: that thread raises them.
  void publish() FABQ_EXCLUDES(mu_);

 private:
  void add_all(const Domain* domain, const AsyncTarget* target, const std::vector<uint32_t>& types)
      FABQ_EXCLUDES(mu_);

  struct Entry {
    uint64_t domain_id;
    uint64_t serial;
    uint32_t type;
  };
  static constexpr size_t kRoom = 16;

  // Moves the queued entries into *batch, gives entries_ the spare's capacity and makes the
  // caller the publisher: true. False, taking nothing, when another thread publishes, or when
  // nothing is queued (the caller then stops publishing, if it was). `publisher`: the caller is
  // the publisher, and *batch (raised and emptied) returns to be the spare.
  bool take(std::vector<Entry>* batch, bool publisher) FABQ_EXCLUDES(mu_);

  core::Mutex mu_;  // a leaf: nothing is called while it is held
  std::vector<Entry> entries_ FABQ_GUARDED_BY(mu_);
  std::vector<Entry> spare_ FABQ_GUARDED_BY(mu_);  // empty; its capacity goes to entries_ next
  bool publishing_ FABQ_GUARDED_BY(mu_) = false;   // a thread is raising a batch
  // entries_ is not empty: spares publish() the lock when it is. Stored under mu_, read without
  // it. Relaxed: it orders nothing (the entries are read under mu_); a thread that added an entry
  // reads its own store, or a later one made under mu_ by a publisher that had taken the entry.
  std::atomic<bool> any_{false};
};

}  // namespace fabq::prov
