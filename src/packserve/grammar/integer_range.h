// integer_range.h: the regex (regex.h's dialect) of the JSON integers in a range, for the
// integer minimum / maximum of json_schema.cc. Decimal digit ranges, nothing to compute at
// match time: [lo, hi] is split by digit count, then each part where its ends' leading digits
// differ, so 20..314 becomes (?:[2-9][0-9]|[1-2][0-9]{2}|30[0-9]|31[0-4]); negative integers
// are "-" and a range of magnitudes (never "-0"). Only the canonical spelling of an integer
// matches: no leading zero, no "+", no fraction or exponent.
// Internal to the schema compiler: json_schema.cc is its one caller.
// Errors: none. Preconditions, which the caller checks on the schema's bounds first: lo <= hi
// when both are set, and |lo|, |hi| <= kMaxIntegerBound.
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

}  // namespace packserve::grammar::detail
