// `fabq bench`: the figures it reduces, the verdicts it prints, and the tool run end to end
// through libfabric (fabq against the tcp provider, one quick repetition).
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <rdma/fi_eq.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tool_run.h"
#include "tools/bench/bench.h"

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

TEST(BenchTool, QuickRunComparesFabqWithTcpOnEveryScenarioAndWritesTheReports) {
  char dir[] = "/tmp/fabq-bench-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const ToolRun r =
      run_tool(std::string("bench --quick --reps 1 --providers fabq,tcp --out ") + dir);
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
  EXPECT_EQ(fabq_state.size(), all_scenarios().size());
  for (const auto& [scenario, state] : fabq_state) EXPECT_EQ(state, "ok") << scenario;
  EXPECT_EQ(tcp_rows, static_cast<int>(all_scenarios().size()));

  const std::string json = read_file(std::string(dir) + "/bench.json");
  EXPECT_NE(json.find("\"machine\""), std::string::npos);
  EXPECT_NE(json.find("\"provider\": \"tcp\""), std::string::npos);
  EXPECT_NE(read_file(std::string(dir) + "/bench.txt").find("eq-pair/none"), std::string::npos);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_NE(read_file(std::string(dir) + "/bench.svg").find("<svg"), std::string::npos);
  }
  EXPECT_EQ(system((std::string("rm -rf ") + dir).c_str()), 0);
}

}  // namespace
}  // namespace fabq::tools::bench
