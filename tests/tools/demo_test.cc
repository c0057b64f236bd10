// `fabq demo`: "a server and a client, in two processes, connected over 127.0.0.1 through
// libfabric ... Each line says when it happened and which side speaks." Run as a user runs it
// (scripts/demo: `fabq demo`, no FI_PROVIDER_PATH, no FI_PROVIDER), its output read line by
// line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tool_run.h"

namespace {

using fabq::tool_test::ToolRun;

// The demo finds the provider itself (FABQ_PROV_DIR) and sets FI_PROVIDER from --provider; a
// developer's environment must not decide for it. It runs under `timeout` (coreutils), so that
// a hang fails instead of blocking.
ToolRun run_demo(const std::string& args) {
  unsetenv("FI_PROVIDER_PATH");
  unsetenv("FI_PROVIDER");
  return fabq::tool_test::run_tool("demo" + (args.empty() ? "" : " " + args), "timeout 60");
}

// "  0.677  server  fi_send ..." : seconds since the start, who speaks, what happened.
struct Line {
  double t = 0;
  std::string who;
  std::string text;
};

std::vector<Line> stamped_lines(const std::string& out) {
  std::vector<Line> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) {
    double t;
    char who[16];
    int n = 0;
    if (std::sscanf(l.c_str(), " %lf %15s %n", &t, who, &n) != 2 || n == 0) continue;
    lines.push_back({t, who, l.substr(static_cast<size_t>(n))});
  }
  return lines;
}

class Transcript {
 public:
  explicit Transcript(const std::string& out) : lines_(stamped_lines(out)) {}

  // The index of the first line `who` says that contains `text`, or -1.
  int find(const std::string& who, const std::string& text) const {
    for (size_t i = 0; i < lines_.size(); ++i) {
      if (lines_[i].who == who && lines_[i].text.find(text) != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  bool has(const std::string& who, const std::string& text) const { return find(who, text) >= 0; }

  // Each process stamps its lines from one monotonic clock: a side's times never go back.
  bool each_side_in_time_order() const {
    std::map<std::string, double> last;
    for (const Line& l : lines_) {
      if (l.t < last[l.who]) return false;
      last[l.who] = l.t;
    }
    return !lines_.empty();
  }

 private:
  std::vector<Line> lines_;
};

// Step 2, on any provider: the connect data reaches the server with FI_CONNREQ, the accept data
// the client with FI_CONNECTED, in the order cause and effect require.
void ExpectConnectionWithData(const Transcript& t, const std::string& out) {
  const int connect = t.find("client", "fi_connect to 127.0.0.1:");
  const int connreq = t.find("server", "FI_CONNREQ on the passive endpoint from 127.0.0.1:");
  const int accept = t.find("server", "fi_accept with accept data \"hello from server\"");
  const int client_connected = t.find("client", "FI_CONNECTED on the client endpoint");
  ASSERT_GE(connect, 0) << out;
  ASSERT_GE(connreq, 0) << out;
  ASSERT_GE(accept, 0) << out;
  ASSERT_GE(client_connected, 0) << out;
  EXPECT_TRUE(t.has("client", "connect data \"hello from client\" (17 bytes)")) << out;
  EXPECT_TRUE(t.has("server", "connect data \"hello from client\" (17 bytes)")) << out;
  EXPECT_TRUE(t.has("client", "accept data \"hello from server\" (17 bytes)")) << out;
  EXPECT_TRUE(t.has("server", "FI_CONNECTED on the server endpoint")) << out;
  EXPECT_LT(connect, connreq);
  EXPECT_LT(connreq, accept);
  EXPECT_LT(accept, client_connected);
}

// Step 3: every message arrives with the flags, length, tag and data it was sent with.
void ExpectMessagesBothWays(const Transcript& t, const std::string& out, bool tagged) {
  EXPECT_TRUE(t.has("server", "completion FI_RECV|FI_MSG: fi_recv #1, len 15, \"ping by fi_send\""))
      << out;
  EXPECT_TRUE(t.has("client", "completion FI_RECV|FI_MSG: fi_recv #1, len 15, \"pong by fi_send\""))
      << out;
  EXPECT_TRUE(t.has("client", "completion FI_SEND|FI_MSG: fi_send done")) << out;
  EXPECT_TRUE(t.has("server", "completion FI_SEND|FI_MSG: fi_send done")) << out;
  EXPECT_TRUE(t.has("server",
                    "completion FI_RECV|FI_MSG|FI_REMOTE_CQ_DATA: fi_recv #2, len 19, data "
                    "0xc0ffee, \"ping by fi_senddata\""))
      << out;
  EXPECT_TRUE(t.has("client",
                    "completion FI_RECV|FI_MSG|FI_REMOTE_CQ_DATA: fi_recv #2, len 19, data "
                    "0xfeed, \"pong by fi_senddata\""))
      << out;
  if (!tagged) return;
  EXPECT_TRUE(t.has("server",
                    "completion FI_RECV|FI_TAGGED: fi_trecv (tag 0xfab1), len 16, tag 0xfab1, "
                    "\"ping by fi_tsend\""))
      << out;
  EXPECT_TRUE(t.has("client",
                    "completion FI_RECV|FI_TAGGED: fi_trecv (tag 0xfab2), len 16, tag 0xfab2, "
                    "\"pong by fi_tsend\""))
      << out;
  EXPECT_TRUE(t.has("client", "completion FI_SEND|FI_TAGGED: fi_tsend done")) << out;
}

// Step 5: the client's fi_shutdown is the server's FI_SHUTDOWN; both close everything.
void ExpectOrderlyShutdown(const Transcript& t, const std::string& out) {
  const int shutdown = t.find("client", "fi_shutdown(endpoint): the client ends the connection");
  const int seen = t.find("server", "fi_eq_sread -> FI_SHUTDOWN on the server endpoint");
  ASSERT_GE(shutdown, 0) << out;
  ASSERT_GE(seen, 0) << out;
  EXPECT_LT(shutdown, seen);
  EXPECT_TRUE(t.has("server", "closed the endpoint, passive endpoint, CQ, EQ, domain and fabric"))
      << out;
  EXPECT_TRUE(t.has("client", "closed the endpoint, CQ, EQ, domain and fabric")) << out;
  EXPECT_TRUE(t.has("demo", "done: server and client exited 0")) << out;
}

TEST(FabqDemo, ServerAndClientTalkThroughFabqAndSeeEachInjectedFault) {
  const ToolRun r = run_demo("");
  // Until fabq's TCP transport lands on main, fabq has no passive endpoints: the demo says so
  // and fails, which is right, and there is nothing more to check. Once it lands this line
  // disappears and the test runs in full.
  if (r.out.find("FAILED: fi_passive_ep: -FI_ENOSYS") != std::string::npos) {
    GTEST_SKIP() << "fabq has no transport yet (fi_passive_ep is -FI_ENOSYS):\n" << r.out;
  }
  EXPECT_EQ(r.status, 0) << r.out;
  const Transcript t(r.out);
  EXPECT_TRUE(t.each_side_in_time_order()) << r.out;
  EXPECT_TRUE(t.has("demo", "FI_PROVIDER=fabq FI_PROVIDER_PATH=" FABQ_PROV_DIR)) << r.out;

  // 1. getinfo and listen
  EXPECT_TRUE(t.has("server",
                    "FI_SOURCE, FI_EP_MSG, FI_MSG|FI_TAGGED) -> provider fabq, fabric "
                    "127.0.0.0/8, domain lo"))
      << r.out;
  EXPECT_TRUE(t.has("client", "FI_EP_MSG, FI_MSG|FI_TAGGED) -> provider fabq")) << r.out;
  EXPECT_TRUE(t.has("server", "fi_listen: listening on 127.0.0.1:")) << r.out;
  ExpectConnectionWithData(t, r.out);
  ExpectMessagesBothWays(t, r.out, /*tagged=*/true);

  // 4. A receive fails: -FI_EAVAIL, then the error entry. The endpoint fails: the EQ's error
  // entry, the channel's event (acknowledged), the posted receive failed, a new post refused.
  EXPECT_TRUE(t.has("server", "inject(\"error=FI_EIO,on=ep:server\") -> 0")) << r.out;
  EXPECT_TRUE(t.has("server", "fi_cq_read -> -FI_EAVAIL")) << r.out;
  EXPECT_TRUE(t.has("server", "fi_cq_readerr -> fi_recv #3, flags FI_RECV|FI_MSG, err FI_EIO"))
      << r.out;
  EXPECT_TRUE(t.has("server", "inject(\"event=ep_fatal,on=ep:server\") -> 0")) << r.out;
  EXPECT_TRUE(t.has("server", "fi_eq_sread -> -FI_EAVAIL")) << r.out;
  EXPECT_TRUE(t.has("server",
                    "fi_eq_readerr -> fid = the server endpoint, err FI_EIO (Input/output "
                    "error), prov_errno 0x1005 (FI_FABQ_EVENT_EP_FATAL)"))
      << r.out;
  EXPECT_TRUE(t.has("server", "fi_eq_strerror(prov_errno) -> \"FI_FABQ_EVENT_EP_FATAL")) << r.out;
  EXPECT_TRUE(t.has("server", "get_event -> FI_FABQ_EVENT_EP_FATAL on the server endpoint"))
      << r.out;
  EXPECT_TRUE(t.has("server", "ack_event -> 0")) << r.out;
  EXPECT_TRUE(t.has("server",
                    "fi_cq_readerr -> fi_recv #4, flags FI_RECV|FI_MSG, err FI_EIO (Input/output "
                    "error), prov_errno 0x1005 (FI_FABQ_EVENT_EP_FATAL)"))
      << r.out;
  EXPECT_TRUE(t.has("server", "fi_recv -> -FI_EOPBADSTATE")) << r.out;
  EXPECT_LT(t.find("demo", "== 4."), t.find("server", "inject(")) << r.out;
  EXPECT_LT(t.find("server", "fi_recv -> -FI_EOPBADSTATE"), t.find("demo", "== 5.")) << r.out;

  ExpectOrderlyShutdown(t, r.out);
}

TEST(FabqDemo, WithTheTcpProviderTheSameApplicationRunsAndTheFaultStepIsSkipped) {
  const ToolRun r = run_demo("--provider tcp");
  EXPECT_EQ(r.status, 0) << r.out;
  const Transcript t(r.out);
  EXPECT_TRUE(t.each_side_in_time_order()) << r.out;
  EXPECT_TRUE(t.has("server", "-> provider tcp")) << r.out;
  EXPECT_TRUE(t.has("server", "fi_listen: listening on 127.0.0.1:")) << r.out;
  ExpectConnectionWithData(t, r.out);
  // libfabric 1.17's tcp has no FI_TAGGED on FI_EP_MSG endpoints; later ones may.
  const bool tagged = !t.has("server", "tcp has no tagged messages on FI_EP_MSG endpoints");
  ExpectMessagesBothWays(t, r.out, tagged);
  EXPECT_TRUE(t.has("server", "skipped: fault injection is fabq's extension")) << r.out;
  EXPECT_FALSE(t.has("server", "inject(")) << r.out;
  ExpectOrderlyShutdown(t, r.out);
}

TEST(FabqDemo, TheStepsComeInOrderEachUnderItsHeading) {
  const ToolRun r = run_demo("--provider tcp");
  ASSERT_EQ(r.status, 0) << r.out;
  const Transcript t(r.out);
  int previous = -1;
  for (const char* heading : {"== 1.", "== 2.", "== 3.", "== 4.", "== 5."}) {
    const int at = t.find("demo", heading);
    EXPECT_GT(at, previous) << heading << "\n" << r.out;
    previous = at;
  }
  // The lines of a step come after its heading, whichever side speaks.
  EXPECT_LT(t.find("demo", "== 2."), t.find("client", "fi_connect")) << r.out;
  EXPECT_LT(t.find("demo", "== 3."), t.find("client", "fi_send")) << r.out;
  EXPECT_LT(t.find("server", "FI_CONNECTED"), t.find("demo", "== 3.")) << r.out;
  EXPECT_LT(t.find("demo", "== 5."), t.find("client", "fi_shutdown")) << r.out;
}

TEST(FabqDemo, AFailureSaysWhatFailedOnBothSidesAndExitsNonZero) {
  const ToolRun r = run_demo("--provider no-such-provider");
  EXPECT_EQ(r.status, 1) << r.out;
  const Transcript t(r.out);
  EXPECT_TRUE(t.has("server", "FAILED: fi_getinfo(")) << r.out;
  EXPECT_TRUE(t.has("client", "FAILED: waiting for the server's port: the server stopped"))
      << r.out;
  EXPECT_TRUE(t.has("demo", "the demo failed")) << r.out;
}

TEST(FabqDemo, BadArgumentsAreRefused) {
  EXPECT_EQ(run_demo("--provider").status, 2);
  EXPECT_EQ(run_demo("--port 0").status, 2);
  EXPECT_EQ(run_demo("--port http").status, 2);
  EXPECT_EQ(run_demo("--frobnicate").status, 2);
}

TEST(FabqDemo, CoreStillShowsTheEventAndCompletionQueueEngine) {
  const ToolRun r = run_demo("--core");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Every step behaved as fi_eq(3) and fi_cq(3) describe."), std::string::npos)
      << r.out;
}

}  // namespace
