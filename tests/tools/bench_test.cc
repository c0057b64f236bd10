// `fabq bench`: the figures it reduces, the verdicts it prints, the MSG scenarios' message
// format, and the tool run end to end through libfabric (fabq against the tcp provider on the
// queue scenarios; tcp-core on the MSG scenarios, and fabq on them ending in a figure or a
// reason; fabq, tcp and shm on the RMA scenarios).
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tool_run.h"
#include "tools/bench/bench.h"
#include "tools/bench/msg.h"

namespace fabq::tools::bench {
namespace {

Sample ok_sample(double value, double p99 = 0, double allocs = 0) {
  Sample s;
  s.value = value;
  s.p99 = p99;
  s.allocs = allocs;
  return s;
}

Sample bad_sample(Sample::State state, const char* why) {
  Sample s;
  s.state = state;
  s.why = why;
  return s;
}

TEST(BenchStats, QuantileIsTheNearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(quantile(&v, 0.50), 50);
  EXPECT_EQ(quantile(&v, 0.99), 99);
  EXPECT_EQ(quantile(&v, 1.0), 100);
  EXPECT_EQ(quantile(&v, 0.0), 1);
  std::vector<double> empty;
  EXPECT_EQ(quantile(&empty, 0.5), 0);
}

TEST(BenchStats, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

class BenchSummary : public testing::Test {
 protected:
  const Scenario* pair_ = &all_scenarios().front();
  std::vector<const ProviderSpec*> providers_ = {find_provider("fabq"), find_provider("tcp"),
                                                 find_provider("shm")};
};

TEST_F(BenchSummary, RatioIsEachProvidersMedianOverFabqs) {
  ASSERT_EQ(pair_->name, "eq-pair/none");
  const std::vector<std::vector<std::vector<Sample>>> samples = {{
      {ok_sample(10), ok_sample(12), ok_sample(11)},
      {ok_sample(60), ok_sample(50), ok_sample(55)},
      {bad_sample(Sample::State::kUnsupported, "fi_eq_open: Function not implemented")},
  }};
  const std::vector<Summary> rows = summarize({pair_}, providers_, samples);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].provider, "fabq");
  EXPECT_EQ(rows[0].median, 11);
  EXPECT_EQ(rows[0].min, 10);
  EXPECT_EQ(rows[0].max, 12);
  EXPECT_EQ(rows[0].ratio, 1);
  EXPECT_EQ(rows[1].median, 55);
  EXPECT_EQ(rows[1].ratio, 5);
  EXPECT_EQ(rows[2].state, Sample::State::kUnsupported);
  EXPECT_EQ(rows[2].ratio, 0) << "no figure, no ratio";
}

TEST_F(BenchSummary, OneFailedRepetitionFailsTheProviderOnThatScenario) {
  const std::vector<std::vector<std::vector<Sample>>> samples = {{
      {ok_sample(10), bad_sample(Sample::State::kFailed, "lost wake-up")},
      {ok_sample(60)},
      {ok_sample(50)},
  }};
  const std::vector<Summary> rows = summarize({pair_}, providers_, samples);
  EXPECT_EQ(rows[0].state, Sample::State::kFailed);
  EXPECT_EQ(rows[0].why, "lost wake-up");
  EXPECT_EQ(rows[1].ratio, 0) << "without a fabq figure nothing is compared";
}

TEST_F(BenchSummary, AllocationsReportTheWorstRepetition) {
  const std::vector<std::vector<std::vector<Sample>>> samples = {{
      {ok_sample(10, 0, 0), ok_sample(10, 0, 0.5)},
      {ok_sample(60, 0, 1)},
      {ok_sample(50, 0, 1)},
  }};
  const std::vector<Summary> rows = summarize({pair_}, providers_, samples);
  EXPECT_EQ(rows[0].allocs, 0.5);
}

TEST_F(BenchSummary, TargetsSayMetOnlyWhenTheFiguresMeetThem) {
  auto targets = [&](double fabq_ns, double tcp_ns) {
    const std::vector<std::vector<std::vector<Sample>>> samples = {{
        {ok_sample(fabq_ns)},
        {ok_sample(tcp_ns, 0, 1)},
        {ok_sample(50, 0, 1)},
    }};
    return format_targets(summarize({pair_}, providers_, samples));
  };
  const std::string good = targets(10, 60);
  EXPECT_NE(good.find("[met] EQ write+read pair <= 12 ns: fabq 10.0 ns"), std::string::npos)
      << good;
  EXPECT_NE(good.find("[met] EQ write+read >= 5x tcp's throughput: 6.00x"), std::string::npos)
      << good;
  const std::string slow = targets(20, 60);
  EXPECT_NE(slow.find("[NOT met] EQ write+read pair <= 12 ns: fabq 20.0 ns"), std::string::npos)
      << slow;
  EXPECT_NE(slow.find("[NOT met] EQ write+read >= 5x tcp's throughput: 3.00x"), std::string::npos)
      << slow;
}

// ---------------------------------------------------------------------------------------------
// MSG ping-pong rows: a one-way latency, p50 with its range and the p99, in ns.

TEST(BenchMsgReport, LatencyRowsShowP50RangeAndP99InNsWithTheRatioToFabq) {
  const Scenario* pingpong = nullptr;
  for (const Scenario& s : all_scenarios()) {
    if (s.name == "msg-pingpong/8") pingpong = &s;
  }
  ASSERT_NE(pingpong, nullptr);
  EXPECT_EQ(pingpong->measure, Measure::kLatencyNs);
  const std::vector<const ProviderSpec*> providers = {find_provider("fabq"),
                                                      find_provider("tcp-core")};
  const std::vector<std::vector<std::vector<Sample>>> samples = {{
      {ok_sample(5'000, 7'000), ok_sample(4'000, 6'000), ok_sample(6'000, 8'000)},
      {ok_sample(12'000, 20'000)},
  }};
  const std::vector<Summary> rows = summarize({pingpong}, providers, samples);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].ratio, 2.4);
  const std::string table = format_table(rows, RunInfo{"now", "fabq bench", 3, Options{}});
  EXPECT_NE(table.find("one-way p50"), std::string::npos) << table;
  EXPECT_NE(table.find("5000 ns (4000-6000)"), std::string::npos) << table;
  EXPECT_NE(table.find("7000 ns"), std::string::npos) << "p99, median over repetitions\n" << table;
  EXPECT_NE(table.find("12000 ns (12000-12000)"), std::string::npos) << table;
}

// RMA bandwidth rows: the time per operation in us with its range, and the bandwidth it makes.
TEST(BenchRmaReport, BandwidthRowsShowTimePerOpAndTheBandwidth) {
  const Scenario* bw = nullptr;
  for (const Scenario& s : all_scenarios()) {
    if (s.name == "rma-write-bw/64Ki") bw = &s;
  }
  ASSERT_NE(bw, nullptr);
  EXPECT_EQ(bw->measure, Measure::kBandwidth);
  EXPECT_EQ(bw->msg_size, 64u << 10);
  const std::vector<const ProviderSpec*> providers = {find_provider("fabq"), find_provider("tcp")};
  const std::vector<std::vector<std::vector<Sample>>> samples = {{
      {ok_sample(32'768), ok_sample(30'000), ok_sample(40'000)},
      {ok_sample(131'072)},
  }};
  const std::vector<Summary> rows = summarize({bw}, providers, samples);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].ratio, 4);
  const std::string table = format_table(rows, RunInfo{"now", "fabq bench", 3, Options{}});
  EXPECT_NE(table.find("time per op"), std::string::npos) << table;
  EXPECT_NE(table.find("32.8 us (30.0-40.0)"), std::string::npos) << table;
  EXPECT_NE(table.find("2.00 GB/s"), std::string::npos) << "64 KiB in 32.8 us\n" << table;
  EXPECT_NE(table.find("500.0 MB/s"), std::string::npos) << "64 KiB in 131 us\n" << table;
}

// ---------------------------------------------------------------------------------------------
// The MSG targets, on synthetic rows: fabq against tcp-core.

Summary row(const std::string& scenario, const std::string& provider, double median) {
  Summary r;
  r.scenario = scenario;
  r.provider = provider;
  r.measure =
      scenario.find("-pingpong/") != std::string::npos ? Measure::kLatencyNs : Measure::kNsPerEvent;
  r.reps = 7;
  r.median = r.min = r.max = r.p99 = median;
  return r;
}

Summary failed_row(const std::string& scenario, const std::string& provider, const char* why) {
  Summary r = row(scenario, provider, 0);
  r.state = Sample::State::kFailed;
  r.why = why;
  return r;
}

// The targets line that begins with `title` after its verdict, or "" when there is none.
std::string target_line(const std::string& targets, const std::string& title) {
  std::istringstream in(targets);
  for (std::string line; std::getline(in, line);) {
    if (line.find("] " + title) != std::string::npos) return line;
  }
  return "";
}

const char* const kPingPong = "MSG ping-pong latency at most half of tcp-core's for 8 B-4 KiB";
const char* const kRate = "MSG message rate above tcp-core's";

TEST(BenchMsgTargets, PingPongIsMetOnlyWhenEverySizeIsAtMostHalfOfTcpCores) {
  std::vector<Summary> rows;
  for (const char* size : {"8", "64", "256", "1Ki", "4Ki"}) {
    rows.push_back(row(std::string("msg-pingpong/") + size, "fabq", 5'000));
    rows.push_back(row(std::string("msg-pingpong/") + size, "tcp-core", 10'000));
  }
  // Sizes above 4 KiB are not part of the target, however slow.
  rows.push_back(row("msg-pingpong/64Ki", "fabq", 90'000));
  rows.push_back(row("msg-pingpong/64Ki", "tcp-core", 60'000));
  std::string line = target_line(format_targets(rows), kPingPong);
  EXPECT_EQ(line.rfind("  [met] ", 0), 0u) << line;
  EXPECT_NE(line.find("8 B 5000/10000, 64 B 5000/10000, 256 B 5000/10000, 1 KiB 5000/10000, "
                      "4 KiB 5000/10000"),
            std::string::npos)
      << line;

  rows[8].median = 9'000;  // 4 KiB: fabq 9 us against tcp-core's 10 us
  line = target_line(format_targets(rows), kPingPong);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;
  EXPECT_NE(line.find("4 KiB 9000/10000"), std::string::npos) << line;
}

TEST(BenchMsgTargets, RateIsMetOnlyWhenFabqTakesLessTimePerMessageAtEverySize) {
  std::vector<Summary> rows = {
      row("msg-rate/8", "fabq", 400),
      row("msg-rate/8", "tcp-core", 900),
      row("msg-rate/1Mi", "fabq", 2e5),
      row("msg-rate/1Mi", "tcp-core", 3e5),
  };
  std::string line = target_line(format_targets(rows), kRate);
  EXPECT_EQ(line.rfind("  [met] ", 0), 0u) << line;
  EXPECT_NE(line.find("8 B 400/900, 1 MiB 200000/300000"), std::string::npos) << line;

  rows[2].median = 3e5;  // equal is not above
  line = target_line(format_targets(rows), kRate);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;
}

TEST(BenchMsgTargets, AFailedFabqGivesNotApplicableWithItsReason) {
  const std::vector<Summary> rows = {
      failed_row("msg-pingpong/8", "fabq", "server: fi_passive_ep returned -38"),
      row("msg-pingpong/8", "tcp-core", 10'000),
      failed_row("msg-rate/8", "fabq", "server: fi_passive_ep returned -38"),
      row("msg-rate/8", "tcp-core", 900),
  };
  const std::string targets = format_targets(rows);
  for (const char* title : {kPingPong, kRate}) {
    const std::string line = target_line(targets, title);
    EXPECT_EQ(line.rfind("  [n/a] ", 0), 0u) << line;
    EXPECT_NE(line.find("no figure from fabq"), std::string::npos) << line;
    EXPECT_NE(line.find("fi_passive_ep returned -38"), std::string::npos) << line;
  }
}

TEST(BenchMsgTargets, SomeSizesWithoutAFigureMeanNotMet) {
  const std::vector<Summary> rows = {
      row("msg-rate/8", "fabq", 400),
      row("msg-rate/8", "tcp-core", 900),
      row("msg-rate/64", "fabq", 400),
      failed_row("msg-rate/64", "tcp-core", "client: no completion within 2000 ms"),
  };
  const std::string line = target_line(format_targets(rows), kRate);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;
  EXPECT_NE(line.find("no figure from tcp-core for msg-rate/64"), std::string::npos) << line;
}

TEST(BenchMsgTargets, ARunWithoutMsgScenariosHasNoMsgTargetLines) {
  const std::vector<Summary> rows = {row("eq-pair/none", "fabq", 10)};
  const std::string targets = format_targets(rows);
  EXPECT_EQ(target_line(targets, kPingPong), "") << targets;
  EXPECT_EQ(target_line(targets, kRate), "") << targets;
}

const char* const kRdmAsMsg = "RDM ping-pong latency within 10 % of MSG's at every size";

TEST(BenchRdmTargets, RdmAgainstMsgIsMetOnlyWithinTenPercentEitherWayAtEverySize) {
  std::vector<Summary> rows;
  for (const char* size : {"8", "64", "4Ki", "1Mi"}) {
    rows.push_back(row(std::string("msg-pingpong/") + size, "fabq", 1'000));
    rows.push_back(row(std::string("rdm-pingpong/") + size, "fabq", 1'100));
  }
  std::string line = target_line(format_targets(rows), kRdmAsMsg);
  EXPECT_EQ(line.rfind("  [met] ", 0), 0u) << line;
  EXPECT_NE(line.find("fabq rdm/msg): 8 B 1100/1000, 64 B 1100/1000, 4 KiB 1100/1000, "
                      "1 MiB 1100/1000"),
            std::string::npos)
      << line;

  rows[3].median = 1'101;  // 64 B: RDM just over 10 % slower
  line = target_line(format_targets(rows), kRdmAsMsg);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;

  rows[3].median = 900;  // faster by more than 10 %: the two still differ
  line = target_line(format_targets(rows), kRdmAsMsg);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;

  rows[3].median = 1'000;
  rows.pop_back();  // 1 MiB: no RDM figure
  rows.push_back(failed_row("rdm-pingpong/1Mi", "fabq", "client: no completion within 2000 ms"));
  line = target_line(format_targets(rows), kRdmAsMsg);
  EXPECT_EQ(line.rfind("  [NOT met] ", 0), 0u) << line;
  EXPECT_NE(line.find("no figure from fabq for rdm-pingpong/1Mi"), std::string::npos) << line;
}

// ---------------------------------------------------------------------------------------------
// The MSG scenarios' messages: what a sender stamps, the receiver's check accepts; anything
// else it refuses, saying where.

TEST(BenchMsgFormat, CheckAcceptsWhatStampWroteAtEverySize) {
  for (const size_t size : {8u, 9u, 15u, 16u, 64u, 4096u, 4104u, 4105u, 65536u, 1u << 20}) {
    const MsgFormat f(size);
    std::vector<uint8_t> buf(size);
    f.fill(buf.data());
    for (const uint64_t seq : {1ULL, 2ULL, 123456789ULL}) {
      f.stamp(buf.data(), seq, MsgDir::kToClient);
      uint64_t got = 0;
      std::string why;
      EXPECT_TRUE(f.check(buf.data(), size, MsgDir::kToClient, &got, &why)) << size << ": " << why;
      EXPECT_EQ(got, seq) << size;
    }
  }
}

TEST(BenchMsgFormat, CheckRefusesAWrongLengthDirectionByteOrStaleStamp) {
  const size_t size = 64u << 10;
  const MsgFormat f(size);
  std::vector<uint8_t> buf(size);
  f.fill(buf.data());
  f.stamp(buf.data(), 7, MsgDir::kToServer);
  uint64_t seq = 0;
  std::string why;
  EXPECT_FALSE(f.check(buf.data(), size - 1, MsgDir::kToServer, &seq, &why));
  EXPECT_NE(why.find("received 65535 bytes"), std::string::npos) << why;
  EXPECT_FALSE(f.check(buf.data(), size, MsgDir::kToClient, &seq, &why));
  EXPECT_NE(why.find("not a message to the client"), std::string::npos) << why;

  buf[40'000] ^= 0x10;  // a payload byte between two stamps
  EXPECT_FALSE(f.check(buf.data(), size, MsgDir::kToServer, &seq, &why));
  EXPECT_NE(why.find("byte 40000"), std::string::npos) << why;
  buf[40'000] ^= 0x10;

  // Message 8 stamped only over the first 4 KiB: the rest of the buffer still holds message 7,
  // as when a provider delivers a truncated or stale payload.
  std::vector<uint8_t> next = buf;
  f.stamp(next.data(), 8, MsgDir::kToServer);
  std::memcpy(next.data() + 4096, buf.data() + 4096, size - 4096);
  EXPECT_FALSE(f.check(next.data(), size, MsgDir::kToServer, &seq, &why));
  EXPECT_NE(why.find("the stamp at byte 4096"), std::string::npos) << why;

  EXPECT_TRUE(f.check(buf.data(), size, MsgDir::kToServer, &seq, &why)) << why;
  EXPECT_EQ(seq, 7u);
}

TEST(BenchMsgFormat, SizesAreNamedAsTheScenariosSpellThem) {
  EXPECT_EQ(msg_size_name(8), "8");
  EXPECT_EQ(msg_size_name(1024), "1Ki");
  EXPECT_EQ(msg_size_name(64u << 10), "64Ki");
  EXPECT_EQ(msg_size_name(1u << 20), "1Mi");
  EXPECT_EQ(msg_size_label(256), "256 B");
  EXPECT_EQ(msg_size_label(4096), "4 KiB");
  EXPECT_EQ(msg_size_label(1u << 20), "1 MiB");
}

// ---------------------------------------------------------------------------------------------
// Each provider runs in a child process: a hang or a crash fails one scenario, not the run.

Sample hangs(const Scenario&, const Provider&, const Options&) {
  for (;;) pause();
}
Sample crashes(const Scenario&, const Provider&, const Options&) {
  abort();
}
Sample works(const Scenario&, const Provider&, const Options&) {
  Sample s;
  s.value = 42;
  s.why = "with a\nnewline";
  return s;
}

TEST(BenchIsolation, AHungOrCrashedScenarioFailsAloneAndTheOthersStillRun) {
  setenv("FI_PROVIDER_PATH", FABQ_PROV_DIR, 1);
  const Scenario hang{"hang", "", Measure::kNsPerEvent, hangs, FI_WAIT_NONE};
  const Scenario crash{"crash", "", Measure::kNsPerEvent, crashes, FI_WAIT_NONE};
  const Scenario work{"work", "", Measure::kNsPerEvent, works, FI_WAIT_NONE};
  const std::vector<const Scenario*> scenarios = {&work, &hang, &work, &crash, &work};
  std::vector<Sample> out(scenarios.size());
  run_isolated(*find_provider("fabq"), scenarios, {0, 1, 2, 3, 4}, Options{}, 1000, &out);
  for (size_t i : {0, 2, 4}) {
    EXPECT_EQ(out[i].state, Sample::State::kOk) << i << ": " << out[i].why;
    EXPECT_EQ(out[i].value, 42);
    EXPECT_EQ(out[i].why, "with a newline");
  }
  EXPECT_EQ(out[1].state, Sample::State::kFailed);
  EXPECT_EQ(out[1].why.rfind("hung", 0), 0u) << out[1].why;
  EXPECT_EQ(out[3].state, Sample::State::kFailed);
  EXPECT_EQ(out[3].why.rfind("died", 0), 0u) << out[3].why;
}

TEST(BenchIsolation, MsgScenariosAreUnsupportedOnProvidersWithoutMsgEndpoints) {
  const Scenario* pingpong = nullptr;
  for (const Scenario& s : all_scenarios()) {
    if (s.name == "msg-pingpong/8") pingpong = &s;
  }
  ASSERT_NE(pingpong, nullptr);
  for (const char* name : {"tcp", "udp", "shm"}) {
    std::vector<Sample> out(1);
    run_isolated(*find_provider(name), {pingpong}, {0}, Options{}, 10'000, &out);
    EXPECT_EQ(out[0].state, Sample::State::kUnsupported) << name << ": " << out[0].why;
    EXPECT_NE(out[0].why.find("FI_EP_MSG"), std::string::npos) << name << ": " << out[0].why;
  }
}

TEST(BenchIsolation, AProviderThatCannotBeOpenedIsUnsupportedEverywhere) {
  const ProviderSpec nosuch{"nosuch", "nosuch-provider", FI_EP_MSG, ""};
  const Scenario work{"work", "", Measure::kNsPerEvent, works, FI_WAIT_NONE};
  std::vector<Sample> out(2);
  run_isolated(nosuch, {&work, &work}, {0, 1}, Options{}, 5000, &out);
  for (const Sample& s : out) {
    EXPECT_EQ(s.state, Sample::State::kUnsupported);
    EXPECT_NE(s.why.find("fi_getinfo"), std::string::npos) << s.why;
  }
}

// ---------------------------------------------------------------------------------------------
// The tool, run as a user runs it.

using fabq::tool_test::run_tool;
using fabq::tool_test::ToolRun;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(BenchTool, RejectsUnknownProvidersScenariosAndOptions) {
  EXPECT_EQ(run_tool("bench --providers fabq,nosuch").status, 2);
  EXPECT_EQ(run_tool("bench --scenarios nosuch").status, 2);
  EXPECT_EQ(run_tool("bench --reps 0").status, 2);
  EXPECT_EQ(run_tool("bench --frobnicate").status, 2);
}

TEST(BenchTool, ListNamesEveryScenarioAndProvider) {
  const ToolRun r = run_tool("bench --list");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const Scenario& s : all_scenarios()) EXPECT_NE(r.out.find(s.name), std::string::npos);
  for (const ProviderSpec& p : known_providers()) EXPECT_NE(r.out.find(p.name), std::string::npos);
}

// The scenario names `--list` prints under "scenarios:".
std::vector<std::string> listed(const std::string& out) {
  std::vector<std::string> names;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line) && line != "scenarios:") {
  }
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return names;
}

TEST(BenchTool, ListWithScenariosNamesTheMsgScenariosAPrefixSelects) {
  const std::vector<std::string> msg = {
      "msg-pingpong/8",   "msg-pingpong/64",   "msg-pingpong/256", "msg-pingpong/1Ki",
      "msg-pingpong/4Ki", "msg-pingpong/64Ki", "msg-pingpong/1Mi", "msg-rate/8",
      "msg-rate/64",      "msg-rate/4Ki",      "msg-rate/64Ki",    "msg-rate/1Mi",
      "msg-comp-rate/8",
  };
  for (const char* selector : {"msg", "msg-"}) {
    const ToolRun r = run_tool(std::string("bench --list --scenarios ") + selector);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(listed(r.out), msg) << selector << "\n" << r.out;
  }
  const ToolRun pp = run_tool("bench --list --scenarios msg-pingpong,msg-comp-rate/8");
  ASSERT_EQ(pp.status, 0) << pp.out;
  std::vector<std::string> want(msg.begin(), msg.begin() + 7);
  want.push_back("msg-comp-rate/8");
  EXPECT_EQ(listed(pp.out), want) << pp.out;
  EXPECT_EQ(run_tool("bench --list --scenarios msg-ping").status, 2) << "not at a boundary";
}

TEST(BenchTool, ListWithScenariosNamesTheRmaScenariosAPrefixSelects) {
  std::vector<std::string> rma;
  for (const char* kind : {"rma-write-lat/", "rma-write-bw/", "rma-read-bw/"}) {
    for (const char* size : {"8", "64", "4Ki", "64Ki", "1Mi", "4Mi"}) {
      rma.push_back(std::string(kind) + size);
    }
  }
  rma.push_back("rma-atomic/sum");
  rma.push_back("rma-fetch-atomic/sum");
  for (const char* selector : {"rma", "rma-"}) {
    const ToolRun r = run_tool(std::string("bench --list --scenarios ") + selector);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(listed(r.out), rma) << selector << "\n" << r.out;
  }
  const ToolRun lat = run_tool("bench --list --scenarios rma-write-lat,rma-fetch-atomic");
  ASSERT_EQ(lat.status, 0) << lat.out;
  std::vector<std::string> want(rma.begin(), rma.begin() + 6);
  want.push_back("rma-fetch-atomic/sum");
  EXPECT_EQ(listed(lat.out), want) << lat.out;
}

TEST(BenchTool, ListWithScenariosNamesTheRdmScenariosAPrefixSelects) {
  std::vector<std::string> rdm;
  for (const char* kind : {"rdm-pingpong/", "rdm-bw/"}) {
    for (const char* size :
         {"8", "64", "256", "1Ki", "4Ki", "16Ki", "64Ki", "256Ki", "1Mi", "4Mi"}) {
      rdm.push_back(std::string(kind) + size);
    }
  }
  for (const char* selector : {"rdm", "rdm-"}) {
    const ToolRun r = run_tool(std::string("bench --list --scenarios ") + selector);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(listed(r.out), rdm) << selector << "\n" << r.out;
  }
  const ToolRun bw = run_tool("bench --list --scenarios rdm-bw/1Mi,rdm-pingpong/8");
  ASSERT_EQ(bw.status, 0) << bw.out;
  EXPECT_EQ(listed(bw.out), (std::vector<std::string>{"rdm-pingpong/8", "rdm-bw/1Mi"})) << bw.out;
}

// The queue scenarios (EQ, CQ, counter); the MSG, RDM, RMA and datagram ones have tests of their
// own below.
size_t queue_scenario_count() {
  size_t n = 0;
  for (const Scenario& s : all_scenarios()) {
    n += s.name.rfind("msg-", 0) != 0 && s.name.rfind("rma-", 0) != 0 &&
         s.name.rfind("rdm-", 0) != 0 && s.name.rfind("dgram-", 0) != 0;
  }
  return n;
}

TEST(BenchTool, QuickRunComparesFabqWithTcpOnEveryQueueScenarioAndWritesTheReports) {
  char dir[] = "/tmp/fabq-bench-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const ToolRun r = run_tool(
      std::string("bench --quick --reps 1 --providers fabq,tcp --scenarios eq,cq,cntr --out ") +
      dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("targets:"), std::string::npos) << r.out;

  // bench.csv: one row per scenario and provider; fabq passes every scenario, with a figure.
  std::istringstream csv(read_file(std::string(dir) + "/bench.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_EQ(line.rfind("scenario,provider,state,", 0), 0u) << line;
  std::map<std::string, std::string> fabq_state;
  int tcp_rows = 0;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string x;
    while (std::getline(fields, x, ',')) f.push_back(x);
    ASSERT_GE(f.size(), 6u) << line;
    if (f[1] == "fabq") {
      fabq_state[f[0]] = f[2];
      EXPECT_GT(std::stod(f[5]), 0) << line;
    }
    if (f[1] == "tcp") ++tcp_rows;
  }
  EXPECT_EQ(fabq_state.size(), queue_scenario_count());
  for (const auto& [scenario, state] : fabq_state) EXPECT_EQ(state, "ok") << scenario;
  EXPECT_EQ(tcp_rows, static_cast<int>(queue_scenario_count()));

  const std::string json = read_file(std::string(dir) + "/bench.json");
  EXPECT_NE(json.find("\"machine\""), std::string::npos);
  EXPECT_NE(json.find("\"provider\": \"tcp\""), std::string::npos);
  EXPECT_NE(read_file(std::string(dir) + "/bench.txt").find("eq-pair/none"), std::string::npos);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_NE(read_file(std::string(dir) + "/bench.svg").find("<svg"), std::string::npos);
  }
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
}

// libfabric's tcp MSG provider runs every kind of MSG scenario (a small and a large message
// each); the RDM tcp spec is reported unsupported, with the reason, and does not fail the run
// nor its plot, where it has no figure.
TEST(BenchTool, QuickMsgRunOnTcpCoreConnectsExchangesAndReports) {
  char dir[] = "/tmp/fabq-bench-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const ToolRun r = run_tool(
      std::string("bench --quick --reps 1 --providers tcp-core,tcp --scenarios "
                  "msg-pingpong/8,msg-pingpong/1Mi,msg-rate/8,msg-rate/1Mi,msg-comp-rate --out ") +
          dir,
      "timeout 120");
  EXPECT_EQ(r.status, 0) << r.out;
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_NE(read_file(std::string(dir) + "/bench.svg").find("<svg"), std::string::npos);
  }
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
  for (const char* scenario : {"msg-pingpong/8:", "msg-pingpong/1Mi:", "msg-rate/8:",
                               "msg-rate/1Mi:", "msg-comp-rate/8:"}) {
    const size_t at = r.out.find(std::string("\n") + scenario);
    ASSERT_NE(at, std::string::npos) << scenario << "\n" << r.out;
    const std::string block = r.out.substr(at, r.out.find("\n\n", at + 1) - at);
    EXPECT_NE(block.find("\n  tcp-core  "), std::string::npos) << block;
    EXPECT_EQ(block.find("tcp-core  FAILED"), std::string::npos) << block;
    EXPECT_EQ(block.find("tcp-core  unsupported"), std::string::npos) << block;
    EXPECT_NE(block.find("tcp       unsupported: MSG scenarios need FI_EP_MSG"), std::string::npos)
        << block;
  }
}

// Until fabq's transport connects endpoints the MSG scenarios cannot pass on fabq; whatever
// the provider does, the run must end with a figure or with the reason, and never hang.
TEST(BenchTool, MsgScenariosOnFabqEndWithAFigureOrAReason) {
  const ToolRun r =
      run_tool("bench --quick --reps 1 --providers fabq --scenarios msg-pingpong/8", "timeout 60");
  if (r.status == 0) {
    EXPECT_EQ(r.out.find("fabq did not pass"), std::string::npos) << r.out;
    return;
  }
  ASSERT_EQ(r.status, 1) << r.out;
  const std::string said = "fabq bench: fabq did not pass msg-pingpong/8: ";
  const size_t at = r.out.find(said);
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_GT(r.out.find('\n', at) - at, said.size() + 5) << "a reason follows\n" << r.out;
}

// The RDM and RMA scenarios, quick, on fabq and libfabric's RDM providers: every kind (a small
// and a large size each) runs, validates and reports a figure on fabq, tcp (ofi_rxm over tcp) and
// shm; providers without FI_EP_RDM endpoints of their own (tcp-core) are reported unsupported with
// the reason, never FAILED; the report and its plot are written.
TEST(BenchTool, QuickRdmAndRmaRunSendsWritesReadsAndAddsOnFabqTcpAndShm) {
  char dir[] = "/tmp/fabq-bench-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const char* const scenarios[] = {"rdm-pingpong/8",   "rdm-pingpong/1Mi",  "rdm-bw/64",
                                   "rdm-bw/1Mi",       "rma-write-lat/8",   "rma-write-lat/64Ki",
                                   "rma-write-bw/64",  "rma-write-bw/64Ki", "rma-read-bw/64",
                                   "rma-read-bw/64Ki", "rma-atomic/sum",    "rma-fetch-atomic/sum"};
  std::string list;
  for (const char* s : scenarios) list += std::string(list.empty() ? "" : ",") + s;
  const ToolRun r = run_tool(
      "bench --quick --reps 1 --providers fabq,tcp,shm,tcp-core "
      "--scenarios " +
          list + " --out " + dir,
      "timeout 120");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(read_file(std::string(dir) + "/bench.json").find("\"gb_per_s\""), std::string::npos);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_NE(read_file(std::string(dir) + "/bench.svg").find("<svg"), std::string::npos);
  }
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
  for (const char* scenario : scenarios) {
    const size_t at = r.out.find(std::string("\n") + scenario + ":");
    ASSERT_NE(at, std::string::npos) << scenario << "\n" << r.out;
    const std::string block = r.out.substr(at, r.out.find("\n\n", at + 1) - at);
    for (const char* p : {"fabq      ", "tcp       ", "shm       "}) {
      const size_t line = block.find(std::string("\n  ") + p);
      ASSERT_NE(line, std::string::npos) << p << "\n" << block;
      const std::string rest = block.substr(line + 3 + std::strlen(p), 12);
      EXPECT_EQ(rest.find("FAILED"), std::string::npos) << p << "\n" << block;
      EXPECT_EQ(rest.find("unsupported"), std::string::npos) << p << "\n" << block;
    }
    EXPECT_NE(block.find("tcp-core  unsupported: "), std::string::npos) << block;
    EXPECT_NE(block.find("no FI_EP_RDM endpoint of tcp itself"), std::string::npos) << block;
  }
}

// The datagram scenarios run on fabq and on libfabric's udp provider, where its messages fit
// (udp's max_msg_size is an Ethernet frame's); an RDM-only provider is unsupported, saying why.
TEST(BenchTool, QuickDgramRunPingsAndStreamsDatagramsOnFabqAndUdp) {
  const ToolRun r = run_tool(
      "bench --quick --reps 1 --providers fabq,udp,shm "
      "--scenarios dgram-pingpong/8,dgram-pingpong/16Ki,dgram-rate/64",
      "timeout 120");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* scenario : {"dgram-pingpong/8", "dgram-pingpong/16Ki", "dgram-rate/64"}) {
    const size_t at = r.out.find(std::string("\n") + scenario + ":");
    ASSERT_NE(at, std::string::npos) << scenario << "\n" << r.out;
    const std::string block = r.out.substr(at, r.out.find("\n\n", at + 1) - at);
    const size_t fabq = block.find("\n  fabq      ");
    ASSERT_NE(fabq, std::string::npos) << block;
    const std::string rest = block.substr(fabq + 13, 12);
    EXPECT_EQ(rest.find("FAILED"), std::string::npos) << block;
    EXPECT_EQ(rest.find("unsupported"), std::string::npos) << block;
    EXPECT_NE(block.find("no FI_EP_DGRAM endpoint of shm itself"), std::string::npos) << block;
    const bool fits_udp = std::string(scenario) != "dgram-pingpong/16Ki";
    EXPECT_EQ(block.find("udp       unsupported: ") == std::string::npos, fits_udp) << block;
    EXPECT_EQ(block.find("udp       FAILED"), std::string::npos) << block;
  }
}

}  // namespace
}  // namespace fabq::tools::bench
