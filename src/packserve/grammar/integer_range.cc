// integer_range.cc: see integer_range.h. Magnitudes (no sign) come from magnitude_range, one
// digit count at a time, and each same-length [lo, hi] from same_length_range's recursion on
// the leading digit. A number's magnitude is its integer part (a magnitude_range, or a bound's
// own integer part) and a fraction from FractionRange, a recursion on the fraction's digits
// that tracks whether the digits so far equal the lower and the upper bound's.
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

// The fractions (".digits", or none: 0) of a number whose integer part equals a bound's,
// compared digit by digit with the lower bound's fraction `lo` and the upper one's `hi` (no
// trailing zeros; a digit past the end is 0) while the digits so far equal theirs ("tight").
class FractionRange {
 public:
  FractionRange(std::string lo, bool lo_inclusive, std::string hi, bool hi_inclusive)
      : lo_(std::move(lo)), hi_(std::move(hi)), lo_in_(lo_inclusive), hi_in_(hi_inclusive) {}

  // The fraction suffix, nullopt when none is allowed.
  std::optional<std::string> suffix(bool tight_lo, bool tight_hi) const {
    if (!tight_lo && !tight_hi) return std::string(R"((?:\.[0-9]+)?)");
    std::optional<std::string> digits = branches(0, tight_lo, tight_hi);
    const bool end = may_end(0, tight_lo, tight_hi);
    if (!digits) return end ? std::optional<std::string>("") : std::nullopt;
    std::string s = "\\." + *digits;
    return end ? "(?:" + s + ")?" : s;
  }

 private:
  char lo_digit(std::size_t i) const { return i < lo_.size() ? lo_[i] : '0'; }
  char hi_digit(std::size_t i) const { return i < hi_.size() ? hi_[i] : '0'; }

  // Whether the fraction may end at digit i (the rest all zeros).
  bool may_end(std::size_t i, bool tight_lo, bool tight_hi) const {
    const bool lo_ok = !tight_lo || (i >= lo_.size() && lo_in_);  // lo's rest is nonzero
    const bool hi_ok = !tight_hi || i < hi_.size() || hi_in_;     // zeros are below hi's rest
    return lo_ok && hi_ok;
  }

  // The digits from i on (possibly none).
  std::optional<std::string> rest(std::size_t i, bool tight_lo, bool tight_hi) const {
    if (!tight_lo && !tight_hi) return std::string("[0-9]*");
    const bool lo_done = !tight_lo || i >= lo_.size();
    const bool hi_done = !tight_hi || i >= hi_.size();
    if (lo_done && hi_done) {  // the bounds' digits from here on are zeros
      if (tight_hi) {
        return tight_lo ? (lo_in_ && hi_in_ ? std::optional<std::string>("0*") : std::nullopt)
                        : (hi_in_ ? std::optional<std::string>("0*") : std::nullopt);
      }
      return std::string(lo_in_ ? "[0-9]*" : "[0-9]*[1-9][0-9]*");
    }
    std::optional<std::string> digits = branches(i, tight_lo, tight_hi);
    const bool end = may_end(i, tight_lo, tight_hi);
    if (!digits) return end ? std::optional<std::string>("") : std::nullopt;
    return end ? "(?:" + *digits + ")?" : *digits;
  }

  // Digit i and what may follow it, nullopt when nothing may. Neighbouring digits followed by
  // the same rest share one class: 0(?:\.[0-9]+)?, not 0(?:\.(?:0[0-9]*|[1-9][0-9]*))?.
  std::optional<std::string> branches(std::size_t i, bool tight_lo, bool tight_hi) const {
    const char lo = tight_lo ? lo_digit(i) : '0';
    const char hi = tight_hi ? hi_digit(i) : '9';
    struct Branch {
      char from, to;
      std::string rest;
    };
    std::vector<Branch> parts;  // in digit order
    const auto add = [&](char from, char to, bool next_lo, bool next_hi) {
      if (from > to) return;
      std::optional<std::string> r = rest(i + 1, next_lo, next_hi);
      if (!r) return;
      if (!parts.empty() && parts.back().rest == *r && parts.back().to + 1 == from) {
        parts.back().to = to;
      } else {
        parts.push_back({from, to, std::move(*r)});
      }
    };
    if (tight_lo && tight_hi && lo == hi) {
      add(lo, lo, true, true);
    } else {
      if (tight_lo) add(lo, lo, true, false);
      add(tight_lo ? static_cast<char>(lo + 1) : lo, tight_hi ? static_cast<char>(hi - 1) : hi,
          false, false);
      if (tight_hi) add(hi, hi, false, true);
    }
    if (parts.empty()) return std::nullopt;
    std::vector<std::string> out;
    for (const Branch& b : parts) out.push_back(digit_class(b.from, b.to) + b.rest);
    return alternation(std::move(out));
  }

  std::string lo_, hi_;
  bool lo_in_, hi_in_;
};

// The magnitudes (no sign) in the range from `lo` (>= 0) to `hi` (nullopt: unbounded),
// nullopt when none is.
std::optional<std::string> magnitude_decimals(const DecimalBound& lo,
                                              const std::optional<DecimalBound>& hi) {
  if (hi) {
    const int c = compare(lo.value, hi->value);
    if (c > 0 || (c == 0 && !(lo.inclusive && hi->inclusive))) return std::nullopt;
  }
  const FractionRange fractions(lo.value.fraction, lo.inclusive, hi ? hi->value.fraction : "",
                                hi && hi->inclusive);
  const uint64_t lo_int = lo.value.integer;
  const std::string lo_digits = std::to_string(lo_int);
  std::vector<std::string> out;
  if (hi && hi->value.integer == lo_int) {
    if (auto f = fractions.suffix(true, true)) out.push_back(lo_digits + *f);
    return out.empty() ? std::nullopt : std::optional<std::string>(alternation(std::move(out)));
  }
  if (auto f = fractions.suffix(true, false)) out.push_back(lo_digits + *f);
  std::optional<uint64_t> mid_hi;
  if (hi) mid_hi = hi->value.integer - 1;
  if (!mid_hi || *mid_hi >= lo_int + 1) {
    out.push_back(alternation(magnitude_range(lo_int + 1, mid_hi)) +
                  *fractions.suffix(false, false));
  }
  if (hi) {
    if (auto f = fractions.suffix(false, true))
      out.push_back(std::to_string(hi->value.integer) + *f);
  }
  if (out.empty()) return std::nullopt;
  return alternation(std::move(out));
}

}  // namespace

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = 0;
  if (a.integer != b.integer) {
    magnitude = a.integer < b.integer ? -1 : 1;
  } else if (a.fraction != b.fraction) {  // no trailing zeros: string order is value order
    magnitude = a.fraction < b.fraction ? -1 : 1;
  }
  return a.negative ? -magnitude : magnitude;
}

std::optional<std::string> number_range(const std::optional<DecimalBound>& lo,
                                        const std::optional<DecimalBound>& hi) {
  std::vector<std::string> alternatives;
  const auto negate = [](const DecimalBound& b) {
    DecimalBound m = b;
    m.value.negative = false;
    return m;
  };
  const Decimal zero;
  if (!lo || lo->value.negative) {  // x < 0: "-" and a magnitude in (0 or -hi, -lo]
    DecimalBound from{zero, false};
    if (hi && hi->value.negative) from = negate(*hi);
    std::optional<DecimalBound> to;
    if (lo) to = negate(*lo);
    if (auto m = magnitude_decimals(from, to)) alternatives.push_back("-" + *m);
  }
  if (!hi || !hi->value.negative) {  // x >= 0
    DecimalBound from{zero, true};
    if (lo && !lo->value.negative) from = *lo;
    if (auto m = magnitude_decimals(from, hi)) alternatives.push_back(*m);
  }
  if (alternatives.empty()) return std::nullopt;
  return alternation(std::move(alternatives));
}

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
