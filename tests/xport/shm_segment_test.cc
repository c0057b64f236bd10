// A shared-memory Segment as its two sides see it: its name, nonce and mapping after create()
// and open(), what open() refuses, unlink(), destruction and moves.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "core/unique_fd.h"

#include "shm_util.h"

namespace fabq::xport::shm {
namespace {

// An id of this process that Segment::create() will not hand out in a test (its counter starts
// at 1 and a test makes a handful).
uint64_t unused_id(uint32_t n = 0xfffffff0u) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(getpid())) << 32) | n;
}

TEST(ShmSegment, ADefaultSegmentIsInvalid) {
  EXPECT_FALSE(Segment().valid());
}

TEST(ShmSegment, CreateGivesAValidSegmentWithANonzeroNonceAndAPrivateName) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  EXPECT_NE(s.nonce(), 0u);
  EXPECT_EQ(s.id() >> 32, static_cast<uint32_t>(getpid())) << "the id names the creator";
  struct stat st {};
  ASSERT_EQ(::stat(shm_path(s.id()).c_str(), &st), 0) << shm_path(s.id());
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_TRUE(s.tx(true).valid());
  EXPECT_TRUE(s.rx(true).valid());
}

TEST(ShmSegment, TwoCreatedSegmentsHaveDifferentIdsAndNonces) {
  const Segment a = Segment::create();
  const Segment b = Segment::create();
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.nonce(), b.nonce());
}

TEST(ShmSegment, AFreshSegmentHasBothRingsEmptyAndWritable) {
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  for (const bool connecting : {true, false}) {
    Ring rx = s.rx(connecting);
    EXPECT_FALSE(rx.readable()) << "connecting " << connecting;
    EXPECT_TRUE(rx.writable()) << "connecting " << connecting;
    const unsigned char* p = nullptr;
    size_t contiguous = 1;
    size_t avail = 1;
    EXPECT_EQ(rx.peek(&p, &contiguous, &avail), Status::kOk);
    EXPECT_EQ(avail, 0u);
    EXPECT_EQ(contiguous, 0u);
  }
}

TEST(ShmSegment, OpenWithIdAndNonceMapsTheSameMemoryInBothDirections) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  EXPECT_EQ(acceptor.id(), creator.id());
  EXPECT_EQ(acceptor.nonce(), creator.nonce());

  // Connecting side to accepting side.
  Ring c_tx = creator.tx(true);
  Ring a_rx = acceptor.rx(false);
  const Bytes there = pattern(1000, 1);
  ASSERT_EQ(write_bytes(c_tx, there), there.size());
  EXPECT_TRUE(a_rx.readable());
  EXPECT_FALSE(creator.rx(true).readable()) << "the other direction is another ring";
  EXPECT_EQ(read_all(a_rx), there);

  // Accepting side to connecting side.
  Ring a_tx = acceptor.tx(false);
  Ring c_rx = creator.rx(true);
  const Bytes back = pattern(777, 2);
  ASSERT_EQ(write_bytes(a_tx, back), back.size());
  EXPECT_TRUE(c_rx.readable());
  EXPECT_FALSE(a_rx.readable());
  EXPECT_EQ(read_all(c_rx), back);

  // The control blocks are shared too: a consumer's request for a doorbell reaches the
  // producer on the other side.
  EXPECT_EQ(a_rx.arm_consumer(), Armed::kNow);
  bool bell = false;
  ASSERT_EQ(write_bytes(c_tx, Bytes{1, 2, 3}, &bell), 3u);
  EXPECT_TRUE(bell);
}

// Copy advice (xport/copy_choice.h): what each side advises is what the other reads as its
// peer's, and neither reads its own.
TEST(ShmSegment, EachSidesCopyAdviceIsThePeersToRead) {
  Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  Segment acceptor = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(acceptor.valid());
  EXPECT_EQ(creator.peer_advice(true), 0u) << "a fresh segment advises nothing";
  EXPECT_EQ(acceptor.peer_advice(false), 0u);
  creator.advise_peer(true, 0x10001);
  acceptor.advise_peer(false, 0x4);
  EXPECT_EQ(acceptor.peer_advice(false), 0x10001u);
  EXPECT_EQ(creator.peer_advice(true), 0x4u);
}

TEST(ShmSegment, OpenWithAWrongNonceIsInvalidAndLeavesTheNameForTheRightOne) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce() ^ 1).valid());
  EXPECT_FALSE(Segment::open(creator.id(), ~creator.nonce()).valid());
  EXPECT_FALSE(Segment::open(creator.id(), 0).valid());
  EXPECT_TRUE(name_exists(creator.id())) << "a failed open does not take the name away";
  EXPECT_TRUE(Segment::open(creator.id(), creator.nonce()).valid());
}

TEST(ShmSegment, OpenOfAnIdNobodyCreatedIsInvalid) {
  const uint64_t id = unused_id();
  ASSERT_FALSE(name_exists(id));
  EXPECT_FALSE(Segment::open(id, 12345).valid());
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid());
  EXPECT_FALSE(Segment::open(s.id() + 1, s.nonce()).valid()) << "the next id is nobody's yet";
}

// A shm object of the segment's name pattern made by hand: the accepting side must not map
// whatever happens to carry the name. Held as a creator holds its name, so that another
// process's sweep leaves it alone while the test runs.
class HandMadeObject {
 public:
  HandMadeObject(uint64_t id, off_t size)
      : name_("/fabq-" + std::to_string(id >> 32) + "-" + std::to_string(id & 0xffffffffu)),
        fd_(shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) {
    ok_ = fd_.valid() && flock(fd_.get(), LOCK_SH) == 0 && ftruncate(fd_.get(), size) == 0;
  }
  ~HandMadeObject() {
    if (fd_.valid()) shm_unlink(name_.c_str());
  }
  bool ok() const { return ok_; }

 private:
  std::string name_;
  core::UniqueFd fd_;
  bool ok_ = false;
};

TEST(ShmSegment, CreateTakesTheNextNameWhenAProcessOfAnotherPidNamespaceHasIt) {
  // The next two names of this process's counter, made first by somebody else: a process of
  // another PID namespace whose pid has the same number.
  const Segment first = Segment::create();
  ASSERT_TRUE(first.valid());
  const HandMadeObject taken(first.id() + 1, 4096);
  const HandMadeObject also_taken(first.id() + 2, 4096);
  ASSERT_TRUE(taken.ok());
  ASSERT_TRUE(also_taken.ok());
  const Segment s = Segment::create();
  ASSERT_TRUE(s.valid()) << "shared memory given up over a taken name";
  EXPECT_EQ(s.id(), first.id() + 3);
  EXPECT_TRUE(Segment::open(s.id(), s.nonce()).valid());
}

TEST(ShmSegment, OpenRefusesAnObjectOfTheWrongSize) {
  const uint64_t id = unused_id(0xfffffff1u);
  const HandMadeObject obj(id, 4096);
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(Segment::open(id, 1).valid());
}

TEST(ShmSegment, OpenRefusesAnObjectOfTheRightSizeWithoutTheSegmentHeader) {
  off_t size = 0;
  {
    const Segment real = Segment::create();
    ASSERT_TRUE(real.valid());
    struct stat st {};
    ASSERT_EQ(::stat(shm_path(real.id()).c_str(), &st), 0);
    size = st.st_size;
  }
  const uint64_t id = unused_id(0xfffffff2u);
  const HandMadeObject obj(id, size);  // all zeros: no magic, nonce 0
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(Segment::open(id, 1).valid());
  EXPECT_TRUE(name_exists(id));
}

// The accepting side's check of an offered segment, before it maps it: the object's size, then
// the header's magic, the offer's nonce (never 0) and the rings' size, each as it was read.
TEST(ShmSegment, CheckSegmentNamesWhatKeepsAnObjectFromBeingMapped) {
  const SegmentHeaderFields good{.magic = 0x3167657371626166, .nonce = 7, .ring_bytes = kRingBytes};
  EXPECT_EQ(check_segment(good, 7, kSegmentBytes), SegmentFault::kNone);
  EXPECT_EQ(check_segment(good, 7, kSegmentBytes - 1), SegmentFault::kSize);
  EXPECT_EQ(check_segment(good, 7, kSegmentBytes + 4096), SegmentFault::kSize);
  SegmentHeaderFields h = good;
  h.magic ^= 1;
  EXPECT_EQ(check_segment(h, 7, kSegmentBytes), SegmentFault::kMagic);
  EXPECT_EQ(check_segment(good, 8, kSegmentBytes), SegmentFault::kNonce);
  h = good;
  h.nonce = 0;
  EXPECT_EQ(check_segment(h, 0, kSegmentBytes), SegmentFault::kNonce) << "no offer carries 0";
  h = good;
  h.ring_bytes = 2 * kRingBytes;
  EXPECT_EQ(check_segment(h, 7, kSegmentBytes), SegmentFault::kRingBytes);
  unsigned char raw[kSegmentHeaderCheckBytes];
  const uint64_t words[3] = {good.magic, good.nonce, good.ring_bytes};
  std::memcpy(raw, words, sizeof(raw));
  const SegmentHeaderFields read = read_segment_header(raw);
  EXPECT_EQ(read.magic, good.magic);
  EXPECT_EQ(read.nonce, good.nonce);
  EXPECT_EQ(read.ring_bytes, good.ring_bytes);
}

// A segment is its user's alone (0600), whatever the umask: one that took the owner's write bit
// would keep the accepting side from opening it to write, and the connection from shared memory.
TEST(ShmSegment, CreateMakesTheSegmentItsUsersAloneWhateverTheUmask) {
  for (const mode_t mask : {0000, 0022, 0277}) {
    const mode_t was = umask(mask);
    const Segment s = Segment::create();
    umask(was);
    ASSERT_TRUE(s.valid()) << std::oct << mask;
    struct stat st {};
    ASSERT_EQ(::stat(shm_path(s.id()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "umask " << std::oct << mask;
  }
}

// Other users may not read or write what the rings carry: a segment they could is refused, even
// with the right size, header and nonce.
TEST(ShmSegment, OpenRefusesASegmentOtherUsersMayReadOrWrite) {
  for (const mode_t mode : {0666, 0640, 0602}) {
    const Segment creator = Segment::create();
    ASSERT_TRUE(creator.valid());
    ASSERT_EQ(chmod(shm_path(creator.id()).c_str(), mode), 0);
    EXPECT_FALSE(Segment::open(creator.id(), creator.nonce()).valid()) << std::oct << mode;
    ASSERT_EQ(chmod(shm_path(creator.id()).c_str(), 0600), 0);
    EXPECT_TRUE(Segment::open(creator.id(), creator.nonce()).valid()) << "its user's alone again";
  }
}

// A link at an offered name is not followed, even to a real segment with that nonce.
TEST(ShmSegment, OpenRefusesALinkToASegment) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  const uint64_t id = unused_id(0xfffffff3u);
  ASSERT_EQ(symlink(shm_path(creator.id()).c_str(), shm_path(id).c_str()), 0);
  EXPECT_FALSE(Segment::open(id, creator.nonce()).valid());
  unlink(shm_path(id).c_str());
  EXPECT_TRUE(name_exists(creator.id()));
}

TEST(ShmSegment, OpenRemovesTheNameSoASecondOpenFails) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  ASSERT_TRUE(name_exists(creator.id()));
  const Segment first = Segment::open(creator.id(), creator.nonce());
  ASSERT_TRUE(first.valid());
  EXPECT_FALSE(name_exists(creator.id())) << shm_path(creator.id());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce()).valid());
}

TEST(ShmSegment, UnlinkOnTheCreatorRemovesTheNameAndKeepsTheMapping) {
  Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  creator.unlink();
  EXPECT_FALSE(name_exists(creator.id())) << shm_path(creator.id());
  EXPECT_FALSE(Segment::open(creator.id(), creator.nonce()).valid());
  EXPECT_TRUE(creator.valid());
  Ring tx = creator.tx(true);
  ASSERT_EQ(write_bytes(tx, Bytes{7, 8, 9}), 3u);
  EXPECT_TRUE(tx.readable());
  creator.unlink();  // a second time does nothing
  EXPECT_TRUE(creator.valid());
}

TEST(ShmSegment, DestroyingACreatedButNeverOpenedSegmentRemovesItsName) {
  uint64_t id = 0;
  {
    const Segment s = Segment::create();
    ASSERT_TRUE(s.valid());
    id = s.id();
    ASSERT_TRUE(name_exists(id)) << shm_path(id);
  }
  EXPECT_FALSE(name_exists(id)) << shm_path(id);
}

TEST(ShmSegment, DestroyingTheAcceptingSideLeavesTheCreatorsMappingWhole) {
  const Segment creator = Segment::create();
  ASSERT_TRUE(creator.valid());
  {
    const Segment acceptor = Segment::open(creator.id(), creator.nonce());
    ASSERT_TRUE(acceptor.valid());
    Ring a_tx = acceptor.tx(false);
    ASSERT_EQ(write_bytes(a_tx, Bytes{4, 5, 6}), 3u);
  }
  Ring c_rx = creator.rx(true);
  EXPECT_EQ(read_all(c_rx), (Bytes{4, 5, 6}));
}

TEST(ShmSegment, AMovedSegmentTakesItsNameAlongAndTheSourceBecomesInvalid) {
  Segment a = Segment::create();
  ASSERT_TRUE(a.valid());
  const uint64_t id = a.id();
  const uint64_t nonce = a.nonce();
  {
    Segment b(std::move(a));
    EXPECT_FALSE(a.valid());  // the moved-from state is what is checked
    ASSERT_TRUE(b.valid());
    EXPECT_EQ(b.id(), id);
    EXPECT_EQ(b.nonce(), nonce);
    a = Segment();  // destroying or replacing the moved-from segment leaves the name
    EXPECT_TRUE(name_exists(id));
  }
  EXPECT_FALSE(name_exists(id)) << "the new owner unlinked it";
}

TEST(ShmSegment, MoveAssignmentOverACreatedSegmentRemovesTheOldName) {
  Segment a = Segment::create();
  Segment b = Segment::create();
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  const uint64_t old_id = a.id();
  const uint64_t new_id = b.id();
  a = std::move(b);
  EXPECT_FALSE(name_exists(old_id));
  EXPECT_TRUE(name_exists(new_id));
  EXPECT_EQ(a.id(), new_id);
  EXPECT_TRUE(a.valid());
}

// --- Sharing a copy (shm.h): one offer at a time per target, each ending exactly one way.

struct SharePair {
  SharePair() {
    int fds[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0) {
      target_end.reset(fds[0]);
      initiator_end.reset(fds[1]);
    }
  }
  Segment initiator = Segment::create();  // the connecting side
  Segment target = Segment::open(initiator.id(), initiator.nonce());
  // The connection's socket, as the target's settle_share() watches it.
  core::UniqueFd target_end;
  core::UniqueFd initiator_end;
  int fd() const { return target_end.get(); }
  static constexpr ShareOffer kPart{.seq = 7, .offset = 4096, .addr = 0x1000, .len = 100};
};

TEST(ShmShare, OnlyAPeerThatWroteTheNonceIntoThisSidesMemoryReachesIt) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  EXPECT_FALSE(p.target.peer_reaches()) << "nobody wrote its reach cell yet";
  EXPECT_FALSE(p.initiator.peer_reaches());
  // A peer that writes its flag serves nothing more than before: it still reaches no memory.
  p.initiator.serve_peer(true);
  EXPECT_FALSE(p.target.peer_reaches());
  EXPECT_FALSE(p.initiator.reach_peer(true, 0)) << "no pid";
  ASSERT_TRUE(p.initiator.reach_peer(true, getpid()));
  EXPECT_TRUE(p.target.peer_reaches());
  EXPECT_FALSE(p.initiator.peer_reaches()) << "each side's cell is its own";
  // Another pair's nonce in a cell is not this one's.
  SharePair other;
  ASSERT_TRUE(other.target.valid());
  EXPECT_FALSE(other.target.peer_reaches());
}

TEST(ShmShare, TheInitiatorSeesTheOfferWithItsFieldsAndATargetThatTakesItBackCopiesItself) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  ShareOffer seen;
  EXPECT_FALSE(p.initiator.share_offered(true, &seen)) << "nothing offered yet";
  const uint64_t offered = p.target.offer_share(false, SharePair::kPart);
  ASSERT_TRUE(p.initiator.share_offered(true, &seen));
  EXPECT_EQ(seen.word, offered);
  EXPECT_EQ(seen.seq, 7u);
  EXPECT_EQ(seen.offset, 4096u);
  EXPECT_EQ(seen.addr, 0x1000u);
  EXPECT_EQ(seen.len, 100u);
  EXPECT_FALSE(p.target.share_offered(false, &seen)) << "a side sees its peer's offers only";
  EXPECT_EQ(p.target.settle_share(false, offered, p.fd()), ShareEnd::kTakenBack);
  EXPECT_FALSE(p.initiator.claim_share(true, seen)) << "claimed after it was taken back";
  EXPECT_FALSE(p.initiator.share_offered(true, &seen));
}

TEST(ShmShare, AClaimedPartIsDoneOrNotDoneAsTheInitiatorSays) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  for (const bool copied : {true, false}) {
    const uint64_t offered = p.target.offer_share(false, SharePair::kPart);
    ShareOffer seen;
    ASSERT_TRUE(p.initiator.share_offered(true, &seen));
    ASSERT_TRUE(p.initiator.claim_share(true, seen));
    EXPECT_FALSE(p.initiator.claim_share(true, seen)) << "claimed twice";
    p.initiator.finish_share(true, seen, copied);
    EXPECT_EQ(p.target.settle_share(false, offered, p.fd()),
              copied ? ShareEnd::kDone : ShareEnd::kNotDone);
  }
}

TEST(ShmShare, AnOldOffersClaimDoesNotTakeTheNextOne) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  const uint64_t first = p.target.offer_share(false, SharePair::kPart);
  ShareOffer old;
  ASSERT_TRUE(p.initiator.share_offered(true, &old));
  ASSERT_EQ(p.target.settle_share(false, first, p.fd()), ShareEnd::kTakenBack);
  const uint64_t second = p.target.offer_share(false, SharePair::kPart);
  EXPECT_NE(second, first) << "each offer has its own generation";
  EXPECT_FALSE(p.initiator.claim_share(true, old));
  EXPECT_EQ(p.target.settle_share(false, second, p.fd()), ShareEnd::kTakenBack);
}

TEST(ShmShare, AClaimedPartIsWaitedForHoweverLongItTakes) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  const uint64_t offered = p.target.offer_share(false, SharePair::kPart);
  ShareOffer seen;
  ASSERT_TRUE(p.initiator.share_offered(true, &seen));
  ASSERT_TRUE(p.initiator.claim_share(true, seen));
  constexpr std::chrono::milliseconds kSlow{1500};  // longer than any time limit would be
  const auto t0 = std::chrono::steady_clock::now();
  std::thread slow([&] {
    std::this_thread::sleep_for(kSlow);
    p.initiator.finish_share(true, seen, true);
  });
  EXPECT_EQ(p.target.settle_share(false, offered, p.fd()), ShareEnd::kDone);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, kSlow);
  slow.join();
}

TEST(ShmShare, AClaimWhosePeerEndedIsStuckAndAnythingElseIsNotDone) {
  SharePair p;
  ASSERT_TRUE(p.target.valid());
  uint64_t offered = p.target.offer_share(false, SharePair::kPart);
  ShareOffer seen;
  ASSERT_TRUE(p.initiator.share_offered(true, &seen));
  ASSERT_TRUE(p.initiator.claim_share(true, seen));
  p.initiator_end.reset();  // the initiator's process or connection ended
  EXPECT_EQ(p.target.settle_share(false, offered, p.fd()), ShareEnd::kStuck);
  // A peer that writes a word of another generation, or no state at all, has done nothing.
  offered = p.target.offer_share(false, SharePair::kPart);
  ASSERT_TRUE(p.initiator.share_offered(true, &seen));
  seen.word += 8;  // the next generation's offer
  ASSERT_FALSE(p.initiator.claim_share(true, seen));
  p.initiator.finish_share(true, seen, true);
  EXPECT_EQ(p.target.settle_share(false, offered, p.fd()), ShareEnd::kNotDone);
}

TEST(ShmShare, SliceGivesTheRangesOfAWindowOfBuffersLaidEndToEnd) {
  char a[10], b[1], c[20];
  const iovec in[4] = {{a, sizeof(a)}, {nullptr, 0}, {b, sizeof(b)}, {c, sizeof(c)}};
  iovec out[4];
  ASSERT_EQ(slice(in, 4, 8, 5, out), 3u);
  EXPECT_EQ(out[0].iov_base, a + 8);
  EXPECT_EQ(out[0].iov_len, 2u);
  EXPECT_EQ(out[1].iov_base, b);
  EXPECT_EQ(out[1].iov_len, 1u);
  EXPECT_EQ(out[2].iov_base, c);
  EXPECT_EQ(out[2].iov_len, 2u);
  ASSERT_EQ(slice(in, 4, 11, 100, out), 1u) << "no more than there is";
  EXPECT_EQ(out[0].iov_base, c);
  EXPECT_EQ(out[0].iov_len, 20u);
  EXPECT_EQ(slice(in, 4, 31, 1, out), 0u);
}

}  // namespace
}  // namespace fabq::xport::shm
