// apps/dsv4/main.cpp — the dsv4 binary: subcommand dispatch and process-wide flags.
#include <cstdio>
#include <string>

#include "base/flags.h"
#include "base/log.h"
#include "dsv4/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"dsv4 — DeepSeek V4 Flash inference engine and server"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--threads, --simd, ...) may also follow the subcommand
  app.set_version_flag("--version", "dsv4 0.1.0");
  // Process-wide flags from the registry (base/flags.cpp); each also reads its env alias.
  for (const auto& spec : dsv4::flag_specs()) {
    app.add_option_function<std::string>(
           "--" + std::string(spec.name),
           [name = spec.name](const std::string& v) { (void)dsv4::set_flag(name, v); }, std::string(spec.help))
        ->envname(std::string(spec.env_alias));
  }
  // Runs after the flags above are parsed and before any command's callback: --log-level (or
  // DSV4_LOG_LEVEL) sets the verbosity of everything the command logs; a bad value is a usage error.
  app.parse_complete_callback([] {
    const auto level = dsv4::log_level_from_name(dsv4::flag_value("log-level"));
    if (!level.ok()) throw CLI::ValidationError("--log-level", level.status().message());
    dsv4::set_log_level(*level);
  });
  int exit_code = 0;
  dsv4::app::add_inspect_command(app, exit_code);
  dsv4::app::add_convert_command(app, exit_code);
  dsv4::app::add_synth_command(app, exit_code);
  dsv4::app::add_tokenize_commands(app, exit_code);
  dsv4::app::add_logits_commands(app, exit_code);
  dsv4::app::add_bench_command(app, exit_code);
  dsv4::app::add_render_command(app, exit_code);
  dsv4::app::add_serve_command(app, exit_code);
  dsv4::app::add_chat_command(app, exit_code);
  dsv4::app::add_reference_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
