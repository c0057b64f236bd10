// `fabq events`: "opens a domain and prints each asynchronous event as it arrives, one line
// with a timestamp, the kind and the object, and acknowledges it." Run as a user runs it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "tool_run.h"

namespace {

using fabq::tool_test::ToolRun;

// The tool runs under `timeout` (coreutils), so that a hang fails instead of blocking.
ToolRun run_tool(const std::string& args) {
  setenv("FI_PROVIDER_PATH", FABQ_PROV_DIR, 1);
  return fabq::tool_test::run_tool(args, "timeout 30");
}

TEST(FabqEvents, PrintsEachEventWithItsTimeKindAndObjectAndAcknowledgesIt) {
  const ToolRun r = run_tool(
      "events --domain lo --count 2 "
      "--faults 'event=port_err,ms=50; event=port_active,ms=100'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("watching domain lo"), std::string::npos) << r.out;
  // "2026-11-21T19:40:47.065036Z  FI_FABQ_EVENT_PORT_ERR    port 1 of lo"
  std::istringstream lines(r.out);
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("FI_FABQ_EVENT_PORT_ERR") == std::string::npos) continue;
    int y, mo, d, h, mi, sec, us;
    char z;
    const bool stamped = std::sscanf(line.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6d%c", &y, &mo, &d, &h,
                                     &mi, &sec, &us, &z) == 8 &&
                         z == 'Z';
    if (stamped && line.find("port 1 of lo") != std::string::npos) found = true;
  }
  EXPECT_TRUE(found) << r.out;
  EXPECT_NE(r.out.find("EQ error entry: err Network is down"), std::string::npos) << r.out;
  const size_t err = r.out.find("FI_FABQ_EVENT_PORT_ERR");
  const size_t active = r.out.find("FI_FABQ_EVENT_PORT_ACTIVE");
  ASSERT_NE(active, std::string::npos) << r.out;
  EXPECT_LT(err, active) << "in the order they happened";
  EXPECT_NE(r.out.find("2 events"), std::string::npos) << r.out;
}

TEST(FabqEvents, StopsAfterSecondsWhenNothingHappens) {
  const ToolRun r = run_tool("events --domain lo --seconds 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 events"), std::string::npos) << r.out;
}

TEST(FabqEvents, BadArgumentsAreRefused) {
  EXPECT_EQ(run_tool("events --count 0").status, 2);
  EXPECT_EQ(run_tool("events --frobnicate").status, 2);
  EXPECT_EQ(run_tool("events --domain lo --seconds 1 --faults 'event=nonsense'").status, 2);
  EXPECT_EQ(run_tool("events --domain no-such-interface --seconds 1").status, 1);
}

}  // namespace
