// integer_range.cc: see integer_range.h. Magnitudes (no sign) come from magnitude_range, one
// digit count at a time, and each same-length [lo, hi] from same_length_range's recursion on
// the leading digit.
#include "packserve/grammar/integer_range.h"

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/grammar/json_schema_internal.h"

namespace packserve::grammar::detail {
namespace {

constexpr std::string_view kInteger = "-?(?:0|[1-9][0-9]*)";

std::string digit_class(char lo, char hi) {
  if (lo == hi) return std::string(1, lo);
  if (lo == '0' && hi == '9') return "[0-9]";
  return std::string("[") + lo + "-" + hi + "]";
}

// Alternatives matching the decimal strings in [lo, hi] (same length, lo <= hi), after `head`.
void same_length_range(const std::string& lo, const std::string& hi, const std::string& head,
                       std::vector<std::string>& out) {
  const std::size_t n = lo.size();
  if (n == 0) {
    out.push_back(head);
    return;
  }
  if (lo[0] == hi[0]) {
    same_length_range(lo.substr(1), hi.substr(1), head + lo[0], out);
    return;
  }
  const std::string lo_rest = lo.substr(1);
  const std::string hi_rest = hi.substr(1);
  const bool lo_rest_min = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_rest_max = hi_rest.find_first_not_of('9') == std::string::npos;
  const char mid_lo = lo_rest_min ? lo[0] : static_cast<char>(lo[0] + 1);
  const char mid_hi = hi_rest_max ? hi[0] : static_cast<char>(hi[0] - 1);
  if (!lo_rest_min) same_length_range(lo_rest, std::string(n - 1, '9'), head + lo[0], out);
  if (mid_lo <= mid_hi) {
    out.push_back(head + digit_class(mid_lo, mid_hi) + repeat("[0-9]", n - 1, n - 1));
  }
  if (!hi_rest_max) same_length_range(std::string(n - 1, '0'), hi_rest, head + hi[0], out);
}

uint64_t pow10(int exponent) {
  uint64_t p = 1;
  for (int i = 0; i < exponent; ++i) p *= 10;
  return p;
}

// Alternatives matching the canonical decimals (no sign, no leading zero) in [lo, hi].
std::vector<std::string> magnitude_range(uint64_t lo, std::optional<uint64_t> hi) {
  const int lo_digits = static_cast<int>(std::to_string(lo).size());
  if (!hi) {
    if (lo == 0) return {"0", "[1-9][0-9]*"};
    // Numbers with more digits than lo are all in; a power of ten needs nothing else.
    std::string longer = repeat("[1-9]", 1, 1) + repeat("[0-9]", lo_digits, std::nullopt);
    if (lo == pow10(lo_digits - 1)) return {"[1-9]" + repeat("[0-9]", lo_digits - 1, std::nullopt)};
    std::vector<std::string> out = magnitude_range(lo, pow10(lo_digits) - 1);
    out.push_back(longer);
    return out;
  }
  std::vector<std::string> out;
  const int hi_digits = static_cast<int>(std::to_string(*hi).size());
  for (int n = lo_digits; n <= hi_digits; ++n) {
    const uint64_t first = std::max(lo, n == 1 ? 0 : pow10(n - 1));
    const uint64_t last = std::min(*hi, pow10(n) - 1);
    same_length_range(std::to_string(first), std::to_string(last), "", out);
  }
  return out;
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (!lo && !hi) return std::string(kInteger);
  std::vector<std::string> alternatives;
  if (!lo || *lo < 0) {
    const uint64_t mag_lo = (hi && *hi < 0) ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> mag_hi;
    if (lo) mag_hi = static_cast<uint64_t>(-*lo);
    alternatives.push_back("-" + alternation(magnitude_range(mag_lo, mag_hi)));
  }
  if (!hi || *hi >= 0) {
    std::optional<uint64_t> mag_hi;
    if (hi) mag_hi = static_cast<uint64_t>(*hi);
    for (auto& a : magnitude_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, mag_hi)) {
      alternatives.push_back(std::move(a));
    }
  }
  return alternation(std::move(alternatives));
}

}  // namespace packserve::grammar::detail
