// One-sided requests through the TCP transport (transport_harness.h), over the socket and over
// shared memory: a write lands in the owner's region and is acknowledged with its status, a
// read and an atomic are answered with the region's bytes, a refusal comes back with its status
// and no bytes, and an answer to a request this side never made fails the connection
// (xport/transport.h RemoteAccess, Owner::rma_acked; wire.h one-sided frames). Through shared
// memory, large writes and reads are direct: the target copies between the initiator's buffers
// and its region (xport/shm.h, DirectCopy).
#include <gtest/gtest.h>
#include <rdma/fi_atomic.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transport_harness.h"

namespace fabq::xport::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(, TransportTest, ::testing::Values(false, true), tcp_or_shm);

constexpr uint64_t kKey = 0x4B;

// A one-sided op of `kind` to (kKey, addr) whose frame payload is `prefix` (if any) and `data`.
struct OneSided {
  TxOp op;
  std::string data;
};

TxOp* write_op(OneSided* o, uint32_t seq, uint64_t addr, std::string bytes) {
  o->data = std::move(bytes);
  o->op.kind = TxKind::kWrite;
  o->op.seq = seq;
  o->op.key = kKey;
  o->op.addr = addr;
  o->op.iov[0] = {o->data.data(), o->data.size()};
  o->op.iov_count = 1;
  o->op.len = o->data.size();
  return &o->op;
}

TxOp* read_op(OneSided* o, uint32_t seq, uint64_t key, uint64_t addr, size_t len) {
  o->data.assign(len, '\0');
  o->op.kind = TxKind::kRead;
  o->op.seq = seq;
  o->op.key = key;
  o->op.addr = addr;
  put_prefix_u64(&o->op, len);
  o->op.iov[0] = {o->op.prefix, sizeof(o->op.prefix)};
  o->op.iov_count = 1;
  o->op.len = sizeof(o->op.prefix);
  o->op.result[0] = {o->data.data(), len};
  o->op.result_count = 1;
  o->op.result_len = len;
  return &o->op;
}

TEST_P(TransportTest, AWriteLandsInTheRegionAndIsAcknowledged) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(64, '.');
  server_.set_region(kKey, region.data(), region.size());
  OneSided w;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), write_op(&w, 7, 10, "landed")));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0], std::make_pair(uint32_t{7}, RmaStatus::kOk));
  EXPECT_EQ(std::string(region.begin() + 10, region.begin() + 16), "landed");
  EXPECT_EQ(region[9], '.');
  EXPECT_EQ(region[16], '.');
}

TEST_P(TransportTest, AReadIsAnsweredWithTheRegionsBytesAndARefusalWithNone) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::string region = "0123456789abcdef";
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  OneSided good, bad_key, too_far;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&good, 1, kKey, 4, 8)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&bad_key, 2, kKey + 1, 0, 4)));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&too_far, 3, kKey, 12, 8)));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 3; }));
  const auto a = client_.answers();
  EXPECT_EQ(a[0], std::make_pair(uint32_t{1}, RmaStatus::kOk));
  EXPECT_EQ(a[1], std::make_pair(uint32_t{2}, RmaStatus::kBadKey));
  EXPECT_EQ(a[2], std::make_pair(uint32_t{3}, RmaStatus::kOutOfBounds));
  EXPECT_EQ(good.data, "456789ab");
  EXPECT_EQ(too_far.data, std::string(8, '\0')) << "a refused read brings nothing";
}

TEST_P(TransportTest, AFetchingAtomicIsPerformedAndAnsweredWithThePreviousValue) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  alignas(8) unsigned char region[16] = {};
  uint64_t start = 40;
  std::memcpy(region + 8, &start, 8);
  server_.set_region(kKey, region, sizeof(region));
  OneSided o;
  uint64_t add = 2, old = 0;
  o.op.kind = TxKind::kAtomic;
  o.op.seq = 9;
  o.op.key = kKey;
  o.op.addr = 8;
  put_prefix_atomic(&o.op, FI_SUM, FI_UINT64, AtomicKind::kFetch, 1);
  o.op.iov[0] = {o.op.prefix, sizeof(o.op.prefix)};
  o.op.iov[1] = {&add, sizeof(add)};
  o.op.iov_count = 2;
  o.op.len = sizeof(o.op.prefix) + sizeof(add);
  o.op.result[0] = {&old, sizeof(old)};
  o.op.result_count = 1;
  o.op.result_len = sizeof(old);
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &o.op));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0].second, RmaStatus::kOk);
  EXPECT_EQ(old, 40u);
  uint64_t now = 0;
  std::memcpy(&now, region + 8, 8);
  EXPECT_EQ(now, 42u);
}

TEST_P(TransportTest, AWriteTheOwnerRefusesIsReadPastAndTheConnectionGoesOn) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(16, '.');
  server_.set_region(kKey, region.data(), region.size());
  OneSided big, after;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), write_op(&big, 1, 0, std::string(100000, 'B'))));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), write_op(&after, 2, 0, "ok")));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  EXPECT_EQ(client_.answers()[0].second, RmaStatus::kOutOfBounds);
  EXPECT_EQ(client_.answers()[1].second, RmaStatus::kOk);
  EXPECT_EQ(std::string(region.begin(), region.begin() + 3), "ok.");
}

// =============================================================================================
// Direct copies through shared memory (shm.h): a large write or read names the initiator's
// buffers and the target copies between them and its region itself.

bool journal_has(const FakeOwner& o, const std::string& line) {
  const std::vector<std::string> j = o.journal();
  return std::find(j.begin(), j.end(), line) != j.end();
}

constexpr size_t kDirectMin = TransportConfig{}.direct_min;

TEST_P(TransportTest, ALargeWriteThroughSharedMemoryIsCopiedStraightFromTheInitiatorsBuffers) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(3 * kDirectMin, '.');
  server_.set_region(kKey, region.data(), region.size());
  // Three buffers of the initiator, with an empty one between them.
  std::string a(kDirectMin, 'a'), b(kDirectMin / 2, 'b');
  OneSided w;
  write_op(&w, 4, 100, "");
  w.op.iov[0] = {a.data(), a.size()};
  w.op.iov[1] = {nullptr, 0};
  w.op.iov[2] = {b.data(), b.size()};
  w.op.iov_count = 3;
  w.op.len = a.size() + b.size();
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &w.op));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0], std::make_pair(uint32_t{4}, RmaStatus::kOk));
  EXPECT_EQ(journal_has(server_, "direct write"), GetParam()) << "direct only through shm";
  EXPECT_EQ(w.op.direct, GetParam());
  EXPECT_EQ(std::string(region.begin() + 100, region.begin() + 100 + a.size()), a);
  EXPECT_EQ(
      std::string(region.begin() + 100 + a.size(), region.begin() + 100 + a.size() + b.size()), b);
  EXPECT_EQ(region[99], '.');
  EXPECT_EQ(region[100 + a.size() + b.size()], '.');
}

TEST_P(TransportTest, ALargeReadThroughSharedMemoryIsCopiedStraightIntoTheResultBuffers) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::string region(2 * kDirectMin, '\0');
  for (size_t i = 0; i < region.size(); ++i) region[i] = static_cast<char>('a' + i % 26);
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  OneSided r;
  read_op(&r, 5, kKey, 3, kDirectMin + 10);
  std::string tail(10, '\0');
  r.op.result[0] = {r.data.data(), kDirectMin};
  r.op.result[1] = {tail.data(), tail.size()};
  r.op.result_count = 2;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &r.op));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0], std::make_pair(uint32_t{5}, RmaStatus::kOk));
  EXPECT_EQ(journal_has(server_, "direct read"), GetParam());
  EXPECT_EQ(r.data.substr(0, kDirectMin), region.substr(3, kDirectMin));
  EXPECT_EQ(tail, region.substr(3 + kDirectMin, 10));
}

TEST_P(TransportTest, TransfersBelowTheThresholdTravelInTheirFrames) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(kDirectMin, '.');
  server_.set_region(kKey, region.data(), region.size());
  OneSided w, r;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), write_op(&w, 1, 0, std::string(kDirectMin - 1, 'w'))));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&r, 2, kKey, 0, kDirectMin - 1)));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  EXPECT_FALSE(journal_has(server_, "direct write"));
  EXPECT_FALSE(journal_has(server_, "direct read"));
  EXPECT_EQ(r.data, std::string(kDirectMin - 1, 'w'));
}

TEST_P(TransportTest, ADirectWriteOutsideTheRegionIsRefusedAndTouchesNothing) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(2 * kDirectMin, '.');
  server_.set_region(kKey, region.data(), kDirectMin);  // the second half is a guard
  OneSided w, after;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), write_op(&w, 1, 1, std::string(kDirectMin, 'X'))));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), write_op(&after, 2, 0, "ok")));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  EXPECT_EQ(client_.answers()[0].second, RmaStatus::kOutOfBounds);
  EXPECT_EQ(client_.answers()[1].second, RmaStatus::kOk);
  EXPECT_EQ(std::count(region.begin(), region.end(), 'X'), 0);
}

// Direct copies are shared memory's: these run once, through it.
class TransportShmTest : public TransportTest {};
INSTANTIATE_TEST_SUITE_P(, TransportShmTest, ::testing::Values(true), tcp_or_shm);

TEST_P(TransportShmTest, ADirectWriteFromMemoryTheInitiatorDoesNotMapFailsAloneWithCopyFailed) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(2 * kDirectMin, '.');
  server_.set_region(kKey, region.data(), region.size());
  // An address range that was mapped and no longer is.
  const size_t len = 2 * kDirectMin;
  void* gone = mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  ASSERT_EQ(munmap(gone, len), 0);
  OneSided w, after;
  write_op(&w, 1, 0, "");
  w.op.iov[0] = {gone, len};
  w.op.len = len;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &w.op));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), write_op(&after, 2, 0, "ok")));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  EXPECT_EQ(client_.answers()[0].second, RmaStatus::kCopyFailed);
  EXPECT_EQ(client_.answers()[1].second, RmaStatus::kOk) << "the connection goes on";
  EXPECT_TRUE(p.client->open());
}

// The copy choice on (xport/copy_choice.h): a large write goes the way its target measured
// faster, once it has three samples of each way. The first direct copy into a destination is
// not one of them (CopyAdvisor::record_direct()).
class TransportCopyChoiceTest : public TransportTest {
 protected:
  void configure(TransportConfig* c) override { c->adapt_copies = true; }
};
INSTANTIATE_TEST_SUITE_P(, TransportCopyChoiceTest, ::testing::Values(true), tcp_or_shm);

TEST_P(TransportCopyChoiceTest, LargeWritesGoThreeByTheRingThenThreeDirectAndLandWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  constexpr size_t kLen = 4 * kDirectMin;
  std::vector<unsigned char> region(kLen + 200, '.');
  server_.set_region(kKey, region.data(), region.size());
  std::string ways;
  for (uint32_t i = 0; i < 12; ++i) {
    if (i == 6) {
      EXPECT_FALSE(logged_containing("copy advice for sends from "))
          << "two direct samples: the first copy into the region was left out";
    }
    OneSided w;
    const std::string bytes(kLen, static_cast<char>('a' + i));
    write_op(&w, i + 1, 100, bytes);
    ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &w.op));
    ASSERT_TRUE(pump([&] { return client_.answers().size() == i + 1; }));
    EXPECT_EQ(client_.answers()[i], std::make_pair(i + 1, RmaStatus::kOk));
    ways += w.op.direct ? 'd' : 'r';
    EXPECT_EQ(std::string(region.begin() + 100, region.begin() + 100 + kLen), bytes) << i;
    EXPECT_EQ(region[99], '.');
    EXPECT_EQ(region[100 + kLen], '.');
  }
  EXPECT_EQ(ways.substr(0, 10), "rrrdddrrrd") << "the tenth write gives the third sample";
  EXPECT_TRUE(logged_containing("copy advice for sends from ")) << "the target advised";
}

class TransportNoDirectTest : public TransportTest {
 protected:
  void configure(TransportConfig* c) override { c->direct_min = 0; }
};
INSTANTIATE_TEST_SUITE_P(, TransportNoDirectTest, ::testing::Values(true), tcp_or_shm);

TEST_P(TransportNoDirectTest, WithDirectCopiesOffLargeTransfersTravelThroughTheRing) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(4 * kDirectMin, '.');
  server_.set_region(kKey, region.data(), region.size());
  OneSided w, r;
  ASSERT_NO_FATAL_FAILURE(
      send(client_, p.client.get(), write_op(&w, 1, 0, std::string(4 * kDirectMin, 'w'))));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&r, 2, kKey, 0, 4 * kDirectMin)));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  EXPECT_EQ(client_.answers()[1].second, RmaStatus::kOk);
  EXPECT_FALSE(journal_has(server_, "direct write"));
  EXPECT_FALSE(journal_has(server_, "direct read"));
  EXPECT_EQ(r.data, std::string(4 * kDirectMin, 'w'));
}

// =============================================================================================
// Reads longer than a piece (TransportConfig::read_piece) are answered in pieces (wire.h): the
// target holds one piece at a time, whatever the length asked.

constexpr size_t kPiece = 4096;

class TransportPieceTest : public TransportTest {
 protected:
  void configure(TransportConfig* c) override {
    c->direct_min = 0;  // through the ring too, not copied straight into the result
    c->read_piece = kPiece;
  }
};
INSTANTIATE_TEST_SUITE_P(, TransportPieceTest, ::testing::Values(false, true), tcp_or_shm);

TEST_P(TransportPieceTest, AReadLongerThanAPieceArrivesInPiecesAndLandsWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::string region(25 * kPiece + 99, '\0');
  for (size_t i = 0; i < region.size(); ++i) region[i] = static_cast<char>(i * 7 + i / kPiece);
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  OneSided r, small;
  read_op(&r, 5, kKey, 3, 25 * kPiece + 90);
  // Across two result buffers, the second beginning inside a piece.
  std::string tail(1000, '\0');
  r.op.result[0] = {r.data.data(), 25 * kPiece + 90 - tail.size()};
  r.op.result[1] = {tail.data(), tail.size()};
  r.op.result_count = 2;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), &r.op));
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&small, 6, kKey, 1, 10)));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 2; }));
  const auto a = client_.answers();
  EXPECT_EQ(a[0], std::make_pair(uint32_t{5}, RmaStatus::kOk));
  EXPECT_EQ(a[1], std::make_pair(uint32_t{6}, RmaStatus::kOk));
  EXPECT_EQ(r.data.substr(0, 25 * kPiece + 90 - tail.size()),
            region.substr(3, 25 * kPiece + 90 - tail.size()));
  EXPECT_EQ(tail, region.substr(3 + 25 * kPiece + 90 - tail.size(), tail.size()));
  EXPECT_EQ(small.data, region.substr(1, 10));
  EXPECT_EQ(client_.answer_pieces(), 26u);
  EXPECT_EQ(client_.problems(), std::vector<std::string>{});
}

TEST_P(TransportPieceTest, AReadLongerThanItsRegionIsRefusedBeforeAnyPiece) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::string region(4 * kPiece, 'r');
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  OneSided r;
  ASSERT_NO_FATAL_FAILURE(send(client_, p.client.get(), read_op(&r, 8, kKey, 1, 4 * kPiece)));
  ASSERT_TRUE(pump([&] { return client_.answers().size() == 1; }));
  EXPECT_EQ(client_.answers()[0], std::make_pair(uint32_t{8}, RmaStatus::kOutOfBounds));
  EXPECT_EQ(client_.answer_pieces(), 0u);
  EXPECT_EQ(r.data, std::string(4 * kPiece, '\0'));
}

// The initiator's side against a target that answers in pieces out of the rules (wire.h): the
// connection fails, and no byte lands outside the result.
TEST_F(TransportRawTest, PiecesOfAnAnswerOutOfOrderFailTheConnection) {
  struct Case {
    const char* what;
    std::vector<std::string> frames;
    const char* logged;
  };
  const auto piece = [](uint32_t seq, uint64_t offset, size_t len, bool more) {
    return frame({.op = wire::Op::kReadResp,
                  .flags = more ? uint32_t{wire::kMore} : 0,
                  .length = static_cast<uint32_t>(len),
                  .seq = seq,
                  .tag = offset},
                 std::string(len, 'p'));
  };
  const Case cases[] = {
      {"a gap", {piece(1, 0, 4, true), piece(1, 6, 4, false)}, "a piece of an answer out of order"},
      {"an overlap",
       {piece(1, 0, 4, true), piece(1, 2, 6, false)},
       "a piece of an answer out of order"},
      {"a first piece not at 0", {piece(1, 4, 4, true)}, "a piece of an answer out of order"},
      {"a second answer in pieces before the first ends",
       {piece(1, 0, 4, true), piece(2, 0, 4, true)},
       "a piece of an answer out of order"},
      {"a piece past the end of the result",
       {piece(1, 0, 4, true), piece(1, 4, 12, false)},
       "an answer to no request of ours"},
      {"a last piece short of the end",
       {piece(1, 0, 4, true), piece(1, 4, 2, false)},
       "an answer to no request of ours"},
      {"more pieces with no bytes", {piece(1, 0, 0, true)}, "a field the opcode does not use"},
      {"more pieces after a refusal",
       {frame({.op = wire::Op::kReadResp, .flags = wire::kMore, .seq = 1, .data = 1})},
       "a response with an unknown status"},
  };
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    {
      std::lock_guard lock(g_log_mu);
      g_log.clear();
    }
    FakeOwner owner;
    WirePeer peer(ticker());
    ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &owner));
    // Two reads of 10 bytes into guarded buffers: nothing may land past them.
    OneSided r1, r2;
    std::string guard1(64, 'g'), guard2(64, 'g');
    read_op(&r1, 1, kKey, 0, 10);
    read_op(&r2, 2, kKey, 0, 10);
    r1.data.resize(10 + guard1.size(), 'g');
    r2.data.resize(10 + guard2.size(), 'g');
    r1.op.result[0] = {r1.data.data(), 10};
    r2.op.result[0] = {r2.data.data(), 10};
    ASSERT_EQ(owner.submit(p.server.get(), &r1.op), 0);
    ASSERT_EQ(owner.submit(p.server.get(), &r2.op), 0);
    for (int i = 0; i < 2; ++i) {
      wire::Header h;
      std::string payload;
      ASSERT_TRUE(peer.recv_frame(&h, &payload));
      ASSERT_EQ(h.op, wire::Op::kReadReq);
    }
    for (const std::string& f : c.frames) ASSERT_TRUE(peer.send_bytes(f));
    ASSERT_TRUE(pump([&] { return owner.has_async(FI_FABQ_EVENT_EP_REQ_ERR); }))
        << ::testing::PrintToString(owner.journal());
    EXPECT_TRUE(logged_containing(c.logged)) << ::testing::PrintToString(logged());
    EXPECT_EQ(r1.data.substr(10), guard1) << "bytes past the first result";
    EXPECT_EQ(r2.data.substr(10), guard2) << "bytes past the second result";
    EXPECT_EQ(owner.answers().size(), 0u) << "no read completed";
    EXPECT_FALSE(p.server->open());
    p.server.reset();
  }
}

// A peer with more long reads outstanding than a connection keeps (1024) is held, its frames
// unread, until the oldest are answered: however the connection is woken meanwhile (here by the
// owner's resume()), no read is overwritten, lost or answered twice.
class TransportRawPieceTest : public TransportRawTest {
 protected:
  void configure(TransportConfig* c) override { c->read_piece = 1024; }
};

TEST_F(TransportRawPieceTest, MoreLongReadsThanAConnectionKeepsAreHeldAndAllAnsweredInOrder) {
  constexpr size_t kRegion = 64 * 1024;  // 64 pieces a read: answers fill the socket's buffers
  constexpr uint32_t kReads = 1300;
  Pair p;
  ASSERT_NO_FATAL_FAILURE(listen(&p));
  FakeOwner owner;
  std::vector<unsigned char> region(kRegion);
  for (size_t i = 0; i < kRegion; ++i) region[i] = static_cast<unsigned char>(i * 31 + i / 977);
  owner.set_region(kKey, region.data(), region.size());
  WirePeer peer(ticker());
  ASSERT_NO_FATAL_FAILURE(accept_raw(&p, &peer, &owner));
  std::string burst;
  for (uint32_t seq = 1; seq <= kReads; ++seq) {
    std::string len(8, '\0');
    wire::put_u64(reinterpret_cast<unsigned char*>(len.data()), kRegion);
    burst += frame({.op = wire::Op::kReadReq, .length = 8, .seq = seq, .tag = kKey}, len);
  }
  ASSERT_TRUE(peer.send_bytes(burst));
  settle(milliseconds(50));
  for (int i = 0; i < 20; ++i) {
    p.server->resume();  // a wake-up for another reason: must not take the held frames
    settle(milliseconds(2));
  }
  const std::string whole(region.begin(), region.end());
  for (uint32_t seq = 1; seq <= kReads; ++seq) {
    std::string got;
    for (;;) {
      wire::Header h;
      std::string payload;
      ASSERT_TRUE(peer.recv_frame(&h, &payload)) << "read " << seq;
      ASSERT_EQ(h.op, wire::Op::kReadResp);
      ASSERT_EQ(h.seq, seq) << "answers in order, each whole before the next";
      ASSERT_EQ(h.data, 0u);
      ASSERT_EQ(h.tag, got.size());
      got += payload;
      if ((h.flags & wire::kMore) == 0) break;
    }
    ASSERT_EQ(got, whole) << "read " << seq;
  }
  EXPECT_TRUE(p.server->open());
  EXPECT_EQ(owner.problems(), std::vector<std::string>{});
}

// =============================================================================================
// Sharing a copy (shm.h): from share_min bytes on, the target offers the initiator's process
// the second part of a direct request, and both copy at once. Here the two sides run in two
// engines, each progressed by a thread of its own, as two processes are.

constexpr size_t kShareMin = TransportConfig{}.share_min;
// Long enough that the target's half takes a while, odd so that the initiator's half begins
// inside one of its buffers and the region's bytes are not page-aligned.
constexpr size_t kShareLen = (3u << 20) + 12345;
constexpr size_t kAt = 4097;  // where the transfers go in the region
// Whether the initiator's thread gets to claim an offer in time is the scheduler's business:
// transfers go on until one was shared, at least kAtLeast and at most kAtMost of them.
constexpr int kAtLeast = 8;
constexpr int kAtMost = 300;

// n bytes that say which transfer and which position they are: a part copied to the wrong
// place, twice or not at all shows.
std::string pattern(size_t n, int transfer) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 131 + i / 4096 + transfer * 7) % 251);
  return s;
}

class TransportShareTest : public TransportTest {
 protected:
  // The initiator's transport (the second) is progressed by a thread that never sleeps, from
  // before the first transfer to the end; the target's from the test's thread.
  void SetUp() override {
    TransportTest::SetUp();
    ASSERT_NO_FATAL_FAILURE(second_transport());
    initiator_ = std::thread([this] {
      while (!stop_.load(std::memory_order_relaxed)) {
        t2_->progress();
        running_.store(true, std::memory_order_relaxed);
      }
    });
    while (!running_.load(std::memory_order_relaxed)) std::this_thread::yield();
    tick_second_ = false;  // that thread's alone
  }
  void TearDown() override {
    stop_.store(true, std::memory_order_relaxed);
    if (initiator_.joinable()) initiator_.join();
    TransportTest::TearDown();
  }
  // Submits `op` on the initiator's connection `c` and progresses the target until the answer
  // is in.
  bool run(Connection* c, TxOp* op) {
    const size_t before = client_.answers().size();
    return client_.submit(c, op) == 0 &&
           eventually([&] { t_->progress(); }, [&] { return client_.answers().size() > before; });
  }

  std::thread initiator_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};
INSTANTIATE_TEST_SUITE_P(, TransportShareTest, ::testing::Values(true), tcp_or_shm);

TEST_P(TransportShareTest, BothProcessesCopyPartsOfALargeWriteAndTheRegionGetsItWhole) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(kAt + kShareLen + 4096, '.');
  server_.set_region(kKey, region.data(), region.size());
  const std::string want[2] = {pattern(kShareLen, 0), pattern(kShareLen, 1)};
  int shared = 0;
  int m = 0;
  for (; m < kAtMost && (m < kAtLeast || shared == 0); ++m) {
    std::string a = want[m % 2].substr(0, 100000), b = want[m % 2].substr(100000);
    OneSided w;
    write_op(&w, static_cast<uint32_t>(m + 1), kAt, "");
    w.op.iov[0] = {a.data(), a.size()};
    w.op.iov[1] = {nullptr, 0};
    w.op.iov[2] = {b.data(), b.size()};
    w.op.iov_count = 3;
    w.op.len = kShareLen;
    ASSERT_TRUE(run(p.client.get(), &w.op)) << m;
    ASSERT_EQ(client_.answers().back(), std::make_pair(uint32_t(m + 1), RmaStatus::kOk));
    ASSERT_EQ(std::memcmp(want[m % 2].data(), region.data() + kAt, kShareLen), 0) << m;
    if (w.op.shared) ++shared;
  }
  EXPECT_EQ(region[kAt - 1], '.');
  EXPECT_EQ(region[kAt + kShareLen], '.');
  EXPECT_GT(shared, 0) << "the initiator never copied a part of " << m << " writes";
  EXPECT_TRUE(p.client->open());
}

TEST_P(TransportShareTest, BothProcessesCopyPartsOfALargeReadIntoTheResultBuffers) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::string region = pattern(kAt + kShareLen + 4096, 3);
  server_.set_region(kKey, reinterpret_cast<unsigned char*>(region.data()), region.size());
  const std::string want = region.substr(kAt, kShareLen);
  int shared = 0;
  int m = 0;
  for (; m < kAtMost && (m < kAtLeast || shared == 0); ++m) {
    OneSided r;
    read_op(&r, static_cast<uint32_t>(m + 1), kKey, kAt, kShareLen);
    std::string tail(kShareLen - 200000, '\0');
    r.op.result[0] = {r.data.data(), 200000};
    r.op.result[1] = {tail.data(), tail.size()};
    r.op.result_count = 2;
    ASSERT_TRUE(run(p.client.get(), &r.op)) << m;
    ASSERT_EQ(client_.answers().back(), std::make_pair(uint32_t(m + 1), RmaStatus::kOk));
    ASSERT_EQ(r.data.substr(0, 200000) + tail, want) << m;
    if (r.op.shared) ++shared;
  }
  EXPECT_GT(shared, 0) << "the initiator never copied a part of " << m << " reads";
}

TEST_P(TransportShareTest, BelowShareMinTheTargetCopiesAlone) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(kShareMin, '.');
  server_.set_region(kKey, region.data(), region.size());
  for (int m = 0; m < 4; ++m) {
    OneSided w;
    const std::string want = pattern(kShareMin - 1, m);
    ASSERT_TRUE(run(p.client.get(), write_op(&w, static_cast<uint32_t>(m + 1), 0, want)));
    EXPECT_TRUE(w.op.direct);
    EXPECT_FALSE(w.op.shared) << m;
    ASSERT_EQ(std::string(region.begin(), region.end() - 1), want);
  }
}

class TransportNoShareTest : public TransportShareTest {
 protected:
  void configure(TransportConfig* c) override { c->share_min = 0; }
};
INSTANTIATE_TEST_SUITE_P(, TransportNoShareTest, ::testing::Values(true), tcp_or_shm);

TEST_P(TransportNoShareTest, WithSharingOffTheTargetCopiesLargeTransfersAlone) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  std::vector<unsigned char> region(kShareLen, '.');
  server_.set_region(kKey, region.data(), region.size());
  for (int m = 0; m < 4; ++m) {
    OneSided w;
    const std::string want = pattern(kShareLen, m);
    ASSERT_TRUE(run(p.client.get(), write_op(&w, static_cast<uint32_t>(m + 1), 0, want)));
    EXPECT_TRUE(w.op.direct);
    EXPECT_FALSE(w.op.shared) << m;
    ASSERT_EQ(std::string(region.begin(), region.end()), want);
  }
}

}  // namespace
}  // namespace fabq::xport::testing
