// integer_range.h: the regex (regex.h's dialect) of the JSON integers, and of the JSON numbers,
// in a range, for the minimum / maximum of json_schema.cc. Decimal digit ranges, nothing to
// compute at match time: [lo, hi] is split by digit count, then each part where its ends'
// leading digits differ, so 20..314 becomes (?:[2-9][0-9]|[1-2][0-9]{2}|30[0-9]|31[0-4]);
// negative values are "-" and a range of magnitudes (never "-0"). Only the canonical spelling
// of an integer part matches: no leading zero, no "+". Integers have no fraction or exponent;
// numbers may have a fraction (trailing zeros allowed) and no exponent, the fraction's digits
// compared with the bounds' digit by digit (0.25 <= x < 3 is 0.2[5-9]..., 0.[3-9]..., [12]...).
// Internal to the schema compiler: json_schema.cc is its one caller.
// Errors: none. Preconditions, which the caller checks on the schema's bounds first: lo <= hi
// when both are set, and |lo|, |hi| <= kMaxIntegerBound (numbers: integer parts).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace packserve::grammar::detail {

// The largest |bound| integer_range takes; json_schema.cc refuses schema bounds past it.
inline constexpr int64_t kMaxIntegerBound = 1000000000000000000;  // 10^18

// The integers in [lo, hi] (nullopt: unbounded), lo <= hi, |bounds| <= kMaxIntegerBound.
// The result can be concatenated as is (an alternation is wrapped in (?:...)).
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// A finite decimal: sign, integer part (<= kMaxIntegerBound) and fraction digits without
// trailing zeros; zero is never negative.
struct Decimal {
  bool negative = false;
  uint64_t integer = 0;
  std::string fraction;
};

// <0, 0, >0 as a is below, equal to or above b.
int compare(const Decimal& a, const Decimal& b);

struct DecimalBound {
  Decimal value;
  bool inclusive = true;
};

// The JSON numbers without exponent in the range (nullopt end: unbounded), or nullopt when no
// number is in it. Concatenable as is.
std::optional<std::string> number_range(const std::optional<DecimalBound>& lo,
                                        const std::optional<DecimalBound>& hi);

}  // namespace packserve::grammar::detail
