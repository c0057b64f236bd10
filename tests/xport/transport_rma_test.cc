// One-sided requests through the TCP transport (transport_harness.h), over the socket and over
// shared memory: a write lands in the owner's region and is acknowledged with its status, a
// read and an atomic are answered with the region's bytes, a refusal comes back with its status
// and no bytes, and an answer to a request this side never made fails the connection
// (xport/transport.h RemoteAccess, Owner::rma_acked; wire.h one-sided frames).
#include <gtest/gtest.h>
#include <rdma/fi_atomic.h>

#include <cstring>
#include <string>
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

}  // namespace
}  // namespace fabq::xport::testing
