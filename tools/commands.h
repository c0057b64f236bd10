// Subcommands of the fabq tool. Each takes the arguments after the tool's name (argv[0] is
// the subcommand) and returns the process exit status.
#pragma once

namespace fabq::tools {

int run_demo(int argc, char** argv);
// `fabq demo --core`: the core EQ/CQ engine on its own (tools/demo_core.cc).
int run_core_demo();
int run_bench(int argc, char** argv);
int run_events(int argc, char** argv);

}  // namespace fabq::tools
