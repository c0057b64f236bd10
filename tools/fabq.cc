// fabq: the command-line tool. Subcommands grow with the project; today: demo, bench, events.
#include <cstdio>
#include <cstring>

#include "fabq/version.h"
#include "tools/commands.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: fabq <command>\n"
               "\n"
               "commands:\n"
               "  demo      a server and a client talking through libfabric and fabq (--help)\n"
               "  bench     benchmark fabq against libfabric's own providers (--help)\n"
               "  events    print a domain's asynchronous events as they arrive (--help)\n"
               "  version   print the fabq version\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* cmd = argv[1];
  if (std::strcmp(cmd, "demo") == 0) return fabq::tools::run_demo(argc - 1, argv + 1);
  if (std::strcmp(cmd, "bench") == 0) return fabq::tools::run_bench(argc - 1, argv + 1);
  if (std::strcmp(cmd, "events") == 0) return fabq::tools::run_events(argc - 1, argv + 1);
  if (std::strcmp(cmd, "version") == 0) {
    std::printf("fabq %s\n", FABQ_VERSION_STRING);
    return 0;
  }
  if (std::strcmp(cmd, "-h") == 0 || std::strcmp(cmd, "--help") == 0 ||
      std::strcmp(cmd, "help") == 0) {
    usage(stdout);
    return 0;
  }
  std::fprintf(stderr, "fabq: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
