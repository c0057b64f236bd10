// Address vectors (fi_av(3)) through libfabric: open validation, synchronous inserts (counts,
// FI_ADDR_NOTAVAIL, FI_SYNC_ERR), asynchronous inserts (FI_EVENT: FI_AV_COMPLETE and error
// entries on the bound EQ), insertsvc and insertsym, remove, lookup, straddr, bindings and
// lifetimes, and concurrent inserts and lookups.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/fi_collective.h>
#include <rdma/fi_domain.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

sockaddr_in ipv4(const char* ip, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, ip, &sa.sin_addr), 1) << ip;
  return sa;
}

std::string str(const sockaddr_in& sa) {
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
  return std::string(ip) + ":" + std::to_string(ntohs(sa.sin_port)) +
         (sa.sin_family == AF_INET ? "" : " (not AF_INET)");
}

fi_av_attr av_attr(fi_av_type type = FI_AV_TABLE, uint64_t flags = 0) {
  fi_av_attr attr{};
  attr.type = type;
  attr.flags = flags;
  return attr;
}

class Av : public FabqTest {
 protected:
  void TearDown() override {
    if (av_ != nullptr) {
      EXPECT_EQ(fi_close(&av_->fid), 0);
    }
    if (eq_ != nullptr) {
      EXPECT_EQ(fi_close(&eq_->fid), 0);
    }
    FabqTest::TearDown();
  }

  // Opens the test's AV (closed by TearDown).
  void open(fi_av_attr attr) {
    const int rc = fi_av_open(domain_, &attr, &av_, nullptr);
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    ASSERT_NE(av_, nullptr);
  }

  // Opens an FI_EVENT AV bound to a fresh EQ (both closed by TearDown).
  void open_event_av(fi_av_type type = FI_AV_TABLE, size_t eq_size = 0) {
    ASSERT_NO_FATAL_FAILURE(open(av_attr(type, FI_EVENT)));
    fi_eq_attr attr{};
    attr.size = eq_size;
    attr.wait_obj = FI_WAIT_NONE;
    eq_ = open_eq(attr);
    ASSERT_NE(eq_, nullptr);
    ASSERT_EQ(fi_av_bind(av_, &eq_->fid, 0), 0);
  }

  // fi_av_lookup into a sockaddr_in; EXPECTs success.
  sockaddr_in looked_up(fi_addr_t a) {
    sockaddr_in out{};
    size_t len = sizeof(out);
    EXPECT_EQ(fi_av_lookup(av_, a, &out, &len), 0) << "fi_addr " << a;
    EXPECT_EQ(len, sizeof(out));
    return out;
  }

  // The next entry of the EQ, which must be an FI_AV_COMPLETE.
  fi_eq_entry read_complete() {
    fi_eq_entry e{};
    uint32_t event = 0;
    const ssize_t n = fi_eq_read(eq_, &event, &e, sizeof(e), 0);
    EXPECT_EQ(n, static_cast<ssize_t>(sizeof(e))) << fi_strerror(static_cast<int>(-n));
    EXPECT_EQ(event, static_cast<uint32_t>(FI_AV_COMPLETE));
    return e;
  }

  // The next entry of the EQ, which must be an error entry.
  fi_eq_err_entry read_error() {
    fi_eq_entry e{};
    uint32_t event = 0;
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAVAIL);
    fi_eq_err_entry err{};
    EXPECT_EQ(fi_eq_readerr(eq_, &err, 0), static_cast<ssize_t>(sizeof(err)));
    return err;
  }

  void expect_eq_empty() {
    fi_eq_entry e{};
    uint32_t event = 0;
    EXPECT_EQ(fi_eq_read(eq_, &event, &e, sizeof(e), 0), -FI_EAGAIN);
  }

  fid_av* av_ = nullptr;
  fid_eq* eq_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// fi_av_open.

TEST_F(Av, UnspecTypeBecomesTableAndIsReturnedInAttr) {
  fi_av_attr attr = av_attr(FI_AV_UNSPEC);
  ASSERT_EQ(fi_av_open(domain_, &attr, &av_, nullptr), 0);
  EXPECT_EQ(attr.type, FI_AV_TABLE);
}

TEST_F(Av, OpensMapAndTableWithTheirContextAndClass) {
  int ctx = 0;
  for (fi_av_type type : {FI_AV_MAP, FI_AV_TABLE}) {
    SCOPED_TRACE(type);
    fi_av_attr attr = av_attr(type);
    fid_av* av = nullptr;
    ASSERT_EQ(fi_av_open(domain_, &attr, &av, &ctx), 0);
    EXPECT_EQ(attr.type, type);
    EXPECT_EQ(av->fid.fclass, static_cast<size_t>(FI_CLASS_AV));
    EXPECT_EQ(av->fid.context, &ctx);
    EXPECT_EQ(fi_close(&av->fid), 0);
  }
}

// rx_ctx_bits name scalable endpoints' receive contexts (scalable_ep_test.cc); the rest of the
// 64 bits must still name entries.
TEST_F(Av, RxCtxBitsUpTo31AreTakenAndMoreAreInvalid) {
  fi_av_attr attr = av_attr();
  attr.rx_ctx_bits = 31;
  fid_av* av = nullptr;
  ASSERT_EQ(fi_av_open(domain_, &attr, &av, nullptr), 0);
  EXPECT_EQ(fi_close(&av->fid), 0);
  for (const int bits : {32, 64, -1}) {
    attr.rx_ctx_bits = bits;
    av = reinterpret_cast<fid_av*>(0x1);
    EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EINVAL) << bits;
    EXPECT_EQ(av, nullptr) << "a failed open leaves the output pointer NULL";
  }
}

// fi_av(3): "An AV opened for read-only access must be named ... and the AV must exist."
// Named AVs themselves: shared_av_test.cc.
TEST_F(Av, ReadOnlyOpenNeedsANameThatExists) {
  fi_av_attr attr = av_attr(FI_AV_TABLE, FI_READ);
  fid_av* av = reinterpret_cast<fid_av*>(0x1);
  EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EINVAL);
  EXPECT_EQ(av, nullptr);
  attr.name = "fabq-test-nobody-opened-this";
  EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EINVAL);
  EXPECT_EQ(av, nullptr);
}

TEST_F(Av, UnknownOpenFlagsAreBadFlags) {
  for (uint64_t flags : {uint64_t{FI_WRITE}, uint64_t{FI_SYNC_ERR}, uint64_t{1} << 3}) {
    SCOPED_TRACE(flags);
    fi_av_attr attr = av_attr(FI_AV_TABLE, flags);
    fid_av* av = reinterpret_cast<fid_av*>(0x1);
    EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(av, nullptr);
  }
}

TEST_F(Av, EventAndSymmetricFlagsAreAccepted) {
  fi_av_attr attr = av_attr(FI_AV_TABLE, FI_EVENT | FI_SYMMETRIC);
  attr.ep_per_node = 4;
  EXPECT_EQ(fi_av_open(domain_, &attr, &av_, nullptr), 0);
}

TEST_F(Av, UnknownTypeIsInvalid) {
  fi_av_attr attr = av_attr(static_cast<fi_av_type>(77));
  fid_av* av = reinterpret_cast<fid_av*>(0x1);
  EXPECT_EQ(fi_av_open(domain_, &attr, &av, nullptr), -FI_EINVAL);
  EXPECT_EQ(av, nullptr);
}

TEST_F(Av, NullAttrOrOutputIsInvalid) {
  fid_av* av = reinterpret_cast<fid_av*>(0x1);
  EXPECT_EQ(fi_av_open(domain_, nullptr, &av, nullptr), -FI_EINVAL);
  EXPECT_EQ(av, nullptr);
  fi_av_attr attr = av_attr();
  EXPECT_EQ(fi_av_open(domain_, &attr, nullptr, nullptr), -FI_EINVAL);
}

TEST_F(Av, CountIsOnlyASizingHint) {
  fi_av_attr attr = av_attr();
  attr.count = SIZE_MAX;  // not allocated: a hint
  ASSERT_NO_FATAL_FAILURE(open(attr));
  EXPECT_EQ(fi_close(&av_->fid), 0);
  attr.count = 2;
  av_ = nullptr;
  ASSERT_NO_FATAL_FAILURE(open(attr));
  std::vector<sockaddr_in> addrs;
  for (uint16_t p = 1; p <= 8; ++p) addrs.push_back(ipv4("10.0.0.1", p));
  fi_addr_t out[8];
  EXPECT_EQ(fi_av_insert(av_, addrs.data(), 8, out, 0, nullptr), 8) << "more than count fits";
}

TEST_F(Av, DomainOpenedForOneAvTypeOpensOnlyThatType) {
  fi_info* info = fi_dupinfo(info_);
  ASSERT_NE(info, nullptr);
  info->domain_attr->av_type = FI_AV_MAP;
  fid_domain* domain = nullptr;
  ASSERT_EQ(fi_domain(fabric_, info, &domain, nullptr), 0);
  fi_freeinfo(info);
  fi_av_attr attr = av_attr(FI_AV_TABLE);
  fid_av* av = reinterpret_cast<fid_av*>(0x1);
  EXPECT_EQ(fi_av_open(domain, &attr, &av, nullptr), -FI_EINVAL);
  EXPECT_EQ(av, nullptr);
  attr = av_attr(FI_AV_UNSPEC);
  ASSERT_EQ(fi_av_open(domain, &attr, &av, nullptr), 0);
  EXPECT_EQ(attr.type, FI_AV_MAP) << "FI_AV_UNSPEC becomes the domain's type";
  EXPECT_EQ(fi_close(&av->fid), 0);
  EXPECT_EQ(fi_close(&domain->fid), 0);
}

// ---------------------------------------------------------------------------------------------
// fi_av_insert on a synchronous AV.

TEST_F(Av, TableIndicesAreContiguousFromZeroInInsertionOrderAcrossCalls) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr(FI_AV_TABLE)));
  const sockaddr_in a[3] = {ipv4("10.0.0.1", 5000), ipv4("10.0.0.2", 5001), ipv4("10.0.0.3", 5002)};
  fi_addr_t out[3] = {};
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, nullptr), 2);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 1u);
  ASSERT_EQ(fi_av_insert(av_, &a[2], 1, &out[2], 0, nullptr), 1);
  EXPECT_EQ(out[2], 2u) << "sequential indices across insertion calls";
  for (int i = 0; i < 3; ++i) EXPECT_EQ(str(looked_up(i)), str(a[i]));
}

TEST_F(Av, MapReturnsAddressesThatLookUpToWhatWasInserted) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr(FI_AV_MAP)));
  const sockaddr_in a[2] = {ipv4("192.168.1.7", 1), ipv4("192.168.1.8", 65535)};
  fi_addr_t out[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, nullptr), 2);
  EXPECT_NE(out[0], out[1]);
  EXPECT_NE(out[0], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(str(looked_up(out[0])), str(a[0]));
  EXPECT_EQ(str(looked_up(out[1])), str(a[1]));
}

TEST_F(Av, InsertReturnsTheNumberOfAddressesInserted) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  std::vector<sockaddr_in> a;
  for (uint16_t p = 0; p < 5; ++p) a.push_back(ipv4("10.1.1.1", 7000 + p));
  std::vector<fi_addr_t> out(5);
  EXPECT_EQ(fi_av_insert(av_, a.data(), 5, out.data(), 0, nullptr), 5);
  EXPECT_EQ(fi_av_insert(av_, a.data(), 0, out.data(), 0, nullptr), 0) << "zero addresses";
}

TEST_F(Av, AddressOfAnotherFamilyGetsNotAvailAndIsNotCounted) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  sockaddr_in a[3] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2), ipv4("10.0.0.3", 3)};
  a[1].sin_family = AF_INET6;
  fi_addr_t out[3] = {};
  EXPECT_EQ(fi_av_insert(av_, a, 3, out, 0, nullptr), 2);
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(out[2], 1u) << "a failed address takes no index";
  EXPECT_EQ(str(looked_up(1)), str(a[2]));
}

TEST_F(Av, NullFiAddrStillInsertsAtPredictableIndices) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 10), ipv4("10.0.0.2", 20)};
  EXPECT_EQ(fi_av_insert(av_, a, 2, nullptr, 0, nullptr), 2);
  EXPECT_EQ(str(looked_up(0)), str(a[0]));
  EXPECT_EQ(str(looked_up(1)), str(a[1]));
}

TEST_F(Av, StoredAddressIsNormalized) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  sockaddr_in a = ipv4("10.0.0.9", 99);
  std::memset(a.sin_zero, 0xab, sizeof(a.sin_zero));
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
  const sockaddr_in back = looked_up(out);
  EXPECT_EQ(str(back), str(a));
  const char zero[sizeof(back.sin_zero)] = {};
  EXPECT_EQ(std::memcmp(back.sin_zero, zero, sizeof(zero)), 0) << "sin_zero is not stored";
}

TEST_F(Av, UnalignedAddressArrayIsRead) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  alignas(8) unsigned char buf[1 + 2 * sizeof(sockaddr_in)];
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 11), ipv4("10.0.0.2", 12)};
  std::memcpy(buf + 1, a, sizeof(a));
  fi_addr_t out[2] = {};
  ASSERT_EQ(fi_av_insert(av_, buf + 1, 2, out, 0, nullptr), 2);
  EXPECT_EQ(str(looked_up(out[1])), str(a[1]));
}

TEST_F(Av, DuplicateAddressGetsANewIndexAndBothStayValid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 4242);
  fi_addr_t first = FI_ADDR_NOTAVAIL;
  fi_addr_t second = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &first, 0, nullptr), 1);
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &second, 0, nullptr), 1);
  EXPECT_NE(first, second);
  EXPECT_EQ(str(looked_up(first)), str(a));
  EXPECT_EQ(str(looked_up(second)), str(a));
  ASSERT_EQ(fi_av_remove(av_, &first, 1, 0), 0);
  EXPECT_EQ(str(looked_up(second)), str(a)) << "removing one copy leaves the other";
}

TEST_F(Av, SyncErrWritesZeroOrTheErrorOfEachAddress) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  sockaddr_in a[3] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2), ipv4("10.0.0.3", 3)};
  a[0].sin_family = AF_UNIX;
  int errs[3] = {-1, -1, -1};
  fi_addr_t out[3] = {};
  EXPECT_EQ(fi_av_insert(av_, a, 3, out, FI_SYNC_ERR, errs), 2);
  EXPECT_GT(errs[0], 0) << "a failure holds a (positive) fabric errno";
  EXPECT_EQ(errs[1], 0);
  EXPECT_EQ(errs[2], 0);
  EXPECT_EQ(out[0], FI_ADDR_NOTAVAIL);
}

TEST_F(Av, SyncErrWithoutAnArrayIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  EXPECT_EQ(fi_av_insert(av_, &a, 1, nullptr, FI_SYNC_ERR, nullptr), -FI_EINVAL);
}

TEST_F(Av, MoreIsAcceptedAndUnknownInsertFlagsAreBadFlags) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(av_, &a, 1, &out, FI_MORE, nullptr), 1);
  for (uint64_t flags : {uint64_t{FI_AV_USER_ID}, uint64_t{FI_EVENT}, uint64_t{1} << 3}) {
    SCOPED_TRACE(flags);
    EXPECT_EQ(fi_av_insert(av_, &a, 1, &out, flags, nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "1", &out, flags, nullptr), -FI_EBADFLAGS);
    EXPECT_EQ(fi_av_insertsym(av_, "127.0.0.1", 1, "1", 1, &out, flags, nullptr), -FI_EBADFLAGS);
  }
  EXPECT_EQ(str(looked_up(0)), str(a));
  size_t len = sizeof(sockaddr_in);
  sockaddr_in b{};
  EXPECT_EQ(fi_av_lookup(av_, 1, &b, &len), -FI_EINVAL) << "nothing more was inserted";
}

TEST_F(Av, NullAddressArrayWithACountIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(av_, nullptr, 1, &out, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_insert(av_, nullptr, 0, &out, 0, nullptr), 0);
}

TEST_F(Av, CountAboveIntMaxIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  EXPECT_EQ(fi_av_insert(av_, &a, size_t{INT_MAX} + 1, nullptr, 0, nullptr), -FI_EINVAL);
}

TEST_F(Av, SynchronousAvWithABoundEqWritesNoEvents) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  eq_ = open_eq({});
  ASSERT_NE(eq_, nullptr);
  ASSERT_EQ(fi_av_bind(av_, &eq_->fid, 0), 0);
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  EXPECT_EQ(fi_av_insert(av_, &a, 1, nullptr, 0, nullptr), 1);
  expect_eq_empty();
}

// ---------------------------------------------------------------------------------------------
// FI_EVENT: asynchronous inserts report on the bound EQ.

TEST_F(Av, EventInsertReturnsZeroAndWritesAvCompleteWithCountAndContext) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2)};
  fi_addr_t out[2] = {FI_ADDR_NOTAVAIL, FI_ADDR_NOTAVAIL};
  int ctx = 0;
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, &ctx), 0);
  const fi_eq_entry e = read_complete();
  EXPECT_EQ(e.fid, &av_->fid);
  EXPECT_EQ(e.context, &ctx);
  EXPECT_EQ(e.data, 2u) << "data is the number inserted";
  expect_eq_empty();
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], 1u);
  EXPECT_EQ(str(looked_up(out[1])), str(a[1]));
}

TEST_F(Av, EventInsertErrorEntriesPrecedeTheCompletion) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  sockaddr_in a[3] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2), ipv4("10.0.0.3", 3)};
  a[0].sin_family = AF_INET6;
  a[2].sin_family = AF_UNSPEC;
  fi_addr_t out[3] = {};
  int ctx = 0;
  ASSERT_EQ(fi_av_insert(av_, a, 3, out, 0, &ctx), 0);
  for (uint64_t index : {0u, 2u}) {
    const fi_eq_err_entry err = read_error();
    EXPECT_EQ(err.fid, &av_->fid);
    EXPECT_EQ(err.context, &ctx);
    EXPECT_EQ(err.data, index) << "data is the index of the failed address";
    EXPECT_GT(err.err, 0);
  }
  const fi_eq_entry e = read_complete();
  EXPECT_EQ(e.data, 1u);
  EXPECT_EQ(e.context, &ctx);
  expect_eq_empty();
  EXPECT_EQ(out[0], FI_ADDR_NOTAVAIL);
  EXPECT_EQ(out[1], 0u);
  EXPECT_EQ(out[2], FI_ADDR_NOTAVAIL);
}

TEST_F(Av, EventInsertCompletesEvenWhenNothingIsInserted) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  int ctx = 0;
  ASSERT_EQ(fi_av_insert(av_, nullptr, 0, nullptr, 0, &ctx), 0);
  const fi_eq_entry e = read_complete();
  EXPECT_EQ(e.data, 0u);
  EXPECT_EQ(e.context, &ctx);
}

// fabq's contract: overrun happens only when an event truly cannot be stored. An insert can
// still be refused: one that finds no room in the EQ for its FI_AV_COMPLETE is -FI_EAGAIN,
// inserts nothing and leaves the EQ as it was.
TEST_F(Av, EventInsertThatFindsTheEqFullIsEagainInsertsNothingAndTheEqStaysUsable) {
  ASSERT_NO_FATAL_FAILURE(open_event_av(FI_AV_TABLE, 4));
  int rc = 0;
  size_t stored = 0;
  for (; stored < 64; ++stored) {
    rc = fi_av_insert(av_, nullptr, 0, nullptr, 0, nullptr);
    if (rc != 0) break;
  }
  ASSERT_EQ(rc, -FI_EAGAIN) << "the EQ is full";
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  EXPECT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), -FI_EAGAIN) << "no room to complete it";
  EXPECT_EQ(out, FI_ADDR_NOTAVAIL);
  (void)read_complete();
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 0);
  EXPECT_EQ(out, 0u) << "the refused insert took no index";
  for (size_t i = 1; i < stored; ++i) EXPECT_EQ(read_complete().data, 0u);
  EXPECT_EQ(read_complete().data, 1u);
  expect_eq_empty();
}

// An unread FI_AV_COMPLETE of a closed AV would name a fid that no longer exists, and that the
// next AV may reuse.
TEST_F(Av, ClosingAnEventAvPurgesItsUnreadEvents) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  sockaddr_in a[2] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2)};
  a[0].sin_family = AF_INET6;
  ASSERT_EQ(fi_av_insert(av_, a, 2, nullptr, 0, nullptr), 0);
  ASSERT_EQ(fi_close(&av_->fid), 0);
  av_ = nullptr;
  expect_eq_empty();
}

TEST_F(Av, EventInsertWithoutABoundEqIsNoEq) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr(FI_AV_TABLE, FI_EVENT)));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  fi_addr_t out = 0;
  EXPECT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), -FI_ENOEQ);
  EXPECT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "1", &out, 0, nullptr), -FI_ENOEQ);
  EXPECT_EQ(fi_av_insertsym(av_, "127.0.0.1", 1, "1", 1, &out, 0, nullptr), -FI_ENOEQ);
}

TEST_F(Av, SyncErrOnAnEventAvIsBadFlags) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  int err = 0;
  EXPECT_EQ(fi_av_insert(av_, &a, 1, nullptr, FI_SYNC_ERR, &err), -FI_EBADFLAGS);
  expect_eq_empty();
}

TEST_F(Av, EventInsertsymWritesOneCompletionForTheWholeRange) {
  ASSERT_NO_FATAL_FAILURE(open_event_av(FI_AV_MAP));
  fi_addr_t out[4] = {};
  int ctx = 0;
  ASSERT_EQ(fi_av_insertsym(av_, "10.2.0.1", 2, "100", 2, out, 0, &ctx), 0);
  EXPECT_EQ(read_complete().data, 4u);
  expect_eq_empty();
}

TEST_F(Av, EventInsertsvcThatDoesNotResolveGivesAnErrorThenACompletion) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  fi_addr_t out = 0;
  int ctx = 0;
  ASSERT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "no-such-service-fabq", &out, 0, &ctx), 0);
  const fi_eq_err_entry err = read_error();
  EXPECT_EQ(err.data, 0u);
  EXPECT_EQ(err.context, &ctx);
  EXPECT_EQ(read_complete().data, 0u);
  EXPECT_EQ(out, FI_ADDR_NOTAVAIL);
}

// ---------------------------------------------------------------------------------------------
// fi_av_insertsvc.

TEST_F(Av, InsertsvcResolvesNodeAndService) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "7471", &out, 0, nullptr), 1);
  EXPECT_EQ(str(looked_up(out)), "127.0.0.1:7471");
  ASSERT_EQ(fi_av_insertsvc(av_, "localhost", "7472", &out, 0, nullptr), 1);
  EXPECT_EQ(str(looked_up(out)), "127.0.0.1:7472");
}

TEST_F(Av, InsertsvcThatDoesNotResolveInsertsNothing) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = 0;
  EXPECT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "no-such-service-fabq", &out, 0, nullptr), 0);
  EXPECT_EQ(out, FI_ADDR_NOTAVAIL);
  int err = 0;
  EXPECT_EQ(fi_av_insertsvc(av_, "127.0.0.1", "no-such-service-fabq", &out, FI_SYNC_ERR, &err), 0);
  EXPECT_GT(err, 0);
}

TEST_F(Av, InsertsvcTakesAnAddrStrNodeWithoutService) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insertsvc(av_, "fi_sockaddr_in://10.9.8.7:6543", nullptr, &out, 0, nullptr), 1);
  EXPECT_EQ(str(looked_up(out)), "10.9.8.7:6543");
  for (const char* bad : {"fi_sockaddr_in://10.9.8.7", "fi_sockaddr_in://10.9.8:1",
                          "fi_sockaddr_in://10.9.8.7:65536", "fi_sockaddr_in6://[::1]:5"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(fi_av_insertsvc(av_, bad, nullptr, &out, 0, nullptr), 0);
    EXPECT_EQ(out, FI_ADDR_NOTAVAIL);
  }
  EXPECT_EQ(fi_av_insertsvc(av_, "fi_sockaddr_in://10.9.8.7:6543", "1", &out, 0, nullptr),
            -FI_EINVAL)
      << "the service must be NULL with an FI_ADDR_STR node";
}

TEST_F(Av, InsertsvcWithNeitherNodeNorServiceIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = 0;
  EXPECT_EQ(fi_av_insertsvc(av_, nullptr, nullptr, &out, 0, nullptr), -FI_EINVAL);
}

// ---------------------------------------------------------------------------------------------
// fi_av_insertsym.

TEST_F(Av, InsertsymInsertsEveryServiceOfANodeBeforeTheNextNode) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[4] = {};
  ASSERT_EQ(fi_av_insertsym(av_, "10.1.1.1", 2, "5000", 2, out, 0, nullptr), 4);
  const char* want[4] = {"10.1.1.1:5000", "10.1.1.1:5001", "10.1.1.2:5000", "10.1.1.2:5001"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i], static_cast<fi_addr_t>(i));
    EXPECT_EQ(str(looked_up(out[i])), want[i]);
  }
}

TEST_F(Av, InsertsymCarriesIntoTheNextOctet) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[2] = {};
  ASSERT_EQ(fi_av_insertsym(av_, "10.1.1.255", 2, "80", 1, out, 0, nullptr), 2);
  EXPECT_EQ(str(looked_up(out[1])), "10.1.2.0:80");
}

TEST_F(Av, InsertsymResolvesAHostNameForEachService) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[3] = {};
  ASSERT_EQ(fi_av_insertsym(av_, "localhost", 1, "7000", 3, out, 0, nullptr), 3);
  EXPECT_EQ(str(looked_up(out[0])), "127.0.0.1:7000");
  EXPECT_EQ(str(looked_up(out[2])), "127.0.0.1:7002");
}

TEST_F(Av, InsertsymOfSeveralHostsNeedsANumericSuffix) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[2] = {};
  EXPECT_EQ(fi_av_insertsym(av_, "localhost", 2, "7000", 1, out, 0, nullptr), -FI_EINVAL);
}

TEST_F(Av, InsertsymOfSeveralServicesNeedsANumericService) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[2] = {};
  EXPECT_EQ(fi_av_insertsym(av_, "127.0.0.1", 1, "http", 2, out, 0, nullptr), -FI_EINVAL);
}

TEST_F(Av, InsertsymPastTheLastAddressOrPortIsInvalidAndInsertsNothing) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[2] = {};
  EXPECT_EQ(fi_av_insertsym(av_, "255.255.255.255", 2, "80", 1, out, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_insertsym(av_, "10.0.0.1", 1, "65535", 2, out, 0, nullptr), -FI_EINVAL);
  sockaddr_in b{};
  size_t len = sizeof(b);
  EXPECT_EQ(fi_av_lookup(av_, 0, &b, &len), -FI_EINVAL);
}

TEST_F(Av, InsertsymWithNullNodeOrServiceIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out = 0;
  EXPECT_EQ(fi_av_insertsym(av_, nullptr, 1, "80", 1, &out, 0, nullptr), -FI_EINVAL);
  EXPECT_EQ(fi_av_insertsym(av_, "10.0.0.1", 1, nullptr, 1, &out, 0, nullptr), -FI_EINVAL);
}

TEST_F(Av, InsertsymReportsPerAddressErrorsWithSyncErr) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_addr_t out[2] = {};
  int errs[2] = {-1, -1};
  EXPECT_EQ(fi_av_insertsym(av_, "127.0.0.1", 2, "no-such-service-fabq", 1, out, FI_SYNC_ERR, errs),
            0);
  EXPECT_GT(errs[0], 0);
  EXPECT_GT(errs[1], 0);
  EXPECT_EQ(out[1], FI_ADDR_NOTAVAIL);
}

// ---------------------------------------------------------------------------------------------
// fi_av_remove.

TEST_F(Av, RemovedAddressNoLongerLooksUp) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2)};
  fi_addr_t out[2] = {};
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, nullptr), 2);
  ASSERT_EQ(fi_av_remove(av_, &out[0], 1, 0), 0);
  sockaddr_in b{};
  size_t len = sizeof(b);
  EXPECT_EQ(fi_av_lookup(av_, out[0], &b, &len), -FI_EINVAL);
  EXPECT_EQ(str(looked_up(out[1])), str(a[1]));
}

TEST_F(Av, RemoveWithAnyInvalidAddressRemovesNothing) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2)};
  fi_addr_t out[2] = {};
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, nullptr), 2);
  fi_addr_t bad[3] = {out[0], 17, out[1]};
  EXPECT_EQ(fi_av_remove(av_, bad, 3, 0), -FI_EINVAL);
  fi_addr_t notavail[2] = {out[0], FI_ADDR_NOTAVAIL};
  EXPECT_EQ(fi_av_remove(av_, notavail, 2, 0), -FI_EINVAL);
  EXPECT_EQ(str(looked_up(out[0])), str(a[0]));
  EXPECT_EQ(str(looked_up(out[1])), str(a[1]));
  ASSERT_EQ(fi_av_remove(av_, &out[0], 1, 0), 0);
  EXPECT_EQ(fi_av_remove(av_, &out[0], 1, 0), -FI_EINVAL) << "already removed";
}

TEST_F(Av, RemoveFlagsAreBadFlags) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  fi_addr_t out = 0;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
  EXPECT_EQ(fi_av_remove(av_, &out, 1, FI_MORE), -FI_EBADFLAGS);
  EXPECT_EQ(str(looked_up(out)), str(a));
}

TEST_F(Av, RemoveOfNullArrayWithACountIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  EXPECT_EQ(fi_av_remove(av_, nullptr, 1, 0), -FI_EINVAL);
  EXPECT_EQ(fi_av_remove(av_, nullptr, 0, 0), 0);
}

TEST_F(Av, RemovedIndicesAreNotReused) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a[2] = {ipv4("10.0.0.1", 1), ipv4("10.0.0.2", 2)};
  fi_addr_t out[2] = {};
  ASSERT_EQ(fi_av_insert(av_, a, 2, out, 0, nullptr), 2);
  ASSERT_EQ(fi_av_remove(av_, out, 2, 0), 0);
  fi_addr_t again = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insert(av_, &a[0], 1, &again, 0, nullptr), 1)
      << "removal followed by reinsertion is supported";
  EXPECT_EQ(again, 2u);
  EXPECT_EQ(str(looked_up(again)), str(a[0]));
}

// ---------------------------------------------------------------------------------------------
// fi_av_lookup.

TEST_F(Av, LookupCopiesTheAddressAndSetsAddrlen) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("172.16.5.4", 31337);
  fi_addr_t out = 0;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
  unsigned char buf[64];
  std::memset(buf, 0xee, sizeof(buf));
  size_t len = sizeof(buf);
  ASSERT_EQ(fi_av_lookup(av_, out, buf, &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in));
  EXPECT_EQ(std::memcmp(buf, &a, sizeof(a)), 0);
  EXPECT_EQ(buf[sizeof(sockaddr_in)], 0xee) << "nothing written past the address";
}

TEST_F(Av, LookupIntoAShortBufferTruncatesAndReportsTheSizeNeeded) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("172.16.5.4", 31337);
  fi_addr_t out = 0;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
  unsigned char buf[8];
  std::memset(buf, 0xee, sizeof(buf));
  size_t len = 4;
  EXPECT_EQ(fi_av_lookup(av_, out, buf, &len), 0);
  EXPECT_EQ(len, sizeof(sockaddr_in)) << "addrlen is set to the size needed";
  EXPECT_EQ(std::memcmp(buf, &a, 4), 0);
  EXPECT_EQ(buf[4], 0xee) << "only *addrlen bytes are written";
  len = 0;
  EXPECT_EQ(fi_av_lookup(av_, out, nullptr, &len), 0) << "a size query";
  EXPECT_EQ(len, sizeof(sockaddr_in));
}

TEST_F(Av, LookupOfAnAddressThatNamesNoEntryIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  sockaddr_in b{};
  for (fi_addr_t a : {fi_addr_t{0}, fi_addr_t{5}, FI_ADDR_NOTAVAIL, FI_ADDR_UNSPEC}) {
    size_t len = sizeof(b);
    EXPECT_EQ(fi_av_lookup(av_, a, &b, &len), -FI_EINVAL) << a;
  }
}

TEST_F(Av, LookupWithNullAddrlenOrNullBufferIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  fi_addr_t out = 0;
  ASSERT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
  sockaddr_in b{};
  EXPECT_EQ(fi_av_lookup(av_, out, &b, nullptr), -FI_EINVAL);
  size_t len = sizeof(b);
  EXPECT_EQ(fi_av_lookup(av_, out, nullptr, &len), -FI_EINVAL);
}

// ---------------------------------------------------------------------------------------------
// fi_av_straddr.

TEST_F(Av, StraddrFormatsLikeLibfabric) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("192.168.0.10", 8080);
  char buf[64];
  size_t len = sizeof(buf);
  ASSERT_EQ(fi_av_straddr(av_, &a, buf, &len), buf);
  EXPECT_STREQ(buf, "fi_sockaddr_in://192.168.0.10:8080");
  EXPECT_EQ(len, std::strlen(buf) + 1) << "len counts the NUL";
}

TEST_F(Av, StraddrTruncatesTerminatesAndReportsTheFullSize) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("192.168.0.10", 8080);
  char buf[10];
  std::memset(buf, 'x', sizeof(buf));
  size_t len = 8;
  ASSERT_EQ(fi_av_straddr(av_, &a, buf, &len), buf);
  EXPECT_STREQ(buf, "fi_sock");
  EXPECT_EQ(buf[8], 'x') << "nothing written past *len";
  EXPECT_EQ(len, std::strlen("fi_sockaddr_in://192.168.0.10:8080") + 1);
  len = 0;
  EXPECT_EQ(fi_av_straddr(av_, &a, nullptr, &len), nullptr);
  EXPECT_EQ(len, std::strlen("fi_sockaddr_in://192.168.0.10:8080") + 1) << "a size query";
}

TEST_F(Av, StraddrOfAnInsertedAddressRoundTripsThroughInsertsvc) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  const sockaddr_in a = ipv4("10.20.30.40", 5050);
  char buf[64];
  size_t len = sizeof(buf);
  ASSERT_NE(fi_av_straddr(av_, &a, buf, &len), nullptr);
  fi_addr_t out = FI_ADDR_NOTAVAIL;
  ASSERT_EQ(fi_av_insertsvc(av_, buf, nullptr, &out, 0, nullptr), 1);
  EXPECT_EQ(str(looked_up(out)), str(a));
}

TEST_F(Av, StraddrOfBadArgumentsIsNull) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  sockaddr_in a = ipv4("10.0.0.1", 1);
  char buf[64];
  size_t len = sizeof(buf);
  EXPECT_EQ(fi_av_straddr(av_, nullptr, buf, &len), nullptr);
  EXPECT_EQ(fi_av_straddr(av_, &a, buf, nullptr), nullptr);
  EXPECT_EQ(fi_av_straddr(av_, &a, nullptr, &len), nullptr);
  a.sin_family = AF_INET6;
  EXPECT_EQ(fi_av_straddr(av_, &a, buf, &len), nullptr);
}

// ---------------------------------------------------------------------------------------------
// fi_av_bind, fi_close and what is not supported.

TEST_F(Av, CloseAfterBindingAnEqSucceedsAndReleasesTheEq) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  EXPECT_EQ(fi_close(&av_->fid), 0);
  av_ = nullptr;
  EXPECT_EQ(fi_close(&eq_->fid), 0) << "the AV released the EQ";
  eq_ = nullptr;
}

TEST_F(Av, EqBoundToAnAvCannotBeClosed) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  EXPECT_EQ(fi_close(&eq_->fid), -FI_EBUSY);
  const sockaddr_in a = ipv4("10.0.0.1", 1);
  ASSERT_EQ(fi_av_insert(av_, &a, 1, nullptr, 0, nullptr), 0);
  EXPECT_EQ(read_complete().data, 1u) << "the EQ still works";
}

TEST_F(Av, BindOfASecondEqIsBusy) {
  ASSERT_NO_FATAL_FAILURE(open_event_av());
  fid_eq* other = open_eq({});
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(fi_av_bind(av_, &other->fid, 0), -FI_EBUSY);
  EXPECT_EQ(fi_close(&other->fid), 0) << "a refused bind holds nothing";
}

TEST_F(Av, BindOfANonEqOrWithFlagsIsRefused) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr(FI_AV_TABLE, FI_EVENT)));
  fid_cq* cq = open_cq({});
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(fi_av_bind(av_, &cq->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  eq_ = open_eq({});
  ASSERT_NE(eq_, nullptr);
  EXPECT_EQ(fi_av_bind(av_, &eq_->fid, FI_MORE), -FI_EBADFLAGS);
  EXPECT_EQ(fi_av_bind(av_, nullptr, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&eq_->fid), 0) << "a refused bind holds nothing";
  eq_ = nullptr;
}

TEST_F(Av, BindOfAnEqOfAnotherFabricIsInvalid) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr(FI_AV_TABLE, FI_EVENT)));
  fid_fabric* fabric = nullptr;
  ASSERT_EQ(fi_fabric(info_->fabric_attr, &fabric, nullptr), 0);
  fi_eq_attr attr{};
  fid_eq* eq = nullptr;
  ASSERT_EQ(fi_eq_open(fabric, &attr, &eq, nullptr), 0);
  EXPECT_EQ(fi_av_bind(av_, &eq->fid, 0), -FI_EINVAL);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  EXPECT_EQ(fi_close(&fabric->fid), 0);
}

TEST_F(Av, AvSetIsNotSupported) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  fi_av_set_attr attr{};
  fid_av_set* set = nullptr;
  EXPECT_EQ(fi_av_set(av_, &attr, &set, nullptr), -FI_ENOSYS);
}

TEST_F(Av, OpTablesHaveEverySlot) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  ASSERT_NE(av_->fid.ops, nullptr);
  EXPECT_NE(av_->fid.ops->close, nullptr);
  EXPECT_NE(av_->fid.ops->bind, nullptr);
  EXPECT_NE(av_->fid.ops->control, nullptr);
  EXPECT_NE(av_->fid.ops->ops_open, nullptr);
  EXPECT_NE(av_->fid.ops->tostr, nullptr);
  EXPECT_NE(av_->fid.ops->ops_set, nullptr);
  ASSERT_NE(av_->ops, nullptr);
  EXPECT_GE(av_->ops->size, sizeof(fi_ops_av));
  EXPECT_NE(av_->ops->insert, nullptr);
  EXPECT_NE(av_->ops->insertsvc, nullptr);
  EXPECT_NE(av_->ops->insertsym, nullptr);
  EXPECT_NE(av_->ops->remove, nullptr);
  EXPECT_NE(av_->ops->lookup, nullptr);
  EXPECT_NE(av_->ops->straddr, nullptr);
  EXPECT_NE(av_->ops->av_set, nullptr);
  EXPECT_EQ(fi_control(&av_->fid, FI_GETWAIT, nullptr), -FI_ENOSYS);
}

// ---------------------------------------------------------------------------------------------
// Threads: concurrent inserts get distinct consecutive indices; lookups see whole entries.

TEST_F(Av, ConcurrentInsertsAndLookupsAgree) {
  ASSERT_NO_FATAL_FAILURE(open(av_attr()));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::vector<fi_addr_t>> got(kThreads, std::vector<fi_addr_t>(kPerThread));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!stop.load()) {
      for (fi_addr_t a = 0; a < 64; ++a) {
        sockaddr_in b{};
        size_t len = sizeof(b);
        if (fi_av_lookup(av_, a, &b, &len) == 0 && b.sin_family != AF_INET) ++torn;
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const sockaddr_in a = ipv4(("10.0." + std::to_string(t) + ".1").c_str(), 1000 + i);
        fi_addr_t out = FI_ADDR_NOTAVAIL;
        EXPECT_EQ(fi_av_insert(av_, &a, 1, &out, 0, nullptr), 1);
        got[t][i] = out;
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  std::set<fi_addr_t> all;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      all.insert(got[t][i]);
      const std::string want = "10.0." + std::to_string(t) + ".1:" + std::to_string(1000 + i);
      ASSERT_EQ(str(looked_up(got[t][i])), want);
    }
  }
  ASSERT_EQ(all.size(), size_t{kThreads * kPerThread});
  EXPECT_EQ(*all.begin(), 0u);
  EXPECT_EQ(*all.rbegin(), fi_addr_t{kThreads * kPerThread - 1}) << "no gaps";
}

}  // namespace
}  // namespace fabq::testing
