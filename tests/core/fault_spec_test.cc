// Fault rules (fi_fabq(7) FAULT INJECTION): the grammar parse_fault_spec() reads, the line
// format_fault_rule() writes, and when a FaultTrigger fires.
#include "core/fault_spec.h"

#include <gtest/gtest.h>
#include <rdma/fi_errno.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/async_event.h"
#include "fabq/fi_fabq.h"

namespace fabq::core {
namespace {

// The one rule of `spec`, which must parse.
FaultRule one(const std::string& spec) {
  std::vector<FaultRule> rules;
  std::string error;
  EXPECT_TRUE(parse_fault_spec(spec, &rules, &error)) << spec << ": " << error;
  EXPECT_EQ(rules.size(), 1u) << spec;
  return rules.empty() ? FaultRule{} : rules.front();
}

// The error message for `spec`, which must not parse.
std::string rejected(const std::string& spec) {
  std::vector<FaultRule> rules;
  std::string error;
  EXPECT_FALSE(parse_fault_spec(spec, &rules, &error)) << spec << " was accepted";
  EXPECT_FALSE(error.empty()) << spec;
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  return error;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

bool same(const FaultRule& a, const FaultRule& b) {
  return a.what == b.what && a.event == b.event && a.err == b.err && a.prov_errno == b.prov_errno &&
         a.target.kind == b.target.kind && a.target.index == b.target.index &&
         a.target.name == b.target.name && a.when == b.when && a.ops == b.ops && a.ms == b.ms &&
         a.prob == b.prob && a.seed == b.seed && a.count == b.count && a.net == b.net;
}

FaultRule rule_with(FaultWhen when, uint64_t n, uint64_t count) {
  FaultRule r;
  r.event = FI_FABQ_EVENT_EP_FATAL;
  r.target = {FaultTargetKind::kEndpoint, 0, ""};
  r.when = when;
  if (when == FaultWhen::kOps) r.ops = n;
  if (when == FaultWhen::kMs) r.ms = n;
  r.count = count;
  return r;
}

FaultRule prob_rule(double p, uint64_t seed, uint64_t count = 0) {
  FaultRule r;
  r.what = FaultWhat::kError;
  r.err = FI_EIO;
  r.target = {FaultTargetKind::kCq, 0, ""};
  r.when = FaultWhen::kProb;
  r.prob = p;
  r.seed = seed;
  r.count = count;
  return r;
}

// The 1-based operations (counted from the trigger's next one) on which `trigger` fires over
// `ops` more operations.
std::vector<uint64_t> firings(FaultTrigger& trigger, uint64_t ops) {
  std::vector<uint64_t> out;
  for (uint64_t i = 1; i <= ops; ++i) {
    if (trigger.on_operation()) out.push_back(i);
  }
  return out;
}

// The same for a fresh trigger of `rule`.
std::vector<uint64_t> firings(const FaultRule& rule, uint64_t ops) {
  FaultTrigger trigger(rule);
  return firings(trigger, ops);
}

// --- A spec is rules separated by ';' ----------------------------------------------------------

TEST(FaultSpec, TheHeaderExampleParsesIntoTwoRules) {
  std::vector<FaultRule> rules;
  std::string error;
  ASSERT_TRUE(parse_fault_spec(
      "event=ep_fatal,on=ep:0,ops=3; error=FI_EIO:7,on=cq:0,prob=0.01,seed=9,count=0", &rules,
      &error))
      << error;
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].what, FaultWhat::kEvent);
  EXPECT_EQ(rules[0].event, static_cast<uint32_t>(FI_FABQ_EVENT_EP_FATAL));
  EXPECT_EQ(rules[0].target.kind, FaultTargetKind::kEndpoint);
  EXPECT_EQ(rules[0].target.index, 0);
  EXPECT_EQ(rules[0].when, FaultWhen::kOps);
  EXPECT_EQ(rules[0].ops, 3u);
  EXPECT_EQ(rules[0].count, 1u);
  EXPECT_EQ(rules[1].what, FaultWhat::kError);
  EXPECT_EQ(rules[1].err, FI_EIO);
  EXPECT_EQ(rules[1].prov_errno, 7);
  EXPECT_EQ(rules[1].target.kind, FaultTargetKind::kCq);
  EXPECT_EQ(rules[1].when, FaultWhen::kProb);
  EXPECT_DOUBLE_EQ(rules[1].prob, 0.01);
  EXPECT_EQ(rules[1].seed, 9u);
  EXPECT_EQ(rules[1].count, 0u);
}

TEST(FaultSpec, EmptyRulesAndSurroundingWhitespaceAreIgnored) {
  std::vector<FaultRule> rules;
  std::string error;
  ASSERT_TRUE(parse_fault_spec(" ;\t event = sm_change , on = domain ;; \n event=port_err ; ",
                               &rules, &error))
      << error;
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].event, static_cast<uint32_t>(FI_FABQ_EVENT_SM_CHANGE));
  EXPECT_EQ(rules[1].event, static_cast<uint32_t>(FI_FABQ_EVENT_PORT_ERR));
}

TEST(FaultSpec, AnEmptySpecHasNoRules) {
  for (const char* spec : {"", " ", ";", " ; ;\t"}) {
    std::vector<FaultRule> rules(3);
    std::string error;
    EXPECT_TRUE(parse_fault_spec(spec, &rules, &error)) << spec;
    EXPECT_TRUE(rules.empty()) << "replaced, not appended: '" << spec << "'";
  }
}

TEST(FaultSpec, AnErrorLeavesTheRulesUnchangedAndNamesTheRuleAndWhy) {
  std::vector<FaultRule> rules(1);
  rules[0].count = 42;
  std::string error;
  EXPECT_FALSE(parse_fault_spec("event=sm_change; event=cq_err,on=ep:0", &rules, &error));
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].count, 42u);
  EXPECT_EQ(error, "rule 2 'event=cq_err,on=ep:0': cq_err is a CQ event, not an endpoint event");
}

TEST(FaultSpec, RulesAreNumberedAmongTheNonEmptyOnes) {
  EXPECT_TRUE(contains(rejected(";; event=sm_change ;; bogus=1"), "rule 2 'bogus=1'"));
}

TEST(FaultSpec, AnErrorMessageIsOneLineEvenWhenTheRuleSpansLines) {
  const std::string error = rejected("event=sm_change,\n  bogus=1");
  EXPECT_TRUE(contains(error, "rule 1 'event=sm_change,   bogus=1'")) << error;
}

TEST(FaultSpec, ANullErrorPointerIsAllowed) {
  std::vector<FaultRule> rules;
  EXPECT_FALSE(parse_fault_spec("bogus=1", &rules, nullptr));
  EXPECT_TRUE(parse_fault_spec("event=sm_change", &rules, nullptr));
  EXPECT_EQ(rules.size(), 1u);
}

// --- event=<kind> ------------------------------------------------------------------------------

TEST(FaultSpecEvent, AKindIsItsShortNameInAnyCaseWithOrWithoutThePrefix) {
  for (const char* name :
       {"ep_fatal", "EP_FATAL", "Ep_Fatal", "FI_FABQ_EVENT_EP_FATAL", "fi_fabq_event_ep_fatal"}) {
    const FaultRule r = one(std::string("event=") + name + ",on=ep:0");
    EXPECT_EQ(r.what, FaultWhat::kEvent) << name;
    EXPECT_EQ(r.event, static_cast<uint32_t>(FI_FABQ_EVENT_EP_FATAL)) << name;
  }
}

TEST(FaultSpecEvent, EveryKindParsesOnItsOwnKindOfTarget) {
  for (uint32_t type = FI_FABQ_EVENT_FIRST; type <= FI_FABQ_EVENT_LAST; ++type) {
    const AsyncKind* k = async_kind(type);
    ASSERT_NE(k, nullptr);
    std::string on;
    switch (k->object) {
      case AsyncObject::kEndpoint:
        on = "ep:0";
        break;
      case AsyncObject::kCq:
        on = "cq:0";
        break;
      case AsyncObject::kSrx:
        on = "srx:0";
        break;
      case AsyncObject::kPort:
      case AsyncObject::kDevice:
        on = "domain";
        break;
    }
    EXPECT_EQ(one(std::string("event=") + k->short_name + ",on=" + on).event, type) << k->name;
  }
}

TEST(FaultSpecEvent, AnUnknownKindIsRejected) {
  const std::string error = rejected("event=nonsense");
  EXPECT_TRUE(contains(error, "unknown event kind 'nonsense'")) << error;
  rejected("event=FI_FABQ_EVENT_");
  rejected("event=4101");  // numbers are not names
}

TEST(FaultSpecEvent, EndpointKindsNeedAnEndpointTarget) {
  one("event=ep_fatal,on=ep:1");
  EXPECT_TRUE(contains(rejected("event=ep_fatal"), "ep_fatal is an endpoint event, not a domain"));
  EXPECT_TRUE(contains(rejected("event=ep_fatal,on=cq:0"), "not a CQ event"));
  EXPECT_TRUE(contains(rejected("event=comm_est,on=srx:0"), "not an SRX event"));
}

TEST(FaultSpecEvent, CqKindsNeedACqTarget) {
  one("event=cq_err,on=cq:0");
  EXPECT_TRUE(
      contains(rejected("event=cq_err,on=ep:0"), "cq_err is a CQ event, not an endpoint event"));
  rejected("event=cq_err");
  rejected("event=cq_err,on=srx:0");
}

TEST(FaultSpecEvent, SrxKindsNeedAnSrxTarget) {
  one("event=srx_err,on=srx:0");
  one("event=srx_limit_reached,on=srx:q");
  EXPECT_TRUE(contains(rejected("event=srx_err,on=ep:0"), "srx_err is an SRX event"));
  rejected("event=srx_err");
}

TEST(FaultSpecEvent, PortAndDeviceKindsNeedTheDomain) {
  EXPECT_EQ(one("event=port_err").target.kind, FaultTargetKind::kDomain);
  EXPECT_EQ(one("event=device_fatal,on=domain").target.kind, FaultTargetKind::kDomain);
  const std::string error = rejected("event=port_err,on=ep:0");
  EXPECT_TRUE(contains(error, "port_err is a port event, not an endpoint event")) << error;
  EXPECT_TRUE(contains(error, "on=domain")) << error;
  EXPECT_TRUE(contains(rejected("event=device_fatal,on=cq:0"), "a device event"));
}

// --- error=<err>[:<prov>] ----------------------------------------------------------------------

TEST(FaultSpecError, AnErrnoIsANameWithOrWithoutFiInAnyCase) {
  for (const char* name : {"FI_EIO", "EIO", "fi_eio", "eio", "Fi_EiO"}) {
    const FaultRule r = one(std::string("error=") + name + ",on=ep:0");
    EXPECT_EQ(r.what, FaultWhat::kError) << name;
    EXPECT_EQ(r.err, FI_EIO) << name;
    EXPECT_EQ(r.prov_errno, 0) << name;
  }
  EXPECT_EQ(one("error=ECONNRESET,on=cq:0").err, FI_ECONNRESET);
  EXPECT_EQ(one("error=FI_EOVERRUN,on=cq:0").err, FI_EOVERRUN);
  EXPECT_EQ(one("error=FI_ENORX,on=ep:0").err, FI_ENORX);
  EXPECT_EQ(one("error=FI_EWOULDBLOCK,on=ep:0").err, FI_EAGAIN);
}

TEST(FaultSpecError, AnErrnoIsAPositiveNumber) {
  EXPECT_EQ(one("error=5,on=ep:0").err, 5);
  EXPECT_EQ(one("error=9999,on=ep:0").err, 9999);
  rejected("error=0,on=ep:0");
  rejected("error=-5,on=ep:0");
  rejected("error=+5,on=ep:0");
  rejected("error=5x,on=ep:0");
  rejected("error=99999999999,on=ep:0");
}

TEST(FaultSpecError, AProviderErrnoFollowsAColonAndMayBeNegative) {
  FaultRule r = one("error=FI_EIO:77,on=ep:0");
  EXPECT_EQ(r.err, FI_EIO);
  EXPECT_EQ(r.prov_errno, 77);
  r = one("error=EIO:-3,on=cq:0");
  EXPECT_EQ(r.prov_errno, -3);
  r = one("error=12 : 4 ,on=cq:0");
  EXPECT_EQ(r.err, 12);
  EXPECT_EQ(r.prov_errno, 4);
  rejected("error=FI_EIO:,on=ep:0");
  rejected("error=:7,on=ep:0");
  rejected("error=FI_EIO:7x,on=ep:0");
  rejected("error=FI_EIO:1:2,on=ep:0");
  rejected("error=FI_EIO:99999999999,on=ep:0");
}

TEST(FaultSpecError, AnUnknownErrnoNameIsRejected) {
  const std::string error = rejected("error=FI_NOPE,on=cq:0");
  EXPECT_TRUE(contains(error, "unknown fabric errno 'FI_NOPE'")) << error;
  rejected("error=FI_,on=cq:0");
  rejected("error=IO,on=cq:0");
}

TEST(FaultSpecError, TheTargetMustBeAnEndpointACqOrTheDomain) {
  EXPECT_EQ(one("error=FI_EIO,on=ep:0").target.kind, FaultTargetKind::kEndpoint);
  EXPECT_EQ(one("error=FI_EIO,on=cq:0").target.kind, FaultTargetKind::kCq);
  EXPECT_EQ(one("error=FI_EIO,on=domain").target.kind, FaultTargetKind::kDomain)
      << "a memory registration fails";
  EXPECT_EQ(one("error=FI_EIO").target.kind, FaultTargetKind::kDomain);
  EXPECT_TRUE(contains(rejected("error=FI_EIO,on=srx:0"), "not an SRX"));
}

TEST(FaultSpecWhat, ExactlyOneOfEventAndErrorIsRequired) {
  EXPECT_TRUE(contains(rejected("on=ep:0,ops=1"), "no event=, error= or net="));
  EXPECT_TRUE(contains(rejected("event=ep_fatal,error=FI_EIO,on=ep:0"), "exclusive"));
}

// --- on=<target> -------------------------------------------------------------------------------

TEST(FaultSpecTarget, TheDefaultIsTheDomain) {
  const FaultRule r = one("event=sm_change");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kDomain);
  EXPECT_EQ(r.target.index, -1);
  EXPECT_TRUE(r.target.name.empty());
}

TEST(FaultSpecTarget, DomainIsWrittenOutInAnyCase) {
  for (const char* on : {"domain", "DOMAIN", "Domain"}) {
    const FaultRule r = one(std::string("event=port_active,on=") + on);
    EXPECT_EQ(r.target.kind, FaultTargetKind::kDomain) << on;
    EXPECT_EQ(r.target.index, -1) << on;
  }
}

TEST(FaultSpecTarget, AKindAndAnIndexNameTheIthObject) {
  FaultRule r = one("event=ep_fatal,on=ep:3");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kEndpoint);
  EXPECT_EQ(r.target.index, 3);
  EXPECT_TRUE(r.target.name.empty());
  r = one("event=cq_err,on=cq:0");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kCq);
  EXPECT_EQ(r.target.index, 0);
  r = one("event=srx_err,on=srx:1");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kSrx);
  EXPECT_EQ(r.target.index, 1);
  r = one("event=ep_fatal,on=EP:12");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kEndpoint);
  EXPECT_EQ(r.target.index, 12);
  r = one("event=cq_err,on=Cq:007");
  EXPECT_EQ(r.target.index, 7);
}

TEST(FaultSpecTarget, AKindAndANameNameTheObjectGivenThatName) {
  FaultRule r = one("event=ep_fatal,on=ep:myname");
  EXPECT_EQ(r.target.kind, FaultTargetKind::kEndpoint);
  EXPECT_EQ(r.target.index, -1);
  EXPECT_EQ(r.target.name, "myname");
  EXPECT_EQ(one("event=cq_err,on=cq:_hot.q-1").target.name, "_hot.q-1");
  EXPECT_EQ(one("event=srx_err,on=SRX:Shared").target.name, "Shared") << "names keep their case";
  const std::string longest(63, 'n');
  EXPECT_EQ(one("event=cq_err,on=cq:" + longest).target.name, longest);
}

TEST(FaultSpecTarget, BadTargetsAreRejected) {
  for (const char* on : {"ep", "ep:", "ep:-1", "ep:3abc", "ep:my name", "ep:a/b", "ep:.x", "qp:0",
                         "domain:0", "dom", "cq:99999999999999999999"}) {
    rejected(std::string("event=ep_fatal,on=") + on);
  }
  rejected("event=cq_err,on=cq:" + std::string(64, 'n'));
  EXPECT_TRUE(contains(rejected("event=ep_fatal,on=qp:0"), "unknown object kind 'qp'"));
}

// --- when: ops= | ms= | prob= ------------------------------------------------------------------

TEST(FaultSpecWhen, NoWhenMeansAtOnce) {
  const FaultRule r = one("event=sm_change");
  EXPECT_EQ(r.when, FaultWhen::kNow);
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(r.seed, 1u);
}

TEST(FaultSpecWhen, OpsIsTheNthOperationFromOne) {
  FaultRule r = one("event=ep_fatal,on=ep:0,ops=1");
  EXPECT_EQ(r.when, FaultWhen::kOps);
  EXPECT_EQ(r.ops, 1u);
  EXPECT_EQ(one("event=ep_fatal,on=ep:0,ops=18446744073709551615").ops, UINT64_MAX);
  EXPECT_TRUE(contains(rejected("event=sm_change,ops=0"), "ops=0"));
  EXPECT_TRUE(contains(rejected("event=sm_change,ops=-1"), "negative"));
  rejected("event=sm_change,ops=3x");
  rejected("event=sm_change,ops=+3");
  rejected("event=sm_change,ops=1.5");
  rejected("event=sm_change,ops=0x10");
  EXPECT_TRUE(contains(rejected("event=sm_change,ops=18446744073709551616"), "out of range"));
}

TEST(FaultSpecWhen, MsIsADelayInMilliseconds) {
  const FaultRule r = one("event=sm_change,ms=100,count=2");
  EXPECT_EQ(r.when, FaultWhen::kMs);
  EXPECT_EQ(r.ms, 100u);
  EXPECT_EQ(r.count, 2u);
  rejected("event=sm_change,ms=-5");
  rejected("event=sm_change,ms=5ms");
  rejected("event=sm_change,ms=0");
}

TEST(FaultSpecWhen, ProbIsAProbabilityInZeroToOne) {
  FaultRule r = one("event=sm_change,prob=0.25");
  EXPECT_EQ(r.when, FaultWhen::kProb);
  EXPECT_DOUBLE_EQ(r.prob, 0.25);
  EXPECT_EQ(r.seed, 1u) << "default seed";
  EXPECT_DOUBLE_EQ(one("event=sm_change,prob=1").prob, 1.0);
  EXPECT_DOUBLE_EQ(one("event=sm_change,prob=1e-3").prob, 0.001);
  for (const char* p :
       {"0", "0.0", "-0.5", "1.0001", "2", "nan", "inf", "0.5x", "x", "0x0.8", "1e-999"}) {
    rejected(std::string("event=sm_change,prob=") + p);
  }
}

TEST(FaultSpecWhen, AtMostOneWhenIsAllowed) {
  EXPECT_TRUE(contains(rejected("event=sm_change,ms=1,ops=2"), "ops= and ms= are exclusive"));
  rejected("event=sm_change,ops=1,prob=0.5");
  rejected("event=sm_change,ms=1,prob=0.5");
}

// --- seed= and count= --------------------------------------------------------------------------

TEST(FaultSpecSeed, SeedGoesWithProbAndIsAllowedAnywhere) {
  EXPECT_EQ(one("event=sm_change,prob=0.5,seed=9").seed, 9u);
  EXPECT_EQ(one("event=sm_change,seed=0").seed, 0u);
  EXPECT_EQ(one("event=sm_change,ops=2,seed=18446744073709551615").seed, UINT64_MAX);
  rejected("event=sm_change,prob=0.5,seed=-1");
  rejected("event=sm_change,prob=0.5,seed=abc");
}

TEST(FaultSpecCount, CountDefaultsToOneAndZeroIsUnlimited) {
  EXPECT_EQ(one("event=sm_change").count, 1u);
  EXPECT_EQ(one("event=sm_change,count=5").count, 5u);
  EXPECT_EQ(one("event=sm_change,count=0").count, 0u);
  rejected("event=sm_change,count=-1");
  rejected("event=sm_change,count=1e3");
}

// --- keys --------------------------------------------------------------------------------------

TEST(FaultSpecKeys, KeysAreCaseInsensitiveAndSpacedFreely) {
  const FaultRule r = one("  EVENT = ep_fatal ,  On=ep:2,OPS=4 , Count = 3 ");
  EXPECT_EQ(r.event, static_cast<uint32_t>(FI_FABQ_EVENT_EP_FATAL));
  EXPECT_EQ(r.target.index, 2);
  EXPECT_EQ(r.ops, 4u);
  EXPECT_EQ(r.count, 3u);
}

TEST(FaultSpecKeys, AnUnknownKeyIsRejected) {
  EXPECT_TRUE(contains(rejected("bogus=1"), "unknown key 'bogus'"));
  EXPECT_TRUE(contains(rejected("event=sm_change,when=never"), "unknown key 'when'"));
}

TEST(FaultSpecKeys, ADuplicateKeyIsRejected) {
  EXPECT_TRUE(contains(rejected("event=ep_fatal,on=ep:0,on=ep:1"), "duplicate key 'on'"));
  EXPECT_TRUE(contains(rejected("event=sm_change,count=1,COUNT=2"), "duplicate key 'count'"));
  rejected("event=sm_change,event=sm_change");
}

TEST(FaultSpecKeys, EveryPairIsKeyEqualsValue) {
  EXPECT_TRUE(contains(rejected("event=sm_change,count"), "not key=value"));
  EXPECT_TRUE(contains(rejected("event=sm_change,count="), "count= has no value"));
  EXPECT_TRUE(contains(rejected("event=sm_change,=3"), "no key"));
  EXPECT_TRUE(contains(rejected("event=sm_change,,count=2"), "empty"));
  rejected("event=sm_change,");
}

// --- format_fault_rule -------------------------------------------------------------------------

TEST(FaultFormat, WritesEveryKeyTheRuleUses) {
  EXPECT_EQ(format_fault_rule(one("event=EP_FATAL,on=ep:0,ops=3")),
            "event=ep_fatal,on=ep:0,ops=3,count=1");
  EXPECT_EQ(format_fault_rule(one("error=eio:7,on=cq:0,prob=0.01,seed=9,count=0")),
            "error=FI_EIO:7,on=cq:0,prob=0.01,seed=9,count=0");
  EXPECT_EQ(format_fault_rule(one("event=sm_change,ms=100,count=2")),
            "event=sm_change,on=domain,ms=100,count=2");
  EXPECT_EQ(format_fault_rule(one("event=cq_err,on=CQ:hot")), "event=cq_err,on=cq:hot,count=1");
  EXPECT_EQ(format_fault_rule(one("error=4242,on=ep:1")), "error=4242,on=ep:1,count=1");
  EXPECT_EQ(format_fault_rule(one("event=sm_change,seed=5")),
            "event=sm_change,on=domain,seed=5,count=1");
}

TEST(FaultFormat, RoundTripsThroughTheParser) {
  for (const char* spec :
       {"event=ep_fatal,on=ep:0,ops=3", "error=FI_EIO:7,on=cq:0,prob=0.01,seed=9,count=0",
        "event=sm_change,ms=100,count=2", "event=port_err", "event=srx_limit_reached,on=srx:q.1",
        "error=ECONNRESET:-9,on=cq:0", "error=4242:1,on=ep:5,ops=18446744073709551615",
        "event=comm_est,on=ep:0,prob=0.1234567890123,seed=18446744073709551615,count=7",
        "event=device_fatal,prob=1e-9", "event=gid_change,prob=1", "event=cq_err,on=cq:0,seed=0"}) {
    const FaultRule r = one(spec);
    const std::string line = format_fault_rule(r);
    EXPECT_EQ(line.find(';'), std::string::npos) << line;
    const FaultRule again = one(line);
    EXPECT_TRUE(same(r, again)) << spec << " -> " << line << " -> " << format_fault_rule(again);
    EXPECT_EQ(format_fault_rule(again), line);
  }
}

// --- FaultTrigger ------------------------------------------------------------------------------

TEST(FaultTrigger, OpsFiresExactlyOnTheNthOperation) {
  FaultTrigger t(rule_with(FaultWhen::kOps, 3, 1));
  EXPECT_FALSE(t.on_operation());
  EXPECT_FALSE(t.on_operation());
  EXPECT_TRUE(t.on_operation());
  EXPECT_TRUE(t.exhausted());
  EXPECT_EQ(firings(t, 100), std::vector<uint64_t>{}) << "count=1: never again";
  EXPECT_EQ(t.operations(), 103u);
  EXPECT_EQ(t.fired(), 1u);
}

TEST(FaultTrigger, OpsOneFiresOnTheFirstOperation) {
  EXPECT_EQ(firings(rule_with(FaultWhen::kOps, 1, 1), 10), std::vector<uint64_t>{1});
}

TEST(FaultTrigger, OpsWithACountFiresEveryNthOperationUntilTheCount) {
  EXPECT_EQ(firings(rule_with(FaultWhen::kOps, 3, 2), 20), (std::vector<uint64_t>{3, 6}));
  EXPECT_EQ(firings(rule_with(FaultWhen::kOps, 1, 4), 20), (std::vector<uint64_t>{1, 2, 3, 4}));
}

TEST(FaultTrigger, CountZeroIsUnlimited) {
  FaultTrigger t(rule_with(FaultWhen::kOps, 5, 0));
  const std::vector<uint64_t> f = firings(t, 1000);
  ASSERT_EQ(f.size(), 200u);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(f[i], 5 * (i + 1));
  FaultTrigger always(prob_rule(1.0, 3, 0));
  EXPECT_EQ(firings(always, 500).size(), 500u);
  EXPECT_FALSE(always.exhausted());
}

TEST(FaultTrigger, OperationsAreCountedWhetherOrNotTheyFire) {
  FaultTrigger t(rule_with(FaultWhen::kOps, 2, 1));
  for (int i = 0; i < 7; ++i) (void)t.on_operation();
  EXPECT_EQ(t.operations(), 7u);
}

TEST(FaultTrigger, ProbIsDeterministicUnderTheSameSeed) {
  const std::vector<uint64_t> a = firings(prob_rule(0.01, 9), 10000);
  const std::vector<uint64_t> b = firings(prob_rule(0.01, 9), 10000);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a.empty());
}

TEST(FaultTrigger, DifferentSeedsFireOnDifferentOperations) {
  const std::vector<uint64_t> a = firings(prob_rule(0.01, 9), 10000);
  const std::vector<uint64_t> b = firings(prob_rule(0.01, 10), 10000);
  const std::vector<uint64_t> c = firings(prob_rule(0.01, 0), 10000);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(b, c);
}

TEST(FaultTrigger, ProbFiresAtRoughlyItsRate) {
  for (uint64_t seed : {1u, 2u, 9u, 12345u}) {
    EXPECT_GT(firings(prob_rule(0.01, seed), 10000).size(), 50u) << seed;
    EXPECT_LT(firings(prob_rule(0.01, seed), 10000).size(), 150u) << seed;
    const size_t half = firings(prob_rule(0.5, seed), 10000).size();
    EXPECT_GT(half, 4700u) << seed;
    EXPECT_LT(half, 5300u) << seed;
  }
}

TEST(FaultTrigger, ProbWithACountStopsAfterTheCountButKeepsTheSameFirstFirings) {
  const std::vector<uint64_t> unlimited = firings(prob_rule(0.1, 4, 0), 1000);
  const std::vector<uint64_t> three = firings(prob_rule(0.1, 4, 3), 1000);
  ASSERT_GE(unlimited.size(), 3u);
  EXPECT_EQ(three, std::vector<uint64_t>(unlimited.begin(), unlimited.begin() + 3));
}

TEST(FaultTrigger, NowFiresOnceByDefault) {
  FaultTrigger t(rule_with(FaultWhen::kNow, 0, 1));
  EXPECT_FALSE(t.exhausted());
  EXPECT_TRUE(t.fire_once());
  EXPECT_TRUE(t.exhausted());
  EXPECT_FALSE(t.fire_once());
  EXPECT_EQ(t.fired(), 1u);
}

TEST(FaultTrigger, FireOnceRespectsTheCount) {
  FaultTrigger t(rule_with(FaultWhen::kMs, 10, 3));
  EXPECT_TRUE(t.fire_once());
  EXPECT_TRUE(t.fire_once());
  EXPECT_FALSE(t.exhausted());
  EXPECT_TRUE(t.fire_once());
  EXPECT_TRUE(t.exhausted());
  EXPECT_FALSE(t.fire_once());
  FaultTrigger unlimited(rule_with(FaultWhen::kMs, 10, 0));
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(unlimited.fire_once());
  EXPECT_FALSE(unlimited.exhausted());
}

TEST(FaultTrigger, TimedRulesNeverFireOnOperations) {
  FaultTrigger now(rule_with(FaultWhen::kNow, 0, 0));
  FaultTrigger ms(rule_with(FaultWhen::kMs, 1, 0));
  EXPECT_EQ(firings(now, 100), std::vector<uint64_t>{});
  EXPECT_EQ(firings(ms, 100), std::vector<uint64_t>{});
}

TEST(FaultTrigger, OperationsCountAgainstTheSameCountAsFireOnce) {
  FaultTrigger t(rule_with(FaultWhen::kOps, 1, 2));
  EXPECT_TRUE(t.fire_once());
  EXPECT_TRUE(t.on_operation());
  EXPECT_FALSE(t.on_operation());
  EXPECT_TRUE(t.exhausted());
}

TEST(FaultSpec, NetFaultsNameWhatHappensToAnEndpointsConnection) {
  for (auto [text, fault] :
       {std::pair{"reject", NetFault::kReject}, std::pair{"TIMEOUT", NetFault::kTimeout},
        std::pair{"drop", NetFault::kDrop}, std::pair{"Corrupt", NetFault::kCorrupt}}) {
    const FaultRule r = one(std::string("net=") + text + ",on=ep:client,ops=2");
    EXPECT_EQ(r.what, FaultWhat::kNet) << text;
    EXPECT_EQ(r.net, fault) << text;
    EXPECT_EQ(r.target.kind, FaultTargetKind::kEndpoint);
    EXPECT_EQ(r.target.name, "client");
    EXPECT_EQ(r.when, FaultWhen::kOps);
    EXPECT_TRUE(same(one(format_fault_rule(r)), r)) << format_fault_rule(r);
  }
}

TEST(FaultSpec, NetFaultsApplyToEndpointsOnlyAndExcludeEventAndError) {
  EXPECT_TRUE(contains(rejected("net=drop"), "on=ep"));
  EXPECT_TRUE(contains(rejected("net=drop,on=cq:0"), "on=ep"));
  EXPECT_TRUE(contains(rejected("net=lose,on=ep:0"), "reject, timeout, drop, corrupt"));
  EXPECT_TRUE(contains(rejected("net=drop,event=ep_fatal,on=ep:0"), "exclusive"));
  EXPECT_TRUE(contains(rejected("net=drop,error=EIO,on=ep:0"), "exclusive"));
}

}  // namespace
}  // namespace fabq::core
