// fabq provider: the receive side of an endpoint or shared receive context: posted receives
// and the messages that arrived before a receive for them (fi_msg(3), fi_tagged(3)).
//
// Matching: an untagged message takes the oldest posted untagged receive; a tagged message
// the oldest tagged receive whose tag equals the message's in every bit its ignore mask leaves
// out. A receive directed at one sender (FI_DIRECTED_RECV) matches only that sender's messages;
// the others take any sender's. A receive posted while an earlier unexpected message matches
// takes that message: the oldest first, so messages complete in the order they were sent
// (FI_ORDER_SAS), per sender.
//
// A multi-receive buffer (FI_MULTI_RECV, untagged) stays posted while messages are packed into
// it: each message that picks it takes the next slice of the buffer, a PostedRecv of its own
// whose completion names the slice (`buf`), and the buffer leaves the queue once less than its
// minimum (FI_OPT_MIN_MULTI_RECV) remains, or a message was longer than what remained (that
// message is truncated). Slices are filled asynchronously, from several connections at once:
// the buffer's release (the FI_MULTI_RECV completion flag) goes on whichever completion of it
// comes last after it left the queue.
//
// Unexpected messages are buffered up to three bounds: the queue's bytes and count
// (FI_FABQ_UNEXPECTED_BYTES, 4 x its size), each sending connection's share
// (FI_FABQ_UNEXPECTED_PEER_BYTES for an RDM endpoint's or an SRX's: one peer cannot take all
// of the queue; an MSG endpoint's one peer may) and the fabric's
// budget for all its queues together (FI_FABQ_UNEXPECTED_TOTAL_BYTES, UnexpectedBudget). The
// share and the budget count each message's payload and its bookkeeping (kEntryBytes), so that
// empty messages cost too. Past a bound, the connection stalls (the transport stops reading,
// and TCP makes the sender wait) until receives are posted, or, for the budget, until another
// queue's messages are taken. Nothing is dropped.
//
// A buffered message names the connection it came through (Incoming::via), for its delivery
// acknowledgement and its sender's share, until that connection closes and is freed: then it
// forgets it (forget()), so that a message nobody takes never holds its connection, nor that
// connection's socket.
//
// Memory: the entries and the payloads of up to kPooledPayload bytes come from a pool the queue
// owns. A consumed message's memory returns to the pool, not to the heap, so once the queue has
// held its peak number of messages, buffering as many again allocates nothing. The pool grows in
// chunks of at most kChunkBlocks entries or payloads and keeps what it grew to until the queue is
// destroyed: at most its peak (both limits above) plus one chunk per size. Larger payloads come
// from a core::PayloadCache, which keeps them when the message is consumed, up to the byte limit
// in all, for the next message of their size.
//
// Thread safety: none; the owner's lock guards it.
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory_resource>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/payload_cache.h"
#include "prov/api_version.h"
#include "xport/transport.h"

namespace fabq::prov {

// What the provider takes from the transport seam (xport/transport.h) by name.
using xport::AckWanted;
using xport::Connection;
using xport::Incoming;
using xport::kInjectSize;
using xport::kMaxIov;
using xport::Listener;
using xport::Placement;
using xport::TxLevel;
using xport::TxOp;

class Endpoint;

// Which receives select their sender by src_addr (fi_getinfo(3)): all of them with
// FI_DIRECTED_RECV; from libfabric 2.0 on, only tagged ones with FI_TAGGED_DIRECTED_RECV, and
// with FI_EXACT_DIRECTED_RECV those it applies to (all, when it stands alone) must name one:
// FI_ADDR_UNSPEC is -FI_EINVAL. Elsewhere src_addr is ignored.
struct DirectedRecv {
  bool msg = false;
  bool tagged = false;
  bool exact = false;

  static DirectedRecv of(uint64_t caps, ApiVersion api) {
    const bool all = (caps & FI_DIRECTED_RECV) != 0;
    const uint64_t v2 = api.v2() ? caps : 0;
    const bool tagged_only = (v2 & abi2::kTaggedDirectedRecv) != 0;
    const bool exact = (v2 & abi2::kExactDirectedRecv) != 0;
    return {.msg = all || (exact && !tagged_only),
            .tagged = all || tagged_only || exact,
            .exact = exact};
  }
  bool applies(bool tagged_recv) const { return tagged_recv ? tagged : msg; }
};

// The senders a receive accepts: any (FI_ADDR_UNSPEC, or an endpoint without
// FI_DIRECTED_RECV), or the one whose RDM name is `name` (the address its fi_addr_t named in the
// AV when the receive was posted).
struct SourceFilter {
  bool any = true;
  sockaddr_in name{};

  static SourceFilter only(const sockaddr_in& n) { return {.any = false, .name = n}; }
  // `from`: Incoming::from, AF_UNSPEC on connected endpoints.
  bool accepts(const sockaddr_in& from) const {
    return any || (from.sin_family == AF_INET && from.sin_addr.s_addr == name.sin_addr.s_addr &&
                   from.sin_port == name.sin_port);
  }
};

// A receive an application posted, as endpoints and SRX contexts keep it.
struct PostedRecv {
  void* context = nullptr;
  uint64_t flags = 0;          // FI_COMPLETION, FI_CLAIM, FI_DISCARD as posted
  bool default_flags = false;  // fi_recv & co.: the endpoint's rx op_flags apply
  bool tagged = false;
  uint64_t tag = 0;
  uint64_t ignore = 0;
  SourceFilter source;
  uint32_t multi = 0;  // FI_MULTI_RECV: its buffer's id in the queue (MultiBuf); 0: not one
  size_t iov_count = 0;
  iovec iov[kMaxIov] = {};
  size_t len = 0;
  // FI_MSG_PREFIX: the bytes before iov[0] the application gave for the prefix, which its
  // completion's len counts (fi_cq(3)); the payload goes to iov. 0: no prefix mode.
  size_t prefix = 0;
  Endpoint* owner = nullptr;  // the endpoint whose receive CQ holds its credit (null: none yet)
};

struct Unexpected {
  Endpoint* from = nullptr;  // the endpoint it arrived on
  Incoming in;
  unsigned char* data = nullptr;    // in.len bytes from the queue's pool; null when in.len is 0
  bool complete = false;            // its whole payload has arrived
  bool orphan = false;              // its endpoint is closing: no receive may take it
  void* claimed_by = nullptr;       // FI_PEEK | FI_CLAIM: kept for the FI_CLAIM receive with it
  std::optional<PostedRecv> taker;  // a receive posted while it was still arriving
};

bool tag_matches(uint64_t tag, uint64_t want, uint64_t ignore);

// The bytes the receive queues of one fabric buffer together (FI_FABQ_UNEXPECTED_TOTAL_BYTES),
// counted as RecvQueue counts a connection's share. Any thread, under any lock: its state is
// atomic, and `room` (called when bytes come back while a queue waits for them) must take
// leaves only (Fabric::room_given()).
class UnexpectedBudget {
 public:
  using Room = void (*)(void* arg);
  UnexpectedBudget(size_t max, Room room, void* arg) : max_(max), room_(room), arg_(arg) {}
  UnexpectedBudget(const UnexpectedBudget&) = delete;
  UnexpectedBudget& operator=(const UnexpectedBudget&) = delete;

  // Takes n bytes if they fit.
  bool take(size_t n) {
    size_t used = used_.load(std::memory_order_relaxed);
    do {
      if (n > max_ || used > max_ - n) return false;
    } while (!used_.compare_exchange_weak(used, used + n, std::memory_order_seq_cst));
    return true;
  }
  void give(size_t n) {
    used_.fetch_sub(n, std::memory_order_seq_cst);
    if (wanted_.load(std::memory_order_seq_cst) &&
        wanted_.exchange(false, std::memory_order_seq_cst)) {
      room_(arg_);
    }
  }
  // A queue found no room: true when n bytes fit after all (take them again), else `room` is
  // called once bytes come back. seq_cst with give(), as core::CompletionQueue::await_room().
  bool await(size_t n) {
    wanted_.store(true, std::memory_order_seq_cst);
    return n <= max_ && used_.load(std::memory_order_seq_cst) <= max_ - n;
  }
  size_t used() const { return used_.load(std::memory_order_relaxed); }
  // What a queue takes at a time, so that most messages cost the budget nothing (RecvQueue):
  // 1/64 of it, at most 64 KiB. A queue keeps at most two slices unused (one with nothing
  // buffered), and gives them back when another waits.
  size_t slice() const { return std::min<size_t>(max_ / 64, 64 * 1024); }
  // Whether a queue waits for room (await() found none, and no bytes came back since).
  bool wanted() const { return wanted_.load(std::memory_order_relaxed); }

 private:
  const size_t max_;
  const Room room_;
  void* const arg_;
  std::atomic<size_t> used_{0};
  std::atomic<bool> wanted_{false};
};

// A multi-receive buffer's state while any of it is posted or being filled.
struct MultiBuf {
  uint32_t id = 0;
  size_t min = 0;          // release when less than this remains
  uint32_t in_flight = 0;  // slices handed out and not completed
  bool released = false;   // out of the queue: no more slices
};

class RecvQueue {
 public:
  // `peer_bytes`: each connection's share; `budget`: the fabric's, which outlives the queue.
  RecvQueue(size_t capacity, size_t unexpected_bytes, size_t unexpected_count, size_t peer_bytes,
            UnexpectedBudget* budget);
  ~RecvQueue();
  RecvQueue(const RecvQueue&) = delete;
  RecvQueue& operator=(const RecvQueue&) = delete;

  size_t posted() const { return posted_.size(); }
  bool full() const { return posted_.size() >= capacity_; }
  bool has_unexpected() const { return !unexpected_.empty(); }
  void post(const PostedRecv& r) { posted_.push_back(r); }
  // Makes `r` (one buffer, untagged) a multi-receive buffer released below `min` bytes.
  void make_multi(PostedRecv* r, size_t min);
  // The next slice of multi-receive buffer `r` for a message of `len` bytes: the slice is
  // returned and `r` shrinks past it. *release: `r` is used up (less than its minimum left, or
  // `len` did not fit and the slice truncates it); it must leave the queue.
  PostedRecv carve(PostedRecv* r, size_t len, bool* release);
  // A slice of buffer `id` completed (or was abandoned): true when it was the buffer's last,
  // after the buffer left the queue; its completion carries FI_MULTI_RECV, and the state goes.
  bool slice_done(uint32_t id);
  // Buffer `id` left the queue (used up, cancelled or failed): true when no slice of it is
  // being filled, so that what reports its leaving carries FI_MULTI_RECV (the state goes);
  // false: the last slice's completion will.
  bool release(uint32_t id);
  // Back at the head: a receive whose message broke off keeps its place in the order.
  void post_front(const PostedRecv& r) { posted_.insert(posted_.begin(), r); }
  // The oldest posted receive `in` matches, removed into *out once `credit()` (its
  // completion's CQ slot) says yes: true. False when none matches, or when credit() says no:
  // then the receive keeps its place and *refused is set. *out is written only on true.
  // A multi-receive buffer gives a slice and stays, unless used up.
  template <class Credit>
  bool take_match(const Incoming& in, Credit credit, bool* refused, PostedRecv* out) {
    *refused = false;
    auto it = find_match(in);
    if (it == posted_.end()) return false;
    if (!credit()) {
      *refused = true;
      return false;
    }
    if (it->multi != 0) {
      bool used_up = false;
      *out = carve(&*it, in.len, &used_up);
      if (used_up) {
        release(it->multi);  // in flight: its own completion carries the flag
        posted_.erase(it);
      }
      return true;
    }
    *out = *it;
    posted_.erase(it);
    return true;
  }
  // The posted receive take_match() would give `in`, left where it is (null: none), for a
  // caller that fills it and then remove_posted()s it, with no copy between.
  PostedRecv* peek_match(const Incoming& in) {
    auto it = find_match(in);
    return it == posted_.end() ? nullptr : &*it;
  }
  void remove_posted(const PostedRecv* r) { posted_.erase(posted_.begin() + (r - posted_.data())); }
  // The posted receive with this context, removed (fi_cancel).
  std::optional<PostedRecv> take_context(void* context);
  bool holds_context(void* context) const;
  // Every posted receive, removed (failure, close).
  std::vector<PostedRecv> take_all();

  // What a message that is not buffered found full.
  enum class Full : uint8_t { kQueue, kPeer, kBudget };
  // Buffers a new unexpected message if every bound lets it; its payload goes to the returned
  // entry's data. Null, with *full, when one does not.
  Unexpected* try_add(Endpoint* from, const Incoming& in, Full* full);
  // What a message of `len` bytes counts against its connection's share and the budget.
  static size_t charge(size_t len) { return len + kEntryBytes; }
  // The oldest unexpected message `r` would take (same kind, its tag, a sender it accepts) and
  // that is not claimed; null when none.
  Unexpected* find_unexpected(const PostedRecv& r);
  Unexpected* find_claimed(void* context);
  void remove(Unexpected* u);
  // Whether a buffered message that came through `c` owes its sender a delivery
  // acknowledgement there.
  bool owes(const Connection* c) const;
  // `c` closed and is about to be freed: its buffered messages stay, for receives to take, but
  // no longer name it (their acknowledgements cannot go: their sends fail with it) and no
  // longer count against its share.
  void forget(const Connection* c);
  // Keeps every message that arrived on `from` from receives (it is closing); they forget
  // their connections, which close with it.
  void orphan(const Endpoint* from);
  // Forgets every message that arrived on `from` (it is closing). Returns the receives that
  // were waiting for the rest of one of them (Unexpected::taker).
  std::vector<PostedRecv> drop_from(Endpoint* from);

 private:
  static constexpr size_t kPooledPayload = 4096;
  static constexpr size_t kChunkBlocks = 256;
  // A buffered message's bookkeeping: its entry, its list node, a share of the map below.
  static constexpr size_t kEntryBytes = 320;
  void retire(std::pmr::list<Unexpected>::iterator it);
  std::vector<PostedRecv>::iterator find_match(const Incoming& in);
  MultiBuf* multi(uint32_t id);

  // The message leaves the share of the connection it names (if it still names one).
  void unshare(const Unexpected& u);
  // A message's charge against the fabric's budget, taken from what this queue holds of it and
  // given back to it (UnexpectedBudget::slice()); false when the budget has no room.
  bool charge_budget(size_t cost);
  void uncharge_budget(size_t cost);
  // The bytes connection `c` has buffered here (an entry made at its first message, kept until
  // forget()), or null when they are not counted: no connection, or a per-peer bound no tighter
  // than the queue's (an MSG endpoint's one peer).
  size_t* peer_share(const Connection* c);

  const size_t capacity_;
  const size_t max_bytes_;
  const size_t max_count_;
  const size_t max_peer_bytes_;
  UnexpectedBudget* const budget_;
  std::vector<PostedRecv> posted_;
  std::vector<MultiBuf> multis_;
  uint32_t next_multi_ = 1;
  // Before unexpected_: outlive its nodes. The pool, destroyed, frees every payload still out;
  // the cache gets back its own in ~RecvQueue().
  core::PayloadCache large_;
  std::pmr::unsynchronized_pool_resource pool_;
  std::pmr::list<Unexpected> unexpected_;
  size_t unexpected_bytes_ = 0;
  // Of the fabric's budget: what this queue took, and what its messages are charged.
  size_t budget_taken_ = 0;
  size_t charged_ = 0;
  // Each connection's share (charge()) of what is buffered, from its first message until it is
  // forgotten; and the last one looked up.
  std::pmr::unordered_map<const Connection*, size_t> peer_bytes_;
  const Connection* last_peer_ = nullptr;
  size_t* last_share_ = nullptr;
};

}  // namespace fabq::prov
