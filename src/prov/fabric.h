// fabq provider: the fabric object (fi_fabric(3)).
//
// A fabric is one IPv4 subnet (its name, e.g. "127.0.0.0/8"). It opens domains, event
// queues and wait sets, and implements fi_trywait for fabq's EQs, CQs, counters and wait sets.
// It counts its open EQs against FI_FABQ_EQ_MAX_COUNT.
//
// fi_close() on a fabric with open domains, EQs or wait sets returns -FI_EBUSY.
#pragma once

#include <rdma/fabric.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "prov/api_version.h"
#include "prov/object.h"
#include "prov/outbox.h"
#include "prov/recv_queue.h"
#include "xport/transport.h"

namespace fabq::prov {

using xport::Transport;

// What makes a fabric's transport. fi_prov_ini sets it (the TCP transport) before any fabric
// opens; a fabric reads it once, when its first endpoint needs a transport.
using TransportFactory = std::unique_ptr<Transport> (*)(const xport::TransportConfig&);
void set_transport_factory(TransportFactory factory);

class Endpoint;

class Fabric final : public Object {
 public:
  static Fabric* from_fid(const fid* f);

  Fabric(const fi_fabric_attr& attr, void* context);
  ~Fabric() override;
  fid_fabric* handle() { return &box_.fid; }
  const std::string& name() const { return name_; }
  // The API version the application asked for (fabric_attr->api_version): what fabq's answers
  // follow (prov/api_version.h).
  ApiVersion api() const { return api_; }
  bool legacy_err_data() const { return api_.legacy_err_data(); }

  // EQ accounting against the per-fabric limit: false when the limit is reached.
  bool acquire_eq_slot();
  void release_eq_slot() { eqs_.fetch_sub(1, std::memory_order_relaxed); }

  // The transport that moves this fabric's bytes (xport/transport.h): created by the first
  // endpoint or passive endpoint, destroyed with the fabric. Takes transport_mu_ while it has
  // none yet; any caller (an endpoint's lock may be held).
  Transport* transport() FABQ_EXCLUDES(transport_mu_);
  // Null until then; what queue reads look at to drive progress. Acquire pairs with the
  // release in transport().
  Transport* transport_if_any() const { return transport_.load(std::memory_order_acquire); }

  // The asynchronous events its objects' code queued where raise() may not be called
  // (prov/outbox.h). Published after each round of its transport, and by the provider after a
  // downcall that may have queued some.
  Outbox& outbox() { return outbox_; }

  // Room that an endpoint's own posts do not make. A message that waits for a slot of its
  // endpoint's receive CQ, or for the fabric's unexpected-message budget, waits for room: its
  // endpoint registers here (wait_for_room(), under its lock, then asks the CQ or the budget to
  // tell it: core::CompletionQueue::await_room(), UnexpectedBudget::await()), and whatever
  // gives room back calls room_given(). The endpoints are resumed (their stalled connections go
  // on) by resume_room_waiters() at the next point that holds no lock: after a progress round,
  // after a CQ read. Each registration is resumed once; one that finds no room yet registers
  // again. So nothing retries in a loop while it waits, and no room is missed.
  //
  // wait_for_room(), forget_room(): from any thread, under the endpoint's lock (room_mu_ is a
  // leaf). room_given(): any thread, under any lock (an atomic and Transport::wake()).
  // resume_room_waiters(): holding no lock of the provider's or the transport's.
  void wait_for_room(Endpoint* ep) FABQ_EXCLUDES(room_mu_);
  // The endpoint is closing: not resumed from here once this returns, or the resume that took
  // it holds it (Endpoint::borrow()) until it is done.
  void forget_room(Endpoint* ep) FABQ_EXCLUDES(room_mu_);
  void room_given();
  void resume_room_waiters() FABQ_EXCLUDES(room_mu_) {
    if (room_given_.load(std::memory_order_acquire)) [[unlikely]]
      resume_room_waiters_slow();
  }
  // The unexpected messages every receive queue of the fabric buffers, together
  // (FI_FABQ_UNEXPECTED_TOTAL_BYTES).
  UnexpectedBudget* unexpected_budget() { return &budget_; }

 private:
  void resume_room_waiters_slow() FABQ_EXCLUDES(room_mu_);

  static int close(fid* f);

  FidBox<fid_fabric> box_;
  std::string name_;
  const ApiVersion api_;
  std::atomic<size_t> eqs_{0};
  // Outlives the transport, which ~Fabric's body destroys, and with it the progress thread
  // that publishes this after its rounds.
  Outbox outbox_;
  core::Mutex room_mu_;  // a leaf
  std::vector<Endpoint*> room_waiters_ FABQ_GUARDED_BY(room_mu_);
  std::atomic<bool> room_given_{false};
  UnexpectedBudget budget_;
  // One transport is made: held while it is. Taken under an endpoint's lock (a first
  // connection); inside it only the transport's constructor runs (docs/locking.md).
  core::Mutex transport_mu_;
  // Written once, under transport_mu_ (release); read without it (acquire).
  std::atomic<Transport*> transport_{nullptr};
};

// Drives the fabric's transport, if it has one: what every queue read does first.
void progress(Fabric* fabric);

// A thread blocks on a queue of `fabric` for the life of this object: the transport keeps
// moving bytes meanwhile (xport/transport.h).
class BlockingScope {
 public:
  explicit BlockingScope(Fabric* fabric);
  ~BlockingScope();
  BlockingScope(const BlockingScope&) = delete;
  BlockingScope& operator=(const BlockingScope&) = delete;

 private:
  Transport* transport_;
};

// fi_trywait left an application waiting on a queue's fd or condition: the transport keeps
// moving bytes until the application reads that queue again.
class ExternalWait {
 public:
  ~ExternalWait();
  void arm(Fabric* fabric);
  void disarm();

 private:
  std::atomic<Transport*> armed_{nullptr};
};

// fi_provider::fabric.
int open_fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);

}  // namespace fabq::prov
