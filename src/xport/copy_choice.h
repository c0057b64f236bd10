// fabq transport: which way a large message between two processes of one host is copied,
// chosen by what each way costs on this machine.
//
// A message (or RMA write) that may go direct (Conn::go_direct_locked) can cross either way:
//
//   kRing    the sender copies it into the shared ring and the receiver out of it; two copies,
//            on two cores at once, a chunk (shm::kPublishEvery) apart.
//   kDirect  the receiver copies it once from the sender's buffers (process_vm_readv).
//
// Which is faster differs between machines by several times either way: seen on a 2-core AMD
// EPYC VM, the ring moved a 64 KiB answer in 2.2 us and process_vm_readv in 6.8 us; on a 2-core
// Intel Xeon VM, 8-9 us against 6. So the receiver measures, and tells the sender:
//
//   - The receiver times the messages it takes that may have come either way, from header to
//     last byte (CopyAdvisor::record), per size class and way, and keeps each way's recent
//     samples. Of the way it advises it times only some (CopyAdvisor::wants).
//   - Once it holds enough of both ways for a size class, its advice says which is faster. It
//     publishes the advice in the segment (shm::Segment::advise_peer), where the sender reads it.
//   - The sender (CopyPlanner::choose) follows the advice; while there is none for a class it
//     sends three of each way in turn, and once there is, it still sends a few messages the
//     other way now and then (kProbeRun, kProbeFirst, kProbePeriod), so that a change (another
//     machine's load, another size mix) is seen.
//
// Size classes are powers of two from kCopyClassMin (16 KiB): [16, 32) KiB, [32, 64) KiB, ... and
// the last one from 2 MiB on. Smaller messages fall in the first.
//
// Advice word (what the receiver publishes): bit c says class c is known, bit 16 + c that the
// direct way is faster for it. A peer may write any word: it only chooses between two ways,
// both of which the sender supports.
//
// Threads: both classes are plain values used under their connection's lock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fabq::xport {

enum class CopyPath : uint8_t { kRing = 0, kDirect = 1 };

inline constexpr size_t kCopyClassMin = 16 * 1024;
inline constexpr int kCopyClasses = 8;
// Once a class is known, kProbeRun messages take the way not advised after kProbeFirst
// messages, then after twice as many each time up to kProbePeriod: an advice drawn from a
// start that was slow for one way (its first messages fault pages in) is soon corrected, and
// a settled one costs about 1 % of the messages.
inline constexpr uint32_t kProbeFirst = 16;
inline constexpr uint32_t kProbePeriod = 256;
inline constexpr uint32_t kProbeRun = 3;

// The advice as text for a log line ("64K:ring 1M:direct", known classes only; "none"), into
// out[0..n) with its terminating NUL.
void format_advice(uint64_t advice, char* out, size_t n);

// The class of a message of len bytes.
int copy_class(size_t len);
inline bool advice_known(uint64_t advice, int c) {
  return (advice >> c) & 1;
}
inline bool advice_direct(uint64_t advice, int c) {
  return (advice >> (16 + c)) & 1;
}

// The receiver's side.
class CopyAdvisor {
 public:
  // Samples of each way kept per class; the estimate is the second smallest of them, so that
  // one sample slowed by the cold caches of a way not taken for a while, or by the receiver
  // being preempted, decides nothing.
  static constexpr int kSamples = 4;
  // A way is known for a class from this many samples on.
  static constexpr int kEnough = 3;

  // Of the way advised for a class, one message in kSampleEvery is timed: reading the clock
  // twice costs a 16 KiB message about 5 %. Every message of a class not known yet, or of
  // the way not advised (the sender's probes), is.
  static constexpr uint32_t kSampleEvery = 16;

  // Destinations of direct copies remembered (record_direct()).
  static constexpr int kDestinations = 16;

  // Whether to time a message of len bytes that comes `path`'s way (counts it).
  bool wants(size_t len, CopyPath path);
  // A message of len bytes took ns nanoseconds `path`'s way. True when the advice changed.
  bool record(size_t len, CopyPath path, uint64_t ns);
  // A direct copy of len bytes took ns nanoseconds into the destination named `dest` (any value
  // that tells one destination from another: a buffer's address, an RMA key and address).
  //
  // The first direct copy into a destination may cost many times what later ones do: on the
  // 2-core EPYC VM, process_vm_readv() put 4 MiB into pages it had not written before in
  // 5.5-9 ms and into the same pages afterwards in 0.3-0.9 ms, however the process had touched
  // them itself (presumably the hypervisor mapping them for the kernel's first write; the
  // process sees no page fault). A ring copy has no such cost. So a sample whose destination
  // is not among the last kDestinations recorded here is left out, unless the kEnough before it
  // all went to new destinations too: then new destinations are what this peer's messages meet.
  // (Only timed copies are recorded: one untimed before may have warmed a destination taken
  // for new, which costs a sample, not a wrong one.)
  // True when the advice changed.
  bool record_direct(size_t len, uint64_t dest, uint64_t ns);
  uint64_t advice() const { return advice_; }
  // The estimate for class c and `path` (ns), 0 while there are no samples.
  uint32_t estimate(int c, CopyPath path) const;

 private:
  struct Window {
    uint32_t ns[kSamples] = {};
    uint8_t count = 0;
    uint8_t next = 0;
  };
  Window windows_[kCopyClasses][2];
  uint32_t untimed_[kCopyClasses] = {};
  uint64_t advice_ = 0;
  uint64_t destinations_[kDestinations] = {};
  uint8_t destinations_known_ = 0;  // entries of destinations_ in use
  uint8_t destination_next_ = 0;    // the entry the next new destination replaces
  uint8_t new_in_a_row_ = 0;        // direct copies into new destinations since a known one
};

// The sender's side.
class CopyPlanner {
 public:
  // The way for a message of len bytes that may take either, given the peer's advice. When the
  // turn is the direct way's, direct_ok() says whether this message may take it now; if not,
  // it takes the ring and the turn stays for the next one.
  template <typename DirectOk>
  CopyPath choose(size_t len, uint64_t advice, const DirectOk& direct_ok) {
    const CopyPath way = next(len, advice);
    if (way == CopyPath::kDirect && !direct_ok()) return CopyPath::kRing;
    take(len, advice);
    return way;
  }
  CopyPath choose(size_t len, uint64_t advice) {
    return choose(len, advice, [] { return true; });
  }

 private:
  // The way of this turn, and the move to the next turn.
  CopyPath next(size_t len, uint64_t advice) const;
  void take(size_t len, uint64_t advice);

  struct Turns {
    uint32_t exploring = 0;  // messages sent while the class was not known
    uint32_t to_probe = 0;   // counts down to 1 at the next probe's first message
    uint32_t period = 0;     // from this probe's start to the next one's (0: not known yet)
    uint32_t probing = 0;    // messages of the current probe left
  };
  Turns turns_[kCopyClasses];
};

}  // namespace fabq::xport
