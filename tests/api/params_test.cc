// fabq's provider parameters (FI_FABQ_*, src/prov/provider.h): fi_getparams lists them, and
// each limit bites. Parameters are read once per process when the provider loads, so every
// test that sets one does so before its first libfabric call and opens its own fabric and
// domain (no FabqTest fixture); ctest runs each test in its own process.
#include <strings.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

// fi_getinfo on "lo" -> fi_fabric -> fi_domain, closed in reverse order.
class Opened {
 public:
  Opened() {
    fi_info* hints = fabq_hints();
    if (hints == nullptr) return;
    rc_ = fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info_);
    fi_freeinfo(hints);
    if (rc_ != 0) return;
    rc_ = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
    if (rc_ != 0) return;
    rc_ = fi_domain(fabric_, info_, &domain_, nullptr);
  }
  ~Opened() {
    if (domain_ != nullptr) {
      EXPECT_EQ(fi_close(&domain_->fid), 0);
    }
    if (fabric_ != nullptr) {
      EXPECT_EQ(fi_close(&fabric_->fid), 0);
    }
    fi_freeinfo(info_);
  }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;

  bool ok() const { return rc_ == 0 && domain_ != nullptr; }
  int rc() const { return rc_; }
  fi_info* info() const { return info_; }
  fid_fabric* fabric() const { return fabric_; }
  fid_domain* domain() const { return domain_; }

 private:
  int rc_ = -FI_ENOMEM;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
};

void set_param(const char* name, const char* value) {
  ASSERT_EQ(setenv(name, value, 1), 0);
}

int eq_open(fid_fabric* fabric, size_t size, fid_eq** eq, uint64_t flags = 0) {
  fi_eq_attr attr{};
  attr.size = size;
  attr.flags = flags;
  *eq = reinterpret_cast<fid_eq*>(uintptr_t{0x1});
  return fi_eq_open(fabric, &attr, eq, nullptr);
}

int cq_open(fid_domain* domain, size_t size, fid_cq** cq) {
  fi_cq_attr attr{};
  attr.size = size;
  *cq = reinterpret_cast<fid_cq*>(uintptr_t{0x1});
  return fi_cq_open(domain, &attr, cq, nullptr);
}

int cntr_open(fid_domain* domain, fid_cntr** cntr) {
  fi_cntr_attr attr{};
  attr.events = FI_CNTR_EVENTS_COMP;
  *cntr = reinterpret_cast<fid_cntr*>(uintptr_t{0x1});
  return fi_cntr_open(domain, &attr, cntr, nullptr);
}

// Writes FI_NOTIFY events until one fails; returns how many succeeded and the failure.
std::pair<size_t, ssize_t> fill(fid_eq* eq, size_t limit) {
  fi_eq_entry e{};
  for (size_t n = 0; n < limit; ++n) {
    e.data = n;
    const ssize_t rc = fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0);
    if (rc < 0) return {n, rc};
    EXPECT_EQ(rc, static_cast<ssize_t>(sizeof(e)));
  }
  return {limit, 0};
}

// ----------------------------------------------------------------------------------------------
// fi_getparams.

struct Expected {
  const char* full;    // as the environment spells it
  const char* suffix;  // the provider-relative name given to fi_param_define
  const char* fallback;
};

constexpr Expected kParams[] = {
    {"FI_FABQ_EQ_MAX_SIZE", "eq_max_size", "65536"},
    {"FI_FABQ_EQ_MAX_COUNT", "eq_max_count", "256"},
    {"FI_FABQ_EQ_DEFAULT_SIZE", "eq_default_size", "1024"},
    {"FI_FABQ_CQ_MAX_SIZE", "cq_max_size", "65536"},
    {"FI_FABQ_CQ_MAX_COUNT", "cq_max_count", "256"},
    {"FI_FABQ_CQ_DEFAULT_SIZE", "cq_default_size", "1024"},
    {"FI_FABQ_CNTR_MAX_COUNT", "cntr_max_count", "256"},
    {"FI_FABQ_SPIN_US", "spin_us", "20"},
    {"FI_FABQ_SHM_DIRECT_MIN", "shm_direct_min", "16384"},
    {"FI_FABQ_SHM_DIRECT_MSG_MIN", "shm_direct_msg_min", "262144"},
    {"FI_FABQ_SHM_DIRECT_MSG_IDLE_MIN", "shm_direct_msg_idle_min", "16384"},
    {"FI_FABQ_SHM_SHARE_MIN", "shm_share_min", "262144"},
    {"FI_FABQ_SHM_ADAPT", "shm_adapt", "1"},
    {"FI_FABQ_RMA_READ_PIECE", "rma_read_piece", "65536"},
    {"FI_FABQ_INBOUND_MAX", "inbound_max", "1024"},
    {"FI_FABQ_UNEXPECTED_PEER_BYTES", "unexpected_peer_bytes", "4194304"},
    {"FI_FABQ_UNEXPECTED_TOTAL_BYTES", "unexpected_total_bytes", "134217728"},
    {"FI_FABQ_DGRAM_SENDERS", "dgram_senders", "1024"},
};

// libfabric 1.17 names parameters "FI_<PROV>_<NAME>" in upper case; accept the
// provider-relative spelling too, in case a libfabric reports that.
const fi_param* find_param(const fi_param* params, int count, const Expected& want) {
  for (int i = 0; i < count; ++i) {
    if (params[i].name == nullptr) continue;
    if (strcasecmp(params[i].name, want.full) == 0 ||
        strcasecmp(params[i].name, want.suffix) == 0) {
      return &params[i];
    }
  }
  return nullptr;
}

TEST(Params, GetparamsListsEveryFabqParameter) {
  fi_param* params = nullptr;
  int count = 0;
  ASSERT_EQ(fi_getparams(&params, &count), 0);
  ASSERT_NE(params, nullptr);
  for (const Expected& want : kParams) {
    const fi_param* p = find_param(params, count, want);
    ASSERT_NE(p, nullptr) << want.full << " is not listed";
    EXPECT_EQ(p->type, FI_PARAM_SIZE_T) << want.full;
    ASSERT_NE(p->help_string, nullptr) << want.full;
    const std::string help = p->help_string;
    EXPECT_NE(help.find(std::string("default: ") + want.fallback), std::string::npos)
        << want.full << ": " << help;
    if (getenv(want.full) == nullptr) {
      EXPECT_EQ(p->value, nullptr) << want.full << " is not set in the environment";
    }
  }
  fi_freeparams(params);
}

TEST(Params, GetparamsReportsTheValueSetInTheEnvironment) {
  set_param("FI_FABQ_SPIN_US", "7");
  set_param("FI_FABQ_CQ_MAX_COUNT", "12");
  fi_param* params = nullptr;
  int count = 0;
  ASSERT_EQ(fi_getparams(&params, &count), 0);
  const fi_param* spin = find_param(params, count, kParams[7]);
  const fi_param* cqs = find_param(params, count, kParams[4]);
  ASSERT_NE(spin, nullptr);
  ASSERT_NE(cqs, nullptr);
  ASSERT_NE(spin->value, nullptr);
  ASSERT_NE(cqs->value, nullptr);
  EXPECT_STREQ(spin->value, "7");
  EXPECT_STREQ(cqs->value, "12");
  fi_freeparams(params);
}

// ----------------------------------------------------------------------------------------------
// EQ limits.

TEST(Params, EqMaxCountLimitsTheEqsOpenOnOneFabric) {
  set_param("FI_FABQ_EQ_MAX_COUNT", "3");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  std::vector<fid_eq*> eqs(3, nullptr);
  for (fid_eq*& eq : eqs) ASSERT_EQ(eq_open(o.fabric(), 0, &eq), 0);
  fid_eq* fourth = nullptr;
  EXPECT_EQ(eq_open(o.fabric(), 0, &fourth), -FI_ENOSPC);
  EXPECT_EQ(fourth, nullptr);
  EXPECT_EQ(eq_open(o.fabric(), 0, &fourth), -FI_ENOSPC) << "a refused open takes no slot";

  ASSERT_EQ(fi_close(&eqs[1]->fid), 0);
  ASSERT_EQ(eq_open(o.fabric(), 0, &eqs[1]), 0) << "closing one frees its slot";
  EXPECT_EQ(eq_open(o.fabric(), 0, &fourth), -FI_ENOSPC);
  for (fid_eq* eq : eqs) EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST(Params, EqMaxCountIsPerFabric) {
  set_param("FI_FABQ_EQ_MAX_COUNT", "2");
  Opened a;
  Opened b;
  ASSERT_TRUE(a.ok()) << fi_strerror(-a.rc());
  ASSERT_TRUE(b.ok()) << fi_strerror(-b.rc());
  std::vector<fid_eq*> eqs;
  for (Opened* o : {&a, &b}) {
    for (int i = 0; i < 2; ++i) {
      fid_eq* eq = nullptr;
      ASSERT_EQ(eq_open(o->fabric(), 0, &eq), 0);
      eqs.push_back(eq);
    }
    fid_eq* extra = nullptr;
    EXPECT_EQ(eq_open(o->fabric(), 0, &extra), -FI_ENOSPC);
  }
  for (fid_eq* eq : eqs) EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST(Params, EqMaxSizeRejectsLargerSizes) {
  set_param("FI_FABQ_EQ_MAX_SIZE", "64");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  fid_eq* eq = nullptr;
  EXPECT_EQ(eq_open(o.fabric(), 65, &eq), -FI_EINVAL);
  EXPECT_EQ(eq, nullptr);
  EXPECT_EQ(eq_open(o.fabric(), 1024, &eq), -FI_EINVAL);
  ASSERT_EQ(eq_open(o.fabric(), 64, &eq), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  ASSERT_EQ(eq_open(o.fabric(), 0, &eq), 0) << "the default size fits under the maximum";
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST(Params, EqDefaultSizeSizesSizeZeroEqs) {
  set_param("FI_FABQ_EQ_DEFAULT_SIZE", "4");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  fid_eq* eq = nullptr;
  ASSERT_EQ(eq_open(o.fabric(), 0, &eq, FI_WRITE), 0);
  auto [written, err] = fill(eq, 100);
  EXPECT_EQ(written, 4u);
  EXPECT_EQ(err, -FI_EOVERRUN);
  EXPECT_EQ(fi_close(&eq->fid), 0);
  // An explicit size is unaffected.
  ASSERT_EQ(eq_open(o.fabric(), 8, &eq, FI_WRITE), 0);
  std::tie(written, err) = fill(eq, 100);
  EXPECT_EQ(written, 8u);
  EXPECT_EQ(err, -FI_EOVERRUN);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

TEST(Params, EqDefaultSizeIsClampedToEqMaxSize) {
  set_param("FI_FABQ_EQ_MAX_SIZE", "8");
  set_param("FI_FABQ_EQ_DEFAULT_SIZE", "1024");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  fid_eq* eq = nullptr;
  ASSERT_EQ(eq_open(o.fabric(), 0, &eq, FI_WRITE), 0);
  auto [written, err] = fill(eq, 2000);
  EXPECT_EQ(written, 8u);
  EXPECT_EQ(err, -FI_EOVERRUN);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// CQ and counter limits.

TEST(Params, CqMaxSizeRejectsLargerSizes) {
  set_param("FI_FABQ_CQ_MAX_SIZE", "64");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  fid_cq* cq = nullptr;
  EXPECT_EQ(cq_open(o.domain(), 65, &cq), -FI_EINVAL);
  EXPECT_EQ(cq, nullptr);
  EXPECT_EQ(cq_open(o.domain(), 4096, &cq), -FI_EINVAL);
  ASSERT_EQ(cq_open(o.domain(), 64, &cq), 0);
  EXPECT_EQ(fi_close(&cq->fid), 0);
  ASSERT_EQ(cq_open(o.domain(), 0, &cq), 0) << "the default size fits under the maximum";
  EXPECT_EQ(fi_close(&cq->fid), 0);
}

TEST(Params, CqMaxCountIsDomainCqCntAndLimitsOpenCqs) {
  set_param("FI_FABQ_CQ_MAX_COUNT", "2");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  EXPECT_EQ(o.info()->domain_attr->cq_cnt, 2u);
  fid_cq* a = nullptr;
  fid_cq* b = nullptr;
  fid_cq* c = nullptr;
  ASSERT_EQ(cq_open(o.domain(), 0, &a), 0);
  ASSERT_EQ(cq_open(o.domain(), 0, &b), 0);
  EXPECT_EQ(cq_open(o.domain(), 0, &c), -FI_ENOSPC);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(fi_close(&b->fid), 0);
  ASSERT_EQ(cq_open(o.domain(), 0, &c), 0) << "closing one frees its slot";
  EXPECT_EQ(cq_open(o.domain(), 0, &b), -FI_ENOSPC);
  EXPECT_EQ(fi_close(&a->fid), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

TEST(Params, CqMaxCountIsPerDomain) {
  set_param("FI_FABQ_CQ_MAX_COUNT", "1");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  fid_domain* second = nullptr;
  ASSERT_EQ(fi_domain(o.fabric(), o.info(), &second, nullptr), 0);
  fid_cq* a = nullptr;
  fid_cq* b = nullptr;
  fid_cq* extra = nullptr;
  ASSERT_EQ(cq_open(o.domain(), 0, &a), 0);
  EXPECT_EQ(cq_open(o.domain(), 0, &extra), -FI_ENOSPC);
  ASSERT_EQ(cq_open(second, 0, &b), 0);
  EXPECT_EQ(cq_open(second, 0, &extra), -FI_ENOSPC);
  EXPECT_EQ(fi_close(&a->fid), 0);
  EXPECT_EQ(fi_close(&b->fid), 0);
  EXPECT_EQ(fi_close(&second->fid), 0);
}

TEST(Params, CqCntHintAboveCqMaxCountGivesEnodata) {
  set_param("FI_FABQ_CQ_MAX_COUNT", "2");
  fi_info* hints = fabq_hints();
  ASSERT_NE(hints, nullptr);
  hints->domain_attr->cq_cnt = 3;
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), -FI_ENODATA);
  EXPECT_EQ(info, nullptr);
  hints->domain_attr->cq_cnt = 2;
  EXPECT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST(Params, RmaReadPieceIsMaxOrderWarSizeAndHintsAskingMoreMatchNothing) {
  set_param("FI_FABQ_RMA_READ_PIECE", "8192");
  fi_info* hints = fabq_hints();
  ASSERT_NE(hints, nullptr);
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA;
  fi_info* info = nullptr;
  ASSERT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  EXPECT_EQ(info->ep_attr->max_order_war_size, 8192u);
  EXPECT_EQ(info->ep_attr->max_order_raw_size, size_t{1} << 30) << "a read sees earlier writes";
  fi_freeinfo(info);
  info = nullptr;
  hints->ep_attr->max_order_war_size = 8193;
  EXPECT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), -FI_ENODATA);
  hints->ep_attr->max_order_war_size = 8192;
  EXPECT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), 0);
  fi_freeinfo(info);
  fi_freeinfo(hints);
}

TEST(Params, CntrMaxCountIsDomainCntrCntAndLimitsOpenCounters) {
  set_param("FI_FABQ_CNTR_MAX_COUNT", "2");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  EXPECT_EQ(o.info()->domain_attr->cntr_cnt, 2u);
  fid_cntr* a = nullptr;
  fid_cntr* b = nullptr;
  fid_cntr* c = nullptr;
  ASSERT_EQ(cntr_open(o.domain(), &a), 0);
  ASSERT_EQ(cntr_open(o.domain(), &b), 0);
  EXPECT_EQ(cntr_open(o.domain(), &c), -FI_ENOSPC);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(fi_close(&a->fid), 0);
  ASSERT_EQ(cntr_open(o.domain(), &c), 0) << "closing one frees its slot";
  EXPECT_EQ(cntr_open(o.domain(), &a), -FI_ENOSPC);
  EXPECT_EQ(fi_close(&b->fid), 0);
  EXPECT_EQ(fi_close(&c->fid), 0);
}

TEST(Params, CntrCntHintAboveCntrMaxCountGivesEnodata) {
  set_param("FI_FABQ_CNTR_MAX_COUNT", "2");
  fi_info* hints = fabq_hints();
  ASSERT_NE(hints, nullptr);
  hints->domain_attr->cntr_cnt = 3;
  fi_info* info = nullptr;
  EXPECT_EQ(fi_getinfo(kVersion, nullptr, nullptr, 0, hints, &info), -FI_ENODATA);
  EXPECT_EQ(info, nullptr);
  fi_freeinfo(hints);
}

TEST(Params, ZeroSizesAndCountsAreIgnored) {
  set_param("FI_FABQ_CQ_MAX_COUNT", "0");
  set_param("FI_FABQ_CNTR_MAX_COUNT", "0");
  set_param("FI_FABQ_EQ_MAX_SIZE", "0");
  Opened o;
  ASSERT_TRUE(o.ok()) << fi_strerror(-o.rc());
  EXPECT_EQ(o.info()->domain_attr->cq_cnt, 256u);
  EXPECT_EQ(o.info()->domain_attr->cntr_cnt, 256u);
  fid_eq* eq = nullptr;
  ASSERT_EQ(eq_open(o.fabric(), 65536, &eq), 0);
  EXPECT_EQ(fi_close(&eq->fid), 0);
}

}  // namespace
}  // namespace fabq::testing
