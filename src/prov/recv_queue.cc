#include "prov/recv_queue.h"

#include <algorithm>
#include <utility>

namespace fabq::prov {

bool tag_matches(uint64_t tag, uint64_t want, uint64_t ignore) {
  return ((tag ^ want) & ~ignore) == 0;
}

static_assert(sizeof(Unexpected) + 4 * sizeof(void*) <= 320, "kEntryBytes is too small");

RecvQueue::RecvQueue(size_t capacity, size_t unexpected_bytes, size_t unexpected_count,
                     size_t peer_bytes, UnexpectedBudget* budget)
    : capacity_(capacity),
      max_bytes_(unexpected_bytes),
      max_count_(unexpected_count),
      max_peer_bytes_(peer_bytes),
      budget_(budget),
      large_(unexpected_bytes),
      pool_(std::pmr::pool_options{.max_blocks_per_chunk = kChunkBlocks,
                                   .largest_required_pool_block = kPooledPayload}),
      unexpected_(&pool_),
      peer_bytes_(&pool_) {
  posted_.reserve(capacity);
}

RecvQueue::~RecvQueue() {
  for (Unexpected& u : unexpected_) {
    if (u.in.len > kPooledPayload) large_.give(std::exchange(u.data, nullptr), u.in.len);
  }
  if (budget_taken_ != 0) budget_->give(budget_taken_);
}

bool RecvQueue::charge_budget(size_t cost) {
  if (charged_ + cost <= budget_taken_) {
    charged_ += cost;
    return true;
  }
  // From the fabric's budget a slice at a time, so that a message costs it no atomic operation
  // while the queue's slice has room: the slice when it fits, else what this message lacks.
  const size_t lack = charged_ + cost - budget_taken_;
  const size_t slice = std::max(lack, budget_->slice());
  size_t got = 0;
  if (budget_->take(slice)) {
    got = slice;
  } else if (slice != lack && budget_->take(lack)) {
    got = lack;
  } else {
    return false;
  }
  budget_taken_ += got;
  charged_ += cost;
  return true;
}

void RecvQueue::uncharge_budget(size_t cost) {
  charged_ -= cost;
  // What the queue holds unused goes back once it is more than two slices (one when no message
  // is buffered), and at once when another queue waits for room.
  const size_t unused = budget_taken_ - charged_;
  const size_t keep = (charged_ == 0 ? 1 : 2) * budget_->slice();
  if (unused > keep || (unused != 0 && budget_->wanted())) {
    budget_taken_ -= unused;
    budget_->give(unused);
  }
}

void RecvQueue::make_multi(PostedRecv* r, size_t min) {
  r->multi = next_multi_++;
  if (next_multi_ == 0) next_multi_ = 1;
  multis_.push_back({.id = r->multi, .min = min});
}

MultiBuf* RecvQueue::multi(uint32_t id) {
  auto it =
      std::find_if(multis_.begin(), multis_.end(), [id](const MultiBuf& m) { return m.id == id; });
  return it != multis_.end() ? &*it : nullptr;
}

PostedRecv RecvQueue::carve(PostedRecv* r, size_t len, bool* release) {
  MultiBuf* m = multi(r->multi);
  PostedRecv slice = *r;
  const size_t take = std::min(len, r->len);
  slice.iov[0].iov_len = take;
  slice.len = take;
  auto* base = static_cast<unsigned char*>(r->iov[0].iov_base);
  r->iov[0].iov_base = base + take;
  r->iov[0].iov_len -= take;
  r->len -= take;
  if (m != nullptr) ++m->in_flight;
  *release = len > take || m == nullptr || r->len < m->min;
  return slice;
}

bool RecvQueue::slice_done(uint32_t id) {
  MultiBuf* m = multi(id);
  if (m == nullptr) return false;
  if (m->in_flight > 0) --m->in_flight;
  if (!m->released || m->in_flight > 0) return false;
  multis_.erase(multis_.begin() + (m - multis_.data()));
  return true;
}

bool RecvQueue::release(uint32_t id) {
  MultiBuf* m = multi(id);
  if (m == nullptr) return false;
  m->released = true;
  if (m->in_flight > 0) return false;
  multis_.erase(multis_.begin() + (m - multis_.data()));
  return true;
}

std::vector<PostedRecv>::iterator RecvQueue::find_match(const Incoming& in) {
  return std::find_if(posted_.begin(), posted_.end(), [&](const PostedRecv& r) {
    return r.tagged == in.tagged && (!in.tagged || tag_matches(in.tag, r.tag, r.ignore)) &&
           r.source.accepts(in.from);
  });
}

std::optional<PostedRecv> RecvQueue::take_context(void* context) {
  auto it = std::find_if(posted_.begin(), posted_.end(),
                         [context](const PostedRecv& r) { return r.context == context; });
  if (it == posted_.end()) return std::nullopt;
  PostedRecv r = *it;
  posted_.erase(it);
  return r;
}

bool RecvQueue::holds_context(void* context) const {
  return std::any_of(posted_.begin(), posted_.end(),
                     [context](const PostedRecv& r) { return r.context == context; });
}

std::vector<PostedRecv> RecvQueue::take_all() {
  std::vector<PostedRecv> all;
  all.swap(posted_);
  posted_.reserve(capacity_);
  return all;
}

Unexpected* RecvQueue::try_add(Endpoint* from, const Incoming& in, Full* full) {
  // A message larger than what is left waits in the kernel (and then at the sender) until a
  // receive for it is posted: the peer's lengths never decide how much fabq allocates.
  if (unexpected_.size() >= max_count_ || in.len > max_bytes_ - unexpected_bytes_) {
    *full = Full::kQueue;
    return nullptr;
  }
  const size_t cost = charge(in.len);
  size_t* share = peer_share(in.via);
  if (share != nullptr && (cost > max_peer_bytes_ || *share > max_peer_bytes_ - cost)) {
    *full = Full::kPeer;
    return nullptr;
  }
  if (!charge_budget(cost)) {
    *full = Full::kBudget;
    return nullptr;
  }
  if (share != nullptr) *share += cost;
  Unexpected& u = unexpected_.emplace_back();
  u.from = from;
  u.in = in;
  if (in.len > kPooledPayload) {
    u.data = large_.take(in.len);
  } else if (in.len > 0) {
    u.data = static_cast<unsigned char*>(pool_.allocate(in.len, 1));
  }
  unexpected_bytes_ += in.len;
  return &u;
}

size_t* RecvQueue::peer_share(const Connection* c) {
  if (c == nullptr || max_peer_bytes_ >= max_bytes_) return nullptr;  // the queue's bound binds
  // Messages come in runs from one peer: the last share looked up is kept (an element of an
  // unordered map stays where it is until it is erased, which forget() does).
  if (c != last_peer_) {
    last_peer_ = c;
    last_share_ = &peer_bytes_[c];
  }
  return last_share_;
}

void RecvQueue::unshare(const Unexpected& u) {
  if (size_t* share = peer_share(u.in.via)) *share -= std::min(*share, charge(u.in.len));
}

void RecvQueue::retire(std::pmr::list<Unexpected>::iterator it) {
  unshare(*it);
  uncharge_budget(charge(it->in.len));
  unexpected_bytes_ -= it->in.len;
  if (it->in.len > kPooledPayload) {
    large_.give(it->data, it->in.len);
  } else if (it->data != nullptr) {
    pool_.deallocate(it->data, it->in.len, 1);
  }
  unexpected_.erase(it);
}

Unexpected* RecvQueue::find_unexpected(const PostedRecv& r) {
  for (Unexpected& u : unexpected_) {
    if (u.claimed_by != nullptr || u.taker || u.orphan) continue;
    if (u.in.tagged != r.tagged) continue;
    if (r.tagged && !tag_matches(u.in.tag, r.tag, r.ignore)) continue;
    if (!r.source.accepts(u.in.from)) continue;
    return &u;
  }
  return nullptr;
}

Unexpected* RecvQueue::find_claimed(void* context) {
  for (Unexpected& u : unexpected_) {
    if (u.claimed_by == context && context != nullptr) return &u;
  }
  return nullptr;
}

void RecvQueue::remove(Unexpected* u) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (&*it == u) {
      retire(it);
      return;
    }
  }
}

bool RecvQueue::owes(const Connection* c) const {
  return std::any_of(unexpected_.begin(), unexpected_.end(), [c](const Unexpected& u) {
    return u.in.via == c && u.in.ack == AckWanted::kDelivered;
  });
}

void RecvQueue::forget(const Connection* c) {
  if (c == nullptr) return;
  peer_bytes_.erase(c);
  if (last_peer_ == c) last_peer_ = nullptr;
  for (Unexpected& u : unexpected_) {
    if (u.in.via == c) u.in.via = nullptr;
  }
}

void RecvQueue::orphan(const Endpoint* from) {
  for (Unexpected& u : unexpected_) {
    if (u.from != from) continue;
    u.orphan = true;
    unshare(u);
    u.in.via = nullptr;
  }
}

std::vector<PostedRecv> RecvQueue::drop_from(Endpoint* from) {
  std::vector<PostedRecv> takers;
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (it->from == from) {
      if (it->taker) takers.push_back(*it->taker);
      retire(it++);
    } else {
      ++it;
    }
  }
  return takers;
}

}  // namespace fabq::prov
