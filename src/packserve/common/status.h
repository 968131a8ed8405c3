// status.h: Status and Result<T>, the error contract of every packserve module.
//
// Four kinds of failure (STYLE.md §5): bad input -> kInvalidArgument with nothing changed;
// out of resources -> kResourceExhausted; CUDA or I/O failure -> kInternal / kNotFound;
// a broken invariant (our bug) -> PS_CHECK aborts with the values. No exceptions cross a
// module boundary; libraries that throw are wrapped where they are called.
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace packserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kInternal,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: kv_page_indptr[3] = 17 < kv_page_indptr[2] = 20: ..."
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status not_found(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status resource_exhausted(std::string message) {
  return Status(StatusCode::kResourceExhausted, std::move(message));
}
inline Status failed_precondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
inline Status unimplemented(std::string message) {
  return Status(StatusCode::kUnimplemented, std::move(message));
}
inline Status internal_error(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

// Result<T>: a T or a non-ok Status (absl::StatusOr in spirit).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = internal_error("Result constructed from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace detail {
// Streams the values of a failed PS_CHECK, then aborts in its destructor.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename V>
  CheckFailure& operator<<(const V& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};
}  // namespace detail

}  // namespace packserve

#define PS_STATUS_CONCAT_INNER(a, b) a##b
#define PS_STATUS_CONCAT(a, b) PS_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define PS_RETURN_IF_ERROR(expr)                                 \
  do {                                                           \
    ::packserve::Status ps_status_tmp_ = (expr);                 \
    if (!ps_status_tmp_.ok()) return ps_status_tmp_;             \
  } while (0)

// `PS_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its Status.
#define PS_ASSIGN_OR_RETURN(lhs, expr) \
  PS_ASSIGN_OR_RETURN_IMPL(PS_STATUS_CONCAT(ps_result_, __LINE__), lhs, expr)
#define PS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// Broken invariant = our bug: abort with the values that broke it. Never for bad input.
#define PS_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::packserve::detail::CheckFailure(__FILE__, __LINE__, #cond)
