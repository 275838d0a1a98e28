// base/flags.h — the one registry of process-wide settings.
//
// Every setting is declared once in flags.cpp (name, default, help, optional env alias). Apps fill
// the registry from the command line (CLI11) and the environment once at start-up, then pass typed
// values to rooms as arguments. No other file reads the environment (CI greps for getenv).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4 {

struct FlagSpec {
  std::string_view name;       // "threads": also the long option --threads
  std::string_view env_alias;  // "DSV4_THREADS", or empty
  std::string_view default_value;
  std::string_view help;
};

std::span<const FlagSpec> flag_specs();

// Current value: set_flag() value, else the env alias if set, else the default.
std::string flag_value(std::string_view name);
Status set_flag(std::string_view name, std::string value);
Result<int64_t> flag_int(std::string_view name);

// Markdown table of every flag: the "Global options" of README.md's command reference (`dsv4 reference`).
std::string flags_markdown();

}  // namespace dsv4
