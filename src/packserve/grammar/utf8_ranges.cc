// utf8_ranges.cc: see utf8_ranges.h.
#include "packserve/grammar/utf8_ranges.h"

#include <algorithm>
#include <string>

#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar {
namespace {

constexpr char32_t kSurrogateLo = 0xD800;
constexpr char32_t kSurrogateHi = 0xDFFF;

// Largest code point encoded in n bytes (n = 1..3).
constexpr char32_t max_in_length(int n) { return n == 1 ? 0x7F : n == 2 ? 0x7FF : 0xFFFF; }

int encode(char32_t cp, uint8_t out[4]) {
  std::string s;
  tokenizer::append_utf8(cp, s);
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<uint8_t>(s[i]);
  return static_cast<int>(s.size());
}

// Appends the sequences of [lo, hi], a range without surrogates.
void split_range(char32_t lo, char32_t hi, std::vector<Utf8Sequence>& out) {
  for (int n = 1; n <= 3; ++n) {
    const char32_t max = max_in_length(n);
    if (lo <= max && max < hi) {
      split_range(lo, max, out);
      split_range(max + 1, hi, out);
      return;
    }
  }
  // Now lo and hi encode to the same length; split until each byte position is independent.
  for (int i = 1; i < 4; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_range(lo, lo | m, out);
        split_range((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_range(lo, (hi & ~m) - 1, out);
        split_range(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t lo_bytes[4];
  uint8_t hi_bytes[4];
  const int n = encode(lo, lo_bytes);
  encode(hi, hi_bytes);
  Utf8Sequence seq;
  seq.num_ranges = n;
  for (int i = 0; i < n; ++i) seq.ranges[i] = {lo_bytes[i], hi_bytes[i]};
  out.push_back(seq);
}

}  // namespace

CodePointSet normalize_code_points(CodePointSet ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.lo < b.lo; });
  CodePointSet merged;
  for (const CodePointRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  CodePointSet out;
  for (const CodePointRange& r : merged) {
    if (r.hi < kSurrogateLo || r.lo > kSurrogateHi) {
      out.push_back(r);
      continue;
    }
    if (r.lo < kSurrogateLo) out.push_back({r.lo, kSurrogateLo - 1});
    if (r.hi > kSurrogateHi) out.push_back({kSurrogateHi + 1, r.hi});
  }
  return out;
}

CodePointSet complement_code_points(const CodePointSet& set) {
  CodePointSet out;
  char32_t next = 0;
  for (const CodePointRange& r : set) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize_code_points(std::move(out));
}

std::vector<Utf8Sequence> utf8_sequences(const CodePointSet& set) {
  std::vector<Utf8Sequence> out;
  for (const CodePointRange& r : set) split_range(r.lo, r.hi, out);
  return out;
}

}  // namespace packserve::grammar
