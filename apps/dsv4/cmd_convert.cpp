// apps/dsv4/cmd_convert.cpp — PLACEHOLDER (being written).
#include "dsv4/commands.h"

namespace dsv4::app {
void add_convert_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("convert", "Convert an official/HF DeepSeek V4 checkpoint to GGUF (not yet available)");
  cmd->callback([&exit_code] { exit_code = 1; });
}
}  // namespace dsv4::app
