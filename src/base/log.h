// base/log.h — leveled logging to stderr (never stdout: stdout belongs to command output).
//
//   log_info("loaded %s: %d tensors", path.c_str(), n);
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv4 {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
// "error", "warn", "info" or "debug" (the --log-level / DSV4_LOG_LEVEL values); anything else is an error.
Result<LogLevel> log_level_from_name(std::string_view name);
// Tests can capture log lines; nullptr restores stderr.
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);

void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) ::dsv4::log_message(::dsv4::LogLevel::kError, __VA_ARGS__)
#define log_warn(...) ::dsv4::log_message(::dsv4::LogLevel::kWarn, __VA_ARGS__)
#define log_info(...) ::dsv4::log_message(::dsv4::LogLevel::kInfo, __VA_ARGS__)
#define log_debug(...) ::dsv4::log_message(::dsv4::LogLevel::kDebug, __VA_ARGS__)

}  // namespace dsv4
