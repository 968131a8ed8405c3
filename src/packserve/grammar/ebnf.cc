// ebnf.cc: see ebnf.h. A recursive-descent parser builds each rule's tree (Node); the
// expander writes the regex of `root`, inlining every reference and counting, per rule, how
// many times it is open on the current path (kMaxEbnfNesting). An expansion that matches
// nothing is nullopt ("none"): a sequence with a none part is none, an alternation drops its
// none alternatives, x* of none is empty. Rules outside any cycle expand the same wherever
// they are used and are memoized.
#include "packserve/grammar/ebnf.h"

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/grammar/json_schema_internal.h"
#include "packserve/grammar/regex.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::grammar {
namespace {

struct Node {
  enum class Kind { kText, kClass, kAny, kRef, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  std::u32string text;                                // kText
  bool negated = false;                               // kClass
  std::vector<std::pair<char32_t, char32_t>> ranges;  // kClass
  std::string name;                                   // kRef
  std::size_t pos = 0;                                // kRef: where, for errors
  int rule = -1;                                      // kRef, resolved
  std::vector<Node> children;                         // kSeq, kAlt, kRepeat (one)
  int64_t min = 0, max = -1;                          // kRepeat; max -1: unbounded
};

struct Rule {
  std::string name;
  std::size_t pos = 0;
  Node body;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<std::vector<Rule>> parse() {
    std::vector<Rule> rules;
    std::map<std::string, std::size_t> seen;
    for (;;) {
      skip_space();
      if (eof()) break;
      Rule rule;
      rule.pos = pos_;
      rule.name = name();
      if (rule.name.empty()) return error("expected a rule name");
      skip_space();
      if (text_.substr(pos_, 3) != "::=") return error("expected ::= after \"" + rule.name + "\"");
      pos_ += 3;
      PS_ASSIGN_OR_RETURN(rule.body, alternates(/*nested=*/false));
      if (!seen.emplace(rule.name, rules.size()).second) {
        return error_at(rule.pos, "rule \"" + rule.name + "\" is defined twice");
      }
      rules.push_back(std::move(rule));
    }
    if (!seen.contains("root")) return invalid_argument("grammar: no rule named root");
    for (Rule& rule : rules) PS_RETURN_IF_ERROR(resolve(rule.body, seen));
    return rules;
  }

 private:
  bool eof() const { return pos_ >= text_.size(); }
  char peek() const { return eof() ? '\0' : text_[pos_]; }

  // "grammar: line L column C: what" at byte offset `at`.
  Status error_at(std::size_t at, const std::string& what) const {
    std::size_t line = 1;
    std::size_t column = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return invalid_argument("grammar: line " + std::to_string(line) + " column " +
                            std::to_string(column) + ": " + what);
  }
  Status error(const std::string& what) const { return error_at(pos_, what); }

  void skip_space() {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string name() {
    const std::size_t begin = pos_;
    while (!eof() && is_name_char(peek())) ++pos_;
    return std::string(text_.substr(begin, pos_ - begin));
  }

  // A `name ::=` starts here (the current rule has ended).
  bool at_rule_start() {
    const std::size_t saved = pos_;
    const bool named = !name().empty();
    skip_space();
    const bool starts = named && text_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return starts;
  }

  Result<Node> alternates(bool nested) {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    for (;;) {
      PS_ASSIGN_OR_RETURN(Node seq, sequence(nested));
      alt.children.push_back(std::move(seq));
      skip_space();
      if (peek() != '|') break;
      ++pos_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Result<Node> sequence(bool nested) {
    Node seq;
    seq.kind = Node::Kind::kSeq;
    for (;;) {
      skip_space();
      if (eof() || peek() == '|') break;
      if (peek() == ')') {
        if (nested) break;
        return error("unmatched ')'");
      }
      if (!nested && at_rule_start()) break;
      PS_ASSIGN_OR_RETURN(Node element, this->element());
      for (;;) {
        skip_space();
        const char q = peek();
        if (q != '*' && q != '+' && q != '?' && q != '{') break;
        Node repeat;
        repeat.kind = Node::Kind::kRepeat;
        if (q == '{') {
          PS_RETURN_IF_ERROR(counts(repeat));
        } else {
          ++pos_;
          repeat.min = q == '+' ? 1 : 0;
          repeat.max = q == '?' ? 1 : -1;
        }
        repeat.children.push_back(std::move(element));
        element = std::move(repeat);
      }
      seq.children.push_back(std::move(element));
    }
    return seq;
  }

  // {m} {m,} {m,n} {,n} at pos_.
  Status counts(Node& repeat) {
    const std::size_t at = pos_++;
    const auto number = [&]() -> std::optional<int64_t> {
      skip_space();
      if (eof() || peek() < '0' || peek() > '9') return std::nullopt;
      int64_t v = 0;
      while (!eof() && peek() >= '0' && peek() <= '9') {
        v = v * 10 + (peek() - '0');
        if (v > kMaxRepeatCount) v = kMaxRepeatCount + 1;
        ++pos_;
      }
      return v;
    };
    const std::optional<int64_t> m = number();
    skip_space();
    std::optional<int64_t> n = m;
    if (peek() == ',') {
      ++pos_;
      n = number();
      skip_space();
    } else if (!m) {
      return error("expected a count in {...}");
    }
    if (peek() != '}') return error("expected } closing the repetition count");
    ++pos_;
    repeat.min = m.value_or(0);
    repeat.max = n.value_or(-1);
    if (repeat.min > kMaxRepeatCount || repeat.max > kMaxRepeatCount) {
      return error_at(at, "repetition count over " + std::to_string(kMaxRepeatCount));
    }
    if (repeat.max >= 0 && repeat.max < repeat.min) {
      return error_at(at, "repetition {" + std::to_string(repeat.min) + "," +
                              std::to_string(repeat.max) + "}: the maximum is below the minimum");
    }
    return ok_status();
  }

  Result<Node> element() {
    Node node;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      node.kind = Node::Kind::kText;
      for (;;) {
        if (eof()) return error("unterminated literal");
        if (peek() == '"') break;
        PS_ASSIGN_OR_RETURN(char32_t cp, code_point());
        node.text.push_back(cp);
      }
      ++pos_;
      return node;
    }
    if (c == '[') {
      const std::size_t at = pos_++;
      node.kind = Node::Kind::kClass;
      if (peek() == '^') {
        node.negated = true;
        ++pos_;
      }
      for (;;) {
        if (eof()) return error_at(at, "unterminated character class");
        if (peek() == ']') break;
        PS_ASSIGN_OR_RETURN(char32_t lo, code_point());
        char32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
          ++pos_;
          PS_ASSIGN_OR_RETURN(hi, code_point());
          if (hi < lo) return error("reversed range in a character class");
        }
        node.ranges.emplace_back(lo, hi);
      }
      ++pos_;
      if (node.ranges.empty()) {
        if (!node.negated) return error_at(at, "empty character class");
        node.kind = Node::Kind::kAny;  // [^]: any code point
      }
      return node;
    }
    if (c == '.') {
      ++pos_;
      node.kind = Node::Kind::kAny;
      return node;
    }
    if (c == '(') {
      ++pos_;
      skip_space();
      if (peek() == '=') {
        return unimplemented(error("lookahead assertions (= ...) are not supported").message());
      }
      PS_ASSIGN_OR_RETURN(node, alternates(/*nested=*/true));
      skip_space();
      if (peek() != ')') return error("expected ')'");
      ++pos_;
      return node;
    }
    if (is_name_char(c)) {
      node.kind = Node::Kind::kRef;
      node.pos = pos_;
      node.name = name();
      return node;
    }
    return error(std::string("expected a literal, a character class, '.', a rule name or '(', "
                             "got '") +
                 c + "'");
  }

  // One code point of a literal or class, escapes decoded.
  Result<char32_t> code_point() {
    const std::size_t at = pos_;
    if (peek() != '\\') {
      char32_t cp = 0;
      const std::size_t n = tokenizer::valid_sequence_length(text_.substr(pos_), &cp);
      if (n == 0) return error("invalid UTF-8");
      pos_ += n;
      return cp;
    }
    ++pos_;
    if (eof()) return error_at(at, "a backslash at the end");
    const char e = text_[pos_++];
    switch (e) {
      case 'n':
        return U'\n';
      case 'r':
        return U'\r';
      case 't':
        return U'\t';
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
        return static_cast<char32_t>(e);
      default:
        break;
    }
    const int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits == 0) return error_at(at, std::string("unknown escape \\") + e);
    const std::optional<uint32_t> hex =
        detail::parse_hex(text_, pos_, static_cast<std::size_t>(digits));
    if (!hex) {
      return error_at(at,
                      std::string("\\") + e + " needs " + std::to_string(digits) + " hex digits");
    }
    pos_ += static_cast<std::size_t>(digits);
    const uint32_t v = *hex;
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
      return error_at(at,
                      std::string(text_.substr(at, pos_ - at)) + ": not a Unicode scalar value");
    }
    return static_cast<char32_t>(v);
  }

  Status resolve(Node& node, const std::map<std::string, std::size_t>& rules) const {
    if (node.kind == Node::Kind::kRef) {
      const auto it = rules.find(node.name);
      if (it == rules.end()) return error_at(node.pos, "rule \"" + node.name + "\" is not defined");
      node.rule = static_cast<int>(it->second);
    }
    for (Node& child : node.children) PS_RETURN_IF_ERROR(resolve(child, rules));
    return ok_status();
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

// A code point as a regex literal outside a class.
void append_literal(char32_t c, std::string& out) {
  static constexpr std::string_view kMeta = "\\.[](){}|*+?^$";
  if (c < 0x80) {
    const char b = static_cast<char>(c);
    if (kMeta.find(b) != std::string_view::npos) {
      out += '\\';
      out += b;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += b;
    }
    return;
  }
  tokenizer::append_utf8(c, out);
}

// A code point inside a class: letters and digits as they are, the rest as \UXXXXXXXX.
void append_class_member(char32_t c, std::string& out) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
    out += static_cast<char>(c);
    return;
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  out += "\\U";
  for (int shift = 28; shift >= 0; shift -= 4) out += kHex[(c >> shift) & 15];
}

class Expander {
 public:
  explicit Expander(const std::vector<Rule>& rules)
      : rules_(rules), open_(rules.size(), 0), memo_(rules.size()) {
    find_cycles();
  }

  Result<std::string> root() {
    std::size_t root = 0;
    while (rules_[root].name != "root") ++root;
    Node ref;
    ref.kind = Node::Kind::kRef;
    ref.rule = static_cast<int>(root);
    PS_ASSIGN_OR_RETURN(std::optional<std::string> regex, expand(ref));
    if (!regex) {
      return invalid_argument(
          "grammar: root matches nothing (every alternative nests a rule more "
          "than " +
          std::to_string(kMaxEbnfNesting) + " deep)");
    }
    return std::move(*regex);
  }

 private:
  using Expansion = std::optional<std::string>;  // nullopt: matches nothing

  // in_cycle_[r]: rule r reaches itself through references.
  void find_cycles() {
    const std::size_t n = rules_.size();
    std::vector<std::vector<int>> refs(n);
    for (std::size_t r = 0; r < n; ++r) collect_refs(rules_[r].body, refs[r]);
    in_cycle_.assign(n, false);
    for (std::size_t r = 0; r < n; ++r) {
      std::vector<bool> seen(n, false);
      std::vector<int> todo(refs[r].begin(), refs[r].end());
      while (!todo.empty()) {
        const int x = todo.back();
        todo.pop_back();
        if (x == static_cast<int>(r)) {
          in_cycle_[r] = true;
          break;
        }
        if (seen[static_cast<std::size_t>(x)]) continue;
        seen[static_cast<std::size_t>(x)] = true;
        for (int y : refs[static_cast<std::size_t>(x)]) todo.push_back(y);
      }
    }
  }
  static void collect_refs(const Node& node, std::vector<int>& out) {
    if (node.kind == Node::Kind::kRef) out.push_back(node.rule);
    for (const Node& child : node.children) collect_refs(child, out);
  }

  Status charge(std::size_t bytes) {
    produced_ += bytes;
    if (produced_ > 16 * kMaxEbnfRegexBytes) return too_large();
    return ok_status();
  }
  static Status too_large() {
    return invalid_argument(
        "grammar: too complex: the expansion exceeds " + std::to_string(kMaxEbnfRegexBytes) +
        " bytes of regex (recursion is unrolled " + std::to_string(kMaxEbnfNesting) + " deep)");
  }

  Result<Expansion> expand(const Node& node) {
    switch (node.kind) {
      case Node::Kind::kText: {
        std::string out;
        for (char32_t c : node.text) append_literal(c, out);
        return Expansion(std::move(out));
      }
      case Node::Kind::kAny:
        return Expansion("(?:.|\\n)");
      case Node::Kind::kClass: {
        std::string out = node.negated ? "[^" : "[";
        for (const auto& [lo, hi] : node.ranges) {
          append_class_member(lo, out);
          if (hi != lo) {
            out += '-';
            append_class_member(hi, out);
          }
        }
        return Expansion(out + "]");
      }
      case Node::Kind::kRef:
        return expand_rule(static_cast<std::size_t>(node.rule));
      case Node::Kind::kSeq: {
        std::string out;
        for (const Node& child : node.children) {
          PS_ASSIGN_OR_RETURN(Expansion part, expand(child));
          if (!part) return Expansion();
          out += *part;
        }
        PS_RETURN_IF_ERROR(charge(out.size()));
        return Expansion(std::move(out));
      }
      case Node::Kind::kAlt: {
        std::vector<std::string> alternatives;
        for (const Node& child : node.children) {
          PS_ASSIGN_OR_RETURN(Expansion part, expand(child));
          if (part) alternatives.push_back(std::move(*part));
        }
        if (alternatives.empty()) return Expansion();
        if (alternatives.size() == 1) return Expansion(std::move(alternatives[0]));
        std::string out = "(?:";
        for (std::size_t i = 0; i < alternatives.size(); ++i) {
          out += (i ? "|" : "") + alternatives[i];
        }
        out += ")";
        PS_RETURN_IF_ERROR(charge(out.size()));
        return Expansion(std::move(out));
      }
      case Node::Kind::kRepeat: {
        PS_ASSIGN_OR_RETURN(Expansion inner, expand(node.children[0]));
        if (!inner) return node.min == 0 ? Expansion("") : Expansion();
        if (inner->empty() || node.max == 0) return Expansion("");
        std::string out = "(?:" + *inner + ")";
        if (node.min == 0 && node.max < 0) {
          out += "*";
        } else if (node.min == 1 && node.max < 0) {
          out += "+";
        } else if (node.min == 0 && node.max == 1) {
          out += "?";
        } else if (node.max < 0) {
          out += "{" + std::to_string(node.min) + ",}";
        } else if (node.min == node.max) {
          out += "{" + std::to_string(node.min) + "}";
        } else {
          out += "{" + std::to_string(node.min) + "," + std::to_string(node.max) + "}";
        }
        PS_RETURN_IF_ERROR(charge(out.size()));
        return Expansion(std::move(out));
      }
    }
    return Expansion();
  }

  Result<Expansion> expand_rule(std::size_t r) {
    if (!in_cycle_[r] && memo_[r]) return *memo_[r];
    if (open_[r] >= kMaxEbnfNesting) return Expansion();
    ++open_[r];
    Result<Expansion> body = expand(rules_[r].body);
    --open_[r];
    if (!body.ok()) return body;
    if (body->has_value() && (*body)->size() > kMaxEbnfRegexBytes) return too_large();
    if (!in_cycle_[r]) memo_[r] = *body;
    return body;
  }

  const std::vector<Rule>& rules_;
  std::vector<int> open_;
  std::vector<std::optional<Expansion>> memo_;
  std::vector<bool> in_cycle_;
  std::size_t produced_ = 0;
};

}  // namespace

Result<std::string> ebnf_to_regex(std::string_view grammar) {
  Parser parser(grammar);
  PS_ASSIGN_OR_RETURN(std::vector<Rule> rules, parser.parse());
  Expander expander(rules);
  return expander.root();
}

}  // namespace packserve::grammar
