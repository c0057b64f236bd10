// fabq transport: the shared-memory data path of a connection whose two ends are on one host.
//
// Two fabq endpoints on the same host still connect over TCP: the connection protocol, the
// close and the peer's death are the socket's. The connecting side also offers a segment of
// shared memory (kConnReq with wire::kShmOffer naming it); if the accepting side can map it
// and finds the nonce the offer carried, it says so (kConnAccept with wire::kShmAccept), and
// from the handshake's last frame on each side writes its frames into a ring of the segment
// instead of the socket. The bytes and frames are exactly those of the TCP stream: only the
// medium changes. What the socket still carries after that is doorbells (single bytes that
// mean "look at the rings"), the end of the connection and its errors.
//
//   Segment   one connection's mapping: a header, then two rings, one per direction. RAII.
//   Ring      a single-producer single-consumer byte ring inside a segment, with the two
//             flags that tell when a doorbell is owed.
//
// Layout of a segment (4096 + 2 * kRingBytes bytes, little-endian like the wire):
//
//   offset        what
//        0        magic 0x3167657371626166 ("fabqseg1"), nonce, ring bytes (u64 each)
//       24        pid of the connecting side, then of the accepting side (u64 each)
//       40        where each side mapped the segment, in the same order (u64 each)
//       56        whether each side serves direct requests, same order (u32 each)
//       64        RingControl of ring 0 (the connecting side's frames): tail at +0, head at
//                 +64, consumer_asleep at +128, producer_blocked at +192
//      320        RingControl of ring 1 (the accepting side's frames)
//      576        share slot of the connecting side as a target, then of the accepting side
//                 (64 bytes each: state word, request seq, offset, address, length, and where
//                 that side's reach cell is; u64 each)
//      704        copy advice of the connecting side for its peer's sends, then of the
//                 accepting side (u64 each; xport/copy_choice.h)
//     4096        ring 0's bytes, then ring 1's
//
// Its name is /fabq-<pid>-<n> (the creator's pid, a counter), which the offer carries as
// id = pid << 32 | n. The pid only keeps names apart, and only within a PID namespace: a
// process of another one that shares /dev/shm may have the same pid, and so the same name
// (create() then takes the next n). Whether a creator still runs is told by a lock, not by its
// pid: the creator holds flock(LOCK_SH) on the name's file from before the file has a size
// until it unlinks the name, and a lock ends with the process that held it, in any namespace.
// A name nobody holds whose creator died before the answer is removed by the next process of
// the same user that creates a segment (Segment::sweep_stale()).
//
// A doorbell is owed only to a side that may sleep: a consumer about to sleep sets
// `consumer_asleep` and looks at the ring again; a producer that found the ring full sets
// `producer_blocked` and looks again. Whoever then moves the index the other side waits on
// exchanges the flag back to 0 and, if it was set, rings.
//
// A full ring is rare, so its two sides use the textbook handshake: the producer stores its
// flag and then loads the head, the consumer stores the head and then loads the flag, all four
// sequentially consistent, so at least one of them sees the other (Dekker). (Not fences:
// ThreadSanitizer does not model them.)
//
// An empty ring is not rare: every send publishes a tail. A sequentially consistent store there
// would wait, on x86, until every line of the frame had been taken from the consumer's core
// (about 180 ns of an 8-byte ping-pong's 900 on a 2-core VM, 13-17 % of the sender's time).
// So the producer publishes its tail with a release store and then loads the flag relaxed: the
// load may be served while the tail is still on its way, and a consumer that armed in that
// moment can see neither the tail nor, through the producer, a doorbell. The consumer covers
// that moment instead: the flag store and tail load of arm_consumer() stay sequentially
// consistent, so once it returns every later flag load of the producer sees the flag; a tail
// that was on its way then is visible to every core well within kRecheckNs. A consumer that
// armed (Armed::kNow) therefore looks at the ring once more between kRecheckNs and twice that
// later, whether a doorbell woke it meanwhile or not (RecheckTimer); after that look it may
// sleep without a limit until a doorbell comes.
//
// The peer is not trusted: it may write anything into the segment at any time. Indices are
// checked on every load (a tail more than a ring ahead of the head, or a head past the tail,
// is Status::kCorrupt and the connection fails with EP_REQ_ERR), and frame bytes are copied
// out by the framer before they are decoded. The segment is created 0600 by the connecting
// side (whatever the umask); the accepting side opens the name without following a link or
// blocking on a FIFO, and maps it only if it is a regular file of the same user that no other
// user may read or write (core/private_file.h), exactly kSegmentBytes long, whose header
// (check_segment(), on a copy read before mapping) has the magic, the offer's nonce and
// kRingBytes; both unlink its name as soon as they can (the accepting side right after mapping
// it). Nothing either side reads from the header afterwards is trusted for more than it says
// (the pid and address a proof checks, the share slot's fields an initiator checks against its
// own request, copy advice that only picks between two ways that both work); the ring size is
// the constant, never the header's.
//
// Direct copies. Above a size, an RMA write or read need not cross the ring: the target copies
// straight between the initiator's buffers and its region (process_vm_readv(2) and
// process_vm_writev(2), PeerMemory), one copy instead of two. That takes the initiator's pid,
// which nobody may forge. Each side writes its pid and the address of its mapping into the
// header before the other can look (create(), and open() before kConnAccept), and each side
// proves what its peer wrote (prove_peer()): it reads the nonce through process_vm_readv() at
// the peer's address in the peer's pid. Only the process that maps this very segment there
// holds it (the nonce is random and known to the two sides alone), and the read succeeds only
// if the kernel lets this process reach the peer's memory at all: another user's process, a
// Yama ptrace_scope that forbids it, a peer that made itself non-dumpable, or a pid of another
// PID namespace all fail the proof. A side that proved its peer says so in the header
// (serve_peer()), and from then on the peer may send it direct requests; a side that did not
// says nothing, and its peer's transfers go through the ring as before. A peer that names this
// side's own mapping (this side's pid and address, copied from its slot) proves nothing and is
// refused. What the proof cannot rule out is a peer of the same user that planted the nonce at
// a known address of a third process of that user and names it: the copies then reach that
// process, which the kernel lets this process reach anyway. The choice is made
// once per connection, before either side's first request, so no request is ever refused for
// it and the order of requests holds. After it, a copy that the kernel refuses (the peer made
// itself non-dumpable since, or named memory it does not map) fails that one request.
//
// Sharing a copy. One copy is still one core's work, while the initiator's core waits for the
// answer. From share_min bytes on (TransportConfig), a target whose peer showed it can write
// this process's memory offers the initiator the second part of the request, page-aligned
// here, in its share slot (offer_share(): the request's seq, where the part begins, where it
// is in the target's memory), copies the first part itself, then settles the offer
// (settle_share()). The slot's word holds a generation and a state; it moves by
// compare-and-swap from kOffered to exactly one of kTaken (the target takes the part back:
// the initiator did not claim it in time) or kClaimed (the initiator copies it with
// process_vm_writev(), or process_vm_readv() for a read, then sets kDone or kFailed). The
// target answers only after the whole request is in place: on kTaken or kFailed it copies the
// part itself, on kClaimed it waits for the end, with no time limit, since an initiator that
// claimed may be writing into the target's memory for as long as it runs: the region, or the
// receive buffer, stays held until it is done. Only the end of the initiator's connection
// (its socket hangs up: the process ended, or the connection, which it cannot while it copies)
// ends the wait (kStuck, and the target's connection fails). A stopped initiator (a debugger,
// SIGSTOP) therefore holds its target's progress until it resumes, as a peer holds libfabric's
// shm provider. What the peer writes into the slot is trusted for nothing but "the part is
// done": a peer that writes anything but kDone gets its part copied by the target. An
// initiator copies only inside a request it recorded and has not seen answered, into its own
// buffers' bounds; the address it writes to or reads from is the target's (a target that names
// another one of its own addresses hurts only itself).
//
// Who may be offered a part. Waiting without a limit is safe only for a peer that could harm
// this process anyway, so a target offers parts only to a peer that showed it can write this
// process's memory: each side keeps a private reach cell (process-lifetime, announced in its
// share slot), and a side that proved its peer writes the segment's nonce into the peer's cell
// with process_vm_writev() (reach_peer()). A peer that merely claims to serve (writes its flag)
// gets no offers, and its claims find nothing to claim.
//
// Thread safety: a Segment and its Rings belong to one connection and are used under its lock,
// except the lock-free checks (readable(), writable(), arm_consumer()) that the progress engine
// makes while it holds the engine lock, which keeps the connection (and so the mapping) alive.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/unique_fd.h"

namespace fabq::xport::shm {

// Bytes of each ring; a power of two.
inline constexpr size_t kRingBytes = 256 * 1024;
// Bytes of a segment: its header and control blocks, then the two rings.
inline constexpr size_t kSegmentBytes = 4096 + 2 * kRingBytes;
// A producer publishes its tail at least every this many bytes of one write(), not only at its
// end: the consumer copies a large frame out while the rest is still being copied in.
inline constexpr size_t kPublishEvery = 8 * 1024;

// How soon after a fresh arm a consumer looks at its ring once more (the doorbell protocol
// above): at least kRecheckNs later and at most twice that (RecheckTimer). A tail in flight
// becomes visible in far less; this bounds the delay of a message whose publish raced with the
// arm, which no doorbell announces. The progress thread also looks once just before it sleeps,
// which takes most of those at once.
inline constexpr int64_t kRecheckNs = 5'000'000;

// When a progress thread that arms its rings before every sleep must look at them again without
// a doorbell: at least kRecheckNs after each fresh arm (Armed::kNow), at most 2 * kRecheckNs
// after it. One timer serves every arm of a period, so a thread that sleeps many times a
// millisecond sets it, and is woken by it, about once a period. What that buys, on the 2-core
// EPYC VM, fabtests' fi_rdm_pingpong -c sread (us per transfer, medians of 6-10 runs):
//
//                                          8 B     4 KiB
//   a 1 ms timeout on every sleep          14.0    16.3
//   this timer, kRecheckNs 5 ms            10.9    10.9
//   sequentially consistent publish        11.8    10.2   (no look again needed)
//
// Each expiry that wakes the thread costs the ping-pong far more than the wake-up itself: at
// kRecheckNs 0.5 ms (2000 expiries a second) 8 B took 22.3 us; at 2 ms, 11.4-13.2.
//
// A plain value (times in monotonic ns); one thread uses it.
class RecheckTimer {
 public:
  // A ring was armed afresh at `now`. Returns when the timer must expire if it is to be set now;
  // 0 when the timer already set serves this arm too (its expiry re-sets it).
  int64_t armed(int64_t now) {
    last_arm_ = now;
    if (due_ != 0) return 0;
    set_at_ = now;
    due_ = now + kRecheckNs;
    return due_;
  }
  // The timer expired, seen at `now`; the caller looks at every ring after this call. That look
  // comes at least kRecheckNs after every arm up to when the timer was set. Returns when the
  // timer must expire next for the arms since, 0 for none.
  int64_t expired(int64_t now) {
    due_ = 0;
    if (last_arm_ <= set_at_ || last_arm_ + kRecheckNs <= now) return 0;
    set_at_ = now;
    due_ = last_arm_ + kRecheckNs;
    return due_;
  }
  // When the timer set expires; 0 if none is set.
  int64_t due() const { return due_; }

 private:
  int64_t due_ = 0;
  int64_t set_at_ = 0;  // when due_ was chosen: arms after it need a later look
  int64_t last_arm_ = 0;
};

// What arm_consumer() found.
enum class Armed : uint8_t {
  kBytes,  // the ring holds bytes: do not sleep (the request is withdrawn)
  kNow,    // the flag was clear and is set now: look again within 2 * kRecheckNs (RecheckTimer)
  kStill,  // the flag was still set by an earlier arm that no doorbell has taken since: the
           // look again owed for that arm is what bounds this sleep
};

// A part of a direct request that its target offers the initiator (Sharing a copy, above).
struct ShareOffer {
  uint64_t word = 0;    // the slot's word as the initiator read it (generation, kOffered)
  uint32_t seq = 0;     // the request's (wire::Header::seq)
  uint64_t offset = 0;  // where the part begins among the request's bytes
  uint64_t addr = 0;    // where it is in the target's memory
  uint64_t len = 0;     // the rest of the request, from offset
};

// How an offer ended, for the target.
enum class ShareEnd : uint8_t {
  kTakenBack,  // the initiator had not claimed it: the target copies the part
  kDone,       // the initiator copied it
  kNotDone,    // the initiator could not (or wrote what no initiator writes): the target copies it
  kStuck,      // the initiator claimed it and ended (its socket hung up) without finishing
};

enum class Status : uint8_t {
  kOk,
  kCorrupt,  // the peer wrote indices no producer or consumer could have
};

// The shared control block of one ring. Producer and consumer fields are on separate cache
// lines. Lives in the segment: never constructed or copied by either side.
struct RingControl {
  alignas(64) std::atomic<uint64_t> tail;              // bytes ever written; the producer's
  alignas(64) std::atomic<uint64_t> head;              // bytes ever consumed; the consumer's
  alignas(64) std::atomic<uint32_t> consumer_asleep;   // set by the consumer, cleared by a bell
  alignas(64) std::atomic<uint32_t> producer_blocked;  // set by the producer, cleared by a bell
};
static_assert(sizeof(RingControl) == 256, "the layout above");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "rings are shared between processes");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "rings are shared between processes");

// One direction of a segment, as one side sees it. The producer calls write() and
// arm_producer(); the consumer calls peek(), consume() and arm_consumer(). Both may call
// readable() and writable().
class Ring {
 public:
  Ring() = default;
  Ring(RingControl* ctl, unsigned char* data)
      : ctl_(ctl), data_(data), head_seen_(ctl->head.load(std::memory_order_acquire)) {}
  bool valid() const { return ctl_ != nullptr; }

  // Consumer. Bytes ready to read, and a pointer to the first `*contiguous` of them (the rest
  // start at the ring's beginning). kCorrupt if the peer's tail is impossible.
  // Acquire: the bytes the producer wrote before publishing its tail are visible.
  [[nodiscard]] Status peek(const unsigned char** p, size_t* contiguous, size_t* avail) const;
  // Consumer: frees the first n bytes (n <= what peek() reported). Release: the producer may
  // reuse them only after this side is done reading them. Returns true if the producer had
  // said it is blocked: the caller owes it a doorbell.
  [[nodiscard]] bool consume(size_t n);
  // Producer: copies as much of iov[0..cnt) as fits; returns the bytes written (0 when full).
  // Publishes the tail every kPublishEvery bytes on the way and at the end (release), then loads
  // the consumer's flag (relaxed: the doorbell protocol above): *bell tells whether the consumer
  // asked for a doorbell (the flag is cleared). The consumer's head is read (acquire) only when the
  // copy of it kept from the last read leaves less room than all of iov: kCorrupt if it is then
  // impossible (a corrupted head is caught when the producer needs the room it would give).
  [[nodiscard]] Status write(const iovec* iov, int cnt, size_t* written, bool* bell);
  // Producer: the same for all of iov[0..cnt) or nothing: *written tells which.
  [[nodiscard]] Status write_whole(const iovec* iov, int cnt, bool* written, bool* bell);
  // Producer, for a frame built in place: *at = where the next n bytes (at most kPublishEvery)
  // go, if they fit whole before the ring's end; else null, and write_whole() takes the frame.
  // kCorrupt as write(). Nothing is published until commit(n).
  [[nodiscard]] Status claim(size_t n, unsigned char** at);
  // Producer: publishes the n bytes claim() gave, as write() publishes its last ones, and sets
  // *bell the same way.
  void commit(size_t n, bool* bell);
  // Producer found the ring full: announces it, then looks again. True if there is room now
  // (write again instead of waiting).
  bool arm_producer();
  // Consumer is about to sleep: announces it, then looks again (both sequentially consistent).
  // kBytes if there are bytes now; a bogus tail also counts as bytes: reading it fails the
  // connection. Otherwise the sleep that follows is bounded as Armed says.
  Armed arm_consumer();

  // Producer: the consumer has taken every byte written so far but at most the last n
  // (acquire: nothing before those is still being read). Reads the consumer's head, one cache
  // line of the other side's.
  bool unread_at_most(size_t n);

  // Lock-free hints for the progress engine (relaxed loads; a stale answer only delays work
  // to the next round, and a sleeper is covered by arm_*()).
  bool readable() const;
  bool writable() const;

 private:
  Status write(const iovec* iov, int cnt, bool whole, size_t* written, bool* bell);
  // Producer: makes `tail` the consumer's to read and sets *bell as write() says.
  void publish(uint64_t tail, bool* bell);

  RingControl* ctl_ = nullptr;
  unsigned char* data_ = nullptr;
  // Producer: the consumer's head as last read. Heads only grow, so the room it implies is never
  // more than there is.
  uint64_t head_seen_ = 0;
};

// The fields of a segment's header that the accepting side checks before it maps the segment,
// as read from its first kSegmentHeaderCheckBytes bytes.
inline constexpr size_t kSegmentHeaderCheckBytes = 24;
struct SegmentHeaderFields {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  uint64_t ring_bytes = 0;
};
SegmentHeaderFields read_segment_header(const unsigned char* raw);

enum class SegmentFault : uint8_t {
  kNone,
  kSize,       // the object is not kSegmentBytes long
  kMagic,      // not a fabq segment, or of another layout
  kNonce,      // not the offer's (or 0, which no offer carries)
  kRingBytes,  // rings of another size than kRingBytes
};
// What keeps the accepting side from mapping an object of `object_bytes` with header `h` for an
// offer of `nonce`; kNone if nothing does. Pure (no I/O), any thread.
SegmentFault check_segment(const SegmentHeaderFields& h, uint64_t nonce, uint64_t object_bytes);

// A mapped segment. Move-only; unmaps (and, if this side still holds the name, unlinks it and
// lets go of its lock) when destroyed.
class Segment {
 public:
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  ~Segment();

  // The connecting side: a fresh segment with a new name and a random nonce, whose name it
  // holds locked (one descriptor) until the name is unlinked. A name already taken (by a
  // process of another PID namespace with the same pid) is passed over for the next, up to 16.
  // An invalid Segment if it cannot be made (no /dev/shm, out of memory, no descriptor, 16
  // names taken): the connection then stays on TCP. The first call in a process also removes
  // stale names (sweep_stale()).
  static Segment create();
  // Removes the names of this user's segments that no creator holds any longer: a process
  // killed between its offer and the answer leaves its name behind, and nobody else would
  // remove it. A name goes if its file is non-empty and flock(LOCK_EX | LOCK_NB) on it succeeds
  // (so no creator's LOCK_SH remains); its pid is not consulted, so a creator in another PID
  // namespace, whose pid is nobody's or somebody else's here, keeps its names. An empty file is
  // kept: its creator may not have locked it yet (one killed in that instant leaves an empty
  // name behind, which holds no memory). Only regular files of this user named as create()
  // names them are looked at. Returns how many names it removed. Any thread; it reads the
  // directory, opens and locks each candidate for a moment, and unlinks. `dir` is where POSIX
  // shared-memory names live; a test passes a directory of its own, which no other process's
  // sweep reaches.
  static size_t sweep_stale(const char* dir = "/dev/shm");
  // The accepting side: maps the segment the offer names if it is this user's private regular
  // file and check_segment() finds nothing wrong, then unlinks the name. An invalid Segment if
  // any of that fails.
  static Segment open(uint64_t id, uint64_t nonce);

  bool valid() const { return base_ != nullptr; }
  uint64_t id() const { return id_; }
  uint64_t nonce() const { return nonce_; }
  // Removes the name (both sides call it once the handshake is over) and, on the creating
  // side, lets go of its lock; the mapping stays.
  void unlink();
  // The ring this side writes into / reads from. `connecting` says which side this is.
  Ring tx(bool connecting) const;
  Ring rx(bool connecting) const;

  // Direct copies (above). The peer's pid if the proof holds, else 0. A few microseconds (one
  // process_vm_readv()).
  int prove_peer(bool connecting) const;
  // This side serves the peer's direct requests. Release: pairs with peer_serves().
  void serve_peer(bool connecting);
  // Shows the peer `pid` (proved) that this side can write its memory: writes the nonce into
  // the peer's reach cell. False if the kernel refuses or the peer named no cell.
  bool reach_peer(bool connecting, int pid) const;
  // The peer wrote the nonce into this side's reach cell: it can write this process's memory,
  // and may be offered parts (Who may be offered a part, above). Lock-free.
  bool peer_reaches() const;
  // The peer serves this side's direct requests. Acquire. Lock-free: a peer that wrote it
  // only hurts itself (it receives requests naming this side's buffers, which the kernel
  // already let it reach).
  bool peer_serves(bool connecting) const;

  // Copy advice (xport/copy_choice.h): this side's for the peer's sends to it, and the peer's
  // for this side's. Relaxed, lock-free: a stale or forged word only picks the other of two
  // ways that both work.
  void advise_peer(bool connecting, uint64_t advice);
  uint64_t peer_advice(bool connecting) const;

  // Sharing a copy (above). The target's side, under its connection's lock: offers part
  // (its word is ignored) and returns the word that names the offer; then settles it, spinning
  // while the initiator copies, until it is done or `peer_fd` (the connection's socket) says
  // the peer's end is gone.
  uint64_t offer_share(bool connecting, const ShareOffer& part);
  ShareEnd settle_share(bool connecting, uint64_t offered, int peer_fd);
  // The initiator's side: an offer of the peer's now, its fields read (acquire: the ones the
  // target wrote before it); claims it (false if the target took it back or offered another
  // since); says it is done. Lock-free, any thread; a stale answer only loses the offer.
  bool share_offered(bool connecting, ShareOffer* part) const;
  bool claim_share(bool connecting, const ShareOffer& part);
  void finish_share(bool connecting, const ShareOffer& part, bool copied);

 private:
  void reset();
  static std::string name_of(uint64_t id);
  // The id of the /dev/shm file `file` if it is named exactly as name_of() names segments.
  static std::optional<uint64_t> id_of(const char* file);

  void* base_ = nullptr;
  size_t size_ = 0;
  uint64_t id_ = 0;
  uint64_t nonce_ = 0;
  uint64_t share_gen_ = 0;  // this side's offers so far
  uint32_t cell_ = 0;       // this side's reach cell
  bool named_ = false;      // this side still has to unlink the name
  // The creator's: its flock(LOCK_SH) says "this name is mine" to every sweep until unlink().
  // A child forked meanwhile shares the lock, and keeps the name too while it runs.
  core::UniqueFd lock_;
};

// The memory of a peer process that Segment::prove_peer() proved: copies between it and this
// process, by the kernel, without a buffer in between. A value; any thread.
inline constexpr size_t kMaxPeerRanges = 16;
class PeerMemory {
 public:
  explicit PeerMemory(int pid) : pid_(pid) {}
  // The peer's ranges remote[0..n) (n <= kMaxPeerRanges) to [at, at + len) here, or the reverse;
  // len is the sum of their lengths. False when the kernel refuses or a range is not mapped: some
  // bytes may have moved.
  bool read(void* at, size_t len, const iovec* remote, size_t n) const;
  bool write(const void* at, size_t len, const iovec* remote, size_t n) const;
  // The same with several local ranges (ln, rn <= kMaxPeerRanges), len bytes on each side.
  bool readv(const iovec* local, size_t ln, const iovec* remote, size_t rn, size_t len) const;
  bool writev(const iovec* local, size_t ln, const iovec* remote, size_t rn, size_t len) const;

 private:
  int pid_;
};

// The ranges that hold bytes [off, off + len) of in[0..n) laid end to end, into out (at most n
// of them, none empty); returns how many. Fewer bytes if in[] holds fewer.
size_t slice(const iovec* in, size_t n, size_t off, size_t len, iovec* out);

}  // namespace fabq::xport::shm
