// pre_tokenizer.cc: see pre_tokenizer.h. The behaviours follow HF's
// SplitDelimiterBehavior exactly, including its treatment of consecutive matches.
#include "packserve/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "packserve/tokenizer/normalizer.h"

namespace packserve::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(error_code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
}

// One match-data block per thread, large enough for the whole-match offsets we read.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

std::size_t utf8_char_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  return 2;
}

struct Segment {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

// HF's MergedWithNext: walking from the end, a match that does not follow another match
// (in that backwards order) is glued to the start of the piece after it.
void merge_with_next(std::vector<Segment>& segments) {
  std::vector<Segment> reversed;
  reversed.reserve(segments.size());
  bool previous_match = false;
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    if (it->is_match && !previous_match && !reversed.empty()) {
      reversed.back().begin = it->begin;
    } else {
      reversed.push_back(*it);
    }
    previous_match = it->is_match;
  }
  segments.assign(reversed.rbegin(), reversed.rend());
}

// Oniguruma's \s and \S mean Unicode White_Space; PCRE2's UCP \s also matches U+180E
// (White_Space before Unicode 6.3). Rewrites both, inside and outside classes, leaving other
// escapes and \Q...\E quoting untouched.
std::string rewrite_space_escapes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[i + 1];
    if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else if (next == 'Q') {
      const std::size_t end = pattern.find("\\E", i + 2);
      const std::size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out.append(pattern.substr(i, stop - i));
      i = stop - 1;
      continue;
    } else {
      out.push_back('\\');
      out.push_back(next);
    }
    ++i;
  }
  return out;
}

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  const std::string rewritten = literal ? std::string(pattern) : rewrite_space_escapes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL admits no UCP (nothing in a literal depends on character properties).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("regex \"" + std::string(pattern) + "\": " + pcre2_message(error_code) +
                            " at offset " + std::to_string(error_offset) +
                            ": expected a PCRE2-compatible pattern");
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  // JIT is an optimization: when it is unavailable pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Regex regex;
  regex.code_ = std::move(holder);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Status Regex::find_all(std::string_view subject,
                       std::vector<std::pair<std::size_t, std::size_t>>& matches) const {
  pcre2_match_data* match_data = thread_match_data();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t offset = 0;
  while (offset < subject.size()) {
    int rc = pcre2_match(code_->code, data, subject.size(), offset, PCRE2_NO_UTF_CHECK, match_data,
                         nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, data, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       match_data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return internal_error("regex \"" + pattern_ + "\": " + pcre2_message(rc) +
                            " at subject offset " + std::to_string(offset));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const std::size_t begin = ovector[0];
    const std::size_t end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      offset = end;
    } else {
      // An empty match yields no piece; step over one character so the scan progresses.
      offset = begin + utf8_char_length(static_cast<unsigned char>(subject[begin]));
    }
  }
  return ok_status();
}

void PreTokenizer::add_split(Regex regex, SplitBehavior behavior, bool invert) {
  Step step;
  step.kind = Kind::kSplit;
  step.regex = std::move(regex);
  step.behavior = behavior;
  step.invert = invert;
  steps_.push_back(std::move(step));
}

Status PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  if (add_prefix_space) {
    Step step;
    step.kind = Kind::kPrefixSpace;
    steps_.push_back(std::move(step));
  }
  if (use_regex) {
    PS_ASSIGN_OR_RETURN(Regex regex, Regex::compile(kGpt2SplitPattern, /*literal=*/false));
    add_split(std::move(regex), SplitBehavior::kIsolated, /*invert=*/false);
  }
  return ok_status();
}

Status PreTokenizer::add_metaspace(std::string replacement, Prepend prepend, bool split) {
  if (replacement.empty()) return invalid_argument("Metaspace replacement: expected a character");
  Step step;
  step.kind = Kind::kMetaspace;
  step.replacement = replacement;
  step.prepend = prepend;
  steps_.push_back(std::move(step));
  if (split) {
    PS_ASSIGN_OR_RETURN(Regex regex, Regex::compile(replacement, /*literal=*/true));
    add_split(std::move(regex), SplitBehavior::kMergedWithNext, /*invert=*/false);
  }
  return ok_status();
}

Status PreTokenizer::run(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& storage, bool at_input_start) const {
  pieces.clear();
  if (!text.empty()) pieces.push_back(text);
  std::vector<std::string_view> next;
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::vector<Segment> segments;
  std::vector<Segment> merged;
  for (const Step& step : steps_) {
    next.clear();
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      const std::string_view piece = pieces[p];
      if (step.kind == Kind::kPrefixSpace) {
        if (piece.front() == ' ') {
          next.push_back(piece);
        } else {
          storage.push_back(" " + std::string(piece));
          next.push_back(storage.back());
        }
        continue;
      }
      if (step.kind == Kind::kMetaspace) {
        std::string replaced = replace_all(piece, " ", step.replacement);
        const bool prepend = step.prepend == Prepend::kAlways ||
                             (step.prepend == Prepend::kFirst && at_input_start && p == 0);
        if (prepend && !replaced.starts_with(step.replacement)) {
          replaced.insert(0, step.replacement);
        }
        storage.push_back(std::move(replaced));
        next.push_back(storage.back());
        continue;
      }
      matches.clear();
      PS_RETURN_IF_ERROR(step.regex.find_all(piece, matches));
      // Segments cover the piece: gaps are non-matches (HF Pattern::find_matches).
      segments.clear();
      std::size_t previous_end = 0;
      for (const auto& [begin, end] : matches) {
        if (begin > previous_end) segments.push_back({previous_end, begin, false});
        segments.push_back({begin, end, true});
        previous_end = end;
      }
      if (previous_end < piece.size()) segments.push_back({previous_end, piece.size(), false});
      if (step.invert) {
        for (Segment& s : segments) s.is_match = !s.is_match;
      }
      merged.clear();
      bool previous_match = false;
      for (const Segment& s : segments) {
        switch (step.behavior) {
          case SplitBehavior::kRemoved:
            if (!s.is_match) merged.push_back(s);
            break;
          case SplitBehavior::kIsolated:
            merged.push_back(s);
            break;
          case SplitBehavior::kMergedWithPrevious:
            if (s.is_match && !previous_match && !merged.empty()) {
              merged.back().end = s.end;
            } else {
              merged.push_back(s);
            }
            break;
          case SplitBehavior::kMergedWithNext:
            merged.push_back(s);  // resolved below, walking backwards
            break;
          case SplitBehavior::kContiguous:
            if (s.is_match == previous_match && !merged.empty()) {
              merged.back().end = s.end;
            } else {
              merged.push_back(s);
            }
            break;
        }
        previous_match = s.is_match;
      }
      if (step.behavior == SplitBehavior::kMergedWithNext) merge_with_next(merged);
      for (const Segment& s : merged) next.push_back(piece.substr(s.begin, s.end - s.begin));
    }
    pieces.swap(next);
  }
  return ok_status();
}

}  // namespace packserve::tokenizer
