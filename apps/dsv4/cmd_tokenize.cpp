// apps/dsv4/cmd_tokenize.cpp — PLACEHOLDER (being written).
#include "dsv4/commands.h"

namespace dsv4::app {
void add_tokenize_commands(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("tokenize", "Text to token ids (not yet available)");
  cmd->callback([&exit_code] { exit_code = 1; });
}
}  // namespace dsv4::app
