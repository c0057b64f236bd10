// Test support for tests/tools: runs the built `fabq` tool as a user runs it and collects
// what it prints (stdout and stderr) and its exit status. The caller's test binary defines
// FABQ_TOOL and FABQ_LSAN_SUPPRESSIONS (tests/tools/CMakeLists.txt).
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fabq::tool_test {

struct ToolRun {
  int status = -1;  // the exit status; -1 when the tool did not exit normally
  std::string out;
};

// `prefix` goes before the tool's path on the command line (e.g. "timeout 30").
inline ToolRun run_tool(const std::string& args, const std::string& prefix = "") {
  setenv("LSAN_OPTIONS", "suppressions=" FABQ_LSAN_SUPPRESSIONS, 1);
  const std::string cmd = prefix + (prefix.empty() ? "" : " ") + FABQ_TOOL + " " + args + " 2>&1";
  ToolRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace fabq::tool_test
