// base/status.h — errors as values: Status and Result<T>.
//
// Library code never throws across room boundaries, never prints and never exits: it returns a
// Status (or a Result<T> holding either a value or a Status). Messages name the thing that was
// wrong (file, key, tensor) and what was expected, so callers can show them to users unchanged.
//
//   Result<int> parse(std::string_view s);
//   DSV4_ASSIGN_OR_RETURN(int v, parse(text));   // early-returns the Status on error
//   DSV4_RETURN_IF_ERROR(write_all(fd, buf));
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace dsv4 {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // caller passed something malformed (bad flag, bad JSON, bad shape)
  kNotFound,          // a named thing (file, key, tensor) does not exist
  kCorrupt,           // file contents violate the format (truncated, overlapping, bad type)
  kUnsupported,       // well-formed but not something we implement
  kOutOfRange,        // a number outside its allowed range
  kResourceExhausted, // allocation or size limit
  kIoError,           // the OS said no
  kCancelled,
  kInternal,          // a bug in dsv4
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: model.gguf: tensor 'x': offset 12 is not a multiple of alignment 32"
  std::string to_string() const;
  // Prefixes context: Status(...).with_context("model.gguf") → "model.gguf: <message>".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a T or a non-ok Status. Accessing value() of an error is a programming bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)

#define DSV4_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::dsv4::Status dsv4_status_ = (expr);           \
    if (!dsv4_status_.ok()) return dsv4_status_;    \
  } while (0)

#define DSV4_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define DSV4_ASSIGN_OR_RETURN(lhs, expr) \
  DSV4_ASSIGN_OR_RETURN_IMPL_(DSV4_CONCAT_(dsv4_result_, __LINE__), lhs, expr)

}  // namespace dsv4
