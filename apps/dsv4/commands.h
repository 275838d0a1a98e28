// apps/dsv4/commands.h — every subcommand registers itself on the CLI11 app here.
//
// Each add_*_command adds one subcommand (with its --help) whose callback stores the process exit
// code in `exit_code`. Commands print results on stdout and errors on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace dsv4::app {

void add_inspect_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_synth_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);
void add_tokenize_commands(CLI::App& app, int& exit_code);  // tokenize, detokenize
void add_logits_commands(CLI::App& app, int& exit_code);    // logits, generate
void add_render_command(CLI::App& app, int& exit_code);     // render (chat prompt)
void add_serve_command(CLI::App& app, int& exit_code);      // serve (HTTP server)
void add_chat_command(CLI::App& app, int& exit_code);       // chat (interactive REPL)
void add_reference_command(CLI::App& app, int& exit_code);  // reference (this CLI as Markdown)

// Every subcommand of `app` and its options, plus the registry's global flags, as Markdown (README.md).
std::string command_reference_markdown(const CLI::App& app);

struct EngineLoadArgs;
// -m, --ctx, --prefill-chunk, --checkpoint-interval, --max-checkpoints, --timing (serve and chat).
void add_engine_options(CLI::App* cmd, EngineLoadArgs& e);

}  // namespace dsv4::app
