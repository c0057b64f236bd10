// fi_getinfo(3) through libfabric: which fi_info fabq returns, what its attributes say, and how
// hints, node/service and flags select among them (src/prov/getinfo.h is the contract).
//
// Tests that change the environment (FI_PROVIDER) do so before their first libfabric call:
// ctest runs every test in its own process.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fabq_fixture.h"

namespace fabq::testing {
namespace {

struct InfoDeleter {
  void operator()(fi_info* i) const { fi_freeinfo(i); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// fi_getinfo returning (rc, list); the list is freed with the InfoPtr.
std::pair<int, InfoPtr> getinfo(uint32_t version, const char* node, const char* service,
                                uint64_t flags, const fi_info* hints) {
  fi_info* out = nullptr;
  const int rc = fi_getinfo(version, node, service, flags, hints, &out);
  return {rc, InfoPtr(out)};
}

// Hints naming only the provider (every interface).
InfoPtr fabq_only_hints() {
  InfoPtr hints(fi_allocinfo());
  if (hints) hints->fabric_attr->prov_name = strdup("fabq");
  return hints;
}

InfoPtr lo_hints() {
  return InfoPtr(fabq_hints());
}

std::vector<const fi_info*> as_vector(const fi_info* head) {
  std::vector<const fi_info*> v;
  for (const fi_info* i = head; i != nullptr; i = i->next) v.push_back(i);
  return v;
}

const char* prov_name(const fi_info* i) {
  return i->fabric_attr != nullptr && i->fabric_attr->prov_name != nullptr
             ? i->fabric_attr->prov_name
             : "";
}

struct IfaceAddr {
  std::string name;
  in_addr addr;
  std::string subnet;
};

// The IPv4 addresses of this host, named as fabq's contract says: subnet "a.b.c.d/len".
std::vector<IfaceAddr> ipv4_ifaces() {
  std::vector<IfaceAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || i->ifa_netmask == nullptr) {
      continue;
    }
    const in_addr a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
    const in_addr m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr;
    const in_addr net{a.s_addr & m.s_addr};
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &net, buf, sizeof(buf));
    out.push_back(
        {i->ifa_name, a, std::string(buf) + "/" + std::to_string(std::popcount(ntohl(m.s_addr)))});
  }
  freeifaddrs(list);
  return out;
}

in_addr loopback() {
  in_addr a{};
  a.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// Environment assignments a child needs to load this build's provider: an ASan-built
// provider in the uninstrumented fi_info needs the ASan runtime preloaded. nullopt when that
// runtime cannot be found (statically linked).
std::optional<std::string> child_env() {
  if (!kAsan) return std::string();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash != std::string::npos && line.find("libasan.so", slash) != std::string::npos) {
      return "LD_PRELOAD=" + line.substr(slash) + " ASAN_OPTIONS=detect_leaks=0 ";
    }
  }
  return std::nullopt;
}

// Runs a command and returns (exit status, stdout+stderr).
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// ----------------------------------------------------------------------------------------------
// Which provider answers.

TEST(Getinfo, HintsNamingFabqReturnOnlyProviderFabq) {
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  ASSERT_NE(info, nullptr);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_STREQ(prov_name(i), "fabq") << "never a utility provider layered over fabq";
  }
}

TEST(Getinfo, NullHintsWithFiProviderFabqReturnNoLayeredProvider) {
  ASSERT_EQ(setenv("FI_PROVIDER", "fabq", 1), 0);
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, nullptr);
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  size_t fabq = 0;
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_EQ(std::string(prov_name(i)).find(';'), std::string::npos) << prov_name(i);
    if (std::string(prov_name(i)) == "fabq") ++fabq;
  }
  EXPECT_GT(fabq, 0u);
}

TEST(Getinfo, NullHintsWithoutFilterNeverLayerAUtilityProviderOverFabq) {
  ASSERT_EQ(unsetenv("FI_PROVIDER"), 0);
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, nullptr);
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  size_t fabq = 0;
  for (const fi_info* i : as_vector(info.get())) {
    const std::string name = prov_name(i);
    if (name == "fabq") {
      ++fabq;
      continue;
    }
    EXPECT_EQ(name.find("fabq"), std::string::npos) << name;
  }
  EXPECT_GT(fabq, 0u);
}

TEST(Getinfo, CoreProvOnlyQueryOfAUtilityProviderGetsNoFabq) {
  // ofi_rxm asks its core with OFI_CORE_PROV_ONLY; fabq refuses, so "fabq;ofi_rxm" never exists.
  ASSERT_EQ(unsetenv("FI_PROVIDER"), 0);
  InfoPtr hints(fi_allocinfo());
  ASSERT_NE(hints, nullptr);
  hints->fabric_attr->prov_name = strdup("fabq;ofi_rxm");
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  if (rc == 0) {
    for (const fi_info* i : as_vector(info.get())) {
      EXPECT_EQ(std::string(prov_name(i)).find("fabq"), std::string::npos) << prov_name(i);
    }
  } else {
    EXPECT_EQ(rc, -FI_ENODATA) << fi_strerror(-rc);
    EXPECT_EQ(info, nullptr);
  }
}

TEST(Getinfo, RdmHintNamingFabqIsAnsweredByFabqItselfNotALayeredProvider) {
  ASSERT_EQ(unsetenv("FI_PROVIDER"), 0);
  auto hints = fabq_only_hints();
  hints->ep_attr->type = FI_EP_RDM;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_STREQ(prov_name(i), "fabq");
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
  }
}

TEST(Getinfo, FiInfoDashPFabqPrintsOnlyProviderFabq) {
  if (access("/usr/bin/fi_info", X_OK) != 0) GTEST_SKIP() << "/usr/bin/fi_info not installed";
  const auto env = child_env();
  if (!env) GTEST_SKIP() << "no ASan runtime to preload into fi_info";
  auto [status, out] = run("env " + *env + "/usr/bin/fi_info -p fabq");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("provider: fabq\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("fabq;"), std::string::npos) << out;

  // As many entries as fi_getinfo returns for the same hints.
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0);
  size_t printed = 0;
  for (size_t pos = 0; (pos = out.find("provider: fabq\n", pos)) != std::string::npos; ++pos) {
    ++printed;
  }
  EXPECT_EQ(printed, as_vector(info.get()).size()) << out;
}

TEST(Getinfo, FiInfoWithoutProviderFilterPrintsNoLayeredFabq) {
  if (access("/usr/bin/fi_info", X_OK) != 0) GTEST_SKIP() << "/usr/bin/fi_info not installed";
  const auto env = child_env();
  if (!env) GTEST_SKIP() << "no ASan runtime to preload into fi_info";
  auto [status, out] = run("env -u FI_PROVIDER " + *env + "/usr/bin/fi_info -l");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("fabq"), std::string::npos) << out;
  EXPECT_EQ(out.find("fabq;"), std::string::npos) << out;
}

// ----------------------------------------------------------------------------------------------
// One fi_info per interface and endpoint type (MSG, then RDM, then DGRAM), named as the tcp
// provider names them.

TEST(Getinfo, OneMsgRdmAndDgramInfoPerIpv4InterfaceWithFabricSubnetAndDomainInterface) {
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  std::multiset<std::pair<std::string, std::string>> got, want;
  for (const fi_info* i : as_vector(info.get())) {
    ASSERT_NE(i->fabric_attr->name, nullptr);
    ASSERT_NE(i->domain_attr->name, nullptr);
    got.insert({i->fabric_attr->name, i->domain_attr->name});
  }
  for (const IfaceAddr& a : ipv4_ifaces()) {
    for (int type = 0; type < 3; ++type) want.insert({a.subnet, a.name});
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(got.count({"127.0.0.0/8", "lo"}), 3u);
}

TEST(Getinfo, LoopbackDomainAttrCountsAreTheProviderDefaults) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  ASSERT_EQ(as_vector(info.get()).size(), 3u) << "MSG, RDM and DGRAM";
  EXPECT_STREQ(info->domain_attr->name, "lo");
  EXPECT_STREQ(info->fabric_attr->name, "127.0.0.0/8");
  EXPECT_EQ(info->domain_attr->cq_cnt, 256u) << "FI_FABQ_CQ_MAX_COUNT default";
  EXPECT_EQ(info->domain_attr->cntr_cnt, 256u) << "FI_FABQ_CNTR_MAX_COUNT default";
}

TEST(Getinfo, MaxErrDataIsTheErrDataACqErrorKeeps) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->max_err_data, 40u);
}

TEST(Getinfo, CqDataSizeIsEightBytes) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->cq_data_size, 8u);
}

TEST(Getinfo, ThreadingDefaultsToThreadSafe) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->threading, FI_THREAD_SAFE);
}

TEST(Getinfo, EndpointTypesAreMsgThenRdmThenDgramForEachInterface) {
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const auto infos = as_vector(info.get());
  ASSERT_EQ(infos.size() % 3, 0u);
  for (size_t k = 0; k < infos.size(); k += 3) {
    EXPECT_EQ(infos[k]->ep_attr->type, FI_EP_MSG);
    EXPECT_EQ(infos[k + 1]->ep_attr->type, FI_EP_RDM);
    EXPECT_EQ(infos[k + 2]->ep_attr->type, FI_EP_DGRAM);
    EXPECT_STREQ(infos[k]->domain_attr->name, infos[k + 1]->domain_attr->name);
    EXPECT_STREQ(infos[k]->domain_attr->name, infos[k + 2]->domain_attr->name);
  }
}

TEST(Getinfo, RdmAndDgramOfferFiSourceAndMsgDoesNot) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_EQ((i->caps & FI_SOURCE) != 0, i->ep_attr->type != FI_EP_MSG);
  }
  hints->caps = FI_TAGGED | FI_SOURCE;
  auto [rc2, rdm] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  for (const fi_info* i : as_vector(rdm.get())) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
    EXPECT_EQ(i->caps, FI_TAGGED | FI_SOURCE | FI_SEND | FI_RECV)
        << "the caps asked for, FI_TAGGED with both its directions";
  }
  hints->ep_attr->type = FI_EP_MSG;
  auto [rc3, none] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  EXPECT_EQ(rc3, -FI_ENODATA) << "FI_SOURCE on FI_EP_MSG";
  EXPECT_EQ(none, nullptr);
}

TEST(Getinfo, AddrFormatIsSockaddrInAndSrcAddrIsTheInterfaceAddress) {
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const std::vector<IfaceAddr> ifaces = ipv4_ifaces();
  bool saw_lo = false;
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_EQ(i->addr_format, static_cast<uint32_t>(FI_SOCKADDR_IN));
    ASSERT_NE(i->src_addr, nullptr);
    ASSERT_EQ(i->src_addrlen, sizeof(sockaddr_in));
    const auto* sin = static_cast<const sockaddr_in*>(i->src_addr);
    EXPECT_EQ(sin->sin_family, AF_INET);
    EXPECT_EQ(i->dest_addr, nullptr);
    bool owned = false;
    for (const IfaceAddr& a : ifaces) {
      owned |= a.name == i->domain_attr->name && a.addr.s_addr == sin->sin_addr.s_addr;
    }
    EXPECT_TRUE(owned) << i->domain_attr->name << " does not own " << inet_ntoa(sin->sin_addr);
    if (std::string(i->domain_attr->name) == "lo") {
      saw_lo = true;
      EXPECT_EQ(sin->sin_addr.s_addr, loopback().s_addr);
    }
  }
  EXPECT_TRUE(saw_lo);
}

TEST(Getinfo, ReturnedInfoOpensFabricAndDomain) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  fid_fabric* fabric = nullptr;
  ASSERT_EQ(fi_fabric(info->fabric_attr, &fabric, nullptr), 0);
  EXPECT_EQ(fabric->api_version, kVersion);
  fid_domain* domain = nullptr;
  EXPECT_EQ(fi_domain(fabric, info.get(), &domain, nullptr), 0);
  if (domain != nullptr) {
    EXPECT_EQ(fi_close(&domain->fid), 0);
  }
  EXPECT_EQ(fi_close(&fabric->fid), 0);
}

// ----------------------------------------------------------------------------------------------
// Hints are honoured: what fabq cannot provide is -FI_ENODATA, with info set to NULL.

void expect_enodata(const fi_info* hints, const char* what, const char* node = nullptr,
                    const char* service = nullptr, uint64_t flags = 0,
                    uint32_t version = kVersion) {
  fi_info* out = reinterpret_cast<fi_info*>(0x1);
  const int rc = fi_getinfo(version, node, service, flags, hints, &out);
  EXPECT_EQ(rc, -FI_ENODATA) << what << ": " << fi_strerror(-rc);
  EXPECT_EQ(out, nullptr) << what << ": info is set to NULL";
  if (rc == 0 && out != nullptr && out != reinterpret_cast<fi_info*>(0x1)) fi_freeinfo(out);
}

TEST(Getinfo, UnsupportedCapsGiveEnodata) {
  for (uint64_t cap : {FI_TRIGGER, FI_MSG | FI_TRIGGER, FI_HMEM | FI_MSG, FI_MULTICAST | FI_TAGGED,
                       FI_MULTICAST | FI_RMA}) {
    auto hints = fabq_only_hints();
    hints->caps = cap;
    expect_enodata(hints.get(), ("caps " + std::to_string(cap)).c_str());
  }
}

// fi_getinfo(3): hints are honoured completely, so every value fabq reports is one it accepts:
// each info it returns, used whole as the hints (sizes, counts, modes, caps, orders, progress,
// threading, the shared-context counts and the prefix size included), finds an info again, with
// the same attributes. This is the round trip that FI_SHARED_CONTEXT once failed.
TEST(Getinfo, EveryInfoUsedAsHintsFindsItselfAgain) {
  struct Variant {
    const char* what;
    uint64_t caps;
    uint64_t mode;
    size_t tx_ctx_cnt;
    size_t rx_ctx_cnt;
  };
  for (const Variant& v :
       {Variant{"defaults", 0, 0, 0, 0},
        Variant{"everything",
                FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_SOURCE | FI_SOURCE_ERR |
                    FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SHARED_AV,
                0, 0, 0},
        Variant{"shared contexts", FI_MSG, 0, FI_SHARED_CONTEXT, FI_SHARED_CONTEXT},
        Variant{"scalable", FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX, 0, 8, 5},
        Variant{"prefix", FI_MSG | FI_TAGGED, FI_MSG_PREFIX, 0, 0}}) {
    SCOPED_TRACE(v.what);
    auto hints = lo_hints();
    hints->caps = v.caps;
    hints->mode = v.mode;
    hints->ep_attr->tx_ctx_cnt = v.tx_ctx_cnt;
    hints->ep_attr->rx_ctx_cnt = v.rx_ctx_cnt;
    auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    for (const fi_info* i : as_vector(info.get())) {
      InfoPtr again_hints(fi_dupinfo(i));
      ASSERT_NE(again_hints, nullptr);
      fi_freeinfo(again_hints->next);
      again_hints->next = nullptr;
      auto [rc2, again] = getinfo(kVersion, nullptr, nullptr, 0, again_hints.get());
      ASSERT_EQ(rc2, 0) << "type " << i->ep_attr->type << ": " << fi_strerror(-rc2);
      EXPECT_EQ(again->caps, i->caps);
      EXPECT_EQ(again->mode, i->mode);
      EXPECT_EQ(again->ep_attr->type, i->ep_attr->type);
      EXPECT_EQ(again->ep_attr->tx_ctx_cnt, i->ep_attr->tx_ctx_cnt);
      EXPECT_EQ(again->ep_attr->rx_ctx_cnt, i->ep_attr->rx_ctx_cnt);
      EXPECT_EQ(again->ep_attr->msg_prefix_size, i->ep_attr->msg_prefix_size);
      EXPECT_EQ(again->domain_attr->threading, i->domain_attr->threading);
      EXPECT_EQ(again->domain_attr->data_progress, i->domain_attr->data_progress);
      EXPECT_EQ(again->domain_attr->mr_mode, i->domain_attr->mr_mode);
      EXPECT_EQ(again->domain_attr->max_ep_tx_ctx, i->domain_attr->max_ep_tx_ctx);
      EXPECT_EQ(again->domain_attr->max_ep_rx_ctx, i->domain_attr->max_ep_rx_ctx);
    }
  }
}

// fi_getinfo(3): "If neither FI_SEND nor FI_RECV is specified, then both are assumed"; and for
// FI_RMA and FI_ATOMIC, FI_READ, FI_WRITE, FI_REMOTE_READ and FI_REMOTE_WRITE. The info says what
// was assumed, so that an application may bind counters for it.
TEST(Getinfo, CapsWithoutDirectionsReportTheDirectionsAssumed) {
  auto hints = lo_hints();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  constexpr uint64_t kAll =
      FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_EQ(i->caps & kAll, kAll);
    EXPECT_EQ(i->tx_attr->caps & kAll, FI_SEND | FI_READ | FI_WRITE);
    EXPECT_EQ(i->rx_attr->caps & kAll, FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);
  }
  hints->caps = FI_MSG | FI_SEND | FI_RMA | FI_REMOTE_WRITE;
  auto [rc2, given] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  for (const fi_info* i : as_vector(given.get())) {
    EXPECT_EQ(i->caps, hints->caps) << "directions given are kept as they are";
  }
}

TEST(Getinfo, DirectedRecvAndSourceErrAreGrantedOnRdmOnlyWhenAsked) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_EQ(i->caps & (FI_DIRECTED_RECV | FI_SOURCE_ERR), 0u)
        << "a primary capability is enabled only when selected (fi_getinfo(3))";
  }
  hints->caps = FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR | FI_DIRECTED_RECV;
  auto [rc2, rdm] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  for (const fi_info* i : as_vector(rdm.get())) {
    EXPECT_EQ(i->ep_attr->type, FI_EP_RDM);
    EXPECT_EQ(i->caps, hints->caps | FI_SEND | FI_RECV);
    EXPECT_EQ(i->rx_attr->caps & hints->caps,
              FI_TAGGED | FI_SOURCE | FI_SOURCE_ERR | FI_DIRECTED_RECV)
        << "receive capabilities are in rx_attr->caps too";
  }
  hints->ep_attr->type = FI_EP_MSG;
  auto [rc3, none] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  EXPECT_EQ(rc3, -FI_ENODATA) << "FI_DIRECTED_RECV applies to connectionless endpoints";
}

TEST(Getinfo, MultiRecvIsGrantedOnMsgAndRdmWithItsRxOpFlag) {
  auto hints = lo_hints();
  hints->caps = FI_MSG | FI_MULTI_RECV;
  hints->rx_attr->op_flags = FI_MULTI_RECV;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  std::set<int> types;
  for (const fi_info* i : as_vector(info.get())) {
    types.insert(i->ep_attr->type);
    EXPECT_NE(i->caps & FI_MULTI_RECV, 0u);
    EXPECT_NE(i->rx_attr->caps & FI_MULTI_RECV, 0u);
    EXPECT_EQ(i->rx_attr->op_flags, FI_MULTI_RECV) << "the rx op_flags asked for";
  }
  EXPECT_EQ(types, (std::set<int>{FI_EP_MSG, FI_EP_RDM}));
}

TEST(Getinfo, SourceErrMustBePairedWithFiSource) {
  auto hints = lo_hints();
  hints->caps = FI_MSG | FI_SOURCE_ERR;
  expect_enodata(hints.get(), "FI_SOURCE_ERR without FI_SOURCE");
}

TEST(Getinfo, MemTagFormatLeavesAllSixtyFourBitsToTheApplication) {
  auto hints = lo_hints();
  hints->caps = FI_TAGGED;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_NE(i->ep_attr->mem_tag_format & (1ULL << 63), 0u) << "the highest tag bit is usable";
  }
  hints->ep_attr->mem_tag_format = 0x0000ffffffffffffULL;
  auto [rc2, own] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  for (const fi_info* i : as_vector(own.get())) {
    EXPECT_EQ(i->ep_attr->mem_tag_format, 0x0000ffffffffffffULL) << "the application's format";
  }
}

TEST(Getinfo, LoopbackComesAfterEveryOtherInterface) {
  auto hints = fabq_only_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  bool seen_loopback = false;
  for (const fi_info* i : as_vector(info.get())) {
    sockaddr_in a{};
    ASSERT_GE(i->src_addrlen, sizeof(a));
    std::memcpy(&a, i->src_addr, sizeof(a));
    const bool lo = (ntohl(a.sin_addr.s_addr) >> 24) == 127;
    EXPECT_FALSE(seen_loopback && !lo)
        << "the first info is the one applications publish to other hosts";
    seen_loopback = seen_loopback || lo;
  }
  EXPECT_TRUE(seen_loopback);
}

// The hints of Open MPI 4.1's ofi MTL (ompi/mca/mtl/ofi/mtl_ofi_component.c), and the answers
// it checks before it selects a provider.
TEST(Getinfo, OpenMpiOfiMtlHintsGetAnRdmInfoItCanUse) {
  InfoPtr hints(fi_allocinfo());
  hints->fabric_attr->prov_name = strdup("fabq");
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->op_flags = FI_COMPLETION;
  hints->tx_attr->op_flags = FI_COMPLETION;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->cq_data_size = sizeof(int);
  hints->domain_attr->av_type = FI_AV_MAP;
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  auto [rc, info] = getinfo(FI_VERSION(1, 5), nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const fi_info* first = info.get();
  EXPECT_NE(first->caps & FI_DIRECTED_RECV, 0u) << "else the MTL cannot use its full tag mode";
  EXPECT_GE(first->domain_attr->cq_data_size, sizeof(int)) << "the source rank travels as data";
  EXPECT_NE(first->ep_attr->mem_tag_format & (1ULL << 63), 0u) << "\"Not enough bits for CID\"";
  EXPECT_GT(first->tx_attr->inject_size, 0u);
  EXPECT_GT(first->ep_attr->max_msg_size, size_t{4} << 20);
}

// fi_endpoint(3) FI_EP_DGRAM: unreliable, unordered messages of at most a datagram's payload,
// with sources and multicast; no tags, no one-sided operations, no multi-receive buffers.
TEST(Getinfo, EndpointTypeDgramGivesUnorderedDatagramMessagesWithMulticast) {
  auto hints = lo_hints();
  hints->ep_attr->type = FI_EP_DGRAM;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  ASSERT_EQ(as_vector(info.get()).size(), 1u);
  EXPECT_EQ(info->ep_attr->type, FI_EP_DGRAM);
  EXPECT_EQ(info->caps & (FI_MSG | FI_SEND | FI_RECV | FI_MULTICAST | FI_SOURCE),
            FI_MSG | FI_SEND | FI_RECV | FI_MULTICAST | FI_SOURCE);
  EXPECT_EQ(info->caps & (FI_TAGGED | FI_RMA | FI_ATOMIC | FI_MULTI_RECV | FI_DIRECTED_RECV), 0u);
  EXPECT_EQ(info->ep_attr->max_msg_size, 65507u - 24u) << "a UDP payload less fabq's header";
  EXPECT_EQ(info->tx_attr->msg_order, FI_ORDER_NONE);
  EXPECT_EQ(info->rx_attr->msg_order, FI_ORDER_NONE);
  EXPECT_EQ(info->ep_attr->max_order_raw_size, 0u);
  EXPECT_EQ(info->ep_attr->mem_tag_format, 0u);
  EXPECT_EQ(info->domain_attr->max_ep_tx_ctx, 1u);
  EXPECT_EQ(info->domain_attr->max_ep_srx_ctx, 0u);
  EXPECT_EQ(info->domain_attr->max_ep_stx_ctx, 0u);
}

// fi_endpoint(3): "The following capabilities apply to the transmit attributes: FI_MSG, FI_RMA,
// FI_TAGGED, FI_ATOMIC, FI_READ, FI_WRITE, FI_SEND, FI_HMEM, FI_TRIGGER, FI_FENCE, FI_MULTICAST,
// FI_RMA_PMEM, FI_NAMED_RX_CTX, FI_COLLECTIVE, and FI_XPU", and to the receive attributes
// "FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_RECV, FI_HMEM,
// FI_TRIGGER, FI_RMA_PMEM, FI_DIRECTED_RECV, FI_VARIABLE_MSG, FI_MULTI_RECV, FI_SOURCE,
// FI_RMA_EVENT, FI_SOURCE_ERR, FI_COLLECTIVE, and FI_XPU"; and "the capabilities must be a
// subset of those requested of the associated endpoint". Every type, with and without caps
// asked for. (FI_XPU, which libfabric 1.17's header does not define, fabq never reports.)
TEST(Getinfo, ContextCapsAreOnlyThoseThatApplyToTheirDirection) {
  constexpr uint64_t kTxApply = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_READ | FI_WRITE |
                                FI_SEND | FI_HMEM | FI_TRIGGER | FI_FENCE | FI_MULTICAST |
                                FI_RMA_PMEM | FI_NAMED_RX_CTX | FI_COLLECTIVE;
  constexpr uint64_t kRxApply = FI_MSG | FI_RMA | FI_TAGGED | FI_ATOMIC | FI_REMOTE_READ |
                                FI_REMOTE_WRITE | FI_RECV | FI_HMEM | FI_TRIGGER | FI_RMA_PMEM |
                                FI_DIRECTED_RECV | FI_VARIABLE_MSG | FI_MULTI_RECV | FI_SOURCE |
                                FI_RMA_EVENT | FI_SOURCE_ERR | FI_COLLECTIVE;
  auto hints = lo_hints();
  std::set<int> types;
  auto check = [&](const fi_info* list, const char* what) {
    for (const fi_info* i : as_vector(list)) {
      if (strcmp(prov_name(i), "fabq") != 0) continue;
      types.insert(i->ep_attr->type);
      EXPECT_EQ(i->tx_attr->caps & ~kTxApply, 0u) << what << ", type " << i->ep_attr->type << ": "
                                                  << fi_tostr(&i->tx_attr->caps, FI_TYPE_CAPS);
      EXPECT_EQ(i->rx_attr->caps & ~kRxApply, 0u) << what << ", type " << i->ep_attr->type << ": "
                                                  << fi_tostr(&i->rx_attr->caps, FI_TYPE_CAPS);
      EXPECT_EQ(i->tx_attr->caps & ~i->caps, 0u) << what;
      EXPECT_EQ(i->rx_attr->caps & ~i->caps, 0u) << what;
    }
  };
  auto [rc, plain] = getinfo(kVersion, nullptr, nullptr, 0, fabq_only_hints().get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  check(plain.get(), "no caps asked for");
  hints->caps = FI_MSG | FI_MULTICAST;
  hints->rx_attr->caps = hints->caps;  // copied from the endpoint's, as applications do
  auto [rc2, mc] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  check(mc.get(), "multicast asked for");
  EXPECT_EQ(types, (std::set<int>{FI_EP_MSG, FI_EP_RDM, FI_EP_DGRAM}));
}

TEST(Getinfo, MulticastOnlyOnDgramAndWhatDgramCannotDoGivesEnodata) {
  auto hints = lo_hints();
  hints->caps = FI_MSG | FI_MULTICAST;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) EXPECT_EQ(i->ep_attr->type, FI_EP_DGRAM);
  hints->caps = FI_MSG;
  hints->ep_attr->type = FI_EP_DGRAM;
  hints->ep_attr->max_msg_size = 65536;
  expect_enodata(hints.get(), "a message larger than a datagram");
  hints->ep_attr->max_msg_size = 0;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  expect_enodata(hints.get(), "ordered datagrams");
  hints->tx_attr->msg_order = 0;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  expect_enodata(hints.get(), "delivery completion of a datagram");
  hints->tx_attr->op_flags = FI_MULTICAST;
  auto [rc2, dgram] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  EXPECT_EQ(rc2, 0) << "FI_MULTICAST is a DGRAM op flag: " << fi_strerror(-rc2);
  hints->ep_attr->type = FI_EP_RDM;
  expect_enodata(hints.get(), "FI_MULTICAST op flag on RDM");
  hints->tx_attr->op_flags = 0;
  hints->ep_attr->type = FI_EP_DGRAM;
  hints->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
  expect_enodata(hints.get(), "a shared transmit context on DGRAM");
}

TEST(Getinfo, EndpointTypeRdmGivesOnlyRdm) {
  auto hints = lo_hints();
  hints->ep_attr->type = FI_EP_RDM;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  ASSERT_EQ(as_vector(info.get()).size(), 1u);
  EXPECT_EQ(info->ep_attr->type, FI_EP_RDM);
  EXPECT_EQ(info->addr_format, FI_SOCKADDR_IN);
  EXPECT_EQ(info->caps & (FI_MSG | FI_TAGGED | FI_SOURCE), FI_MSG | FI_TAGGED | FI_SOURCE);
}

TEST(Getinfo, AddrFormatSockaddrIn6GivesEnodata) {
  auto hints = fabq_only_hints();
  hints->addr_format = FI_SOCKADDR_IN6;
  expect_enodata(hints.get(), "FI_SOCKADDR_IN6");
}

TEST(Getinfo, AddrFormatSockaddrInIsAccepted) {
  auto hints = lo_hints();
  hints->addr_format = FI_SOCKADDR_IN;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->addr_format, static_cast<uint32_t>(FI_SOCKADDR_IN));
}

TEST(Getinfo, UnknownDomainNameGivesEnodata) {
  auto hints = fabq_only_hints();
  hints->domain_attr->name = strdup("nosuchif");
  expect_enodata(hints.get(), "domain nosuchif");
}

TEST(Getinfo, FabricNameSelectsThatSubnetOnly) {
  auto hints = fabq_only_hints();
  hints->fabric_attr->name = strdup("127.0.0.0/8");
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  for (const fi_info* i : as_vector(info.get())) {
    EXPECT_STREQ(i->fabric_attr->name, "127.0.0.0/8");
    EXPECT_STREQ(i->domain_attr->name, "lo");
  }
}

TEST(Getinfo, UnknownFabricNameGivesEnodata) {
  for (const IfaceAddr& a : ipv4_ifaces()) ASSERT_NE(a.subnet, "203.0.113.0/24");
  auto hints = fabq_only_hints();
  hints->fabric_attr->name = strdup("203.0.113.0/24");
  expect_enodata(hints.get(), "fabric 203.0.113.0/24");
}

TEST(Getinfo, RequestedThreadingIsEchoed) {
  for (fi_threading t : {FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_SAFE, FI_THREAD_FID,
                         FI_THREAD_ENDPOINT}) {
    auto hints = lo_hints();
    hints->domain_attr->threading = t;
    auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << t << ": " << fi_strerror(-rc);
    EXPECT_EQ(info->domain_attr->threading, t);
  }
}

TEST(Getinfo, RequestedProgressModelIsEchoed) {
  for (fi_progress p : {FI_PROGRESS_AUTO, FI_PROGRESS_MANUAL}) {
    auto hints = lo_hints();
    hints->domain_attr->control_progress = p;
    hints->domain_attr->data_progress = p;
    auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << p << ": " << fi_strerror(-rc);
    EXPECT_EQ(info->domain_attr->control_progress, p);
    EXPECT_EQ(info->domain_attr->data_progress, p);
  }
  // Mixed: each one echoed independently.
  auto hints = lo_hints();
  hints->domain_attr->control_progress = FI_PROGRESS_AUTO;
  hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->control_progress, FI_PROGRESS_AUTO);
  EXPECT_EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
}

TEST(Getinfo, RequestedResourceMgmtIsEchoed) {
  for (fi_resource_mgmt m : {FI_RM_DISABLED, FI_RM_ENABLED}) {
    auto hints = lo_hints();
    hints->domain_attr->resource_mgmt = m;
    auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << m << ": " << fi_strerror(-rc);
    EXPECT_EQ(info->domain_attr->resource_mgmt, m);
  }
}

TEST(Getinfo, RequestedCapsAreInInfoCapsAndTxRxCaps) {
  auto hints = lo_hints();
  hints->caps = FI_MSG | FI_SEND | FI_RECV;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->caps & (FI_MSG | FI_SEND | FI_RECV), FI_MSG | FI_SEND | FI_RECV);
  EXPECT_EQ(info->tx_attr->caps & (FI_MSG | FI_SEND), FI_MSG | FI_SEND);
  EXPECT_EQ(info->rx_attr->caps & (FI_MSG | FI_RECV), FI_MSG | FI_RECV);
  // Context capabilities are a subset of the endpoint's.
  EXPECT_EQ(info->tx_attr->caps & ~info->caps, 0u);
  EXPECT_EQ(info->rx_attr->caps & ~info->caps, 0u);
}

TEST(Getinfo, RequestedMsgCapIsInInfoCapsAndTxRxCaps) {
  auto hints = lo_hints();
  hints->caps = FI_MSG;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_NE(info->caps & FI_MSG, 0u);
  EXPECT_NE(info->tx_attr->caps & FI_MSG, 0u);
  EXPECT_NE(info->rx_attr->caps & FI_MSG, 0u);
}

TEST(Getinfo, OutputSizesAreAtLeastTheRequestedSizes) {
  auto hints = lo_hints();
  hints->tx_attr->size = 16;
  hints->rx_attr->size = 16;
  hints->tx_attr->inject_size = 8;
  hints->domain_attr->cq_cnt = 4;
  hints->domain_attr->cntr_cnt = 4;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_GE(info->tx_attr->size, 16u);
  EXPECT_GE(info->rx_attr->size, 16u);
  EXPECT_GE(info->tx_attr->inject_size, 8u);
  EXPECT_GE(info->domain_attr->cq_cnt, 4u);
  EXPECT_GE(info->domain_attr->cntr_cnt, 4u);
}

TEST(Getinfo, TooLargeSizesGiveEnodata) {
  {
    auto hints = fabq_only_hints();
    hints->tx_attr->size = size_t{1} << 20;
    expect_enodata(hints.get(), "tx_attr->size 1<<20");
  }
  {
    auto hints = fabq_only_hints();
    hints->tx_attr->inject_size = size_t{1} << 20;
    expect_enodata(hints.get(), "tx_attr->inject_size 1<<20");
  }
  {
    auto hints = fabq_only_hints();
    hints->rx_attr->size = size_t{1} << 20;
    expect_enodata(hints.get(), "rx_attr->size 1<<20");
  }
  {
    auto hints = fabq_only_hints();
    hints->domain_attr->cq_cnt = size_t{1} << 20;
    expect_enodata(hints.get(), "domain_attr->cq_cnt 1<<20");
  }
  {
    auto hints = fabq_only_hints();
    hints->domain_attr->cntr_cnt = size_t{1} << 20;
    expect_enodata(hints.get(), "domain_attr->cntr_cnt 1<<20");
  }
  {
    auto hints = fabq_only_hints();
    hints->domain_attr->cq_data_size = 16;
    expect_enodata(hints.get(), "domain_attr->cq_data_size 16");
  }
}

// fi_fabq(7) RELIABILITY AND SECURITY: an auth_key in the hints is the secret the endpoints
// opened from the answer prove; each answer carries it back, as fi_getinfo(3) says of hints.
TEST(Getinfo, AnAuthKeyInTheHintsIsTakenAndEchoed) {
  const std::string key = "a shared secret";
  for (const bool on_ep : {false, true}) {
    auto hints = fabq_only_hints();
    uint8_t** at = on_ep ? &hints->ep_attr->auth_key : &hints->domain_attr->auth_key;
    size_t* size = on_ep ? &hints->ep_attr->auth_key_size : &hints->domain_attr->auth_key_size;
    *at = reinterpret_cast<uint8_t*>(strdup(key.c_str()));
    *size = key.size();
    auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << (on_ep ? "ep_attr" : "domain_attr") << ": " << fi_strerror(-rc);
    for (const fi_info* i : as_vector(info.get())) {
      const uint8_t* got = on_ep ? i->ep_attr->auth_key : i->domain_attr->auth_key;
      const size_t got_size = on_ep ? i->ep_attr->auth_key_size : i->domain_attr->auth_key_size;
      ASSERT_EQ(got_size, key.size());
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(got), got_size), key);
    }
  }
}

TEST(Getinfo, AnAuthKeyAboveTheLimitOrWithoutBytesGivesEnodata) {
  {
    auto hints = fabq_only_hints();
    std::string big(1025, 'k');
    hints->domain_attr->auth_key = reinterpret_cast<uint8_t*>(strdup(big.c_str()));
    hints->domain_attr->auth_key_size = big.size();
    expect_enodata(hints.get(), "domain_attr->auth_key of 1025 bytes");
  }
  {
    auto hints = fabq_only_hints();
    hints->ep_attr->auth_key_size = 16;  // and no key
    expect_enodata(hints.get(), "ep_attr->auth_key_size without a key");
  }
}

TEST(Getinfo, UnsupportedOrderingGivesEnodata) {
  {
    auto hints = fabq_only_hints();
    hints->tx_attr->msg_order = FI_ORDER_DATA;
    expect_enodata(hints.get(), "tx_attr->msg_order FI_ORDER_DATA");
  }
  {
    auto hints = fabq_only_hints();
    hints->rx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_ATOMIC_WAW;
    expect_enodata(hints.get(), "rx_attr->msg_order SAS|ATOMIC_WAW");
  }
  {
    auto hints = fabq_only_hints();
    hints->tx_attr->comp_order = FI_ORDER_STRICT;
    expect_enodata(hints.get(), "tx_attr->comp_order FI_ORDER_STRICT");
  }
}

TEST(Getinfo, SupportedOrderingIsReported) {
  auto hints = lo_hints();
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_NE(info->tx_attr->msg_order & FI_ORDER_SAS, 0u);
  EXPECT_NE(info->rx_attr->msg_order & FI_ORDER_SAS, 0u);
}

TEST(Getinfo, OfTheMrModeBitsTheApplicationSupportsOnlyKeysAddressesAndEndpointsAreReported) {
  auto hints = lo_hints();
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_ENDPOINT | FI_MR_RAW | FI_MR_HMEM;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ENDPOINT)
      << "local buffers need no registration; remote access serves either way";
  hints->domain_attr->mr_mode = 0;
  auto [rc0, plain] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc0, 0);
  EXPECT_EQ(plain->domain_attr->mr_mode, 0) << "the application's keys, offsets into regions";
}

TEST(Getinfo, OldCallersGetTheBasicOrScalableModeTheyAskFor) {
  for (int mode : {FI_MR_BASIC, FI_MR_SCALABLE}) {
    auto hints = lo_hints();
    hints->domain_attr->mr_mode = mode;
    auto [rc, info] = getinfo(FI_VERSION(1, 4), nullptr, nullptr, 0, hints.get());
    ASSERT_EQ(rc, 0) << fi_strerror(-rc);
    EXPECT_EQ(info->domain_attr->mr_mode, mode);
  }
  auto hints = lo_hints();
  auto [rc, info] = getinfo(FI_VERSION(1, 4), nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_SCALABLE) << "no requirement, in the old words";
}

// fabq needs no mode; of those an application supports, it takes only FI_MSG_PREFIX, which the
// application asks for by supporting it (msg_prefix_test.cc).
TEST(Getinfo, ModeIsZeroButForAPrefixTheApplicationSupports) {
  auto hints = lo_hints();
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->mode, 0u);
  EXPECT_EQ(info->tx_attr->mode, 0u);
  EXPECT_EQ(info->rx_attr->mode, 0u);
  EXPECT_EQ(info->ep_attr->msg_prefix_size, 0u);
  hints->mode |= FI_MSG_PREFIX;
  auto [rc2, prefixed] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc2, 0) << fi_strerror(-rc2);
  EXPECT_EQ(prefixed->mode, FI_MSG_PREFIX);
  EXPECT_EQ(prefixed->tx_attr->mode, FI_MSG_PREFIX);
  EXPECT_EQ(prefixed->rx_attr->mode, FI_MSG_PREFIX);
}

// ----------------------------------------------------------------------------------------------
// node, service, FI_SOURCE and hint addresses.

TEST(Getinfo, NodeAndServiceWithFiSourceGiveSrcAddrWithThatPort) {
  auto hints = fabq_only_hints();
  hints->ep_attr->type = FI_EP_MSG;  // RDM's info is the same but for its type
  auto [rc, info] = getinfo(kVersion, "127.0.0.1", "7777", FI_SOURCE, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const auto infos = as_vector(info.get());
  ASSERT_EQ(infos.size(), 1u) << "only the interface that owns 127.0.0.1";
  EXPECT_STREQ(info->domain_attr->name, "lo");
  ASSERT_NE(info->src_addr, nullptr);
  ASSERT_EQ(info->src_addrlen, sizeof(sockaddr_in));
  const auto* sin = static_cast<const sockaddr_in*>(info->src_addr);
  EXPECT_EQ(sin->sin_family, AF_INET);
  EXPECT_EQ(sin->sin_addr.s_addr, loopback().s_addr);
  EXPECT_EQ(ntohs(sin->sin_port), 7777);
  EXPECT_EQ(info->dest_addr, nullptr);
}

TEST(Getinfo, NodeAndServiceWithoutFiSourceGiveDestAddrOnTheRoutingInterface) {
  auto hints = fabq_only_hints();
  hints->ep_attr->type = FI_EP_MSG;  // RDM's info is the same but for its type
  auto [rc, info] = getinfo(kVersion, "127.0.0.1", "7777", 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const auto infos = as_vector(info.get());
  ASSERT_EQ(infos.size(), 1u) << "only the interface the kernel routes 127.0.0.1 through";
  EXPECT_STREQ(info->domain_attr->name, "lo");
  ASSERT_NE(info->dest_addr, nullptr);
  ASSERT_EQ(info->dest_addrlen, sizeof(sockaddr_in));
  const auto* dst = static_cast<const sockaddr_in*>(info->dest_addr);
  EXPECT_EQ(dst->sin_family, AF_INET);
  EXPECT_EQ(dst->sin_addr.s_addr, loopback().s_addr);
  EXPECT_EQ(ntohs(dst->sin_port), 7777);
  ASSERT_NE(info->src_addr, nullptr);
  const auto* src = static_cast<const sockaddr_in*>(info->src_addr);
  EXPECT_EQ(src->sin_addr.s_addr, loopback().s_addr);
}

TEST(Getinfo, HintsSrcAddrSelectsTheInterfaceThatOwnsIt) {
  auto hints = fabq_only_hints();
  hints->ep_attr->type = FI_EP_MSG;  // RDM's info is the same but for its type
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr = loopback();
  hints->addr_format = FI_SOCKADDR_IN;
  hints->src_addr = malloc(sizeof(sin));
  ASSERT_NE(hints->src_addr, nullptr);
  memcpy(hints->src_addr, &sin, sizeof(sin));
  hints->src_addrlen = sizeof(sin);
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  const auto infos = as_vector(info.get());
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_STREQ(info->domain_attr->name, "lo");
  const auto* src = static_cast<const sockaddr_in*>(info->src_addr);
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(src->sin_addr.s_addr, loopback().s_addr);
}

TEST(Getinfo, HintsDestAddrSelectsTheRoutingInterfaceAndIsReturned) {
  auto hints = fabq_only_hints();
  hints->ep_attr->type = FI_EP_MSG;  // RDM's info is the same but for its type
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr = loopback();
  sin.sin_port = htons(7777);
  hints->addr_format = FI_SOCKADDR_IN;
  hints->dest_addr = malloc(sizeof(sin));
  ASSERT_NE(hints->dest_addr, nullptr);
  memcpy(hints->dest_addr, &sin, sizeof(sin));
  hints->dest_addrlen = sizeof(sin);
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  ASSERT_EQ(as_vector(info.get()).size(), 1u);
  EXPECT_STREQ(info->domain_attr->name, "lo");
  ASSERT_NE(info->dest_addr, nullptr);
  ASSERT_EQ(info->dest_addrlen, sizeof(sockaddr_in));
  const auto* dst = static_cast<const sockaddr_in*>(info->dest_addr);
  EXPECT_EQ(dst->sin_addr.s_addr, loopback().s_addr);
  EXPECT_EQ(ntohs(dst->sin_port), 7777);
}

TEST(Getinfo, NodeNotOwnedByAnyInterfaceWithFiSourceGivesEnodata) {
  auto hints = fabq_only_hints();
  for (const IfaceAddr& a : ipv4_ifaces()) ASSERT_NE(a.subnet, "203.0.113.0/24");
  expect_enodata(hints.get(), "FI_SOURCE 203.0.113.7", "203.0.113.7", "7777",
                 FI_SOURCE | FI_NUMERICHOST);
}

// ----------------------------------------------------------------------------------------------
// API versions.

// Versions newer than the core, and the versions of libfabric 2: api_version_test.cc.

TEST(Getinfo, OldApiVersion14ReportsMrScalable) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(FI_VERSION(1, 4), nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->mr_mode, FI_MR_SCALABLE);
  EXPECT_EQ(info->fabric_attr->api_version, FI_VERSION(1, 4));
}

TEST(Getinfo, CurrentApiVersionReportsNoMrModeRequirements) {
  auto hints = lo_hints();
  auto [rc, info] = getinfo(kVersion, nullptr, nullptr, 0, hints.get());
  ASSERT_EQ(rc, 0) << fi_strerror(-rc);
  EXPECT_EQ(info->domain_attr->mr_mode, 0);
  EXPECT_EQ(info->fabric_attr->api_version, kVersion);
}

}  // namespace
}  // namespace fabq::testing
