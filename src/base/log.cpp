// base/log.cpp
#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace dsv4 {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
std::function<void(LogLevel, const std::string&)> g_sink;
const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}
}  // namespace

Result<LogLevel> log_level_from_name(std::string_view name) {
  for (LogLevel l : {LogLevel::kError, LogLevel::kWarn, LogLevel::kInfo, LogLevel::kDebug})
    if (name == level_tag(l)) return l;
  return invalid_argument("expected error, warn, info or debug, got '" + std::string(name) + "'");
}

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = std::move(sink);
}

void log_message(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) > g_level.load()) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink) {
    g_sink(level, buf);
  } else {
    std::fprintf(stderr, "dsv4 %s: %s\n", level_tag(level), buf);
  }
}

}  // namespace dsv4
