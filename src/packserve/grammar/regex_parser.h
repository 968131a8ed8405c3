// regex_parser.h: the syntax tree of a regex (regex.h's dialect) and its parser. Internal to
// the grammar library: regex_compile.cc turns the tree into an NFA.
// Invariants: kCodePoints sets are normalized (utf8_ranges.h); kRepeat has one child and
// 0 <= min_count <= max_count <= kMaxRepeatCount when bounded; tree depth is bounded by
// 2 * kMaxGroupDepth + 4, so recursion over it is safe.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"
#include "packserve/grammar/utf8_ranges.h"

namespace packserve::grammar {

struct RegexNode {
  enum class Kind : uint8_t {
    kEmpty,        // matches the empty string
    kCodePoints,   // one code point of `code_points`, as UTF-8
    kBytes,        // one byte in [byte_lo, byte_hi] (choice literals)
    kConcat,       // children in order
    kAlternation,  // any one child
    kRepeat,       // children[0] repeated min_count..max_count times
  };
  Kind kind = Kind::kEmpty;
  CodePointSet code_points;
  uint8_t byte_lo = 0;
  uint8_t byte_hi = 0;
  std::vector<RegexNode> children;
  int32_t min_count = 0;
  std::optional<int32_t> max_count;  // nullopt: unbounded
};

// Parses the whole pattern. Errors as regex.h documents ("regex: position P: ...").
Result<RegexNode> parse_regex(std::string_view pattern);

}  // namespace packserve::grammar
