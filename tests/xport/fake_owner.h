// Test support for tests/xport: a fake endpoint (xport::Owner) and a fake passive endpoint
// (xport::PassiveOwner) that stand in for the provider on the other side of the transport seam
// (xport/transport.h). They record every upcall, in order, under their own mutex (upcalls come
// from whichever thread moves the bytes: the test's, in Transport::progress(), or the progress
// thread), place arriving messages into buffers of their own through Placement's iovecs, and
// can be told to refuse a placement (no receive posted), to delay the delivery acknowledgement,
// to truncate, to refuse a request. They never call down from an upcall.
//
// Whatever the transport does against the seam's contract that a single assertion in a test
// would not see (placed() for a message never placed, a record clobbered, bytes written past a
// placement's capacity, an acknowledgement of no send, tx_written() of an op not written
// whole), they note in problems(), which the tests check at the end.
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "xport/transport.h"

namespace fabq::xport::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long any wait of a test may last before it fails.
inline constexpr milliseconds kTimeout{5000};

// Calls `round` (a progress round, or nothing when the progress thread moves the bytes) until
// `done()` holds; false after `timeout`. Never hangs.
template <class Round, class Pred>
bool eventually(Round&& round, Pred&& done, milliseconds timeout = kTimeout) {
  const auto end = Clock::now() + timeout;
  for (;;) {
    round();
    if (done()) return true;
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

// A connection-management event as the owner saw it (its data copied).
struct CmRecord {
  uint32_t event = 0;
  int err = 0;
  std::string data;
};

// A message that arrived whole: its header as placed() saw it, and the bytes that landed in the
// placement (at most its capacity).
struct Received {
  Incoming in;
  std::string bytes;
};

struct AckRecord {
  const Connection* conn = nullptr;
  uint32_t seq = 0;
  bool delivered = false;
};

struct AbortRecord {
  Connection* conn = nullptr;
  int err = 0;
};

class FakeOwner final : public Owner {
 public:
  // What the owner keeps in a Placement's record: the transport must hand it back untouched.
  struct Record {
    uint64_t magic;
    uint64_t id;
  };
  static constexpr uint64_t kRecordMagic = 0x6661627172656331;  // "fabqrec1"
  // Bytes past a placement's capacity that the transport must never write.
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xA5;

  FakeOwner() = default;
  FakeOwner(const FakeOwner&) = delete;
  FakeOwner& operator=(const FakeOwner&) = delete;
  ~FakeOwner() = default;

  // --- What the owner answers.

  // place(): false while not accepting (no receive posted).
  void set_accepting(bool on) {
    std::lock_guard lock(mu_);
    accepting_ = on;
  }
  // take_retry() after a refused place().
  void set_take_retry(bool on) {
    std::lock_guard lock(mu_);
    take_retry_ = on;
  }
  // Placements hold at most this many bytes (a receive buffer smaller than the message).
  void set_capacity(size_t max) {
    std::lock_guard lock(mu_);
    capacity_ = max;
  }
  // placed(): whether the delivery acknowledgement goes now.
  void set_deliver_now(bool on) {
    std::lock_guard lock(mu_);
    deliver_now_ = on;
  }
  void set_can_free(bool on) {
    std::lock_guard lock(mu_);
    can_free_ = on;
  }
  // route(): receive context i of this listener's owner is routes[i] (null or past the end:
  // refused), as a scalable endpoint routes to its receive contexts. Unset: the default, rx 0
  // to this owner.
  void set_routes(std::vector<Owner*> routes) {
    std::lock_guard lock(mu_);
    routes_ = std::move(routes);
    routed_ = true;
  }

  // One-sided requests from the peer reach this region only (key, first byte, length), at
  // offsets: remote_access() and writes are checked against it as an endpoint checks its regions.
  void set_region(uint64_t key, unsigned char* base, size_t len) {
    std::lock_guard lock(mu_);
    region_ = {key, base, len};
  }
  // Answers to this side's one-sided ops, in order: (seq, status).
  std::vector<std::pair<uint32_t, RmaStatus>> answers() const {
    std::lock_guard lock(mu_);
    return answers_;
  }

  // Submits `op` to `c`, first noting the acknowledgement it waits for (if any): tx_acked()
  // takes exactly the acknowledgements of sends submitted and not yet acknowledged.
  int submit(Connection* c, TxOp* op) {
    op->conn = c;
    if (op->kind != TxKind::kSend) {
      {
        std::lock_guard lock(mu_);
        one_sided_[{c, op->seq}] = op;
      }
      return c->submit(op);  // upcalls may come from inside it
    }
    const bool acked = op->level != TxLevel::kInject;
    if (acked) {
      std::lock_guard lock(mu_);
      awaiting_[{c, op->seq}] = op->level;
    }
    const int rc = c->submit(op);
    if (rc != 0 && acked) {
      std::lock_guard lock(mu_);
      awaiting_.erase({c, op->seq});
    }
    return rc;
  }

  // --- What happened (copies, taken under the lock).

  std::vector<CmRecord> cm_events() const {
    std::lock_guard lock(mu_);
    return cm_;
  }
  size_t cm_count() const {
    std::lock_guard lock(mu_);
    return cm_.size();
  }
  bool has_cm(uint32_t event, int err = 0) const {
    std::lock_guard lock(mu_);
    return std::any_of(cm_.begin(), cm_.end(),
                       [&](const CmRecord& r) { return r.event == event && r.err == err; });
  }
  std::vector<uint32_t> async_events() const {
    std::lock_guard lock(mu_);
    return async_;
  }
  bool has_async(uint32_t type) const {
    std::lock_guard lock(mu_);
    return std::find(async_.begin(), async_.end(), type) != async_.end();
  }
  std::vector<Received> received() const {
    std::lock_guard lock(mu_);
    return received_;
  }
  size_t received_count() const {
    std::lock_guard lock(mu_);
    return received_.size();
  }
  std::vector<const TxOp*> written() const {
    std::lock_guard lock(mu_);
    return written_;
  }
  size_t written_count() const {
    std::lock_guard lock(mu_);
    return written_.size();
  }
  std::vector<AckRecord> acks() const {
    std::lock_guard lock(mu_);
    return acks_;
  }
  size_t ack_count() const {
    std::lock_guard lock(mu_);
    return acks_.size();
  }
  std::vector<AbortRecord> aborts() const {
    std::lock_guard lock(mu_);
    return aborts_;
  }
  size_t abort_count() const {
    std::lock_guard lock(mu_);
    return aborts_.size();
  }
  int ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }
  size_t refused_places() const {
    std::lock_guard lock(mu_);
    return refused_;
  }
  // Pieces of answers placed (wire.h): all but whole ones.
  size_t answer_pieces() const {
    std::lock_guard lock(mu_);
    return pieces_;
  }
  size_t unplaced() const {
    std::lock_guard lock(mu_);
    return unplaced_;
  }
  size_t retries_asked() const {
    std::lock_guard lock(mu_);
    return retries_asked_;
  }
  // inbound_ready() calls: the connection and the name its peer announced.
  std::vector<std::pair<Connection*, sockaddr_in>> inbound() const {
    std::lock_guard lock(mu_);
    return inbound_;
  }
  std::vector<const Connection*> can_free_calls() const {
    std::lock_guard lock(mu_);
    return can_free_calls_;
  }
  // Every upcall, in order, in a word or two ("cm FI_CONNECTED", "placed 3", "ended", ...).
  std::vector<std::string> journal() const {
    std::lock_guard lock(mu_);
    return journal_;
  }
  // Breaches of the seam's contract noticed inside upcalls; empty when all is well.
  std::vector<std::string> problems() const {
    std::lock_guard lock(mu_);
    return problems_;
  }

  // --- Owner.

  bool place(const Incoming& in, Placement* p) override {
    std::lock_guard lock(mu_);
    if (in.kind == InKind::kWrite) {
      const size_t prefix = in.has_data ? 8 : 0;
      p->as<Record>() = {kRecordMagic, 0};
      p->iov_count = 0;
      p->capacity = 0;
      p->status = check_locked(in.key, in.addr, in.len - prefix);
      if (p->status == RmaStatus::kOk) {
        p->iov[p->iov_count++] = {region_.base + in.addr, in.len - prefix};
        p->capacity = in.len - prefix;
      }
      journal_.push_back("write " + std::to_string(in.seq));
      return true;
    }
    if (in.kind != InKind::kMsg) {
      // A whole answer, or a piece of one (wire.h): its bytes inside the result, the last
      // ending at its end; a refusal or a direct answer carries none.
      auto it = one_sided_.find({in.via, in.seq});
      const bool empty = in.status != RmaStatus::kOk || in.direct;
      const size_t want = it == one_sided_.end() ? 0 : it->second->result_len;
      const bool fits = empty ? in.len == 0 && !in.more
                              : in.offset <= want && in.len <= want - in.offset &&
                                    (in.more || in.offset + in.len == want);
      if (it == one_sided_.end() || !fits || in.direct != it->second->direct) {
        p->bad = true;
        return true;
      }
      TxOp* op = it->second;
      for (size_t i = 0; i < op->result_count; ++i) p->iov[i] = op->result[i];
      p->iov_count = op->result_count;
      p->capacity = in.offset + in.len;
      p->as<Record>() = {kRecordMagic, 0};
      if (in.more || in.offset != 0) ++pieces_;
      return true;
    }
    if (!accepting_) {
      ++refused_;
      journal_.push_back("refused " + std::to_string(in.seq));
      return false;
    }
    const uint64_t id = next_id_++;
    auto slot = std::make_unique<Slot>();
    slot->in = in;
    slot->capacity = std::min(in.len, capacity_);
    slot->buf.assign(slot->capacity + kGuard, kGuardByte);
    // Several iovecs of uneven sizes (1, 3, half of the rest, the rest): a byte put in the
    // wrong one shows.
    size_t off = 0;
    p->iov_count = 0;
    for (size_t want : {size_t{1}, size_t{3}, slot->capacity / 2, SIZE_MAX}) {
      const size_t n = std::min(want, slot->capacity - off);
      if (n == 0) continue;
      p->iov[p->iov_count++] = {slot->buf.data() + off, n};
      off += n;
      if (off == slot->capacity) break;
    }
    p->capacity = slot->capacity;
    p->as<Record>() = {kRecordMagic, id};
    slot->iov_count = p->iov_count;
    in_flight_[id] = std::move(slot);
    journal_.push_back("place " + std::to_string(in.seq));
    return true;
  }

  bool placed(const Incoming& in, Placement* p) override {
    std::lock_guard lock(mu_);
    if (in.kind == InKind::kWrite) {
      journal_.push_back("wrote " + std::to_string(in.seq));
      return false;
    }
    if (in.kind != InKind::kMsg) {
      if (in.more) return false;  // the answer goes on
      one_sided_.erase({in.via, in.seq});
      answers_.emplace_back(in.seq, in.status);
      journal_.push_back("answer " + std::to_string(in.seq));
      return false;
    }
    const Record r = p->as<Record>();
    auto it = in_flight_.find(r.id);
    if (r.magic != kRecordMagic || it == in_flight_.end()) {
      problems_.push_back("placed() with a record place() did not write");
      return false;
    }
    std::unique_ptr<Slot> slot = std::move(it->second);
    in_flight_.erase(it);
    if (in.seq != slot->in.seq || in.len != slot->in.len || in.tag != slot->in.tag) {
      problems_.push_back("placed() names another message than place() did");
    }
    if (p->capacity != slot->capacity || p->iov_count != slot->iov_count) {
      problems_.push_back("the placement changed between place() and placed()");
    }
    for (size_t i = 0; i < kGuard; ++i) {
      if (slot->buf[slot->capacity + i] != kGuardByte) {
        problems_.push_back("bytes written past the placement's capacity, message seq " +
                            std::to_string(in.seq));
        break;
      }
    }
    received_.push_back(
        {in, std::string(reinterpret_cast<const char*>(slot->buf.data()), slot->capacity)});
    journal_.push_back("placed " + std::to_string(in.seq));
    return deliver_now_;
  }

  void unplace(Placement* p) override {
    std::lock_guard lock(mu_);
    const Record r = p->as<Record>();
    if (r.magic != kRecordMagic || in_flight_.erase(r.id) != 1) {
      problems_.push_back("unplace() of a placement place() did not make");
    }
    ++unplaced_;
    journal_.push_back("unplace");
  }

  RmaStatus remote_access(const RemoteAccess& a, void* out) override {
    std::lock_guard lock(mu_);
    journal_.push_back(a.atomic   ? "atomic"
                       : a.direct ? (a.write ? "direct write" : "direct read")
                                  : "read");
    const RmaStatus s = check_locked(a.key, a.addr, a.len);
    if (s != RmaStatus::kOk || a.part == AccessPart::kCheck) return s;
    if (a.direct != nullptr) {
      if (!a.direct->copy(region_.base + a.addr)) return RmaStatus::kCopyFailed;
    } else if (!a.atomic) {
      std::memcpy(out, region_.base + a.addr, a.len);
    } else if (!core::atomic_valid(a.kind, a.op, a.datatype)) {
      return RmaStatus::kBadAtomic;
    } else {
      core::atomic_apply(a.kind, a.op, a.datatype, region_.base + a.addr, a.operand, a.compare, out,
                         a.count);
    }
    return RmaStatus::kOk;
  }

  bool rma_acked(const Connection* c, uint32_t seq, RmaStatus status) override {
    std::lock_guard lock(mu_);
    journal_.push_back("rma-acked " + std::to_string(seq));
    auto it = one_sided_.find({c, seq});
    if (it == one_sided_.end() || it->second->kind != TxKind::kWrite) return false;
    one_sided_.erase(it);
    answers_.emplace_back(seq, status);
    return true;
  }

  bool holds(const Connection*) override { return false; }

  bool take_retry() override {
    std::lock_guard lock(mu_);
    ++retries_asked_;
    return take_retry_;
  }

  void tx_written(TxOp* op) override {
    std::lock_guard lock(mu_);
    if (!op->accepted || op->written != sizeof(op->header) + op->len) {
      problems_.push_back("tx_written() of an op not written whole, seq " +
                          std::to_string(op->seq));
    }
    written_.push_back(op);
    journal_.push_back("written " + std::to_string(op->seq));
    // A direct send is acknowledged whatever its level (Owner::tx_written): at least received.
    if (op->kind == TxKind::kSend && op->direct && op->level == TxLevel::kInject) {
      awaiting_[{op->conn, op->seq}] = TxLevel::kTransmit;
    }
  }

  void inbound_ready(Connection* c, const sockaddr_in& name) override {
    std::lock_guard lock(mu_);
    if (!c->connected()) problems_.push_back("inbound_ready() of a connection not up");
    inbound_.emplace_back(c, name);
  }

  void tx_lost(TxOp* op, int err) override {
    std::lock_guard lock(mu_);
    journal_.push_back("lost " + std::to_string(op->seq) + " " + std::to_string(err));
  }

  bool tx_acked(const Connection* c, uint32_t seq, bool delivered) override {
    std::lock_guard lock(mu_);
    journal_.push_back(std::string(delivered ? "acked-delivered " : "acked-received ") +
                       std::to_string(seq));
    auto it = awaiting_.find({c, seq});
    const TxLevel want = delivered ? TxLevel::kDelivery : TxLevel::kTransmit;
    if (it == awaiting_.end() || it->second != want) return false;  // names no send awaiting it
    awaiting_.erase(it);
    acks_.push_back({c, seq, delivered});
    return true;
  }

  void abort_sends(Connection* c, int err) override {
    std::lock_guard lock(mu_);
    aborts_.push_back({c, err});
    std::erase_if(awaiting_, [c](const auto& kv) { return kv.first.first == c; });
    journal_.push_back("abort " + std::to_string(err));
  }

  void cm_event(const CmEvent& e) override {
    std::lock_guard lock(mu_);
    if (e.len > 0 && e.data == nullptr) problems_.push_back("cm_event with len and no data");
    cm_.push_back(
        {e.event, e.err, e.len > 0 ? std::string(static_cast<const char*>(e.data), e.len) : ""});
    journal_.push_back("cm " + std::to_string(e.event) + " " + std::to_string(e.err));
  }

  void connection_ended() override {
    std::lock_guard lock(mu_);
    ++ended_;
    journal_.push_back("ended");
  }

  void async_event(uint32_t type) override {
    std::lock_guard lock(mu_);
    async_.push_back(type);
    journal_.push_back("async " + std::to_string(type));
  }

  core::NetFault take_net_fault() override { return core::NetFault::kNone; }

  bool can_free(const Connection* c) override {
    std::lock_guard lock(mu_);
    can_free_calls_.push_back(c);
    return can_free_;
  }

  Owner* route(uint32_t rx) override {
    std::lock_guard lock(mu_);
    if (!routed_) return rx == 0 ? this : nullptr;
    return rx < routes_.size() ? routes_[rx] : nullptr;
  }

 private:
  struct Slot {
    Incoming in;
    size_t capacity = 0;
    size_t iov_count = 0;
    std::vector<unsigned char> buf;  // capacity bytes, then the guard
  };

  RmaStatus check_locked(uint64_t key, uint64_t addr, size_t len) const {
    if (region_.base == nullptr || key != region_.key) return RmaStatus::kBadKey;
    if (addr > region_.len || len > region_.len - addr) return RmaStatus::kOutOfBounds;
    return RmaStatus::kOk;
  }
  struct Region {
    uint64_t key = 0;
    unsigned char* base = nullptr;
    size_t len = 0;
  };

  mutable std::mutex mu_;
  Region region_;
  std::map<std::pair<const Connection*, uint32_t>, TxOp*> one_sided_;
  std::vector<std::pair<uint32_t, RmaStatus>> answers_;
  bool accepting_ = true;
  bool take_retry_ = false;
  size_t capacity_ = SIZE_MAX;
  bool deliver_now_ = true;
  bool can_free_ = true;
  std::vector<Owner*> routes_;
  bool routed_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Slot>> in_flight_;
  std::map<std::pair<const Connection*, uint32_t>, TxLevel> awaiting_;
  std::vector<CmRecord> cm_;
  std::vector<uint32_t> async_;
  std::vector<Received> received_;
  std::vector<const TxOp*> written_;
  std::vector<AckRecord> acks_;
  std::vector<AbortRecord> aborts_;
  std::vector<const Connection*> can_free_calls_;
  std::vector<std::pair<Connection*, sockaddr_in>> inbound_;
  int ended_ = 0;
  size_t refused_ = 0;
  size_t unplaced_ = 0;
  size_t pieces_ = 0;  // pieces of answers placed (not whole answers)
  size_t retries_asked_ = 0;
  std::vector<std::string> journal_;
  std::vector<std::string> problems_;
};

// A connection request as the passive owner saw it.
struct Request {
  Connection* pending = nullptr;
  sockaddr_in peer{};
  std::string data;
};

class FakePassiveOwner final : public PassiveOwner {
 public:
  FakePassiveOwner() = default;
  FakePassiveOwner(const FakePassiveOwner&) = delete;
  FakePassiveOwner& operator=(const FakePassiveOwner&) = delete;
  ~FakePassiveOwner() = default;

  // request(): false while not accepting (the request cannot be queued).
  void set_accepting(bool on) {
    std::lock_guard lock(mu_);
    accepting_ = on;
  }
  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  size_t request_count() const {
    std::lock_guard lock(mu_);
    return requests_.size();
  }

  bool request(Connection* pending, const sockaddr_in& peer, const void* data,
               size_t len) override {
    std::lock_guard lock(mu_);
    requests_.push_back(
        {pending, peer, len > 0 ? std::string(static_cast<const char*>(data), len) : ""});
    return accepting_;
  }

 private:
  mutable std::mutex mu_;
  bool accepting_ = true;
  std::vector<Request> requests_;
};

}  // namespace fabq::xport::testing
