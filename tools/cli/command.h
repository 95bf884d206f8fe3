// The `deepinfer` CLI's subcommand registry: each *_command.cpp defines one Command and registers
// it with a static CommandRegistration, so adding a subcommand touches only its own file.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace deepinfer::cli {

struct Command {
  std::string name;
  std::string summary;  // one line for `deepinfer --help`
  std::function<int(const std::vector<std::string>& args)> run;  // args after the command name
};

std::vector<Command>& command_registry();

struct CommandRegistration {
  explicit CommandRegistration(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace deepinfer::cli
