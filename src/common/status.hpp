// Status and Result<T>: how errors travel inside lithos.
//
// Nothing in the core throws. A function that can fail returns Status (no
// value) or Result<T> (a value or a Status). Exceptions are used only for
// fatal start-up errors in the CLI and daemon, at their top level.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace lithos {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed
  kNotFound,            // a named thing does not exist
  kOutOfRange,          // a value outside what the object can hold
  kFailedPrecondition,  // the system is not in a state where this works
  kUnavailable,         // a resource (GPU, driver, daemon) is not there
  kInternal,            // a bug in lithos
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value of type T or an error Status (never an ok Status).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).is_ok() && "Result built from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  const T& value() const& {
    assert(is_ok());
    return std::get<T>(v_);
  }
  T& value() & {
    assert(is_ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(is_ok());
    return std::get<T>(std::move(v_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace lithos

// Propagates a non-ok Status out of the enclosing function.
#define LITHOS_RETURN_IF_ERROR(expr)                    \
  do {                                                  \
    ::lithos::Status lithos_status_ = (expr);           \
    if (!lithos_status_.is_ok()) return lithos_status_; \
  } while (0)
