// One provider for libfabric 1.x and 2.x (fi_getinfo(3), fi_provider(3)): fabq declares the
// version of the libfabric that loaded it, and answers each application by the API version it
// asked for. Every test runs at each version below; those newer than the libfabric the tests
// run with are skipped (scripts/test runs this file with libfabric 1.17 and with 2.x).
#include <rdma/fi_tagged.h>

#include <cstring>
#include <string>
#include <vector>

#include "libfabric2.h"
#include "rdm_fixture.h"

namespace fabq::testing {
namespace {

// 0: the running core's own version (fi_version()), the newest an application can ask for.
constexpr uint32_t kCoreVersion = 0;

uint32_t resolve(uint32_t v) {
  return v == kCoreVersion ? fi_version() : v;
}

class AtVersion : public Rdm, public ::testing::WithParamInterface<uint32_t> {
 protected:
  AtVersion() : Rdm(FI_MSG | FI_TAGGED | FI_SOURCE, resolve(GetParam())) {}

  uint32_t version() const { return version_; }
  bool at_least(uint32_t major, uint32_t minor) const {
    return !FI_VERSION_LT(version_, FI_VERSION(major, minor));
  }

  // fi_getinfo at the test's version for fabq's RDM endpoints on "lo", after `edit` changed the
  // hints: the return code, and the first info in *out (freed by the caller) when there is one.
  template <typename Edit>
  int getinfo_with(Edit edit, fi_info** out = nullptr) {
    fi_info* hints = fabq_hints(lf2::allocinfo_as(version_));
    if (hints == nullptr) return -FI_ENOMEM;
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED;
    edit(hints);
    fi_info* info = nullptr;
    const int rc = lf2::getinfo_as(version_, nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (out != nullptr) {
      *out = info;
    } else {
      fi_freeinfo(info);
    }
    return rc;
  }

  // Sends `len` bytes of `buf` from `from` to `to`, tagged with `tag` when `tagged`: what the
  // send call returned, after its completion when it returned 0.
  ssize_t send_one(Ep* from, const Ep* to, const char* buf, size_t len, bool tagged = false,
                   uint64_t tag = 0) {
    const ssize_t rc =
        tagged ? fi_tsend(from->ep, buf, len, nullptr, to->addr, tag, const_cast<char*>(buf))
               : fi_send(from->ep, buf, len, nullptr, to->addr, const_cast<char*>(buf));
    if (rc != 0) return rc;
    fi_cq_tagged_entry e{};
    EXPECT_EQ(wait_cq(from->cq, &e), 1);
    return rc;
  }
};

TEST_P(AtVersion, FabqAnswersWithTheVersionAskedFor) {
  ASSERT_STREQ(info_->fabric_attr->prov_name, "fabq");
  EXPECT_EQ(info_->fabric_attr->api_version, version());
  EXPECT_EQ(fabric_->api_version, version());
}

TEST_P(AtVersion, MessagesAndTaggedMessagesArrive) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char in[16] = {};
  char tin[16] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_trecv(b->ep, tin, sizeof(tin), nullptr, FI_ADDR_UNSPEC, 9, 0, tin), 0);
  ASSERT_EQ(send_one(a, b, "untagged", 9), 0);
  ASSERT_EQ(send_one(a, b, "tagged", 7, true, 9), 0);
  fi_cq_tagged_entry e{};
  fi_addr_t src = FI_ADDR_UNSPEC;
  ASSERT_EQ(wait_cq(b->cq, &e, nullptr, &src), 1);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(in, "untagged");
  EXPECT_STREQ(tin, "tagged");
  EXPECT_EQ(src, a->addr);
}

// fi_cq(3): fi_cq_err_entry grew err_data_size in 1.5 and src_addr in 1.20, which is
// FI_ADDR_NOTAVAIL unless the endpoint uses FI_AV_AUTH_KEY. Nothing past the application's
// struct is written.
TEST_P(AtVersion, AnErrorEntryIsAsLongAsTheVersionsStruct) {
  Ep* a = open_ep();
  char buf[8];
  ASSERT_EQ(fi_recv(a->ep, buf, sizeof(buf), nullptr, FI_ADDR_UNSPEC, buf), 0);
  ASSERT_EQ(fi_cancel(&a->ep->fid, buf), 0);
  unsigned char raw[128];
  std::memset(raw, 0xAB, sizeof(raw));
  auto* err = reinterpret_cast<fi_cq_err_entry*>(raw);
  if (at_least(1, 5)) err->err_data_size = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  ssize_t n = -FI_EAGAIN;
  while (n == -FI_EAGAIN && std::chrono::steady_clock::now() < deadline) {
    fi_cq_tagged_entry e{};
    if (fi_cq_read(a->cq, &e, 1) == -FI_EAVAIL) n = fi_cq_readerr(a->cq, err, 0);
  }
  ASSERT_EQ(n, 1);
  EXPECT_EQ(err->err, FI_ECANCELED);
  EXPECT_EQ(err->op_context, buf);
  const size_t end = at_least(1, 20)  ? lf2::kCqErrSrcAddrOffset + sizeof(fi_addr_t)
                     : at_least(1, 5) ? sizeof(fi_cq_err_entry)
                                      : offsetof(fi_cq_err_entry, err_data_size);
  if (at_least(1, 20)) {
    fi_addr_t src_addr;
    std::memcpy(&src_addr, raw + lf2::kCqErrSrcAddrOffset, sizeof(src_addr));
    EXPECT_EQ(src_addr, FI_ADDR_NOTAVAIL);
  }
  for (size_t i = end; i < sizeof(raw); ++i) {
    ASSERT_EQ(raw[i], 0xAB) << "byte " << i << " is past the application's fi_cq_err_entry";
  }
}

// fi_domain(3): max_ep_auth_key (1.20), max_group_id (2.0), max_cntr_value and
// max_err_cntr_value (2.5) are reported from the version that has them, and are 0 (as the core
// allocated them) below it. Only a 2.5 or newer core has all of them to read.
TEST_P(AtVersion, DomainAttributesAddedLaterAreReportedFromTheirVersion) {
  if (!lf2::core_has(FI_VERSION(2, 5))) GTEST_SKIP() << "the core's fi_domain_attr ends at 1.17's";
  const lf2::DomainTail t = lf2::tail_of(info_->domain_attr);
  EXPECT_EQ(t.max_ep_auth_key, at_least(1, 20) ? 1U : 0U);
  EXPECT_EQ(t.max_group_id, 0U);
  EXPECT_EQ(t.max_cntr_value, at_least(2, 5) ? UINT64_MAX : 0U);
  EXPECT_EQ(t.max_err_cntr_value, at_least(2, 5) ? UINT64_MAX : 0U);
}

// "Providers that cannot meet the requested max_group_id will fail fi_getinfo()"; fabq has one
// authorization key per endpoint and no groups. Below their version the members are not read.
TEST_P(AtVersion, HintsOfMembersAddedLaterAreHonouredFromTheirVersion) {
  if (!lf2::core_has(FI_VERSION(2, 5))) GTEST_SKIP() << "the core's fi_domain_attr ends at 1.17's";
  auto with_tail = [](lf2::DomainTail t) {
    return [t](fi_info* h) { lf2::set_tail(h->domain_attr, t); };
  };
  EXPECT_EQ(getinfo_with(with_tail({.max_ep_auth_key = 1})), 0);
  EXPECT_EQ(getinfo_with(with_tail({.max_ep_auth_key = 2})), at_least(1, 20) ? -FI_ENODATA : 0);
  EXPECT_EQ(getinfo_with(with_tail({.max_group_id = 1})), at_least(2, 0) ? -FI_ENODATA : 0);
  EXPECT_EQ(
      getinfo_with(with_tail({.max_cntr_value = UINT64_MAX, .max_err_cntr_value = UINT64_MAX})), 0);
}

// fi_domain(3) of 2.0 simplified the threading models: FI_THREAD_FID and FI_THREAD_ENDPOINT
// are gone (libfabric's own providers refuse them).
TEST_P(AtVersion, ThreadFidAndThreadEndpointAreRefusedFrom20) {
  for (fi_threading t : {FI_THREAD_FID, FI_THREAD_ENDPOINT}) {
    EXPECT_EQ(getinfo_with([t](fi_info* h) { h->domain_attr->threading = t; }),
              at_least(2, 0) ? -FI_ENODATA : 0)
        << "threading " << t;
  }
  for (fi_threading t : {FI_THREAD_SAFE, FI_THREAD_DOMAIN, FI_THREAD_COMPLETION}) {
    fi_info* info = nullptr;
    ASSERT_EQ(getinfo_with([t](fi_info* h) { h->domain_attr->threading = t; }, &info), 0);
    EXPECT_EQ(info->domain_attr->threading, t);
    fi_freeinfo(info);
  }
}

// FI_PROGRESS_CONTROL_UNIFIED (1.21): manual progress with control calls the application
// serialises.
TEST_P(AtVersion, ProgressControlUnifiedIsKnownFrom121) {
  fi_info* info = nullptr;
  const int rc = getinfo_with(
      [](fi_info* h) {
        h->domain_attr->data_progress = static_cast<fi_progress>(lf2::kProgressControlUnified);
      },
      &info);
  if (!at_least(1, 21)) {
    EXPECT_EQ(rc, -FI_ENODATA);
    return;
  }
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->data_progress, lf2::kProgressControlUnified);
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  EXPECT_EQ(fi_domain(fabric, info, &domain, nullptr), 0);
  if (domain != nullptr) {
    EXPECT_EQ(fi_close(&domain->fid), 0);
  }
  EXPECT_EQ(fi_close(&fabric->fid), 0);
  fi_freeinfo(info);
}

// Caps bit 48 is FI_VARIABLE_MSG before 2.0, which fabq does not offer, and
// FI_EXACT_DIRECTED_RECV from 2.0, which it does; FI_TAGGED_DIRECTED_RECV likewise.
TEST_P(AtVersion, DirectedReceiveVariantsAreCapabilitiesFrom20) {
  for (uint64_t cap : {lf2::kExactDirectedRecv, lf2::kTaggedDirectedRecv}) {
    fi_info* info = nullptr;
    const int rc = getinfo_with([cap](fi_info* h) { h->caps |= cap; }, &info);
    if (!at_least(2, 0)) {
      EXPECT_EQ(rc, -FI_ENODATA) << std::hex << cap;
      continue;
    }
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    EXPECT_NE(info->caps & cap, 0U);
    EXPECT_NE(info->rx_attr->caps & cap, 0U);
    EXPECT_EQ(info->tx_attr->caps & cap, 0U);
    fi_freeinfo(info);
  }
  EXPECT_EQ(getinfo_with([](fi_info* h) {
              h->caps |= lf2::kExactDirectedRecv;
              h->ep_attr->type = FI_EP_MSG;
            }),
            -FI_ENODATA)
      << "directed receive is RDM's";
  EXPECT_EQ(getinfo_with([](fi_info* h) { h->caps |= lf2::kTaggedMultiRecv; }), -FI_ENODATA)
      << "tagged multi-receive is not offered";
}

// fi_endpoint(3) of 2.0: a mem_tag_format below FI_TAG_MAX_FORMAT names a format (FI_TAG_BITS,
// FI_TAG_MPI, FI_TAG_CCL); before 2.0 every value is bit fields, kept as the application gave it.
TEST_P(AtVersion, TagFormatsAreNamedFrom20) {
  for (uint64_t format : {lf2::kTagMpi, lf2::kTagCcl, uint64_t{5}}) {
    fi_info* info = nullptr;
    const int rc =
        getinfo_with([format](fi_info* h) { h->ep_attr->mem_tag_format = format; }, &info);
    if (at_least(2, 0) && format == 5) {
      EXPECT_EQ(rc, -FI_ENODATA) << "no format 5";
      continue;
    }
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    EXPECT_EQ(info->ep_attr->mem_tag_format, format);
    fi_freeinfo(info);
  }
}

// FI_TAG_MPI: "a 32-bit searchable tag" and a payload id, each ignored with FI_MPI_IGNORE_TAG or
// FI_MPI_IGNORE_PAYLOAD.
TEST_P(AtVersion, MpiFormattedTagsMatchFieldByField) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  char any_payload[16] = {};
  char any_tag[16] = {};
  ASSERT_EQ(fi_trecv(b->ep, any_payload, sizeof(any_payload), nullptr, FI_ADDR_UNSPEC,
                     lf2::tag_mpi(5, 0), lf2::kMpiIgnorePayload, any_payload),
            0);
  ASSERT_EQ(fi_trecv(b->ep, any_tag, sizeof(any_tag), nullptr, FI_ADDR_UNSPEC, lf2::tag_mpi(0, 3),
                     lf2::kMpiIgnoreTag, any_tag),
            0);
  ASSERT_EQ(send_one(a, b, "tag 6 id 3", 11, true, lf2::tag_mpi(6, 3)), 0);
  ASSERT_EQ(send_one(a, b, "tag 5 id 9", 11, true, lf2::tag_mpi(5, 9)), 0);
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_STREQ(any_payload, "tag 5 id 9");
  EXPECT_STREQ(any_tag, "tag 6 id 3");
}

// fi_endpoint(3) of 1.22: FI_OPT_MAX_*_SIZE and FI_OPT_INJECT_*_SIZE lower, never raise, what
// an endpoint's transfers carry; "Providers that don't support this option will return
// -FI_ENOPROTOOPT", which is what an older application gets.
TEST_P(AtVersion, SizeOptionsLimitTransfersFrom122) {
  Ep* a = open_ep();
  Ep* b = open_ep();
  size_t v = 0;
  size_t len = sizeof(v);
  const int got = fi_getopt(&a->ep->fid, FI_OPT_ENDPOINT, lf2::kOptMaxMsgSize, &v, &len);
  if (!at_least(1, 22)) {
    EXPECT_EQ(got, -FI_ENOPROTOOPT);
    EXPECT_EQ(fi_setopt(&a->ep->fid, FI_OPT_ENDPOINT, lf2::kOptMaxMsgSize, &v, sizeof(v)),
              -FI_ENOPROTOOPT);
    return;
  }
  ASSERT_EQ(got, 0);
  EXPECT_EQ(v, info_->ep_attr->max_msg_size);
  EXPECT_EQ(len, sizeof(size_t));
  auto get = [&](int name) {
    size_t out = 0;
    size_t n = sizeof(out);
    EXPECT_EQ(fi_getopt(&a->ep->fid, FI_OPT_ENDPOINT, name, &out, &n), 0) << name;
    return out;
  };
  auto set = [&](int name, size_t bytes) {
    return fi_setopt(&a->ep->fid, FI_OPT_ENDPOINT, name, &bytes, sizeof(bytes));
  };
  EXPECT_EQ(get(lf2::kOptMaxTaggedSize), info_->ep_attr->max_msg_size);
  EXPECT_EQ(get(lf2::kOptMaxRmaSize), info_->ep_attr->max_msg_size);
  EXPECT_LE(get(lf2::kOptMaxAtomicSize), info_->ep_attr->max_msg_size);
  EXPECT_GT(get(lf2::kOptMaxAtomicSize), 0U);
  for (int name : {lf2::kOptInjectMsgSize, lf2::kOptInjectTaggedSize, lf2::kOptInjectRmaSize,
                   lf2::kOptInjectAtomicSize}) {
    EXPECT_EQ(get(name), info_->tx_attr->inject_size) << name;
  }
  EXPECT_EQ(set(lf2::kOptMaxMsgSize, info_->ep_attr->max_msg_size + 1), -FI_EINVAL);
  EXPECT_EQ(set(lf2::kOptInjectMsgSize, info_->tx_attr->inject_size + 1), -FI_EINVAL);
  size_t small = 4;
  EXPECT_EQ(fi_setopt(&a->ep->fid, FI_OPT_ENDPOINT, lf2::kOptMaxMsgSize, &small, 4), -FI_EINVAL)
      << "optlen must be sizeof(size_t)";

  ASSERT_EQ(set(lf2::kOptMaxMsgSize, 16), 0);
  ASSERT_EQ(set(lf2::kOptInjectMsgSize, 8), 0);
  EXPECT_EQ(get(lf2::kOptMaxMsgSize), 16U);
  EXPECT_EQ(get(lf2::kOptInjectMsgSize), 8U);
  const char text[] = "seventeen bytes!";  // 17 with its NUL
  static_assert(sizeof(text) == 17);
  EXPECT_EQ(fi_send(a->ep, text, 17, nullptr, b->addr, nullptr), -FI_EMSGSIZE);
  EXPECT_EQ(fi_inject(a->ep, text, 9, b->addr), -FI_EMSGSIZE);
  EXPECT_EQ(fi_inject(a->ep, text, 8, b->addr), 0);
  char in[32] = {};
  char tin[32] = {};
  ASSERT_EQ(fi_recv(b->ep, in, sizeof(in), nullptr, FI_ADDR_UNSPEC, in), 0);
  ASSERT_EQ(fi_trecv(b->ep, tin, sizeof(tin), nullptr, FI_ADDR_UNSPEC, 1, 0, tin), 0);
  ASSERT_EQ(send_one(a, b, text, 17, /*tagged=*/true, 1), 0) << "tagged messages keep theirs";
  fi_cq_tagged_entry e{};
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  ASSERT_EQ(wait_cq(b->cq, &e), 1);
  EXPECT_EQ(std::memcmp(in, text, 8), 0);
  EXPECT_STREQ(tin, text);
}

std::string version_name(const ::testing::TestParamInfo<uint32_t>& p) {
  if (p.param == kCoreVersion) return "TheCoresOwn";
  return "v" + std::to_string(FI_MAJOR(p.param)) + "_" + std::to_string(FI_MINOR(p.param));
}

INSTANTIATE_TEST_SUITE_P(Versions, AtVersion,
                         ::testing::Values(FI_VERSION(1, 4), FI_VERSION(1, 5), FI_VERSION(1, 9),
                                           FI_VERSION(1, 17), FI_VERSION(1, 18), FI_VERSION(1, 20),
                                           FI_VERSION(1, 21), FI_VERSION(1, 22), FI_VERSION(2, 0),
                                           FI_VERSION(2, 5), FI_VERSION(2, 6), kCoreVersion),
                         version_name);

// fi_getinfo(3): the core refuses a version newer than itself before any provider sees it; fabq
// declares the core's own, so every version the core accepts reaches it.
TEST(ApiVersion, TheNewestTheCoreAcceptsReachesFabq) {
  fi_info* hints = fabq_hints();
  ASSERT_NE(hints, nullptr);
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(fi_version(), nullptr, nullptr, 0, hints, &info), 0);
  if (info != nullptr) {
    EXPECT_STREQ(info->fabric_attr->prov_name, "fabq");
  }
  fi_freeinfo(info);
  info = nullptr;
  EXPECT_EQ(fi_getinfo(fi_version() + 1, nullptr, nullptr, 0, hints, &info), -FI_ENOSYS);
  EXPECT_EQ(info, nullptr);
  fi_freeinfo(hints);
}

}  // namespace
}  // namespace fabq::testing
