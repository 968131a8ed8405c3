// json_schema_pattern.cc: see json_schema_pattern.h. One left-to-right pass over the
// pattern: read_char reads a (possibly escaped) character, translate_class rewrites a [...]
// class around the characters JSON must escape, translate_pattern everything else.
#include "packserve/grammar/json_schema_pattern.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/grammar/json_schema_internal.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar::detail {
namespace {

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

}  // namespace

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

}  // namespace packserve::grammar::detail
