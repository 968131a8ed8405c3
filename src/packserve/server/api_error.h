// api_error.h: an OpenAI-style error, the one shape every failed HTTP request answers with:
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
// `status` is the HTTP status. The types used (docs/server.md "Errors"):
//   400 invalid_request_error, 401 authentication_error, 404 not_found_error,
//   413 invalid_request_error (code request_too_large), 429 rate_limit_error,
//   500 server_error, 503 service_unavailable_error.
// Thread-safety: a value.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace packserve::server {

struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::optional<std::string> param;  // the offending request field, dotted/indexed
  std::optional<std::string> code;
};

inline ApiError bad_request(std::string message, std::optional<std::string> param = std::nullopt) {
  return ApiError{400, "invalid_request_error", std::move(message), std::move(param), std::nullopt};
}

// 404 model_not_found when a request's `model` is not the served model's name; nullopt when
// it is. Every route that takes a model checks it this way.
inline std::optional<ApiError> check_model(const std::string& model,
                                           const std::string& served_model_name) {
  if (model == served_model_name) return std::nullopt;
  return ApiError{404, "not_found_error",
                  "model: \"" + model + "\" is not served here; this server serves \"" +
                      served_model_name + "\"",
                  "model", "model_not_found"};
}

// The JSON body of `error` (compact, one line).
std::string error_body(const ApiError& error);

// A T or an ApiError (Result<T> carries a Status, which has no HTTP status or param).
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  ApiResult(ApiError error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

}  // namespace packserve::server
