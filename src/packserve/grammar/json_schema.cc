// json_schema.cc: see json_schema.h. One recursive pass over the schema (class Compiler)
// builds each node's regex from its children's; every fragment it returns can be
// concatenated as is (a top-level alternation is wrapped in (?:...)). Helpers below it:
// integer ranges as digit-range regexes, and the rewrite of `pattern` into JSON-safe form.
#include "packserve/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "packserve/common/json_depth.h"
#include "packserve/grammar/regex.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kInteger = "-?(?:0|[1-9][0-9]*)";
constexpr std::string_view kFraction = R"((?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";
constexpr std::string_view kPositiveNumber =
    R"((?:[1-9][0-9]*(?:\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(?:[eE][+-]?[0-9]+)?)";
constexpr std::string_view kDate = "(?:[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]))";
constexpr std::string_view kTime =
    R"((?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\.[0-9]+)?)"
    R"((?:[Zz]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])))";
constexpr std::string_view kUuid =
    "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
constexpr int64_t kMaxIntegerBound = 1000000000000000000;  // 10^18

constexpr std::string_view kAnnotations[] = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "strict",  "discriminator"};
constexpr std::string_view kStringKeywords[] = {"minLength", "maxLength", "pattern", "format"};
constexpr std::string_view kNumberKeywords[] = {"minimum", "maximum", "exclusiveMinimum",
                                                "exclusiveMaximum"};
constexpr std::string_view kObjectKeywords[] = {"properties", "required", "additionalProperties"};
constexpr std::string_view kArrayKeywords[] = {"items", "prefixItems", "minItems", "maxItems"};
constexpr std::string_view kStructuralKeywords[] = {"type",  "enum",  "const", "anyOf",
                                                    "oneOf", "allOf", "$ref"};
constexpr std::string_view kTypes[] = {"string", "integer", "number", "boolean",
                                       "null",   "object",  "array"};

template <std::size_t N>
bool one_of(std::string_view s, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

// The JSON-Schema keywords a type reads ("integer" and "number" share theirs).
bool applies(std::string_view keyword, std::string_view type) {
  if (one_of(keyword, kStringKeywords)) return type == "string";
  if (one_of(keyword, kNumberKeywords)) return type == "integer" || type == "number";
  if (one_of(keyword, kObjectKeywords)) return type == "object";
  if (one_of(keyword, kArrayKeywords)) return type == "array";
  return false;
}

std::string child(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

std::string prefix(const std::string& pointer) {
  return "json_schema: " + (pointer.empty() ? std::string("(root)") : pointer) + ": ";
}
Status bad(const std::string& pointer, const std::string& what) {
  return invalid_argument(prefix(pointer) + what);
}
Status unsupported(const std::string& pointer, const std::string& what) {
  return unimplemented(prefix(pointer) + what);
}
Status no_keyword(const std::string& pointer, std::string_view keyword) {
  return unsupported(pointer, "keyword \"" + std::string(keyword) + "\" is not supported");
}

// Escapes the metacharacters of the dialect, so `text` matches itself.
std::string regex_literal(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::string_view("\\.[](){}|*+?^$").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string alternation(std::vector<std::string> alternatives) {
  std::vector<std::string> unique;
  for (auto& a : alternatives) {
    if (std::find(unique.begin(), unique.end(), a) == unique.end()) unique.push_back(std::move(a));
  }
  if (unique.size() == 1) return unique[0];
  std::string out = "(?:";
  for (std::size_t i = 0; i < unique.size(); ++i) out += (i ? "|" : "") + unique[i];
  return out + ")";
}

// `atom` (one regex atom) repeated min..max times (max nullopt: unbounded); "" when max == 0.
std::string repeat(const std::string& atom, int64_t min, std::optional<int64_t> max) {
  if (max && *max == 0) return "";
  if (!max) {
    if (min == 0) return atom + "*";
    if (min == 1) return atom + "+";
    return atom + "{" + std::to_string(min) + ",}";
  }
  if (min == *max) return min == 1 ? atom : atom + "{" + std::to_string(min) + "}";
  if (min == 0 && *max == 1) return atom + "?";
  return atom + "{" + std::to_string(min) + "," + std::to_string(*max) + "}";
}

// A count keyword (minLength, maxItems, ...): a non-negative integer (5.0 counts as 5).
Result<std::optional<int64_t>> get_count(const Json& schema, const char* keyword,
                                         const std::string& pointer) {
  auto it = schema.find(keyword);
  if (it == schema.end()) return std::optional<int64_t>();
  const Json& v = *it;
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      return unsupported(child(pointer, keyword), "count " + describe(v) + " is too large");
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }
  if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() < 9e18 &&
      std::floor(v.get<double>()) == v.get<double>()) {
    return std::optional<int64_t>(static_cast<int64_t>(v.get<double>()));
  }
  return bad(child(pointer, keyword), "expected a non-negative integer, got " + describe(v));
}

// r[i] == '{' starts a counted repetition {n}, {n,} or {n,m} with counts of at most 4 digits.
bool is_count(std::string_view r, std::size_t i) {
  const std::size_t close = r.find('}', i);
  if (close == std::string_view::npos) return false;
  const std::string_view body = r.substr(i + 1, close - i - 1);
  const std::size_t comma = body.find(',');
  const std::string_view low = body.substr(0, comma);
  const std::string_view high = comma == std::string_view::npos ? low : body.substr(comma + 1);
  auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 4 &&
           d.find_first_not_of("0123456789") == std::string_view::npos;
  };
  return digits(low) && (digits(high) || (comma != std::string_view::npos && high.empty()));
}

// A rough size of `regex` once the DFA builder expands its counted repetitions: a literal,
// escape or class counts 1, a group 1 + its content (all alternatives), `*` `+` `?` 1 more,
// and {n,m} repeats its atom m times ({n,}: n + 1). Saturates at 2^40.
uint64_t expanded_atoms(std::string_view r) {
  constexpr uint64_t kCap = uint64_t{1} << 40;
  struct Frame {
    uint64_t total = 0;
    uint64_t last = 0;  // the atom a quantifier would apply to
  };
  std::vector<Frame> stack(1);
  auto add_atom = [&](uint64_t cost) {
    stack.back().total = std::min(kCap, stack.back().total + cost);
    stack.back().last = cost;
  };
  std::size_t i = 0;
  while (i < r.size()) {
    const char c = r[i];
    if (c == '\\') {
      const char e = i + 1 < r.size() ? r[i + 1] : ' ';
      i += e == 'u' ? 6 : e == 'x' ? 4 : e == 'U' ? 10 : 2;
      add_atom(1);
    } else if (c == '[') {
      std::size_t j = i + 1;
      if (j < r.size() && r[j] == '^') ++j;
      if (j < r.size() && r[j] == ']') ++j;
      while (j < r.size() && r[j] != ']') j += r[j] == '\\' ? 2 : 1;
      i = j + 1;
      add_atom(1);
    } else if (c == '(') {
      stack.emplace_back();
      ++i;
      if (i < r.size() && r[i] == '?') {
        const std::size_t close = r.find_first_of(":>", i);
        i = close == std::string_view::npos ? r.size() : close + 1;
      }
    } else if (c == ')' && stack.size() > 1) {
      const uint64_t group = stack.back().total + 1;
      stack.pop_back();
      add_atom(group);
      ++i;
    } else if (c == '|') {
      stack.back().last = 0;
      ++i;
    } else if (c == '*' || c == '+' || c == '?') {
      stack.back().total = std::min(kCap, stack.back().total + 1);
      ++i;
    } else if (c == '{' && is_count(r, i)) {  // {n}, {n,} or {n,m} (n, m <= 4 digits)
      const std::size_t close = r.find('}', i);
      const std::string_view body = r.substr(i + 1, close - i - 1);
      const std::size_t comma = body.find(',');
      const std::string_view high = comma == std::string_view::npos ? body : body.substr(comma + 1);
      uint64_t times = 0;
      for (char d : high.empty() ? body.substr(0, comma) : high) times = times * 10 + (d - '0');
      if (high.empty()) ++times;
      Frame& top = stack.back();
      top.total = std::min(kCap, top.total + top.last * (times > 0 ? times - 1 : 0));
      i = close + 1;
    } else {
      add_atom(1);
      ++i;
    }
  }
  uint64_t total = 0;
  for (const Frame& f : stack) total = std::min(kCap, total + f.total);
  return total;
}

// Refuses `count` repetitions of `part` that the DFA builder would reject anyway, naming the
// keyword (at `pointer`) and its `value`.
Status check_repeat(const std::string& part, int64_t count, const std::string& pointer,
                    std::string_view keyword, int64_t value) {
  const std::string what = std::string(keyword) + " " + std::to_string(value) + " needs " +
                           std::to_string(count) + " repetitions";
  if (count > kMaxRepeatCount) {
    return unsupported(child(pointer, keyword),
                       what + ", over the limit of " + std::to_string(kMaxRepeatCount));
  }
  const uint64_t atoms = expanded_atoms(part);
  if (static_cast<uint64_t>(count) * atoms > kMaxRepeatAtoms) {
    return unsupported(child(pointer, keyword),
                       what + " of a " + std::to_string(atoms) + "-atom regex, over " +
                           std::to_string(kMaxRepeatAtoms) +
                           " atoms; lower it or simplify the repeated schema");
  }
  return ok_status();
}

bool matches_type(const Json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  return v.is_array();
}

// ---- integers in a range ------------------------------------------------------------------

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

// The integers in [lo, hi] (nullopt: unbounded), lo <= hi, |bounds| <= kMaxIntegerBound.
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

// ---- pattern ------------------------------------------------------------------------------

// Characters a JSON string must escape: '"', '\' and the controls.
bool json_special(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

// The regex of the JSON escape of special character c, as one atom.
std::string escaped_atom(uint32_t c) {
  switch (c) {
    case '"':
      return R"((?:\\"))";
    case '\\':
      return R"((?:\\\\))";
    case '\n':
      return R"((?:\\n))";
    case '\r':
      return R"((?:\\r))";
    case '\t':
      return R"((?:\\t))";
    case '\b':
      return R"((?:\\b))";
    case '\f':
      return R"((?:\\f))";
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      return std::string(R"((?:\\u00)") + kHex[c >> 4] + kHex[c & 15] + ")";
    }
  }
}

// One UTF-8 character at p[i]: its code point and byte count (0 when invalid).
std::pair<uint32_t, std::size_t> decode_utf8(std::string_view p, std::size_t i) {
  char32_t cp = 0;
  const std::size_t n = tokenizer::valid_sequence_length(p.substr(i), &cp);
  return {static_cast<uint32_t>(cp), n};
}

std::optional<uint32_t> parse_hex(std::string_view p, std::size_t at, std::size_t digits) {
  if (at + digits > p.size()) return std::nullopt;
  uint32_t v = 0;
  for (std::size_t k = 0; k < digits; ++k) {
    const char c = p[at + k];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

// One character (or shorthand) of a pattern: what the source says, at p[i].
struct PatternChar {
  enum class Kind { kCodePoint, kShorthand } kind = Kind::kCodePoint;
  uint32_t code_point = 0;  // kCodePoint
  char shorthand = 0;       // kShorthand: d w s D W S
  std::size_t length = 0;   // source bytes
};

// Reads one (possibly escaped) character; `in_class` reads \b as backspace.
Result<PatternChar> read_char(std::string_view p, std::size_t i, bool in_class,
                              const std::string& pointer) {
  const std::string where = "at byte " + std::to_string(i) + ": ";
  if (p[i] != '\\') {
    auto [cp, n] = decode_utf8(p, i);
    if (n == 0) return bad(pointer, where + "invalid UTF-8");
    return PatternChar{PatternChar::Kind::kCodePoint, cp, 0, n};
  }
  if (i + 1 >= p.size()) return bad(pointer, where + "trailing backslash");
  const char e = p[i + 1];
  auto code = [](uint32_t cp, std::size_t n) {
    return PatternChar{PatternChar::Kind::kCodePoint, cp, 0, n};
  };
  switch (e) {
    case 'd':
    case 'w':
    case 's':
    case 'D':
    case 'W':
    case 'S':
      return PatternChar{PatternChar::Kind::kShorthand, 0, e, 2};
    case 'n':
      return code('\n', 2);
    case 'r':
      return code('\r', 2);
    case 't':
      return code('\t', 2);
    case 'f':
      return code('\f', 2);
    case 'v':
      return code('\v', 2);
    case '0':
      return code(0, 2);
    case 'x':
    case 'u':
    case 'U': {
      const std::size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      auto v = parse_hex(p, i + 2, digits);
      // A \u high surrogate followed by a \u low one is one code point (as in regex.h).
      if (v && e == 'u' && *v >= 0xD800 && *v <= 0xDBFF && p.substr(i + 6, 2) == "\\u") {
        auto low = parse_hex(p, i + 8, 4);
        if (low && *low >= 0xDC00 && *low <= 0xDFFF) {
          return code(0x10000 + ((*v - 0xD800) << 10) + (*low - 0xDC00), 12);
        }
      }
      if (!v || (*v >= 0xD800 && *v <= 0xDFFF) || *v > 0x10FFFF) {
        return bad(pointer, where + "bad escape \\" + e + " (expected " + std::to_string(digits) +
                                " hex digits of a code point)");
      }
      return code(*v, 2 + digits);
    }
    case 'b':
      if (in_class) return code('\b', 2);
      return unsupported(pointer, where + "word boundary \\b is not supported");
    default:
      break;
  }
  if (static_cast<unsigned char>(e) >= 0x80) {
    auto [cp, n] = decode_utf8(p, i + 1);
    if (n == 0) return bad(pointer, where + "invalid UTF-8");
    return code(cp, 1 + n);
  }
  if (std::isalnum(static_cast<unsigned char>(e))) {
    return unsupported(pointer, where + "escape \\" + std::string(1, e) +
                                    " is not supported (backreferences, \\B, \\p, ...)");
  }
  return code(static_cast<uint32_t>(e), 2);
}

// A class body [lo, hi] item, with the source text of each end (for re-emitting).
struct ClassItem {
  PatternChar lo, hi;
  std::string_view lo_text, hi_text;
};

// A class member at a position where `-`, `]`, `[` and `^` must be escaped; `text`, when set,
// is its source spelling (kept for non-ASCII characters and escapes).
std::string class_char(uint32_t c, std::string_view text) {
  if (!text.empty() && text[0] == '\\') return std::string(text);
  if (c < 0x80 && std::string_view("\\]-^[").find(static_cast<char>(c)) != std::string_view::npos) {
    return std::string("\\") + static_cast<char>(c);
  }
  return text.empty() ? std::string(1, static_cast<char>(c)) : std::string(text);
}

// Rewrites the class starting at p[i] == '['; sets `end` past its ']'.
Result<std::string> translate_class(std::string_view p, std::size_t i, std::size_t& end,
                                    const std::string& pointer) {
  const std::size_t start = i;
  ++i;
  const bool negated = i < p.size() && p[i] == '^';
  if (negated) ++i;
  const std::size_t body_start = i;
  std::vector<ClassItem> items;
  while (true) {
    if (i >= p.size()) return bad(pointer, "at byte " + std::to_string(start) + ": unterminated [");
    if (p[i] == ']' && i != body_start) break;
    PS_ASSIGN_OR_RETURN(PatternChar lo, read_char(p, i, true, pointer));
    ClassItem item{lo, lo, p.substr(i, lo.length), p.substr(i, lo.length)};
    i += lo.length;
    if (i + 1 < p.size() && p[i] == '-' && p[i + 1] != ']') {
      PS_ASSIGN_OR_RETURN(PatternChar hi, read_char(p, i + 1, true, pointer));
      if (lo.kind != PatternChar::Kind::kCodePoint || hi.kind != PatternChar::Kind::kCodePoint ||
          hi.code_point < lo.code_point) {
        return bad(pointer, "at byte " + std::to_string(i) + ": bad class range");
      }
      item.hi = hi;
      item.hi_text = p.substr(i + 1, hi.length);
      i += 1 + hi.length;
    }
    items.push_back(item);
  }
  end = i + 1;
  const std::string_view body = p.substr(body_start, i - body_start);
  // Which JSON-special characters the class holds (uniform over the controls but \t \n \r).
  auto holds = [&](uint32_t c) {
    bool in = false;
    for (const ClassItem& it : items) {
      if (it.lo.kind == PatternChar::Kind::kShorthand) {
        const char s = it.lo.shorthand;
        const bool space = c == ' ' || (c >= '\t' && c <= '\r');
        const bool word =
            (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        const bool digit = c >= '0' && c <= '9';
        in |= (s == 's' && space) || (s == 'S' && !space) || (s == 'w' && word) ||
              (s == 'W' && !word) || (s == 'd' && digit) || (s == 'D' && !digit);
      } else {
        in |= it.lo.code_point <= c && c <= it.hi.code_point;
      }
    }
    return in != negated;
  };
  std::string escapes;  // the JSON escape letters this class allows
  for (auto [c, letter] : {std::pair<uint32_t, const char*>{'"', "\""},
                           {'\\', "\\\\"},
                           {'\t', "t"},
                           {'\n', "n"},
                           {'\r', "r"}}) {
    if (holds(c)) escapes += letter;
  }
  std::string raw;  // the class less the JSON-special characters
  if (negated) {
    // The body no longer starts the class: a leading ']' or '-' must be escaped.
    const bool lead = !body.empty() && (body[0] == ']' || body[0] == '-');
    raw = R"([^"\\\x00-\x1F)" + std::string(lead ? "\\" : "") + std::string(body) + "]";
  } else {
    bool needs_rewrite = false;
    for (uint32_t c = 0; c < 0x20; ++c) needs_rewrite |= holds(c);
    needs_rewrite |= holds('"') || holds('\\');
    if (!needs_rewrite) {
      raw = std::string(p.substr(start, end - start));
    } else {
      std::string rebuilt;
      for (const ClassItem& it : items) {
        if (it.lo.kind == PatternChar::Kind::kShorthand) {
          const char s = it.lo.shorthand;
          if (s == 'D' || s == 'W' || s == 'S') {
            return unsupported(pointer, std::string("\\") + s +
                                            " inside a class that also holds characters JSON "
                                            "must escape is not supported");
          }
          rebuilt += s == 's' ? std::string(" ") : std::string(it.lo_text);
          continue;
        }
        // Split [lo, hi] around the specials 0x00-0x1F, 0x22 and 0x5C.
        uint32_t lo = std::max<uint32_t>(it.lo.code_point, 0x20);
        const uint32_t hi = it.hi.code_point;
        for (uint32_t cut : {uint32_t{0x22}, uint32_t{0x5C}, uint32_t{0x110000}}) {
          const uint32_t piece_hi = std::min(hi, cut - 1);
          if (lo <= piece_hi) {
            rebuilt += class_char(lo, lo == it.lo.code_point ? it.lo_text : "");
            if (piece_hi != lo) {
              rebuilt += "-" + class_char(piece_hi, piece_hi == hi ? it.hi_text : "");
            }
          }
          lo = std::max(lo, cut + 1);
        }
      }
      if (!rebuilt.empty()) raw = "[" + rebuilt + "]";
    }
  }
  if (escapes.empty()) {
    if (raw.empty())
      return bad(pointer, "class at byte " + std::to_string(start) +
                              " matches "
                              "no character a JSON string can hold");
    return raw;
  }
  const std::string escape = R"(\\)" + (escapes.size() == 1 ? escapes : "[" + escapes + "]");
  return raw.empty() ? "(?:" + escape + ")" : "(?:" + raw + "|" + escape + ")";
}

// The regex of a JSON string's content for schema `pattern` (see json_schema.h).
Result<std::string> translate_pattern(std::string_view p, const std::string& pointer) {
  if (!p.empty() && p.front() == '^') p.remove_prefix(1);
  if (!p.empty() && p.back() == '$') {
    std::size_t backslashes = 0;
    while (backslashes + 1 < p.size() && p[p.size() - 2 - backslashes] == '\\') ++backslashes;
    if (backslashes % 2 == 0) p.remove_suffix(1);
  }
  std::string out;
  int depth = 0;
  std::size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    const std::string where = "at byte " + std::to_string(i) + ": ";
    if (c == '[') {
      std::size_t end = 0;
      PS_ASSIGN_OR_RETURN(std::string cls, translate_class(p, i, end, pointer));
      out += cls;
      i = end;
    } else if (c == '(') {
      const std::string_view rest = p.substr(i);
      std::size_t skip = 1;
      if (rest.starts_with("(?:")) {
        skip = 3;
      } else if (rest.starts_with("(?P<") ||
                 (rest.starts_with("(?<") && !rest.starts_with("(?<=") &&
                  !rest.starts_with("(?<!"))) {
        const std::size_t close = rest.find('>');
        if (close == std::string_view::npos) return bad(pointer, where + "unterminated group name");
        skip = close + 1;
      } else if (rest.starts_with("(?")) {
        return unsupported(pointer, where + "group \"" + std::string(rest.substr(0, 3)) +
                                        "\" is not supported (lookaround, flags)");
      }
      out += "(?:";
      ++depth;
      i += skip;
    } else if (c == ')') {
      if (depth == 0) return bad(pointer, where + "unmatched ')'");
      --depth;
      out += ')';
      ++i;
    } else if (c == '^' || c == '$') {
      return unsupported(pointer, where + "anchor '" + std::string(1, c) +
                                      "' is supported only at the start or end");
    } else if (c == '.') {
      out += R"((?:[^"\\\x00-\x1F]|\\["\\rt]))";
      ++i;
    } else if (c == '\\' || c == '"' || static_cast<unsigned char>(c) < 0x20) {
      PS_ASSIGN_OR_RETURN(PatternChar pc, read_char(p, i, false, pointer));
      if (pc.kind == PatternChar::Kind::kShorthand) {
        switch (pc.shorthand) {
          case 's':
            out += R"((?: |\\[tnr]))";
            break;
          case 'S':
            out += R"((?:[^ "\\\x00-\x1F]|\\["\\]))";
            break;
          case 'D':
            out += R"((?:[^0-9"\\\x00-\x1F]|\\["\\tnr]))";
            break;
          case 'W':
            out += R"((?:[^0-9A-Za-z_"\\\x00-\x1F]|\\["\\tnr]))";
            break;
          default:
            out += "\\" + std::string(1, pc.shorthand);
        }
      } else if (json_special(pc.code_point)) {
        out += escaped_atom(pc.code_point);
      } else {
        out += std::string(p.substr(i, pc.length));
      }
      i += pc.length;
    } else {
      out += c;
      ++i;
    }
  }
  if (depth != 0) return bad(pointer, "unmatched '('");
  return out;
}

// ---- the compiler -------------------------------------------------------------------------

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  // The regex of `schema`, found at JSON pointer `pointer`, `depth` schemas deep.
  Result<std::string> compile(const Json& schema, const std::string& pointer, int depth);

 private:
  Result<std::string> compile_node(const Json& schema, const std::string& pointer, int depth);
  Result<std::string> compile_ref(const Json& ref, const std::string& pointer, int depth);
  Result<std::string> compile_enum(const Json& schema, const std::string& pointer,
                                   const std::vector<std::string>& types);
  Result<std::string> compile_type(std::string_view type, const Json& schema,
                                   const std::string& pointer, int depth);
  Result<std::string> compile_string(const Json& schema, const std::string& pointer);
  Result<std::string> compile_number(bool integer, const Json& schema, const std::string& pointer);
  Result<std::string> compile_object(const Json& schema, const std::string& pointer, int depth);
  Result<std::string> compile_array(const Json& schema, const std::string& pointer, int depth);

  const Json& root_;
  std::vector<std::string> ref_stack_;  // pointers of the $ref targets being expanded
  std::size_t work_bytes_ = 0;          // bytes of every fragment built so far
};

Result<std::string> Compiler::compile(const Json& schema, const std::string& pointer, int depth) {
  if (depth > kMaxSchemaDepth) {
    return bad(pointer, "schemas nested deeper than " + std::to_string(kMaxSchemaDepth) +
                            " levels ($ref included)");
  }
  PS_ASSIGN_OR_RETURN(std::string regex, compile_node(schema, pointer, depth));
  work_bytes_ += regex.size();
  if (work_bytes_ > kMaxWorkBytes || regex.size() > kMaxRegexBytes) {
    return bad(pointer,
               "schema too large: its regex exceeds " + std::to_string(kMaxRegexBytes) + " bytes");
  }
  return regex;
}

// Reads `type` (a name or a list of names); empty when absent.
Result<std::vector<std::string>> read_types(const Json& schema, const std::string& pointer) {
  std::vector<std::string> types;
  auto it = schema.find("type");
  if (it == schema.end()) return types;
  const std::string at = child(pointer, "type");
  const Json list = it->is_array() ? *it : Json::array({*it});
  if (list.empty()) return bad(at, "expected a type name or a non-empty list of them, got []");
  for (const Json& t : list) {
    if (!t.is_string() || !one_of(t.get_ref<const std::string&>(), kTypes)) {
      return bad(at,
                 "expected \"string\", \"integer\", \"number\", \"boolean\", \"null\", "
                 "\"object\" or \"array\", got " +
                     describe(t));
    }
    if (std::find(types.begin(), types.end(), t.get<std::string>()) != types.end()) {
      return bad(at, "type " + describe(t) + " is listed twice");
    }
    types.push_back(t.get<std::string>());
  }
  return types;
}

Result<std::string> Compiler::compile_node(const Json& schema, const std::string& pointer,
                                           int depth) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return bad(pointer, "schema false allows no value");
    return unsupported(pointer,
                       "schema true allows any value, which is not supported; use "
                       "response_format {\"type\": \"json_object\"} for free-form JSON");
  }
  if (!schema.is_object()) {
    return bad(pointer, "expected a schema (an object), got " + describe(schema));
  }
  std::vector<std::string> keywords;  // the ones that constrain the value
  for (const auto& [key, value] : schema.items()) {
    if (one_of(key, kAnnotations)) continue;
    if (key == "$defs" || key == "definitions") {
      if (!value.is_object()) {
        return bad(child(pointer, key),
                   "expected an object of named schemas, got " + describe(value));
      }
      continue;
    }
    if (!one_of(key, kStructuralKeywords) && !one_of(key, kStringKeywords) &&
        !one_of(key, kNumberKeywords) && !one_of(key, kObjectKeywords) &&
        !one_of(key, kArrayKeywords)) {
      return no_keyword(pointer, key);
    }
    keywords.push_back(key);
  }
  if (keywords.empty()) {
    return unsupported(pointer,
                       "a schema without constraints allows any value, which is not "
                       "supported; use response_format {\"type\": \"json_object\"} for "
                       "free-form JSON");
  }
  // $ref, anyOf, oneOf, allOf each stand alone (annotations aside).
  for (const std::string combinator : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (!schema.contains(combinator)) continue;
    for (const std::string& k : keywords) {
      if (k != combinator) {
        return unsupported(pointer,
                           "keyword \"" + k + "\" beside \"" + combinator + "\" is not supported");
      }
    }
    const Json& value = schema.at(combinator);
    const std::string at = child(pointer, combinator);
    if (combinator == "$ref") return compile_ref(value, at, depth);
    if (!value.is_array() || value.empty()) {
      return bad(at, "expected a non-empty list of schemas, got " + describe(value));
    }
    if (combinator == "allOf" && value.size() != 1) {
      return unsupported(at, "allOf of " + std::to_string(value.size()) +
                                 " schemas is not supported (only of one)");
    }
    std::vector<std::string> alternatives;
    for (std::size_t i = 0; i < value.size(); ++i) {
      PS_ASSIGN_OR_RETURN(std::string a,
                          compile(value[i], child(at, std::to_string(i)), depth + 1));
      alternatives.push_back(std::move(a));
    }
    return alternation(std::move(alternatives));
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::string> types, read_types(schema, pointer));
  if (schema.contains("enum") || schema.contains("const")) {
    for (const std::string& k : keywords) {
      if (k != "enum" && k != "const" && k != "type") {
        return unsupported(pointer, "keyword \"" + k + "\" beside \"" +
                                        (schema.contains("enum") ? "enum" : "const") +
                                        "\" is not supported");
      }
    }
    return compile_enum(schema, pointer, types);
  }
  if (types.empty()) {  // infer the type from the keywords, as outlines does
    std::set<std::string> inferred;
    for (const std::string& k : keywords) {
      for (std::string_view t : {"string", "number", "object", "array"}) {
        if (applies(k, t)) inferred.insert(std::string(t));
      }
    }
    if (inferred.size() != 1) {
      return unsupported(pointer,
                         "a schema without \"type\" is supported only when its keywords "
                         "belong to one type");
    }
    types.push_back(*inferred.begin());
  }
  for (const std::string& k : keywords) {
    if (k == "type") continue;
    if (std::none_of(types.begin(), types.end(),
                     [&](const std::string& t) { return applies(k, t); })) {
      return bad(child(pointer, k),
                 "keyword \"" + k + "\" does not apply to type " + describe(Json(types)));
    }
  }
  std::vector<std::string> alternatives;
  for (const std::string& t : types) {
    PS_ASSIGN_OR_RETURN(std::string a, compile_type(t, schema, pointer, depth));
    alternatives.push_back(std::move(a));
  }
  return alternation(std::move(alternatives));
}

Result<std::string> Compiler::compile_ref(const Json& ref, const std::string& pointer, int depth) {
  if (!ref.is_string()) return bad(pointer, "expected a string, got " + describe(ref));
  const std::string& text = ref.get_ref<const std::string&>();
  if (text.empty() || text[0] != '#') {
    return unsupported(pointer,
                       "only local references (\"#/...\") are supported, got " + describe(ref));
  }
  std::string target;  // the fragment, %XX-decoded: a JSON pointer
  for (std::size_t i = 1; i < text.size(); ++i) {
    auto hex = text[i] == '%' ? parse_hex(text, i + 1, 2) : std::nullopt;
    target += hex ? static_cast<char>(*hex) : text[i];
    if (hex) i += 2;
  }
  if (!target.empty() && target[0] != '/') {
    return unsupported(
        pointer, "only JSON-pointer references (\"#/...\") are supported, got " + describe(ref));
  }
  const Json* node = &root_;
  std::size_t pos = 0;
  while (pos < target.size()) {  // each step: "/" token
    std::size_t next = target.find('/', pos + 1);
    if (next == std::string::npos) next = target.size();
    std::string token;
    for (std::size_t i = pos + 1; i < next; ++i) {
      if (target[i] != '~') {
        token += target[i];
      } else if (i + 1 < next && (target[i + 1] == '0' || target[i + 1] == '1')) {
        token += target[++i] == '0' ? '~' : '/';
      } else {
        return bad(pointer, "bad ~ escape in " + describe(ref) + " (expected ~0 or ~1)");
      }
    }
    const Json* found = nullptr;
    if (node->is_object() && node->contains(token)) found = &node->at(token);
    if (node->is_array() && !token.empty() && token.size() < 10 &&
        token.find_first_not_of("0123456789") == std::string::npos &&
        std::stoul(token) < node->size()) {
      found = &(*node)[std::stoul(token)];
    }
    if (!found) return bad(pointer, describe(ref) + " does not resolve");
    node = found;
    pos = next;
  }
  if (std::find(ref_stack_.begin(), ref_stack_.end(), target) != ref_stack_.end()) {
    return unsupported(pointer, "recursive $ref " + describe(ref) + " is not supported");
  }
  ref_stack_.push_back(target);
  Result<std::string> regex = compile(*node, target, depth + 1);
  ref_stack_.pop_back();
  return regex;
}

Result<std::string> Compiler::compile_enum(const Json& schema, const std::string& pointer,
                                           const std::vector<std::string>& types) {
  Json values = Json::array();
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array() || it->empty()) {
      return bad(child(pointer, "enum"),
                 "expected a non-empty list of values, got " + describe(*it));
    }
    values = *it;
  }
  if (auto it = schema.find("const"); it != schema.end()) {
    if (!schema.contains("enum")) values.push_back(*it);
    Json kept = Json::array();
    for (const Json& v : values) {
      if (v == *it) kept.push_back(v);
    }
    values = kept;
  }
  std::vector<std::string> alternatives;
  for (const Json& v : values) {
    if (!types.empty() && std::none_of(types.begin(), types.end(),
                                       [&](const std::string& t) { return matches_type(v, t); })) {
      continue;
    }
    alternatives.push_back(regex_literal(v.dump()));
  }
  if (alternatives.empty()) {
    return bad(pointer,
               "no value satisfies enum / const" + std::string(types.empty() ? "" : " and type"));
  }
  return alternation(std::move(alternatives));
}

Result<std::string> Compiler::compile_type(std::string_view type, const Json& schema,
                                           const std::string& pointer, int depth) {
  if (type == "string") return compile_string(schema, pointer);
  if (type == "integer" || type == "number") {
    return compile_number(type == "integer", schema, pointer);
  }
  if (type == "boolean") return std::string("(?:true|false)");
  if (type == "null") return std::string("null");
  if (type == "object") return compile_object(schema, pointer, depth);
  return compile_array(schema, pointer, depth);
}

Result<std::string> Compiler::compile_string(const Json& schema, const std::string& pointer) {
  PS_ASSIGN_OR_RETURN(auto min_length, get_count(schema, "minLength", pointer));
  PS_ASSIGN_OR_RETURN(auto max_length, get_count(schema, "maxLength", pointer));
  const bool has_length = min_length || max_length;
  if (auto it = schema.find("format"); it != schema.end()) {
    const std::string at = child(pointer, "format");
    if (!it->is_string()) return bad(at, "expected a string, got " + describe(*it));
    if (schema.contains("pattern") || has_length) {
      return unsupported(pointer,
                         "\"format\" together with \"pattern\", \"minLength\" or "
                         "\"maxLength\" is not supported");
    }
    const std::string& format = it->get_ref<const std::string&>();
    if (format == "date") return "\"" + std::string(kDate) + "\"";
    if (format == "time") return "\"" + std::string(kTime) + "\"";
    if (format == "date-time")
      return "\"" + std::string(kDate) + "[Tt]" + std::string(kTime) + "\"";
    if (format == "uuid") return "\"" + std::string(kUuid) + "\"";
    return unsupported(at, "format " + describe(*it) +
                               " is not supported (supported: date, time, date-time, uuid)");
  }
  if (auto it = schema.find("pattern"); it != schema.end()) {
    const std::string at = child(pointer, "pattern");
    if (!it->is_string()) return bad(at, "expected a string, got " + describe(*it));
    if (has_length) {
      return unsupported(pointer,
                         "\"pattern\" together with \"minLength\" or \"maxLength\" is "
                         "not supported; bound the length in the pattern");
    }
    PS_ASSIGN_OR_RETURN(std::string content, translate_pattern(it->get<std::string>(), at));
    return "\"(?:" + content + ")\"";
  }
  const int64_t min = min_length.value_or(0);
  if (max_length && min > *max_length) {
    return bad(child(pointer, "minLength"),
               "minLength " + std::to_string(min) + " > maxLength " + std::to_string(*max_length));
  }
  const std::string chars(kJsonStringChar);
  PS_RETURN_IF_ERROR(check_repeat(chars, min, pointer, "minLength", min));
  if (max_length) {
    PS_RETURN_IF_ERROR(check_repeat(chars, *max_length, pointer, "maxLength", *max_length));
  }
  return "\"" + repeat(chars, min, max_length) + "\"";
}

// One bound keyword, if present: a number; the exclusive ones may be draft-4 booleans.
struct Bound {
  const char* keyword;
  const Json* value;  // a number
  bool exclusive;
};

Result<std::vector<Bound>> read_bounds(const Json& schema, const std::string& pointer, bool lower) {
  const char* inclusive = lower ? "minimum" : "maximum";
  const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
  std::vector<Bound> bounds;
  bool draft4_exclusive = false;
  if (auto it = schema.find(exclusive); it != schema.end()) {
    if (it->is_boolean()) {
      if (!schema.contains(inclusive)) {
        return bad(child(pointer, exclusive),
                   std::string("a boolean needs \"") + inclusive + "\" beside it (draft 4)");
      }
      draft4_exclusive = it->get<bool>();
    } else if (it->is_number()) {
      bounds.push_back({exclusive, &*it, true});
    } else {
      return bad(child(pointer, exclusive), "expected a number, got " + describe(*it));
    }
  }
  if (auto it = schema.find(inclusive); it != schema.end()) {
    if (!it->is_number())
      return bad(child(pointer, inclusive), "expected a number, got " + describe(*it));
    bounds.push_back({inclusive, &*it, draft4_exclusive});
  }
  return bounds;
}

// The tightest integer the bound allows from below (lower) or above.
Result<int64_t> integer_bound(const Bound& b, bool lower, const std::string& pointer) {
  const Json& v = *b.value;
  const std::string at = child(pointer, b.keyword);
  const auto too_large = [&] {
    return unsupported(at, describe(v) + " is outside the supported range +-10^18");
  };
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{kMaxIntegerBound}) return too_large();
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n > kMaxIntegerBound || n < -kMaxIntegerBound) return too_large();
    return b.exclusive ? (lower ? n + 1 : n - 1) : n;
  }
  const double d = v.get<double>();
  if (!(std::fabs(d) <= 1e18)) return too_large();
  if (lower) return static_cast<int64_t>(b.exclusive ? std::floor(d) + 1 : std::ceil(d));
  return static_cast<int64_t>(b.exclusive ? std::ceil(d) - 1 : std::floor(d));
}

Result<std::string> Compiler::compile_number(bool integer, const Json& schema,
                                             const std::string& pointer) {
  PS_ASSIGN_OR_RETURN(std::vector<Bound> lower, read_bounds(schema, pointer, true));
  PS_ASSIGN_OR_RETURN(std::vector<Bound> upper, read_bounds(schema, pointer, false));
  if (!integer) {
    const std::string number = "-?(?:0|[1-9][0-9]*)" + std::string(kFraction);
    if (!upper.empty()) {
      return unsupported(child(pointer, upper[0].keyword),
                         "bounds on \"number\" are not supported except minimum 0 or "
                         "exclusiveMinimum 0 (use \"type\": \"integer\" for integer ranges)");
    }
    if (lower.empty()) return number;
    if (lower.size() > 1 || *lower[0].value != 0) {
      return unsupported(child(pointer, lower.back().keyword),
                         "bounds on \"number\" are not supported except minimum 0 or "
                         "exclusiveMinimum 0 (use \"type\": \"integer\" for integer ranges)");
    }
    if (lower[0].exclusive) return std::string(kPositiveNumber);
    return "(?:0|[1-9][0-9]*)" + std::string(kFraction);
  }
  std::optional<int64_t> lo;
  std::optional<int64_t> hi;
  for (const Bound& b : lower) {
    PS_ASSIGN_OR_RETURN(int64_t v, integer_bound(b, true, pointer));
    lo = lo ? std::max(*lo, v) : v;
  }
  for (const Bound& b : upper) {
    PS_ASSIGN_OR_RETURN(int64_t v, integer_bound(b, false, pointer));
    hi = hi ? std::min(*hi, v) : v;
  }
  if (lo && hi && *lo > *hi) {
    return bad(pointer, "no integer satisfies the bounds (lowest allowed " + std::to_string(*lo) +
                            " > highest allowed " + std::to_string(*hi) + ")");
  }
  return integer_range(lo, hi);
}

Result<std::string> Compiler::compile_object(const Json& schema, const std::string& pointer,
                                             int depth) {
  if (auto it = schema.find("additionalProperties"); it != schema.end()) {
    const std::string at = child(pointer, "additionalProperties");
    if (!it->is_boolean() && !it->is_object()) {
      return bad(at, "expected a boolean or a schema, got " + describe(*it));
    }
    if (*it != false) {
      return unsupported(at,
                         "additional properties (true or a schema) are not supported; list "
                         "every property in \"properties\" and set it to false");
    }
  }
  auto props_it = schema.find("properties");
  if (props_it == schema.end()) {
    return unsupported(pointer,
                       "an object without \"properties\" (a free-form object) is not "
                       "supported; use response_format {\"type\": \"json_object\"}");
  }
  const std::string props_at = child(pointer, "properties");
  if (!props_it->is_object()) {
    return bad(props_at, "expected an object of property schemas, got " + describe(*props_it));
  }
  std::set<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    const std::string at = child(pointer, "required");
    if (!it->is_array()) return bad(at, "expected a list of property names, got " + describe(*it));
    for (const Json& name : *it) {
      if (!name.is_string()) return bad(at, "expected property names, got " + describe(name));
      if (!props_it->contains(name.get<std::string>())) {
        return bad(at, "required property " + describe(name) + " is not in \"properties\"");
      }
      if (!required.insert(name.get<std::string>()).second) {
        return bad(at, "property " + describe(name) + " is listed twice");
      }
    }
  }
  const std::string ws(kJsonWs);
  const std::string sep = ws + "," + ws;
  std::vector<std::string> members;
  std::vector<bool> is_required;
  for (const auto& [name, sub] : props_it->items()) {
    PS_ASSIGN_OR_RETURN(std::string value, compile(sub, child(props_at, name), depth + 1));
    members.push_back(regex_literal(Json(name).dump()) + ws + ":" + ws + value);
    is_required.push_back(required.count(name) > 0);
  }
  if (members.empty()) return "\\{" + ws + "\\}";
  const auto first_required = std::find(is_required.begin(), is_required.end(), true);
  if (first_required != is_required.end()) {
    // Optional members before the first required one carry their comma after them, the
    // ones after it before them.
    const std::size_t r = static_cast<std::size_t>(first_required - is_required.begin());
    std::string content;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (i < r) {
        content += "(?:" + members[i] + sep + ")?";
      } else if (i == r) {
        content += members[i];
      } else {
        content += is_required[i] ? sep + members[i] : "(?:" + sep + members[i] + ")?";
      }
    }
    return "\\{" + ws + content + ws + "\\}";
  }
  // All optional: choose the first member present, then each later one may follow.
  std::vector<std::string> alternatives;
  for (std::size_t i = 0; i < members.size(); ++i) {
    std::string a = members[i];
    for (std::size_t j = i + 1; j < members.size(); ++j) a += "(?:" + sep + members[j] + ")?";
    alternatives.push_back(std::move(a));
  }
  return "\\{" + ws + "(?:" + alternation(std::move(alternatives)) + ws + ")?\\}";
}

Result<std::string> Compiler::compile_array(const Json& schema, const std::string& pointer,
                                            int depth) {
  PS_ASSIGN_OR_RETURN(auto min_items_opt, get_count(schema, "minItems", pointer));
  PS_ASSIGN_OR_RETURN(auto max_items, get_count(schema, "maxItems", pointer));
  const int64_t min_items = min_items_opt.value_or(0);
  if (max_items && min_items > *max_items) {
    return bad(child(pointer, "minItems"), "minItems " + std::to_string(min_items) +
                                               " > maxItems " + std::to_string(*max_items));
  }
  const Json* prefix = nullptr;
  std::string prefix_at;
  std::optional<std::string> item;  // the regex of items beyond the prefix; none: no more
  auto items_it = schema.find("items");
  if (auto it = schema.find("prefixItems"); it != schema.end()) {
    prefix_at = child(pointer, "prefixItems");
    if (!it->is_array()) return bad(prefix_at, "expected a list of schemas, got " + describe(*it));
    if (items_it != schema.end() && items_it->is_array()) {
      return bad(child(pointer, "items"), "a list of schemas beside \"prefixItems\"");
    }
    prefix = &*it;
  }
  if (items_it != schema.end()) {
    const std::string at = child(pointer, "items");
    if (items_it->is_array()) {  // draft 4-7 tuple
      prefix = &*items_it;
      prefix_at = at;
    } else if (*items_it != false) {
      PS_ASSIGN_OR_RETURN(std::string regex, compile(*items_it, at, depth + 1));
      item = std::move(regex);
    }
  } else if (!prefix) {
    return unsupported(pointer, "an array without \"items\" (of any values) is not supported");
  }
  const std::string ws(kJsonWs);
  const std::string sep = ws + "," + ws;
  std::string content;
  if (!prefix || prefix->empty()) {
    if (!item) {
      if (min_items > 0)
        return bad(child(pointer, "minItems"), "minItems > 0 but no items are allowed");
      return "\\[" + ws + "\\]";
    }
    if (max_items && *max_items == 0) return "\\[" + ws + "\\]";
    const std::string rest = "(?:" + sep + *item + ")";
    const int64_t rest_min = std::max<int64_t>(0, min_items - 1);
    std::optional<int64_t> rest_max;
    if (max_items) rest_max = *max_items - 1;
    PS_RETURN_IF_ERROR(check_repeat(rest, rest_min, pointer, "minItems", min_items));
    if (rest_max) {
      PS_RETURN_IF_ERROR(check_repeat(rest, *rest_max, pointer, "maxItems", *max_items));
    }
    content = *item + repeat(rest, rest_min, rest_max);
  } else {
    const int64_t num_prefix = static_cast<int64_t>(prefix->size());
    if (!item && min_items > num_prefix) {
      return bad(child(pointer, "minItems"), "minItems " + std::to_string(min_items) + " > the " +
                                                 std::to_string(num_prefix) +
                                                 " prefix items, and no items may follow them");
    }
    if (max_items && *max_items == 0) return "\\[" + ws + "\\]";
    const int64_t used = max_items ? std::min(num_prefix, *max_items) : num_prefix;
    std::vector<std::string> elements;
    for (int64_t i = 0; i < used; ++i) {
      PS_ASSIGN_OR_RETURN(std::string regex,
                          compile((*prefix)[static_cast<std::size_t>(i)],
                                  child(prefix_at, std::to_string(i)), depth + 1));
      elements.push_back(std::move(regex));
    }
    // Items after the prefix: only when every prefix item is allowed.
    if (item && used == num_prefix) {
      const std::string rest = "(?:" + sep + *item + ")";
      const int64_t rest_min = std::max<int64_t>(0, min_items - num_prefix);
      std::optional<int64_t> rest_max;
      if (max_items) rest_max = *max_items - num_prefix;
      PS_RETURN_IF_ERROR(check_repeat(rest, rest_min, pointer, "minItems", min_items));
      if (rest_max) {
        PS_RETURN_IF_ERROR(check_repeat(rest, *rest_max, pointer, "maxItems", *max_items));
      }
      content = repeat(rest, rest_min, rest_max);
    }
    // Element i (0-based) may end the array when i + 1 >= minItems.
    for (int64_t i = used - 1; i >= 0; --i) {
      const std::size_t k = static_cast<std::size_t>(i);
      if (i == used - 1) {
        content = elements[k] + content;
      } else {
        content = elements[k] + (i + 1 >= min_items ? "(?:" + sep + content + ")?" : sep + content);
      }
    }
  }
  if (min_items == 0) return "\\[" + ws + "(?:" + content + ws + ")?\\]";
  return "\\[" + ws + content + ws + "\\]";
}

}  // namespace

Result<std::string> json_schema_to_regex(std::string_view schema_json) {
  // nlohmann's parser and dump recurse per nesting level: bound it before parsing.
  if (json_nesting_depth(schema_json, 4 * kMaxSchemaDepth) > 4 * kMaxSchemaDepth) {
    return bad("", "JSON nested deeper than " + std::to_string(4 * kMaxSchemaDepth) + " levels");
  }
  try {
    Json root = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return bad("", "not valid JSON");
    Compiler compiler(root);
    PS_ASSIGN_OR_RETURN(std::string regex, compiler.compile(root, "", 0));
    return regex;
  } catch (const std::exception& e) {
    return internal_error(std::string("json_schema: ") + e.what());
  }
}

}  // namespace packserve::grammar
