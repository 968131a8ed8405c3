// regex_parser.cc: see regex_parser.h. A recursive-descent parser over the pattern's bytes:
// alternation := concat ('|' concat)*; concat := (repeat | '^' at 0 | '$' at end)*;
// repeat := atom quantifier?; atom := group | class | '.' | escape | literal.
#include "packserve/grammar/regex_parser.h"

#include <string>
#include <utility>

#include "packserve/grammar/regex.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar {
namespace {

using Kind = RegexNode::Kind;

RegexNode set_node(CodePointSet set) {
  RegexNode node;
  node.kind = Kind::kCodePoints;
  node.code_points = normalize_code_points(std::move(set));
  return node;
}

CodePointSet digit_set() { return {{'0', '9'}}; }
CodePointSet word_set() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodePointSet space_set() { return {{'\t', '\r'}, {' ', ' '}}; }  // \t \n \v \f \r and space

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t hex_value(char c) {
  if (c >= '0' && c <= '9') return static_cast<uint32_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<uint32_t>(c - 'a' + 10);
  return static_cast<uint32_t>(c - 'A' + 10);
}
bool is_ascii_alnum(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

// One item of a class or an escape: a single code point or a set (\d, \W, ...).
struct ClassAtom {
  bool is_set = false;
  char32_t code_point = 0;
  CodePointSet set;
};

class Parser {
 public:
  explicit Parser(std::string_view pattern) : p_(pattern) {}

  Result<RegexNode> parse() {
    PS_ASSIGN_OR_RETURN(RegexNode node, parse_alternation(0));
    if (pos_ < p_.size()) return invalid(pos_, "unmatched ')'");  // the only way to stop early
    return node;
  }

 private:
  Status invalid(std::size_t pos, const std::string& what) const {
    return invalid_argument("regex: position " + std::to_string(pos) + ": " + what);
  }
  Status unsupported(std::size_t pos, const std::string& what) const {
    return unimplemented("regex: position " + std::to_string(pos) + ": " + what +
                         " is not supported");
  }
  bool at(std::size_t pos, char c) const { return pos < p_.size() && p_[pos] == c; }
  bool starts_with(std::size_t pos, std::string_view s) const {
    return p_.substr(pos).substr(0, s.size()) == s;
  }

  Result<RegexNode> parse_alternation(int depth) {
    std::vector<RegexNode> alternatives;
    while (true) {
      PS_ASSIGN_OR_RETURN(RegexNode branch, parse_concat(depth));
      alternatives.push_back(std::move(branch));
      if (!at(pos_, '|')) break;
      ++pos_;
    }
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    RegexNode node;
    node.kind = Kind::kAlternation;
    node.children = std::move(alternatives);
    return node;
  }

  Result<RegexNode> parse_concat(int depth) {
    std::vector<RegexNode> parts;
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      if (p_[pos_] == '^' && pos_ == 0) {  // the implicit start anchor, written out
        ++pos_;
        continue;
      }
      if (p_[pos_] == '$' && pos_ + 1 == p_.size()) {  // the implicit end anchor
        ++pos_;
        continue;
      }
      PS_ASSIGN_OR_RETURN(RegexNode part, parse_repeat(depth));
      parts.push_back(std::move(part));
    }
    if (parts.size() == 1) return std::move(parts[0]);
    RegexNode node;
    if (!parts.empty()) {
      node.kind = Kind::kConcat;
      node.children = std::move(parts);
    }
    return node;
  }

  // Parses {n}, {n,} or {n,m} at `pos`; false (a literal '{') when the text is not one.
  // *end receives the position after '}'; counts above kMaxRepeatCount saturate there + 1.
  bool parse_braces(std::size_t pos, int32_t* min, std::optional<int32_t>* max,
                    std::size_t* end) const {
    std::size_t i = pos + 1;
    auto number = [&](int32_t* value) {
      const std::size_t start = i;
      int64_t v = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[i] - '0'), kMaxRepeatCount + 1);
        ++i;
      }
      *value = static_cast<int32_t>(v);
      return i > start;
    };
    if (!number(min)) return false;
    if (at(i, '}')) {
      *max = *min;
    } else if (at(i, ',')) {
      ++i;
      int32_t m = 0;
      if (number(&m)) {
        *max = m;
      } else {
        *max = std::nullopt;
      }
      if (!at(i, '}')) return false;
    } else {
      return false;
    }
    *end = i + 1;
    return true;
  }

  // Reads a quantifier at pos_, if any: true with the counts and pos_ moved past it.
  Result<bool> parse_quantifier(int32_t* min, std::optional<int32_t>* max) {
    const std::size_t qpos = pos_;
    const char c = p_[pos_];
    if (c == '*') {
      *min = 0;
      *max = std::nullopt;
      ++pos_;
    } else if (c == '+') {
      *min = 1;
      *max = std::nullopt;
      ++pos_;
    } else if (c == '?') {
      *min = 0;
      *max = 1;
      ++pos_;
    } else if (c == '{') {
      std::size_t end = 0;
      if (!parse_braces(pos_, min, max, &end)) return false;
      if (*min > kMaxRepeatCount || (max->has_value() && **max > kMaxRepeatCount)) {
        return invalid_argument("regex: too complex: position " + std::to_string(qpos) +
                                ": repetition count over " + std::to_string(kMaxRepeatCount));
      }
      if (max->has_value() && **max < *min) {
        return invalid(qpos, "bad repetition range " + std::string(p_.substr(qpos, end - qpos)) +
                                 ": min > max");
      }
      pos_ = end;
    } else {
      return false;
    }
    if (at(pos_, '?')) {
      ++pos_;  // lazy: the same language
    } else if (at(pos_, '+')) {
      return unsupported(pos_,
                         "possessive quantifier " + std::string(p_.substr(qpos, pos_ + 1 - qpos)));
    }
    return true;
  }

  Result<RegexNode> parse_repeat(int depth) {
    PS_ASSIGN_OR_RETURN(RegexNode atom, parse_atom(depth));
    if (pos_ >= p_.size()) return atom;
    int32_t min = 0;
    std::optional<int32_t> max;
    PS_ASSIGN_OR_RETURN(const bool quantified, parse_quantifier(&min, &max));
    if (!quantified) return atom;
    if (pos_ < p_.size()) {  // a second quantifier has nothing to repeat (Python, JS)
      const char c = p_[pos_];
      std::size_t end = 0;
      int32_t m2 = 0;
      std::optional<int32_t> x2;
      if (c == '*' || c == '+' || c == '?' || (c == '{' && parse_braces(pos_, &m2, &x2, &end))) {
        return invalid(pos_, "nothing to repeat: multiple quantifiers");
      }
    }
    RegexNode node;
    node.kind = Kind::kRepeat;
    node.min_count = min;
    node.max_count = max;
    node.children.push_back(std::move(atom));
    return node;
  }

  Result<RegexNode> parse_atom(int depth) {
    const std::size_t start = pos_;
    const char c = p_[pos_];
    switch (c) {
      case '(':
        return parse_group(depth);
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return set_node(complement_code_points({{'\n', '\n'}}));
      case '\\': {
        PS_ASSIGN_OR_RETURN(ClassAtom a, parse_escape(/*in_class=*/false));
        return a.is_set ? set_node(std::move(a.set)) : set_node({{a.code_point, a.code_point}});
      }
      case '*':
      case '+':
      case '?':
        return invalid(start, std::string("nothing to repeat before '") + c + "'");
      case '{': {
        int32_t min = 0;
        std::optional<int32_t> max;
        std::size_t end = 0;
        if (parse_braces(pos_, &min, &max, &end)) {
          return invalid(start, "nothing to repeat before '" +
                                    std::string(p_.substr(start, end - start)) + "'");
        }
        ++pos_;
        return set_node({{'{', '{'}});
      }
      case '^':
        return unsupported(start, "anchor '^' other than at the start of the pattern");
      case '$':
        return unsupported(start, "anchor '$' other than at the end of the pattern");
      default: {
        PS_ASSIGN_OR_RETURN(const char32_t cp, parse_literal());
        return set_node({{cp, cp}});
      }
    }
  }

  // A literal UTF-8 character at pos_.
  Result<char32_t> parse_literal() {
    char32_t cp = 0;
    const std::size_t n = tokenizer::valid_sequence_length(p_.substr(pos_), &cp);
    if (n == 0) return invalid(pos_, "invalid UTF-8");
    pos_ += n;
    return cp;
  }

  Result<RegexNode> parse_group(int depth) {
    const std::size_t open = pos_;
    ++pos_;
    if (at(pos_, '?')) {
      if (starts_with(pos_, "?:")) {
        pos_ += 2;
      } else if (starts_with(pos_, "?=") || starts_with(pos_, "?!")) {
        return unsupported(open, "lookahead (" + std::string(p_.substr(pos_, 2)));
      } else if (starts_with(pos_, "?<=") || starts_with(pos_, "?<!")) {
        return unsupported(open, "lookbehind (" + std::string(p_.substr(pos_, 3)));
      } else if (starts_with(pos_, "?P=")) {
        return unsupported(open, "backreference (?P=");
      } else if (starts_with(pos_, "?P<") || starts_with(pos_, "?<")) {
        pos_ += at(pos_ + 1, 'P') ? 3 : 2;
        const std::size_t name_start = pos_;
        while (pos_ < p_.size() && (is_ascii_alnum(p_[pos_]) || p_[pos_] == '_')) ++pos_;
        if (pos_ == name_start || !at(pos_, '>')) return invalid(open, "bad group name");
        ++pos_;
      } else {
        return unsupported(open, "group (" + std::string(p_.substr(pos_, 2)) +
                                     " (inline flags, comments, atomic and conditional groups)");
      }
    }
    if (depth + 1 > kMaxGroupDepth) {
      return invalid_argument("regex: too complex: position " + std::to_string(open) +
                              ": groups nested deeper than " + std::to_string(kMaxGroupDepth));
    }
    PS_ASSIGN_OR_RETURN(RegexNode inner, parse_alternation(depth + 1));
    if (!at(pos_, ')')) return invalid(open, "unmatched '('");
    ++pos_;
    return inner;
  }

  // An escape at pos_ (the backslash), outside or inside a class.
  Result<ClassAtom> parse_escape(bool in_class) {
    const std::size_t start = pos_;
    ++pos_;
    if (pos_ >= p_.size()) return invalid(start, "trailing backslash");
    const char c = p_[pos_];
    ClassAtom a;
    auto single = [&](char32_t cp) {
      a.code_point = cp;
      return a;
    };
    auto set = [&](CodePointSet s, bool negate) {
      a.is_set = true;
      a.set = negate ? complement_code_points(normalize_code_points(std::move(s)))
                     : normalize_code_points(std::move(s));
      return a;
    };
    if (static_cast<uint8_t>(c) >= 0x80) {  // an escaped non-ASCII character is itself
      PS_ASSIGN_OR_RETURN(const char32_t cp, parse_literal());
      return single(cp);
    }
    ++pos_;
    switch (c) {
      case 'd':
      case 'D':
        return set(digit_set(), c == 'D');
      case 'w':
      case 'W':
        return set(word_set(), c == 'W');
      case 's':
      case 'S':
        return set(space_set(), c == 'S');
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 't':
        return single('\t');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case '0':
        if (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') {
          return unsupported(start, "octal escape");
        }
        return single(0);
      case 'b':
        if (in_class) return single('\b');
        return unsupported(start, "word boundary \\b");
      case 'B':
        return unsupported(start, "word boundary \\B");
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return unsupported(start, std::string("anchor \\") + c);
      case 'p':
      case 'P':
        return unsupported(start, std::string("Unicode property \\") + c);
      case 'k':
        return unsupported(start, "backreference \\k");
      case 'x': {
        PS_ASSIGN_OR_RETURN(const uint32_t v, parse_hex(start, 2));
        return single(v);
      }
      case 'u': {
        PS_ASSIGN_OR_RETURN(const uint32_t v, parse_hex(start, 4));
        if (v >= 0xDC00 && v <= 0xDFFF) return invalid(start, "lone low surrogate \\u");
        if (v < 0xD800 || v > 0xDBFF) return single(v);
        if (!starts_with(pos_, "\\u")) return invalid(start, "lone high surrogate \\u");
        const std::size_t low_start = pos_;
        pos_ += 2;
        PS_ASSIGN_OR_RETURN(const uint32_t low, parse_hex(low_start, 4));
        if (low < 0xDC00 || low > 0xDFFF) {
          return invalid(start, "high surrogate \\u not followed by a low surrogate");
        }
        return single(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
      }
      case 'U': {
        PS_ASSIGN_OR_RETURN(const uint32_t v, parse_hex(start, 8));
        if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
          return invalid(start, "\\U escape is not a Unicode scalar value");
        }
        return single(v);
      }
      default:
        break;
    }
    if (c >= '1' && c <= '9') return unsupported(start, "backreference \\" + std::string(1, c));
    if (is_ascii_alnum(c)) return invalid(start, "bad escape \\" + std::string(1, c));
    return single(static_cast<uint8_t>(c));  // punctuation, space, control: itself
  }

  // `digits` hex digits at pos_ (after "\x", "\u" or "\U" at `start`).
  Result<uint32_t> parse_hex(std::size_t start, int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size() || !is_hex(p_[pos_])) {
        return invalid(start, "bad escape " + std::string(p_.substr(start, pos_ - start)) +
                                  ": expected " + std::to_string(digits) + " hex digits");
      }
      v = v * 16 + hex_value(p_[pos_]);
      ++pos_;
    }
    return v;
  }

  Result<ClassAtom> parse_class_atom() {
    if (p_[pos_] == '\\') return parse_escape(/*in_class=*/true);
    PS_ASSIGN_OR_RETURN(const char32_t cp, parse_literal());
    ClassAtom a;
    a.code_point = cp;
    return a;
  }

  Result<RegexNode> parse_class() {
    const std::size_t open = pos_;
    ++pos_;
    const bool negate = at(pos_, '^');
    if (negate) ++pos_;
    CodePointSet set;
    bool first = true;
    while (true) {
      if (pos_ >= p_.size()) return invalid(open, "unterminated character class");
      if (p_[pos_] == ']' && !first) break;
      first = false;
      const std::size_t item = pos_;
      PS_ASSIGN_OR_RETURN(ClassAtom lo, parse_class_atom());
      if (at(pos_, '-') && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        PS_ASSIGN_OR_RETURN(ClassAtom hi, parse_class_atom());
        const std::string text(p_.substr(item, pos_ - item));
        if (lo.is_set || hi.is_set) return invalid(item, "bad range " + text);
        if (lo.code_point > hi.code_point) return invalid(item, "bad range " + text + ": lo > hi");
        set.push_back({lo.code_point, hi.code_point});
      } else if (lo.is_set) {
        set.insert(set.end(), lo.set.begin(), lo.set.end());
      } else {
        set.push_back({lo.code_point, lo.code_point});
      }
    }
    ++pos_;
    set = normalize_code_points(std::move(set));
    return set_node(negate ? complement_code_points(set) : std::move(set));
  }

  std::string_view p_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<RegexNode> parse_regex(std::string_view pattern) { return Parser(pattern).parse(); }

}  // namespace packserve::grammar
