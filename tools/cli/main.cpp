// Entry point of the `deepinfer` command-line tool: dispatches to the registered subcommands.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "command.h"

namespace deepinfer::cli {
std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}
}  // namespace deepinfer::cli

static void print_help() {
  auto commands = deepinfer::cli::command_registry();
  std::sort(commands.begin(), commands.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::printf("usage: deepinfer <command> [options]\n\ncommands:\n");
  for (auto& c : commands) std::printf("  %-16s %s\n", c.name.c_str(), c.summary.c_str());
  std::printf("\n`deepinfer <command> --help` describes a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    print_help();
    return 2;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_help();
    return 0;
  }
  for (auto& c : deepinfer::cli::command_registry()) {
    if (c.name != name) continue;
    try {
      return c.run(std::vector<std::string>(argv + 2, argv + argc));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "deepinfer %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s' (see deepinfer --help)\n", name.c_str());
  return 2;
}
