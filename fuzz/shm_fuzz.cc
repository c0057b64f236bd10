// libFuzzer target for what a same-host peer writes into a shared-memory segment
// (xport/shm.h): the header the accepting side checks before it maps the segment, and a ring
// whose indices and flags the peer may rewrite between any two operations of this side. Any
// broken invariant traps.
//
// Input layout (shorter inputs are padded with zeros):
//   bytes 0..23   the segment's header as the accepting side reads it: magic, nonce, ring bytes
//   bytes 24..31  the nonce the offer carried
//   bytes 32..39  the object's size
//   bytes 40..47  where both indices of the ring start (bytes ever written and consumed)
//   the rest      operations on the ring, each an op byte t and what t % 8 says:
//     0  write() of a 16-bit length n, in up to three pieces (cut where the next byte says)
//     1  write_whole() of a 16-bit length n, in one piece
//     2  claim() of a 16-bit length n, and commit() if it gave room
//     3  peek(), then consume() of the smaller of what it gave and a 16-bit count
//     4  arm_consumer(), arm_producer(), readable(), writable(), unread_at_most()
//     5  the peer sets the tail (8 bytes)
//     6  the peer sets the head (8 bytes)
//     7  the peer sets the two flags (a byte: bit 0 consumer_asleep, bit 1 producer_blocked)
//
// Invariants checked:
//   - check_segment() accepts exactly an object of kSegmentBytes whose header has the magic of
//     shm.h's layout, the offer's nonce (never 0) and kRingBytes, and names the first rule broken;
//     read_segment_header() reads the fields at their offsets;
//   - whatever the peer wrote, every byte this side reads or writes lies inside the ring (its
//     bytes are a heap block of exactly kRingBytes, where AddressSanitizer sees past the end),
//     peek() gives at most kRingBytes, of which the contiguous part ends at the ring's end at the
//     latest, claim() gives room for n bytes inside the ring and at most kPublishEvery, a write
//     reports at most what it was given; peek() and write() say kCorrupt exactly when the
//     indices they read are more than a ring apart;
//   - while the peer has written nothing, the ring is a FIFO: peek() gives tail - head bytes,
//     contiguous up to the ring's end, holding exactly the stream's bytes in order; a write takes
//     min(n, room), write_whole() all or nothing, claim() gives room exactly when n fits before
//     the ring's end; the flags, readable(), writable() and arm_*() agree with the indices.
#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "xport/shm.h"

namespace fabq::xport::shm {
namespace {

constexpr uint64_t kMagic = 0x3167657371626166ULL;  // "fabqseg1", shm.h's layout

void check(bool ok) {
  if (!ok) __builtin_trap();
}

uint64_t u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// The stream's byte at position k (counted from where the indices started).
unsigned char stream_byte(uint64_t k) {
  return static_cast<unsigned char>(k * 131 + (k >> 8) + 7);
}

class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool empty() const { return n_ == 0; }
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(byte() | byte() << 8); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{byte()} << (8 * i);
    return v;
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

void check_header(const unsigned char* in) {
  const SegmentHeaderFields h = read_segment_header(in);
  check(h.magic == u64(in) && h.nonce == u64(in + 8) && h.ring_bytes == u64(in + 16));
  const uint64_t nonce = u64(in + 24);
  const uint64_t object_bytes = u64(in + 32);
  SegmentFault want = SegmentFault::kNone;
  if (object_bytes != 4096 + 2 * kRingBytes) {
    want = SegmentFault::kSize;
  } else if (h.magic != kMagic) {
    want = SegmentFault::kMagic;
  } else if (nonce == 0 || h.nonce != nonce) {
    want = SegmentFault::kNonce;
  } else if (h.ring_bytes != kRingBytes) {
    want = SegmentFault::kRingBytes;
  }
  check(check_segment(h, nonce, object_bytes) == want);
}

// One ring, both of its sides in this process, and the peer's writes into its control block.
struct Harness {
  RingControl* ctl;
  unsigned char* data;
  uint64_t start;        // where the indices started
  bool honest = true;    // the peer has written nothing
  uint64_t written = 0;  // the stream's bytes written so far (honest only)
  unsigned char scratch[1 << 16];

  uint64_t tail() const { return ctl->tail.load(std::memory_order_relaxed); }
  uint64_t head() const { return ctl->head.load(std::memory_order_relaxed); }
  uint64_t room() const { return kRingBytes - (tail() - head()); }

  // The next n bytes of the stream, into scratch.
  void fill(size_t n) {
    for (size_t i = 0; i < n; ++i) scratch[i] = stream_byte(written + i);
  }

  void wrote(Status s, uint64_t tail_before, size_t n, size_t want, size_t wrote_bytes) {
    check(wrote_bytes <= want);
    if (s == Status::kCorrupt) {
      check(!honest && wrote_bytes == 0);
      return;
    }
    if (wrote_bytes != 0) check(tail() - tail_before == wrote_bytes);
    if (!honest) return;
    check(wrote_bytes == n);
    written += wrote_bytes;
  }
};

void run(const uint8_t* data, size_t size) {
  unsigned char in[48] = {};
  std::memcpy(in, data, size < sizeof(in) ? size : sizeof(in));
  check_header(in);

  // The ring's bytes: exactly kRingBytes on the heap, so that AddressSanitizer sees past them.
  static unsigned char* const ring = new unsigned char[kRingBytes];
  static RingControl* const ctl = new RingControl;
  auto h = std::make_unique<Harness>();
  h->ctl = ctl;
  h->data = ring;
  h->start = u64(in + 40);
  ctl->tail.store(h->start, std::memory_order_relaxed);
  ctl->head.store(h->start, std::memory_order_relaxed);
  ctl->consumer_asleep.store(0, std::memory_order_relaxed);
  ctl->producer_blocked.store(0, std::memory_order_relaxed);
  Ring producer(ctl, ring);
  Ring consumer(ctl, ring);
  const uint8_t* ops = size > sizeof(in) ? data + sizeof(in) : data + size;
  Input input(ops, size > sizeof(in) ? size - sizeof(in) : 0);

  for (int steps = 0; !input.empty() && steps < 256; ++steps) {
    const uint8_t t = input.byte();
    switch (t % 8) {
      case 0: {
        const size_t n = input.u16();
        const size_t cut1 = std::min<size_t>(n, input.u16());
        const size_t cut2 = std::min<size_t>(n - cut1, input.u16());
        h->fill(n);
        const iovec iov[3] = {{h->scratch, cut1},
                              {h->scratch + cut1, cut2},
                              {h->scratch + cut1 + cut2, n - cut1 - cut2}};
        const uint64_t before = h->tail();
        const uint64_t room = h->room();
        size_t w = 0;
        bool bell = false;
        const Status s = producer.write(iov, 3, &w, &bell);
        h->wrote(s, before, std::min<uint64_t>(n, h->honest ? room : n), n, w);
        break;
      }
      case 1: {
        const size_t n = input.u16();
        h->fill(n);
        const iovec iov{h->scratch, n};
        const uint64_t before = h->tail();
        const bool fits = n <= h->room();
        bool whole = false;
        bool bell = false;
        const Status s = producer.write_whole(&iov, 1, &whole, &bell);
        check(!whole || n > 0);
        if (s == Status::kOk && h->honest) check(whole == (fits && n > 0));
        h->wrote(s, before, whole ? n : 0, n, whole ? n : 0);
        break;
      }
      case 2: {
        const size_t n = input.u16() % (2 * kPublishEvery);
        unsigned char* at = nullptr;
        const uint64_t before = h->tail();
        const bool fits =
            n <= h->room() && n <= kPublishEvery && (before & (kRingBytes - 1)) + n <= kRingBytes;
        const Status s = producer.claim(n, &at);
        if (s == Status::kCorrupt) {
          check(!h->honest && at == nullptr);
          break;
        }
        if (h->honest) check((at != nullptr) == fits);
        if (at == nullptr) break;
        check(at >= ring && at + n <= ring + kRingBytes && n <= kPublishEvery);
        h->fill(n);
        std::memcpy(at, h->scratch, n);
        bool bell = false;
        producer.commit(n, &bell);
        h->wrote(Status::kOk, before, n, n, n);
        break;
      }
      case 3: {
        const uint64_t tail = h->tail();
        const uint64_t head = h->head();
        const unsigned char* p = nullptr;
        size_t contiguous = 0;
        size_t avail = 0;
        const Status s = consumer.peek(&p, &contiguous, &avail);
        check((s == Status::kCorrupt) == (tail - head > kRingBytes));
        if (s == Status::kCorrupt) {
          check(!h->honest);
          break;
        }
        check(avail <= kRingBytes && contiguous <= avail);
        check(p >= ring && p + contiguous <= ring + kRingBytes);
        // The ends of what the consumer may read: the contiguous part, then the rest from the
        // ring's start (AddressSanitizer checks the reads; the bounds are checked above).
        volatile unsigned char sink = 0;
        if (contiguous > 0) sink = sink ^ p[0] ^ p[contiguous - 1];
        if (avail > contiguous) sink = sink ^ ring[avail - contiguous - 1];
        if (h->honest) {
          check(avail == tail - head);
          check(contiguous == std::min<size_t>(avail, kRingBytes - (head & (kRingBytes - 1))));
          // The stream's bytes in order: the first few KiB and the last ones.
          const uint64_t k = head - h->start;
          auto at = [&](size_t i) { return i < contiguous ? p[i] : ring[i - contiguous]; };
          for (size_t i = 0; i < std::min<size_t>(avail, 4096); ++i) {
            check(at(i) == stream_byte(k + i));
          }
          for (size_t i = avail > 64 ? avail - 64 : 0; i < avail; ++i) {
            check(at(i) == stream_byte(k + i));
          }
        }
        const size_t n = std::min<size_t>(avail, input.u16());
        const bool blocked = ctl->producer_blocked.load(std::memory_order_relaxed) != 0;
        const bool bell = consumer.consume(n);
        check(bell == (blocked && n > 0));
        check(h->head() == head + n);
        break;
      }
      case 4: {
        const uint64_t tail = h->tail();
        const uint64_t head = h->head();
        check(consumer.readable() == (tail != head));
        check(producer.writable() == (tail - head < kRingBytes));
        const Armed a = consumer.arm_consumer();
        check((a == Armed::kBytes) == (tail != head));
        check(ctl->consumer_asleep.load(std::memory_order_relaxed) == (a == Armed::kBytes ? 0 : 1));
        const bool room = producer.arm_producer();
        check(room == (tail - head < kRingBytes));
        const size_t n = input.u16();
        check(producer.unread_at_most(n) == (tail - head <= n));
        // The peer's flags are left as the arms set them, or cleared.
        if (input.byte() & 1) {
          ctl->consumer_asleep.store(0, std::memory_order_relaxed);
          ctl->producer_blocked.store(0, std::memory_order_relaxed);
        }
        break;
      }
      case 5:
        ctl->tail.store(input.u64(), std::memory_order_relaxed);
        h->honest = false;
        break;
      case 6:
        ctl->head.store(input.u64(), std::memory_order_relaxed);
        h->honest = false;
        break;
      case 7: {
        const uint8_t f = input.byte();
        ctl->consumer_asleep.store(f & 1, std::memory_order_relaxed);
        ctl->producer_blocked.store((f >> 1) & 1, std::memory_order_relaxed);
        break;
      }
    }
  }
}

}  // namespace
}  // namespace fabq::xport::shm

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabq::xport::shm::run(data, size);
  return 0;
}
