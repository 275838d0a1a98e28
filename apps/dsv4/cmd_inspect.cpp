// apps/dsv4/cmd_inspect.cpp — PLACEHOLDER (being written).
#include "dsv4/commands.h"

namespace dsv4::app {
void add_inspect_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
  cmd->callback([&exit_code] { exit_code = 1; });
}
}  // namespace dsv4::app
