// The security boundary of one-sided operations (fi_fabq(7) MEMORY REGIONS): "the target checks
// every request against its registered regions before it touches memory; a refused one is
// answered with its status and no data, and the connection goes on", whatever a peer forges on
// the wire: keys, addresses, lengths, atomic descriptions, answers to requests never made. The
// peer here is a raw socket speaking fabq's wire format (raw_peer.h) to an RDM endpoint whose
// region sits in the middle of a larger buffer: the bytes around it must never change, and no
// byte of them may come back.
#include <malloc.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "raw_peer.h"

namespace fabq::testing {
namespace {

constexpr uint64_t kKey = 0x5EC12E7;
constexpr size_t kRegion = 256;
constexpr size_t kGuard = 512;  // bytes on each side of the region

Options rma_options() {
  Options o = rdm_options();
  o.caps |= FI_RMA | FI_ATOMIC;
  return o;
}

class Target : public Side {
 public:
  Target() : Side(rma_options()), memory_(kGuard + kRegion + kGuard, 'G') {
    ok_ = open();
    std::memset(region(), 0, kRegion);
    if (ok_) {
      ok_ = fi_mr_reg(domain(), region(), kRegion, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, kKey, 0,
                      &mr_, nullptr) == 0;
    }
  }
  ~Target() override {
    if (mr_ != nullptr) fi_close(&mr_->fid);
  }
  bool ok() const { return ok_; }
  char* region() { return memory_.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (memory_[i] != 'G' || memory_[kGuard + kRegion + i] != 'G') return false;
    }
    return true;
  }

 private:
  std::vector<char> memory_;
  fid_mr* mr_ = nullptr;
  bool ok_ = false;
};

class HostileRma : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_UNLESS_FABQ();
    ASSERT_TRUE(t_.ok());
    ASSERT_TRUE(raw_.connect_to(ntohs(t_.address().sin_port)));
    sockaddr_in me = t_.address();
    me.sin_port = htons(1);
    const std::string name(reinterpret_cast<char*>(&me), sizeof(me));
    ASSERT_TRUE(raw_.send_all(
        encode(Header{.op = kConnReq, .length = static_cast<uint32_t>(name.size())}) + name));
    Header h;
    ASSERT_TRUE(next(&h));
    ASSERT_EQ(h.op, kConnAccept);
    ASSERT_TRUE(raw_.send_all(encode(Header{.op = kConnReady})));
  }
  void TearDown() override {
    if (!IsSkipped()) {
      EXPECT_TRUE(t_.guards_intact()) << "bytes around the region changed";
    }
  }

  // fabq's next frame (its payload in *payload), moving the target's bytes meanwhile.
  bool next(Header* h, std::string* payload = nullptr) {
    const auto t0 = Clock::now();
    pollfd p{.fd = raw_.fd(), .events = POLLIN};
    while (poll(&p, 1, 0) == 0) {
      if (ms_since(t0) > kTimeoutMs) {
        ADD_FAILURE() << "no answer";
        return false;
      }
      t_.progress();
    }
    unsigned char b[kHeaderSize];
    if (!raw_.recv_exact(b, sizeof(b))) return false;
    h->op = b[3];
    h->flags = static_cast<uint32_t>(get_le(b + 4, 4));
    h->length = static_cast<uint32_t>(get_le(b + 8, 4));
    h->seq = static_cast<uint32_t>(get_le(b + 12, 4));
    h->tag = get_le(b + 16, 8);
    h->data = get_le(b + 24, 8);
    std::string body(h->length, '\0');
    if (h->length > 0 && !raw_.recv_exact(body.data(), body.size())) return false;
    if (payload != nullptr) *payload = body;
    return true;
  }
  // fabq closes the connection (a protocol violation), moving its bytes meanwhile.
  bool closed() {
    const auto t0 = Clock::now();
    while (ms_since(t0) < kTimeoutMs) {
      t_.progress();
      if (raw_.closed_by_peer(1)) return true;
    }
    return false;
  }
  // Sends a write and returns the status fabq answers it with (-1: no answer).
  int64_t write(uint64_t key, uint64_t addr, const std::string& bytes, uint32_t seq) {
    if (!raw_.send_all(encode(Header{.op = kWrite,
                                     .length = static_cast<uint32_t>(bytes.size()),
                                     .seq = seq,
                                     .tag = key,
                                     .data = addr}) +
                       bytes)) {
      return -1;
    }
    Header h;
    if (!next(&h) || h.op != kRmaAck || h.seq != seq || h.length != 0) return -1;
    return static_cast<int64_t>(h.data);
  }
  static std::string u64(uint64_t v) {
    std::string s;
    put_le(s, v, 8);
    return s;
  }

  Target t_;
  RawConnection raw_;
};

TEST_F(HostileRma, ForgedKeysAndRangesAreRefusedAndTheConnectionGoesOn) {
  EXPECT_EQ(write(kKey + 1, 0, "forged key", 1), 1) << "kBadKey";
  EXPECT_EQ(write(0, 0, "zero key", 2), 1);
  EXPECT_EQ(write(kKey, kRegion - 4, "past the end", 3), 2) << "kOutOfBounds";
  EXPECT_EQ(write(kKey, kRegion, "x", 4), 2);
  EXPECT_EQ(write(kKey, UINT64_MAX - 2, "wraps around", 5), 2);
  EXPECT_EQ(write(kKey, uint64_t{0} - kGuard, "before the start", 6), 2);
  EXPECT_EQ(write(kKey, 16, std::string(kRegion, 'L'), 7), 2) << "too long for where it starts";
  EXPECT_EQ(std::string(t_.region(), kRegion), std::string(kRegion, '\0'));
  EXPECT_EQ(write(kKey, 8, "granted", 8), 0) << "the connection still works";
  EXPECT_STREQ(t_.region() + 8, "granted");
}

// A region whose end would wrap past the top of the address space lets an offset the peer
// chooses land below the region's start: fi_mr_reg refuses it, so its key names nothing.
TEST_F(HostileRma, ARegionThatWouldWrapTheAddressSpaceIsNeverRegisteredSoNoOffsetReachesBelowIt) {
  constexpr uint64_t kWideKey = kKey + 0x100;
  fid_mr* wide = nullptr;
  EXPECT_EQ(fi_mr_reg(t_.domain(), t_.region(), SIZE_MAX, FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                      kWideKey, 0, &wide, nullptr),
            -FI_EINVAL);
  // kGuard bytes before the region, were it registered.
  const uint64_t below = uint64_t{0} - kGuard;
  EXPECT_EQ(write(kWideKey, below, "below the start", 1), 1) << "kBadKey";
  ASSERT_TRUE(raw_.send_all(
      encode(Header{.op = kReadReq, .length = 8, .seq = 2, .tag = kWideKey, .data = below}) +
      u64(16)));
  Header h;
  std::string body;
  ASSERT_TRUE(next(&h, &body));
  EXPECT_EQ(h.data, 1u) << "kBadKey";
  EXPECT_EQ(body.size(), 0u) << "no byte from below the region comes back";
  if (wide != nullptr) fi_close(&wide->fid);
}

TEST_F(HostileRma, ReadsReturnNothingButTheRegion) {
  std::memcpy(t_.region(), "secret-in-region", 16);
  struct Case {
    uint64_t addr;
    uint64_t len;
    uint64_t status;
  };
  uint32_t seq = 10;
  for (const Case c : {Case{0, kRegion + 1, 2}, Case{kRegion - 1, 2, 2}, Case{UINT64_MAX, 2, 2},
                       Case{0, uint64_t{1} << 40, 2}, Case{0, UINT64_MAX, 2}}) {
    ASSERT_TRUE(raw_.send_all(
        encode(Header{.op = kReadReq, .length = 8, .seq = seq, .tag = kKey, .data = c.addr}) +
        u64(c.len)));
    Header h;
    std::string body;
    ASSERT_TRUE(next(&h, &body));
    EXPECT_EQ(h.op, kReadResp);
    EXPECT_EQ(h.seq, seq);
    EXPECT_EQ(h.data, c.status) << c.addr << "+" << c.len;
    EXPECT_EQ(body.size(), 0u) << "no byte of a refused read comes back";
    ++seq;
  }
  ASSERT_TRUE(raw_.send_all(
      encode(Header{.op = kReadReq, .length = 8, .seq = seq, .tag = kKey + 9, .data = 0}) +
      u64(4)));
  Header h;
  std::string body;
  ASSERT_TRUE(next(&h, &body));
  EXPECT_EQ(h.data, 1u);
  ASSERT_TRUE(raw_.send_all(
      encode(Header{.op = kReadReq, .length = 8, .seq = 99, .tag = kKey, .data = 0}) + u64(16)));
  ASSERT_TRUE(next(&h, &body));
  EXPECT_EQ(h.data, 0u);
  EXPECT_EQ(body, "secret-in-region");
}

TEST_F(HostileRma, AtomicsAreCheckedAndAMisdescribedOneClosesTheConnection) {
  auto atomic = [](uint8_t op, uint8_t dt, uint8_t kind, uint32_t count) {
    std::string d;
    d.push_back(static_cast<char>(op));
    d.push_back(static_cast<char>(dt));
    d.push_back(static_cast<char>(kind));
    d.push_back(0);
    put_le(d, count, 4);
    return d;
  };
  // An unknown op: refused (kBadAtomic), nothing touched.
  std::string bad = atomic(200, FI_UINT64, 0, 1) + u64(1);
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kAtomic,
                                          .length = static_cast<uint32_t>(bad.size()),
                                          .seq = 1,
                                          .tag = kKey,
                                          .data = 0}) +
                            bad));
  Header h;
  ASSERT_TRUE(next(&h));
  EXPECT_EQ(h.op, kAtomicResp);
  EXPECT_EQ(h.data, 4u);
  // At the last 4 bytes of the region, 8 bytes do not fit.
  std::string edge = atomic(FI_SUM, FI_UINT64, 1, 1) + u64(1);
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kAtomic,
                                          .length = static_cast<uint32_t>(edge.size()),
                                          .seq = 2,
                                          .tag = kKey,
                                          .data = kRegion - 4}) +
                            edge));
  std::string body;
  ASSERT_TRUE(next(&h, &body));
  EXPECT_EQ(h.data, 2u);
  EXPECT_TRUE(body.empty());
  // A good fetch-add answers the old value.
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kAtomic,
                                          .length = static_cast<uint32_t>(edge.size()),
                                          .seq = 3,
                                          .tag = kKey,
                                          .data = 0}) +
                            edge));
  ASSERT_TRUE(next(&h, &body));
  EXPECT_EQ(h.data, 0u);
  EXPECT_EQ(body, u64(0));
  // Operands that are not count elements long: the frame lies about itself.
  std::string lie = atomic(FI_SUM, FI_UINT64, 0, 3) + u64(1);
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kAtomic,
                                          .length = static_cast<uint32_t>(lie.size()),
                                          .seq = 4,
                                          .tag = kKey,
                                          .data = 0}) +
                            lie));
  EXPECT_TRUE(closed());
  uint64_t v = 0;
  std::memcpy(&v, t_.region(), 8);
  EXPECT_EQ(v, 1u) << "only the good fetch-add changed the region";
}

TEST_F(HostileRma, AnAnswerToNoRequestClosesTheConnection) {
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kRmaAck, .seq = 77})));
  EXPECT_TRUE(closed());
}

TEST_F(HostileRma, AReadAnswerNobodyAskedForClosesTheConnectionAndWritesNothing) {
  ASSERT_TRUE(raw_.send_all(encode(Header{.op = kReadResp, .length = 64, .seq = 5}) +
                            std::string(64, 'Z')));
  EXPECT_TRUE(closed());
  EXPECT_EQ(std::string(t_.region(), kRegion), std::string(kRegion, '\0'));
}

TEST_F(HostileRma, AFloodOfReadsIsAnsweredInOrderWhileThePeerReadsSlowly) {
  // Reads of the whole region sent far faster than their answers are read: fabq stops taking
  // requests while its answers wait to be written (instead of buffering them without bound),
  // and goes on as they are read.
  constexpr uint32_t kReads = 16000;
  constexpr uint32_t kBatch = 1600;
  uint32_t sent = 0;
  uint32_t answered = 0;
  while (answered < kReads) {
    if (sent == answered) {
      std::string batch;
      for (uint32_t i = 0; i < kBatch; ++i) {
        ++sent;
        batch +=
            encode(Header{.op = kReadReq, .length = 8, .seq = sent, .tag = kKey}) + u64(kRegion);
      }
      ASSERT_TRUE(raw_.send_all(batch));
      for (auto t0 = Clock::now(); ms_since(t0) < 20;) t_.progress();
    }
    Header h;
    std::string body;
    ASSERT_TRUE(next(&h, &body));
    ASSERT_EQ(h.op, kReadResp);
    ASSERT_EQ(h.seq, answered + 1);
    ASSERT_EQ(body.size(), kRegion);
    ++answered;
  }
}

// ---------------------------------------------------------------------------------------------
// What a peer's reads can make the target hold (fi_fabq(7) RELIABILITY AND SECURITY): a read is
// checked before anything is held for it, and a long one is answered in pieces of
// FI_FABQ_RMA_READ_PIECE bytes (64 KiB), one copied at a time, whatever length it asks for and
// however slowly the peer takes the answer.

// Starts the measure of peak_rss() afresh (proc(5) clear_refs: 5 resets VmHWM to VmRSS), so that
// an earlier test of the same process does not hide a later one's peak.
void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// One field of /proc/self/status ("RssAnon:"), in bytes.
size_t status_bytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kib = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, field, n) == 0 && std::sscanf(line + n, " %zu kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib * 1024;
}

// The most this process has held at once since reset_peak_rss() (VmHWM), in bytes.
size_t peak_rss() {
  return status_bytes("VmHWM:");
}

// Bytes the allocator has handed out and not taken back: the sanitizers' allocator's count in a
// sanitizer build (their allocator replaces malloc, whose own count would stand still), glibc's
// (mallinfo2(3): the heaps' and the mmapped chunks') otherwise.
extern "C" size_t __sanitizer_get_current_allocated_bytes() __attribute__((weak));
size_t heap_in_use() {
  if (__sanitizer_get_current_allocated_bytes != nullptr) {
    return __sanitizer_get_current_allocated_bytes();
  }
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Growth of the peak beyond this fails: a 64 KiB piece, the socket's own buffers (kernel
// memory), and the allocator's slack fit many times; one answer of the whole region does not.
constexpr size_t kHeld = 16u << 20;
constexpr size_t kHugeRegion = 64u << 20;

class HugeReadTarget : public Side {
 public:
  explicit HugeReadTarget(uint64_t caps) : Side(options(caps)) {
    ok_ = open();
    // Written whole, with marks at both ends that the answer must carry.
    base_ = mmap(nullptr, kHugeRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ok_ = ok_ && base_ != MAP_FAILED;
    if (ok_) {
      std::memset(region(), 'r', kHugeRegion);
      std::memcpy(region(), "head", 4);
      std::memcpy(region() + kHugeRegion - 4, "tail", 4);
    }
    if (ok_ && (caps & FI_RMA) != 0) {
      ok_ = fi_mr_reg(domain(), region(), kHugeRegion, FI_REMOTE_READ, 0, kKey, 0, &mr_, nullptr) ==
            0;
    }
  }
  ~HugeReadTarget() override {
    close_region();
    if (base_ != MAP_FAILED) munmap(base_, kHugeRegion);
  }
  bool ok() const { return ok_; }
  char* region() { return static_cast<char*>(base_); }
  void close_region() {
    if (mr_ != nullptr) fi_close(&mr_->fid);
    mr_ = nullptr;
  }

 private:
  static Options options(uint64_t caps) {
    Options o = rdm_options();
    o.caps |= caps;
    return o;
  }
  void* base_ = MAP_FAILED;
  fid_mr* mr_ = nullptr;
  bool ok_ = false;
};

class HostileHugeRead : public ::testing::TestWithParam<uint64_t> {
 protected:
  void SetUp() override {
    SKIP_UNLESS_FABQ();
    t_ = std::make_unique<HugeReadTarget>(GetParam());
    ASSERT_TRUE(t_->ok());
    ASSERT_TRUE(raw_.connect_to(ntohs(t_->address().sin_port)));
    sockaddr_in me = t_->address();
    me.sin_port = htons(1);
    const std::string name(reinterpret_cast<char*>(&me), sizeof(me));
    ASSERT_TRUE(raw_.send_all(
        encode(Header{.op = kConnReq, .length = static_cast<uint32_t>(name.size())}) + name));
    Header h;
    ASSERT_TRUE(next(&h));
    ASSERT_EQ(h.op, kConnAccept);
    ASSERT_TRUE(raw_.send_all(encode(Header{.op = kConnReady})));
  }
  // n bytes from the target, moving its bytes while they are not there (it is in this process).
  bool recv_moving(void* p, size_t n) {
    char* c = static_cast<char*>(p);
    const auto t0 = Clock::now();
    while (n > 0) {
      const ssize_t r = recv(raw_.fd(), c, n, MSG_DONTWAIT);
      if (r > 0) {
        c += r;
        n -= static_cast<size_t>(r);
        continue;
      }
      if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        ADD_FAILURE() << "the target closed the connection";
        return false;
      }
      if (ms_since(t0) > kTimeoutMs) {
        ADD_FAILURE() << "no answer";
        return false;
      }
      t_->progress();
      note_held();
    }
    return true;
  }
  bool next(Header* h, std::string* payload = nullptr) {
    unsigned char b[kHeaderSize];
    if (!recv_moving(b, sizeof(b))) return false;
    h->op = b[3];
    h->flags = static_cast<uint32_t>(get_le(b + 4, 4));
    h->length = static_cast<uint32_t>(get_le(b + 8, 4));
    h->seq = static_cast<uint32_t>(get_le(b + 12, 4));
    h->tag = get_le(b + 16, 8);
    h->data = get_le(b + 24, 8);
    std::string body(h->length, '\0');
    if (h->length > 0 && !recv_moving(body.data(), body.size())) return false;
    if (payload != nullptr) *payload = std::move(body);
    return true;
  }
  bool read_request(uint32_t seq, uint64_t key, uint64_t addr, uint64_t len) {
    std::string len_bytes;
    put_le(len_bytes, len, 8);
    return raw_.send_all(
        encode(Header{.op = kReadReq, .length = 8, .seq = seq, .tag = key, .data = addr}) +
        len_bytes);
  }
  // Moves the target's bytes for `ms` while the peer reads nothing.
  void progress_for(int ms) {
    for (auto t0 = Clock::now(); ms_since(t0) < ms;) {
      t_->progress();
      note_held();
    }
  }
  // What the process holds, sampled as the target moves bytes: the bytes its allocator has
  // handed out and not taken back (a vector of the whole answer shows here at once). Not its
  // resident memory: under a loaded machine the kernel moves the region's, the program's and the
  // allocator's pages in and out (and may back them with huge pages), which CI saw add up to
  // 100 MB while nothing was held for the peer.
  size_t held() { return heap_in_use(); }
  void note_held() { most_held_ = std::max(most_held_, held()); }

  std::unique_ptr<HugeReadTarget> t_;
  RawConnection raw_;
  size_t most_held_ = 0;
};

constexpr uint32_t kMore = 1u << 7;  // kReadResp: a piece, and more follow (wire.h)

std::string rma_caps_name(const ::testing::TestParamInfo<uint64_t>& i) {
  return i.param != 0 ? "WithRma" : "WithoutRma";
}
INSTANTIATE_TEST_SUITE_P(, HostileHugeRead, ::testing::Values(uint64_t{FI_RMA}, uint64_t{0}),
                         rma_caps_name);

TEST_P(HostileHugeRead, ARefusedReadCostsNothingWhateverLengthItAsks) {
  reset_peak_rss();
  const size_t before = peak_rss();
  // Forged keys (and, on an endpoint without FI_RMA, every key) asking for up to 1 GiB, the
  // largest message, each answered with its refusal and no byte.
  for (uint32_t seq = 1; seq <= 8; ++seq) {
    ASSERT_TRUE(read_request(seq, kKey + seq, 0, (uint64_t{1} << 30) - seq));
    Header h;
    std::string body;
    ASSERT_TRUE(next(&h, &body));
    EXPECT_EQ(h.op, kReadResp);
    EXPECT_EQ(h.seq, seq);
    EXPECT_NE(h.data, 0u) << "refused";
    EXPECT_TRUE(body.empty());
  }
  EXPECT_LT(peak_rss() - before, kHeld) << "bytes held for refused reads";
}

TEST_P(HostileHugeRead, AReadOfAHugeRegionHoldsOnePieceAtATimeAndArrivesWhole) {
  if (GetParam() == 0) GTEST_SKIP() << "a region needs FI_RMA";
  const size_t before = held();
  ASSERT_TRUE(read_request(1, kKey, 0, kHugeRegion));
  // The peer takes nothing: the target fills the socket, then holds what it owes, bounded.
  progress_for(300);
  EXPECT_LT(most_held_ - std::min(most_held_, before), kHeld)
      << "bytes held for a read the peer does not take";
  // Meanwhile the connection still takes requests: a short read is copied at once and answered
  // whole between two pieces. Then every piece, in order, with the region's bytes.
  ASSERT_TRUE(read_request(2, kKey, kHugeRegion - 4, 4));
  bool short_answered = false;
  size_t at = 0;
  size_t pieces = 0;
  std::string head, tail;
  for (;;) {
    Header h;
    std::string body;
    ASSERT_TRUE(next(&h, &body));
    ASSERT_EQ(h.op, kReadResp);
    if (h.seq == 2) {
      EXPECT_EQ(h.flags, 0u);
      EXPECT_EQ(h.tag, 0u);
      EXPECT_EQ(body, "tail");
      short_answered = true;
      continue;
    }
    ASSERT_EQ(h.seq, 1u);
    ASSERT_EQ(h.data, 0u);
    ASSERT_EQ(h.tag, at) << "pieces in order, without a gap";
    ASSERT_LE(body.size(), size_t{64} << 10) << "one piece of FI_FABQ_RMA_READ_PIECE at most";
    if (at == 0) head = body.substr(0, 4);
    at += body.size();
    ++pieces;
    if ((h.flags & kMore) == 0) {
      tail = body.substr(body.size() - 4);
      break;
    }
  }
  EXPECT_TRUE(short_answered);
  EXPECT_EQ(at, kHugeRegion);
  EXPECT_EQ(pieces, kHugeRegion / (size_t{64} << 10));
  EXPECT_EQ(head, "head");
  EXPECT_EQ(tail, "tail");
  EXPECT_LT(most_held_ - std::min(most_held_, before), kHeld)
      << "bytes held while the answer was taken";
}

TEST_P(HostileHugeRead, ARegionClosedWhileItsReadIsAnsweredEndsTheAnswerWithItsRefusal) {
  if (GetParam() == 0) GTEST_SKIP() << "a region needs FI_RMA";
  ASSERT_TRUE(read_request(1, kKey, 0, kHugeRegion));
  progress_for(100);
  t_->close_region();
  size_t at = 0;
  for (;;) {
    Header h;
    std::string body;
    ASSERT_TRUE(next(&h, &body));
    ASSERT_EQ(h.op, kReadResp);
    ASSERT_EQ(h.tag, at);
    at += body.size();
    if (h.data != 0) {
      EXPECT_EQ(h.data, 1u) << "kBadKey: the region's key is gone";
      EXPECT_TRUE(body.empty());
      EXPECT_EQ(h.flags & kMore, 0u) << "the answer ends there";
      break;
    }
    ASSERT_NE(h.flags & kMore, 0u) << "the whole region came before its close";
  }
  EXPECT_LT(at, kHugeRegion);
  // The connection goes on.
  ASSERT_TRUE(read_request(2, kKey, 0, 4));
  Header h;
  ASSERT_TRUE(next(&h));
  EXPECT_EQ(h.seq, 2u);
  EXPECT_EQ(h.data, 1u);
}

}  // namespace
}  // namespace fabq::testing
