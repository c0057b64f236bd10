#include "xport/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include "core/private_file.h"
#include "core/spinlock.h"
#include "core/unique_fd.h"

namespace fabq::xport::shm {
namespace {

constexpr uint64_t kSegmentMagic = 0x31676573'71626166;  // "fabqseg1"
constexpr size_t kControlOffset = 64;
constexpr size_t kDataOffset = 4096;
static_assert(kSegmentBytes == kDataOffset + 2 * kRingBytes, "the layout in shm.h");
static_assert((kRingBytes & (kRingBytes - 1)) == 0, "ring indices wrap with a mask");
constexpr size_t kShareOffset = kControlOffset + 2 * sizeof(RingControl);

struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  uint64_t ring_bytes;
  // [0] the connecting side's, [1] the accepting side's; each written by its own side before
  // the other looks (the socket orders them), relaxed.
  std::atomic<uint64_t> pid[2];
  std::atomic<uint64_t> base[2];
  std::atomic<uint32_t> serves[2];
};
static_assert(offsetof(SegmentHeader, serves) == 56 && sizeof(SegmentHeader) <= kControlOffset,
              "the layout in shm.h");
static_assert(offsetof(SegmentHeader, ring_bytes) + 8 == kSegmentHeaderCheckBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

SegmentHeader* header(void* base) {
  return static_cast<SegmentHeader*>(base);
}

// The part of a direct request its target offers the initiator (shm.h "Sharing a copy"). The
// target writes the fields, then publishes the word; either side moves the word.
struct ShareSlot {
  alignas(64) std::atomic<uint64_t> word;  // generation << 3 | ShareState
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> offset;
  std::atomic<uint64_t> addr;
  std::atomic<uint64_t> len;
  // Where the slot's side keeps its reach cell (below); written once, by that side, in
  // announce().
  std::atomic<uint64_t> cell;
};
static_assert(sizeof(ShareSlot) == 64 && kShareOffset % 64 == 0);
static_assert(kShareOffset == 576 && kShareOffset + 2 * sizeof(ShareSlot) <= kDataOffset,
              "the layout in shm.h");

enum ShareState : uint64_t {
  kOffered = 1,  // by the target
  kTaken = 2,    // back, by the target, which copies the part itself
  kClaimed = 3,  // by the initiator, which is copying it
  kDone = 4,     // the initiator copied it
  kFailed = 5,   // the initiator could not: the target copies it
};
constexpr uint64_t kStateMask = 7;

// Copy advice (xport/copy_choice.h): cell i is written by side i, for the peer's sends to it.
constexpr size_t kAdviceOffset = kShareOffset + 2 * sizeof(ShareSlot);
static_assert(kAdviceOffset == 704 && kAdviceOffset + 64 <= kDataOffset, "the layout in shm.h");
std::atomic<uint64_t>& advice_cell(void* base, int i) {
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<unsigned char*>(base) +
                                                  kAdviceOffset)[i];
}

// Slot i holds the offers of side i as a target (0: the connecting side).
ShareSlot& share_slot(void* base, int i) {
  return reinterpret_cast<ShareSlot*>(static_cast<unsigned char*>(base) + kShareOffset)[i];
}

// Reach cells: private memory into which a peer writes the segment's nonce with
// process_vm_writev() to show that it can write this process's memory (Segment::reach_peer(),
// peer_reaches()). They live as long as the process, so the late write of a peer long gone
// lands in a cell, never in memory freed and reused; a cell given to another segment since
// then holds a nonce that is not that segment's, which only keeps that connection from
// sharing.
constexpr size_t kReachCells = 1024;
std::atomic<uint64_t> g_reach_cells[kReachCells];
std::atomic<uint32_t> g_next_reach_cell{0};

// The peer's end of `fd` is closed, or the socket failed: the peer process ended, or its
// connection did, which it cannot while it copies a claimed part (it claims and copies under
// its connection's lock, and closes under it).
bool peer_gone(int fd) {
  pollfd p{.fd = fd, .events = POLLRDHUP, .revents = 0};
  return poll(&p, 1, 0) != 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

uint32_t take_reach_cell() {
  const uint32_t i = g_next_reach_cell.fetch_add(1, std::memory_order_relaxed) % kReachCells;
  g_reach_cells[i].store(0, std::memory_order_relaxed);
  return i;
}

// This side's pid, mapping and reach cell, for the peer's proofs.
void announce(void* base, int side, uint32_t cell) {
  header(base)->pid[side].store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
  header(base)->base[side].store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
  share_slot(base, side)
      .cell.store(reinterpret_cast<uintptr_t>(&g_reach_cells[cell]), std::memory_order_relaxed);
}

std::atomic<uint32_t> g_next_id{1};

// Names create() tries before it gives up on shared memory: the pid in a name is unique only
// within a PID namespace, and processes of several may share /dev/shm.
constexpr int kNameAttempts = 16;

RingControl* control(void* base, int i) {
  return reinterpret_cast<RingControl*>(static_cast<unsigned char*>(base) + kControlOffset) + i;
}

unsigned char* data(void* base, int i) {
  return static_cast<unsigned char*>(base) + kDataOffset + static_cast<size_t>(i) * kRingBytes;
}

}  // namespace

// --- What the accepting side checks

SegmentHeaderFields read_segment_header(const unsigned char* raw) {
  SegmentHeaderFields h;
  std::memcpy(&h.magic, raw + offsetof(SegmentHeader, magic), 8);
  std::memcpy(&h.nonce, raw + offsetof(SegmentHeader, nonce), 8);
  std::memcpy(&h.ring_bytes, raw + offsetof(SegmentHeader, ring_bytes), 8);
  return h;
}

SegmentFault check_segment(const SegmentHeaderFields& h, uint64_t nonce, uint64_t object_bytes) {
  if (object_bytes != kSegmentBytes) return SegmentFault::kSize;
  if (h.magic != kSegmentMagic) return SegmentFault::kMagic;
  if (nonce == 0 || h.nonce != nonce) return SegmentFault::kNonce;
  if (h.ring_bytes != kRingBytes) return SegmentFault::kRingBytes;
  return SegmentFault::kNone;
}

// --- Ring

Status Ring::peek(const unsigned char** p, size_t* contiguous, size_t* avail) const {
  // Acquire: pairs with the producer's release of its tail; the bytes before it are written.
  const uint64_t tail = ctl_->tail.load(std::memory_order_acquire);
  const uint64_t head = ctl_->head.load(std::memory_order_relaxed);
  const uint64_t n = tail - head;
  if (n > kRingBytes) return Status::kCorrupt;
  const size_t off = static_cast<size_t>(head & (kRingBytes - 1));
  *p = data_ + off;
  *avail = static_cast<size_t>(n);
  *contiguous = std::min(*avail, kRingBytes - off);
  return Status::kOk;
}

bool Ring::consume(size_t n) {
  if (n == 0) return false;
  const uint64_t head = ctl_->head.load(std::memory_order_relaxed);
  // seq_cst, like the flag load after it and arm_producer()'s flag store and head load: in
  // their single total order the producer sees this head or this side sees its flag (Dekker).
  // It is also a release: this side's reads of the bytes happen before they are overwritten.
  ctl_->head.store(head + n, std::memory_order_seq_cst);
  return ctl_->producer_blocked.load(std::memory_order_seq_cst) != 0 &&
         ctl_->producer_blocked.exchange(0, std::memory_order_relaxed) != 0;
}

Status Ring::write(const iovec* iov, int cnt, size_t* written, bool* bell) {
  return write(iov, cnt, /*whole=*/false, written, bell);
}

Status Ring::write_whole(const iovec* iov, int cnt, bool* written, bool* bell) {
  size_t n = 0;
  const Status s = write(iov, cnt, /*whole=*/true, &n, bell);
  *written = n != 0;
  return s;
}

Status Ring::claim(size_t n, unsigned char** at) {
  *at = nullptr;
  const uint64_t tail = ctl_->tail.load(std::memory_order_relaxed);
  if (tail - head_seen_ > kRingBytes || kRingBytes - (tail - head_seen_) < n) {
    head_seen_ = ctl_->head.load(std::memory_order_acquire);  // as in write()
  }
  const uint64_t used = tail - head_seen_;
  if (used > kRingBytes) return Status::kCorrupt;
  const size_t start = static_cast<size_t>(tail & (kRingBytes - 1));
  if (n <= kRingBytes - used && n <= kPublishEvery && start + n <= kRingBytes) {
    *at = data_ + start;
  }
  return Status::kOk;
}

void Ring::commit(size_t n, bool* bell) {
  publish(ctl_->tail.load(std::memory_order_relaxed) + n, bell);
}

void Ring::publish(uint64_t tail, bool* bell) {
  // Release: the bytes are written before the consumer can see the tail that covers them. Not
  // seq_cst, and so the flag load may pass the store: arm_consumer()'s bounded sleep covers that
  // (shm.h). The signal fence keeps the compiler from moving the load further up, past the copy.
  ctl_->tail.store(tail, std::memory_order_release);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  *bell = ctl_->consumer_asleep.load(std::memory_order_relaxed) != 0 &&
          ctl_->consumer_asleep.exchange(0, std::memory_order_relaxed) != 0;
}

Status Ring::write(const iovec* iov, int cnt, bool whole, size_t* written, bool* bell) {
  *written = 0;
  *bell = false;
  uint64_t tail = ctl_->tail.load(std::memory_order_relaxed);
  size_t want = 0;
  for (int i = 0; i < cnt; ++i) want += iov[i].iov_len;
  // The consumer's head is read only when the copy of it does not leave room for all of this:
  // its cache line was last written by the other core, and most writes fit.
  if (tail - head_seen_ > kRingBytes || kRingBytes - (tail - head_seen_) < want) {
    // Acquire: pairs with the consumer's release of its head; it is done with those bytes.
    head_seen_ = ctl_->head.load(std::memory_order_acquire);
  }
  const uint64_t used = tail - head_seen_;
  if (used > kRingBytes) return Status::kCorrupt;
  size_t room = kRingBytes - static_cast<size_t>(used);
  if (whole && room < want) return Status::kOk;
  const size_t start = static_cast<size_t>(tail & (kRingBytes - 1));
  if (want <= room && want <= kPublishEvery && start + want <= kRingBytes) {
    // The usual small frame: one piece before the ring's end, published once.
    unsigned char* dst = data_ + start;
    for (int i = 0; i < cnt; ++i) {
      if (iov[i].iov_len == 0) continue;  // its base may be null
      std::memcpy(dst, iov[i].iov_base, iov[i].iov_len);
      dst += iov[i].iov_len;
    }
    *written = want;
    tail += want;
    cnt = 0;
  }
  uint64_t published = tail;
  for (int i = 0; i < cnt && room > 0; ++i) {
    const auto* src = static_cast<const unsigned char*>(iov[i].iov_base);
    size_t len = std::min(iov[i].iov_len, room);
    room -= len;
    *written += len;
    while (len > 0) {
      const size_t off = static_cast<size_t>(tail & (kRingBytes - 1));
      const size_t c = std::min({len, kRingBytes - off, kPublishEvery});
      std::memcpy(data_ + off, src, c);
      src += c;
      len -= c;
      tail += c;
      if (tail - published >= kPublishEvery && (len > 0 || i + 1 < cnt)) {
        // Release: the consumer may copy these bytes out while this side copies the next ones
        // in, so a large frame costs about one copy's time instead of two.
        ctl_->tail.store(tail, std::memory_order_release);
        published = tail;
      }
    }
  }
  if (*written == 0) return Status::kOk;
  publish(tail, bell);
  return Status::kOk;
}

bool Ring::arm_producer() {
  // seq_cst store and load (Dekker, with consume()).
  ctl_->producer_blocked.store(1, std::memory_order_seq_cst);
  const uint64_t head = ctl_->head.load(std::memory_order_seq_cst);
  const uint64_t tail = ctl_->tail.load(std::memory_order_relaxed);
  if (tail - head < kRingBytes) {
    ctl_->producer_blocked.store(0, std::memory_order_relaxed);
    return true;
  }
  return false;
}

Armed Ring::arm_consumer() {
  // seq_cst: the flag is visible to the producer before the tail is loaded (shm.h).
  const uint32_t was = ctl_->consumer_asleep.exchange(1, std::memory_order_seq_cst);
  if (ctl_->tail.load(std::memory_order_seq_cst) == ctl_->head.load(std::memory_order_relaxed)) {
    return was != 0 ? Armed::kStill : Armed::kNow;
  }
  // Bytes are there: no sleep, so no doorbell is wanted for them.
  ctl_->consumer_asleep.store(0, std::memory_order_relaxed);
  return Armed::kBytes;
}

bool Ring::unread_at_most(size_t n) {
  head_seen_ = ctl_->head.load(std::memory_order_acquire);
  return ctl_->tail.load(std::memory_order_relaxed) - head_seen_ <= n;
}

bool Ring::readable() const {
  return ctl_->tail.load(std::memory_order_relaxed) != ctl_->head.load(std::memory_order_relaxed);
}

bool Ring::writable() const {
  return ctl_->tail.load(std::memory_order_relaxed) - ctl_->head.load(std::memory_order_relaxed) <
         kRingBytes;
}

// --- Segment

Segment::Segment(Segment&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      id_(o.id_),
      nonce_(o.nonce_),
      share_gen_(o.share_gen_),
      cell_(o.cell_),
      named_(std::exchange(o.named_, false)),
      lock_(std::move(o.lock_)) {}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    id_ = o.id_;
    nonce_ = o.nonce_;
    share_gen_ = o.share_gen_;
    cell_ = o.cell_;
    named_ = std::exchange(o.named_, false);
    lock_ = std::move(o.lock_);
  }
  return *this;
}

Segment::~Segment() {
  reset();
}

void Segment::reset() {
  unlink();
  if (base_ != nullptr) munmap(base_, size_);
  base_ = nullptr;
  size_ = 0;
}

std::string Segment::name_of(uint64_t id) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "/fabq-%u-%u", static_cast<unsigned>(id >> 32),
                static_cast<unsigned>(id & 0xffffffffu));
  return buf;
}

void Segment::unlink() {
  if (!named_) return;
  named_ = false;
  shm_unlink(name_of(id_).c_str());
  // Only now: as long as the name exists, the lock is what keeps a sweep from taking it.
  lock_.reset();
}

std::optional<uint64_t> Segment::id_of(const char* file) {
  static constexpr std::string_view kPrefix = "fabq-";
  std::string_view f(file);
  if (!f.starts_with(kPrefix)) return std::nullopt;
  f.remove_prefix(kPrefix.size());
  uint64_t part[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    // Digits only, no leading zero, at most 2^32 - 1: exactly what name_of() writes.
    size_t k = 0;
    while (k < f.size() && f[k] >= '0' && f[k] <= '9') {
      part[i] = part[i] * 10 + static_cast<uint64_t>(f[k] - '0');
      if (++k > 10 || part[i] > 0xffffffffu) return std::nullopt;
    }
    if (k == 0 || (k > 1 && f[0] == '0')) return std::nullopt;
    f.remove_prefix(k);
    if (i == 0) {
      if (!f.starts_with('-')) return std::nullopt;
      f.remove_prefix(1);
    }
  }
  if (!f.empty()) return std::nullopt;
  return part[0] << 32 | part[1];
}

size_t Segment::sweep_stale(const char* path) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(path), closedir);
  if (!dir) return 0;
  const int dfd = dirfd(dir.get());
  size_t removed = 0;
  while (const dirent* e = readdir(dir.get())) {
    std::optional<uint64_t> id = id_of(e->d_name);
    if (!id) continue;
    // Linux pids are 1..PID_MAX_LIMIT (2^22): any other number is no name create() made. The
    // pid says nothing more: it may be of another PID namespace, or reused.
    const uint64_t pid = *id >> 32;
    if (pid == 0 || pid > (1u << 22)) continue;
    // O_NONBLOCK: a FIFO of that name must not stop the sweep; O_NOFOLLOW: nor a link lead it
    // elsewhere.
    core::UniqueFd fd(
        openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!fd.valid()) continue;
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) continue;
    // create() locks the file before it gives it a size, so an empty one may be a creator's
    // between the two: it is kept (it holds no memory). One that had a size when looked at
    // above was locked by then, and if the lock can be taken now, no process holds it any
    // longer: its creator has unlinked the name or has ended, in whatever PID namespace it ran.
    if (st.st_size == 0 || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;
    // Still the file locked here: another sweep may have removed it, and a new creator made
    // the name again, since this one opened it.
    struct stat named {};
    if (fstatat(dfd, e->d_name, &named, AT_SYMLINK_NOFOLLOW) != 0 || named.st_dev != st.st_dev ||
        named.st_ino != st.st_ino) {
      continue;
    }
    // What shm_unlink() does, relative to `path`. The lock ends when fd closes.
    if (unlinkat(dfd, e->d_name, 0) == 0) ++removed;
  }
  return removed;
}

Segment Segment::create() {
  static std::once_flag swept;
  std::call_once(swept, [] { sweep_stale(); });
  Segment s;
  uint64_t nonce = 0;
  while (nonce == 0) {
    if (getrandom(&nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) return s;
  }
  for (int attempt = 0; attempt < kNameAttempts && !s.named_; ++attempt) {
    const uint64_t id = (static_cast<uint64_t>(static_cast<uint32_t>(getpid())) << 32) |
                        g_next_id.fetch_add(1, std::memory_order_relaxed);
    const std::string name = name_of(id);
    core::UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid()) {
      // Taken: by a process of another PID namespace with this pid, or left by a dead one.
      if (errno == EEXIST) continue;
      return s;
    }
    // The umask may have taken the owner's write bit: the accepting side opens it to write.
    if (fchmod(fd.get(), 0600) != 0) {
      shm_unlink(name.c_str());
      return s;
    }
    // Locked before it has a size (see sweep_stale()), and until the name is gone (unlink()).
    // Without waiting: no sweep locks an empty file, so whoever holds this one is nothing of
    // fabq's, and the next name will do.
    if (flock(fd.get(), LOCK_SH | LOCK_NB) != 0) {
      shm_unlink(name.c_str());
      continue;
    }
    s.id_ = id;
    s.named_ = true;  // from here on, a failure unlinks it
    s.lock_ = std::move(fd);
  }
  if (!s.named_) return s;
  if (ftruncate(s.lock_.get(), static_cast<off_t>(kSegmentBytes)) != 0) return s;
  // Populated: the first pass through each ring would otherwise fault its pages in, in both
  // processes, one message at a time.
  void* base = mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                    s.lock_.get(), 0);
  if (base == MAP_FAILED) return s;
  // A fresh shm object is zero-filled: both rings start empty with no flag set.
  auto* h = static_cast<SegmentHeader*>(base);
  h->magic = kSegmentMagic;
  h->nonce = nonce;
  h->ring_bytes = kRingBytes;
  s.cell_ = take_reach_cell();
  announce(base, 0, s.cell_);
  s.base_ = base;
  s.size_ = kSegmentBytes;
  s.nonce_ = nonce;
  return s;
}

Segment Segment::open(uint64_t id, uint64_t nonce) {
  Segment s;
  if (nonce == 0) return s;
  const std::string name = name_of(id);
  // Whatever is at the name: not a link followed elsewhere, nor a FIFO that blocks the open.
  core::UniqueFd fd(shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0));
  if (!fd.valid()) return s;
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 ||
      core::private_file_fault(st.st_mode, st.st_uid, geteuid()) != core::FileFault::kNone) {
    return s;
  }
  // Checked on a copy, before anything is mapped.
  unsigned char raw[kSegmentHeaderCheckBytes];
  if (pread(fd.get(), raw, sizeof(raw), 0) != static_cast<ssize_t>(sizeof(raw)) ||
      check_segment(read_segment_header(raw), nonce, static_cast<uint64_t>(st.st_size)) !=
          SegmentFault::kNone) {
    return s;
  }
  void* base =
      mmap(nullptr, kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  if (base == MAP_FAILED) return s;
  // Mapped and proven to be the offer's: the name is no longer needed by anybody.
  shm_unlink(name.c_str());
  s.cell_ = take_reach_cell();
  announce(base, 1, s.cell_);
  s.base_ = base;
  s.size_ = kSegmentBytes;
  s.id_ = id;
  s.nonce_ = nonce;
  return s;
}

Ring Segment::tx(bool connecting) const {
  const int i = connecting ? 0 : 1;
  return Ring(control(base_, i), data(base_, i));
}

Ring Segment::rx(bool connecting) const {
  const int i = connecting ? 1 : 0;
  return Ring(control(base_, i), data(base_, i));
}

int Segment::prove_peer(bool connecting) const {
  const SegmentHeader* h = header(base_);
  const int peer = connecting ? 1 : 0;
  const uint64_t pid = h->pid[peer].load(std::memory_order_relaxed);
  const uint64_t at = h->base[peer].load(std::memory_order_relaxed);
  // Linux pids are 1..2^22; the nonce sits at offset 8 of the peer's mapping.
  if (pid == 0 || pid > (1u << 22) || at == 0 || at > UINTPTR_MAX - 16) return 0;
  // A peer that names this side's own mapping would prove nothing but that this side holds the
  // nonce (it wrote what this side announced into its own slot).
  if (pid == static_cast<uint64_t>(getpid()) && at == reinterpret_cast<uintptr_t>(base_)) return 0;
  uint64_t seen = 0;
  const PeerMemory peer_memory(static_cast<int>(pid));
  const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(at) + 8), sizeof(seen)};
  if (!peer_memory.read(&seen, sizeof(seen), &remote, 1) || seen != nonce_) return 0;
  return static_cast<int>(pid);
}

void Segment::serve_peer(bool connecting) {
  header(base_)->serves[connecting ? 0 : 1].store(1, std::memory_order_release);
}

bool Segment::peer_serves(bool connecting) const {
  return header(base_)->serves[connecting ? 1 : 0].load(std::memory_order_acquire) != 0;
}

void Segment::advise_peer(bool connecting, uint64_t advice) {
  advice_cell(base_, connecting ? 0 : 1).store(advice, std::memory_order_relaxed);
}

uint64_t Segment::peer_advice(bool connecting) const {
  return advice_cell(base_, connecting ? 1 : 0).load(std::memory_order_relaxed);
}

bool Segment::reach_peer(bool connecting, int pid) const {
  // Whatever address the peer named: the nonce, which it knows, goes into memory the kernel
  // lets this process write in the proved pid, as every direct copy may.
  const uint64_t at = share_slot(base_, connecting ? 1 : 0).cell.load(std::memory_order_relaxed);
  if (pid <= 0 || at == 0 || at % alignof(uint64_t) != 0 || at > UINTPTR_MAX - 8) return false;
  const iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(at)), sizeof(nonce_)};
  return PeerMemory(pid).write(&nonce_, sizeof(nonce_), &remote, 1);
}

bool Segment::peer_reaches() const {
  return base_ != nullptr && g_reach_cells[cell_].load(std::memory_order_relaxed) == nonce_;
}

uint64_t Segment::offer_share(bool connecting, const ShareOffer& part) {
  ShareSlot& s = share_slot(base_, connecting ? 0 : 1);
  const uint64_t word = (++share_gen_ << 3) | kOffered;
  s.seq.store(part.seq, std::memory_order_relaxed);
  s.offset.store(part.offset, std::memory_order_relaxed);
  s.addr.store(part.addr, std::memory_order_relaxed);
  s.len.store(part.len, std::memory_order_relaxed);
  // Release: an initiator that sees the word sees the fields above.
  s.word.store(word, std::memory_order_release);
  return word;
}

ShareEnd Segment::settle_share(bool connecting, uint64_t offered, int peer_fd) {
  ShareSlot& s = share_slot(base_, connecting ? 0 : 1);
  const uint64_t gen = offered & ~kStateMask;
  uint64_t w = offered;
  // Acquire on failure too: a kDone seen here makes the initiator's copy visible.
  if (s.word.compare_exchange_strong(w, gen | kTaken, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
    return ShareEnd::kTakenBack;
  }
  for (uint32_t spins = 1;; ++spins) {
    if (w == (gen | kDone)) return ShareEnd::kDone;
    // kFailed, or anything else a peer wrote: the part may not be there.
    if (w != (gen | kClaimed)) return ShareEnd::kNotDone;
    // No time limit: the claimant may be copying into this side's memory, and gives that up
    // only by ending (shm.h "Sharing a copy"). A socket the peer's end of which is gone says
    // it did.
    if (spins % 4096 == 0 && peer_gone(peer_fd)) return ShareEnd::kStuck;
    core::cpu_relax();
    w = s.word.load(std::memory_order_acquire);
  }
}

bool Segment::share_offered(bool connecting, ShareOffer* part) const {
  ShareSlot& s = share_slot(base_, connecting ? 1 : 0);
  // Acquire: pairs with offer_share()'s release of the fields.
  const uint64_t w = s.word.load(std::memory_order_acquire);
  if ((w & kStateMask) != kOffered) return false;
  part->word = w;
  part->seq = static_cast<uint32_t>(s.seq.load(std::memory_order_relaxed));
  part->offset = s.offset.load(std::memory_order_relaxed);
  part->addr = s.addr.load(std::memory_order_relaxed);
  part->len = s.len.load(std::memory_order_relaxed);
  return true;
}

bool Segment::claim_share(bool connecting, const ShareOffer& part) {
  // Succeeds only while the word is still the one share_offered() read, so the fields it read
  // were that offer's: the target writes new ones only after it moved the word.
  uint64_t w = part.word;
  return share_slot(base_, connecting ? 1 : 0)
      .word.compare_exchange_strong(w, (part.word & ~kStateMask) | kClaimed,
                                    std::memory_order_acq_rel, std::memory_order_relaxed);
}

void Segment::finish_share(bool connecting, const ShareOffer& part, bool copied) {
  // Release: the copy happened before the target sees kDone.
  share_slot(base_, connecting ? 1 : 0)
      .word.store((part.word & ~kStateMask) | (copied ? kDone : kFailed),
                  std::memory_order_release);
}

// --- PeerMemory

namespace {

// Skips `by` bytes of v[*first..n).
void advance(iovec* v, size_t n, size_t* first, size_t by) {
  while (by > 0 && *first < n) {
    const size_t c = std::min(by, v[*first].iov_len);
    v[*first].iov_base = static_cast<unsigned char*>(v[*first].iov_base) + c;
    v[*first].iov_len -= c;
    by -= c;
    if (v[*first].iov_len == 0) ++*first;
  }
}

// process_vm_readv/writev, until every byte moved: the kernel may stop short of the whole
// (at most MAX_RW_COUNT per call), so the rest is asked for again.
template <class Call>
bool move_all(Call call, const iovec* local, size_t ln, const iovec* remote, size_t rn,
              size_t len) {
  if (ln > kMaxPeerRanges || rn > kMaxPeerRanges) return false;
  iovec here[kMaxPeerRanges];
  iovec there[kMaxPeerRanges];
  std::copy(local, local + ln, here);
  std::copy(remote, remote + rn, there);
  size_t lf = 0;
  size_t rf = 0;
  size_t done = 0;
  while (done < len) {
    const ssize_t got = call(here + lf, ln - lf, there + rf, rn - rf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
    advance(here, ln, &lf, static_cast<size_t>(got));
    advance(there, rn, &rf, static_cast<size_t>(got));
  }
  return true;
}

}  // namespace

bool PeerMemory::readv(const iovec* local, size_t ln, const iovec* remote, size_t rn,
                       size_t len) const {
  return move_all([this](const iovec* l, size_t lc, const iovec* r,
                         size_t rc) { return process_vm_readv(pid_, l, lc, r, rc, 0); },
                  local, ln, remote, rn, len);
}

bool PeerMemory::writev(const iovec* local, size_t ln, const iovec* remote, size_t rn,
                        size_t len) const {
  return move_all([this](const iovec* l, size_t lc, const iovec* r,
                         size_t rc) { return process_vm_writev(pid_, l, lc, r, rc, 0); },
                  local, ln, remote, rn, len);
}

bool PeerMemory::read(void* at, size_t len, const iovec* remote, size_t n) const {
  const iovec local{at, len};
  return readv(&local, 1, remote, n, len);
}

bool PeerMemory::write(const void* at, size_t len, const iovec* remote, size_t n) const {
  const iovec local{const_cast<void*>(at), len};
  return writev(&local, 1, remote, n, len);
}

size_t slice(const iovec* in, size_t n, size_t off, size_t len, iovec* out) {
  size_t k = 0;
  for (size_t i = 0; i < n && len > 0; ++i) {
    if (off >= in[i].iov_len) {
      off -= in[i].iov_len;
      continue;
    }
    const size_t c = std::min(len, in[i].iov_len - off);
    out[k++] = {static_cast<unsigned char*>(in[i].iov_base) + off, c};
    len -= c;
    off = 0;
  }
  return k;
}

}  // namespace fabq::xport::shm
