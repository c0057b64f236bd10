// CompletionQueue error entries: fi_cq_readerr fields, err_data copy and provider-owned modes,
// truncated receives (olen) and unknown source addresses (FI_SOURCE_ERR, FI_EADDRNOTAVAIL).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/cq.h"

namespace fabq::core {
namespace {

constexpr unsigned char kCanary = 0xC3;

std::unique_ptr<CompletionQueue> make_cq(CqFormat format = CqFormat::kTagged,
                                         bool provider_owned = false, size_t size = 16) {
  CqConfig config;
  config.size = size;
  config.format = format;
  config.provider_owned_err_data = provider_owned;
  auto r = CompletionQueue::create(config);
  EXPECT_TRUE(r.ok());
  return r.ok() ? std::move(r.value()) : nullptr;
}

void* ptr(uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

Completion completion(uint64_t i) {
  Completion c;
  c.op_context = ptr(0x40000 + i * 16);
  c.flags = FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA;
  c.len = 300 + i;
  c.buf = ptr(0x50000 + i * 8);
  c.data = 0xDEAD0000 + i;
  c.tag = 0xBEEF0000 + i;
  c.src_addr = 12 + i;
  return c;
}

std::vector<unsigned char> pattern(size_t n, unsigned char seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(seed + 7 * i + 1);
  return v;
}

sockaddr_in unknown_peer() {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(47593);
  sin.sin_addr.s_addr = htonl(0xC0A80A2A);  // 192.168.10.42
  return sin;
}

// The error a receive from an unknown peer produces when FI_SOURCE_ERR is enabled.
CompletionError unknown_source_error(const sockaddr_in& sin) {
  CompletionError e;
  e.completion = completion(3);
  e.completion.src_addr = FI_ADDR_NOTAVAIL;
  e.err = FI_EADDRNOTAVAIL;
  e.prov_errno = 0;
  e.err_data = &sin;
  e.err_data_size = sizeof(sin);
  return e;
}

bool all_canary(const unsigned char* p, size_t n) {
  return std::all_of(p, p + n, [](unsigned char b) { return b == kCanary; });
}

// ---------------------------------------------------------------------------------------------
// Fields.

TEST(CqReadError, ReturnsTheErrorAtTheHeadWithEveryField) {
  auto cq = make_cq();
  const auto bytes = pattern(24, 3);
  CompletionError e;
  e.completion = completion(1);
  e.olen = 17;
  e.err = FI_EIO;
  e.prov_errno = -4242;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  unsigned char user[64];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  Result<size_t> r = cq->read_error(&out, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  const Completion c = completion(1);
  EXPECT_EQ(out.op_context, c.op_context);
  EXPECT_EQ(out.flags, c.flags);
  EXPECT_EQ(out.len, c.len);
  EXPECT_EQ(out.buf, c.buf);
  EXPECT_EQ(out.data, c.data);
  EXPECT_EQ(out.tag, c.tag);
  EXPECT_EQ(out.olen, 17u);
  EXPECT_EQ(out.err, FI_EIO);
  EXPECT_EQ(out.prov_errno, -4242);
  EXPECT_EQ(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, bytes.size());
  EXPECT_EQ(std::memcmp(user, bytes.data(), bytes.size()), 0);
}

TEST(CqReadError, ReportsEveryFieldWhateverTheQueueFormat) {
  // The queue's format shapes fi_cq_read entries only; readerr always has every field.
  auto cq = make_cq(CqFormat::kContext);
  CompletionError e;
  e.completion = completion(2);
  e.err = FI_ECANCELED;
  e.prov_errno = 5;
  ASSERT_TRUE(cq->write_error(e).ok());
  fi_cq_err_entry out{};
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.op_context, e.completion.op_context);
  EXPECT_EQ(out.flags, e.completion.flags);
  EXPECT_EQ(out.len, e.completion.len);
  EXPECT_EQ(out.buf, e.completion.buf);
  EXPECT_EQ(out.data, e.completion.data);
  EXPECT_EQ(out.tag, e.completion.tag);
  EXPECT_EQ(out.err, FI_ECANCELED);
  EXPECT_EQ(out.prov_errno, 5);
}

TEST(CqReadError, ReturnsAgainWhenEmpty) {
  auto cq = make_cq();
  fi_cq_err_entry out{};
  EXPECT_EQ(cq->read_error(&out, 0).status().code(), Code::kAgain);
}

TEST(CqReadError, ReturnsAgainWhenTheHeadIsNotAnError) {
  auto cq = make_cq();
  ASSERT_TRUE(cq->write(completion(0)).ok());
  CompletionError e;
  e.completion = completion(1);
  e.err = FI_EIO;
  ASSERT_TRUE(cq->write_error(e).ok());

  fi_cq_err_entry out{};
  EXPECT_EQ(cq->read_error(&out, 0).status().code(), Code::kAgain);
  // The successful entry was not consumed by the failed readerr.
  fi_cq_tagged_entry entry;
  Result<size_t> r = cq->read(&entry, 4, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(entry.op_context, completion(0).op_context);
  // Now the error is at the head.
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.op_context, completion(1).op_context);
}

TEST(CqReadError, ConsumesTheErrorSoTheNextErrorComesNext) {
  auto cq = make_cq();
  for (uint64_t i = 0; i < 3; ++i) {
    CompletionError e;
    e.completion = completion(i);
    e.err = FI_EIO;
    e.prov_errno = static_cast<int>(i);
    ASSERT_TRUE(cq->write_error(e).ok());
  }
  ASSERT_TRUE(cq->write(completion(3)).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    fi_cq_err_entry out{};
    Result<size_t> r = cq->read_error(&out, 0);
    ASSERT_TRUE(r.ok()) << i;
    EXPECT_EQ(out.op_context, completion(i).op_context);
    EXPECT_EQ(out.prov_errno, static_cast<int>(i));
  }
  fi_cq_err_entry out{};
  EXPECT_EQ(cq->read_error(&out, 0).status().code(), Code::kAgain);
  fi_cq_tagged_entry entry;
  Result<size_t> r = cq->read(&entry, 1, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(entry.op_context, completion(3).op_context);
}

TEST(CqReadError, NullEntryIsInval) {
  auto cq = make_cq();
  CompletionError e;
  e.err = FI_EIO;
  ASSERT_TRUE(cq->write_error(e).ok());
  EXPECT_EQ(cq->read_error(nullptr, 0).status().code(), Code::kInval);
  EXPECT_EQ(cq->pending(), 1u);
}

// ---------------------------------------------------------------------------------------------
// err_data: copy mode.

TEST(CqErrData, CopiesIntoTheUserBufferAndSetsTheCopiedSize) {
  auto cq = make_cq();
  const auto bytes = pattern(24, 9);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  unsigned char user[64];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, 24u);
  EXPECT_EQ(std::memcmp(user, bytes.data(), 24), 0);
  EXPECT_TRUE(all_canary(user + 24, sizeof(user) - 24)) << "wrote past the error data";
}

TEST(CqErrData, CopiesAtMostTheUserBufferSize) {
  auto cq = make_cq();
  const auto bytes = pattern(30, 1);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  unsigned char user[32];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = 8;
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, 8u);
  EXPECT_EQ(std::memcmp(user, bytes.data(), 8), 0);
  EXPECT_TRUE(all_canary(user + 8, sizeof(user) - 8)) << "wrote past err_data_size";
}

TEST(CqErrData, ErrorWithoutDataSetsCopiedSizeToZero) {
  auto cq = make_cq();
  CompletionError e;
  e.err = FI_EIO;
  ASSERT_TRUE(cq->write_error(e).ok());
  unsigned char user[16];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err_data_size, 0u);
  EXPECT_TRUE(all_canary(user, sizeof(user)));
}

TEST(CqErrData, MaximumInlineErrDataRoundTrips) {
  auto cq = make_cq();
  const auto bytes = pattern(kCqMaxErrData, 77);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());
  unsigned char user[kCqMaxErrData + 8];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  ASSERT_EQ(out.err_data_size, kCqMaxErrData);
  EXPECT_EQ(std::memcmp(user, bytes.data(), kCqMaxErrData), 0);
  EXPECT_TRUE(all_canary(user + kCqMaxErrData, 8));
}

// ---------------------------------------------------------------------------------------------
// err_data: provider-owned mode.

TEST(CqErrData, ZeroInputSizePointsErrDataAtAProviderBuffer) {
  auto cq = make_cq();
  const auto bytes = pattern(20, 5);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  fi_cq_err_entry out{};
  out.err_data = nullptr;
  out.err_data_size = 0;
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  ASSERT_NE(out.err_data, nullptr);
  EXPECT_NE(out.err_data, static_cast<const void*>(bytes.data())) << "must be the provider's copy";
  ASSERT_EQ(out.err_data_size, bytes.size());
  EXPECT_EQ(std::memcmp(out.err_data, bytes.data(), bytes.size()), 0);
}

TEST(CqErrData, ZeroInputSizeIgnoresTheUserPointer) {
  auto cq = make_cq();
  const auto bytes = pattern(20, 6);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  unsigned char user[64];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = 0;
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  ASSERT_NE(out.err_data, nullptr);
  EXPECT_NE(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, bytes.size());
  EXPECT_EQ(std::memcmp(out.err_data, bytes.data(), bytes.size()), 0);
  EXPECT_TRUE(all_canary(user, sizeof(user))) << "a zero-sized user buffer was written";
}

TEST(CqErrData, ProviderOwnedConfigUsesAProviderBufferEvenWithAUserBuffer) {
  auto cq = make_cq(CqFormat::kTagged, /*provider_owned=*/true);
  const auto bytes = pattern(20, 8);
  CompletionError e;
  e.err = FI_EIO;
  e.err_data = bytes.data();
  e.err_data_size = bytes.size();
  ASSERT_TRUE(cq->write_error(e).ok());

  unsigned char user[64];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  ASSERT_NE(out.err_data, nullptr);
  EXPECT_NE(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, bytes.size());
  EXPECT_EQ(std::memcmp(out.err_data, bytes.data(), bytes.size()), 0);
  EXPECT_TRUE(all_canary(user, sizeof(user))) << "API < 1.5 must not use the user's buffer";
}

TEST(CqErrData, ProviderBufferHoldsTheDataOfTheErrorJustRead) {
  auto cq = make_cq(CqFormat::kTagged, /*provider_owned=*/true);
  const auto first = pattern(12, 10);
  const auto second = pattern(33, 90);
  for (const auto* bytes : {&first, &second}) {
    CompletionError e;
    e.err = FI_EIO;
    e.err_data = bytes->data();
    e.err_data_size = bytes->size();
    ASSERT_TRUE(cq->write_error(e).ok());
  }
  for (const auto* bytes : {&first, &second}) {
    fi_cq_err_entry out{};
    ASSERT_TRUE(cq->read_error(&out, 0).ok());
    ASSERT_NE(out.err_data, nullptr);
    ASSERT_EQ(out.err_data_size, bytes->size());
    EXPECT_EQ(std::memcmp(out.err_data, bytes->data(), bytes->size()), 0);
  }
}

TEST(CqErrData, ProviderOwnedErrorWithoutDataHasZeroSize) {
  auto cq = make_cq(CqFormat::kTagged, /*provider_owned=*/true);
  CompletionError e;
  e.err = FI_EIO;
  ASSERT_TRUE(cq->write_error(e).ok());
  fi_cq_err_entry out{};
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err_data_size, 0u);
}

// ---------------------------------------------------------------------------------------------
// Truncated receives.

TEST(CqTruncation, TruncatedReceiveReportsEtruncWithOlen) {
  auto cq = make_cq(CqFormat::kMsg);
  CompletionError e;
  e.completion = completion(4);
  e.completion.flags = FI_RECV | FI_MSG;
  e.completion.len = 64;  // what fit in the posted buffer
  e.olen = 36;            // what did not
  e.err = FI_ETRUNC;
  ASSERT_TRUE(cq->write_error(e).ok());

  fi_cq_msg_entry entry;
  EXPECT_EQ(cq->read(&entry, 1, nullptr).status().code(), Code::kAvail);
  fi_cq_err_entry out{};
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err, FI_ETRUNC);
  EXPECT_EQ(out.olen, 36u);
  EXPECT_EQ(out.len, 64u);
  EXPECT_EQ(out.flags, FI_RECV | FI_MSG);
  EXPECT_EQ(out.op_context, e.completion.op_context);
  EXPECT_EQ(out.buf, e.completion.buf);
}

TEST(CqTruncation, LargeOlenRoundTrips) {
  auto cq = make_cq();
  CompletionError e;
  e.completion = completion(0);
  e.olen = (size_t{1} << 40) + 3;
  e.err = FI_ETRUNC;
  ASSERT_TRUE(cq->write_error(e).ok());
  fi_cq_err_entry out{};
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.olen, (size_t{1} << 40) + 3);
}

// ---------------------------------------------------------------------------------------------
// Unknown source addresses (FI_SOURCE_ERR).

TEST(CqSourceErr, UnknownSourceRoundTripsThroughCopiedErrData) {
  auto cq = make_cq();
  const sockaddr_in sin = unknown_peer();
  ASSERT_EQ(sizeof(sin), 16u);
  ASSERT_TRUE(cq->write_error(unknown_source_error(sin)).ok());

  unsigned char user[sizeof(sockaddr_in) + 16];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err, FI_EADDRNOTAVAIL);
  EXPECT_EQ(out.op_context, completion(3).op_context);
  EXPECT_EQ(out.len, completion(3).len);
  EXPECT_EQ(out.data, completion(3).data);
  ASSERT_EQ(out.err_data_size, sizeof(sockaddr_in));
  sockaddr_in got;
  std::memcpy(&got, user, sizeof(got));
  EXPECT_EQ(got.sin_family, AF_INET);
  EXPECT_EQ(got.sin_port, sin.sin_port);
  EXPECT_EQ(got.sin_addr.s_addr, sin.sin_addr.s_addr);
  EXPECT_EQ(std::memcmp(user, &sin, sizeof(sin)), 0);
  EXPECT_TRUE(all_canary(user + sizeof(sin), sizeof(user) - sizeof(sin)));
}

TEST(CqSourceErr, UnknownSourceRoundTripsIntoAnExactlySizedBuffer) {
  auto cq = make_cq();
  const sockaddr_in sin = unknown_peer();
  ASSERT_TRUE(cq->write_error(unknown_source_error(sin)).ok());
  sockaddr_in got;
  std::memset(&got, kCanary, sizeof(got));
  fi_cq_err_entry out{};
  out.err_data = &got;
  out.err_data_size = sizeof(got);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err, FI_EADDRNOTAVAIL);
  ASSERT_EQ(out.err_data_size, sizeof(sin));
  EXPECT_EQ(std::memcmp(&got, &sin, sizeof(sin)), 0);
}

TEST(CqSourceErr, UnknownSourceRoundTripsThroughProviderOwnedErrData) {
  auto cq = make_cq();
  const sockaddr_in sin = unknown_peer();
  ASSERT_TRUE(cq->write_error(unknown_source_error(sin)).ok());
  fi_cq_err_entry out{};
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err, FI_EADDRNOTAVAIL);
  ASSERT_NE(out.err_data, nullptr);
  ASSERT_EQ(out.err_data_size, sizeof(sockaddr_in));
  sockaddr_in got;
  std::memcpy(&got, out.err_data, sizeof(got));
  EXPECT_EQ(got.sin_family, AF_INET);
  EXPECT_EQ(got.sin_port, sin.sin_port);
  EXPECT_EQ(got.sin_addr.s_addr, sin.sin_addr.s_addr);
}

TEST(CqSourceErr, UnknownSourceRoundTripsWithProviderOwnedConfig) {
  auto cq = make_cq(CqFormat::kMsg, /*provider_owned=*/true);
  const sockaddr_in sin = unknown_peer();
  ASSERT_TRUE(cq->write_error(unknown_source_error(sin)).ok());
  unsigned char user[32];
  std::fill(std::begin(user), std::end(user), kCanary);
  fi_cq_err_entry out{};
  out.err_data = user;
  out.err_data_size = sizeof(user);
  ASSERT_TRUE(cq->read_error(&out, 0).ok());
  EXPECT_EQ(out.err, FI_EADDRNOTAVAIL);
  ASSERT_NE(out.err_data, nullptr);
  EXPECT_NE(out.err_data, static_cast<void*>(user));
  ASSERT_EQ(out.err_data_size, sizeof(sockaddr_in));
  EXPECT_EQ(std::memcmp(out.err_data, &sin, sizeof(sin)), 0);
}

TEST(CqSourceErr, UnknownSourceErrorStopsReadsLikeAnyError) {
  auto cq = make_cq(CqFormat::kContext);
  ASSERT_TRUE(cq->write(completion(0)).ok());
  const sockaddr_in sin = unknown_peer();
  ASSERT_TRUE(cq->write_error(unknown_source_error(sin)).ok());
  fi_cq_entry e[4];
  fi_addr_t src[4];
  Result<size_t> r = cq->read(e, 4, src);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 1u);
  EXPECT_EQ(src[0], completion(0).src_addr);
  EXPECT_EQ(cq->read(e, 4, src).status().code(), Code::kAvail);
}

}  // namespace
}  // namespace fabq::core
