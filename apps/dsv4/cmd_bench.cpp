// apps/dsv4/cmd_bench.cpp — PLACEHOLDER (being written).
#include "dsv4/commands.h"

namespace dsv4::app {
void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks");
  cmd->callback([&exit_code] { exit_code = 1; });
}
}  // namespace dsv4::app
