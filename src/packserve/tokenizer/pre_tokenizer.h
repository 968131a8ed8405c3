// pre_tokenizer.h: splits normalized text into the pieces ("words") that BPE encodes
// independently, as Hugging Face's pre_tokenizer does for byte-level models: a sequence of
// Split steps (a PCRE2 regex compiled in UTF + UCP mode with JIT, or a literal string, and a
// behaviour saying what happens to the matches) and ByteLevel steps (optional prefix space,
// optional GPT-2 split regex; the byte mapping itself is left to the BPE model, which works
// on raw bytes).
// Regex dialect: tokenizer.json patterns are written for Oniguruma; the constructs used by
// the Llama-3 / Qwen2 / Qwen3 / GPT-2 patterns ((?i:...), \p{L}, \p{N}, (?!...), {1,3}) mean
// the same in PCRE2; \s and \S are rewritten to \p{White_Space} / \P{White_Space}, Oniguruma's
// meaning (PCRE2's own \s also matches U+180E). Tested in pre_tokenizer_test.
// Invariants: pieces are non-empty and, concatenated in order, give the input minus removed
// matches plus added prefix spaces.
// Thread-safety: const methods are safe to call concurrently (match data is per thread).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::tokenizer {

// What a Split step does with the regex matches (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// A compiled PCRE2 pattern (UTF, UCP, JIT when available). Copies share the compiled code.
class Regex {
 public:
  // `literal`: the pattern is a plain string to find, not a regex. Errors name the PCRE2
  // message and the offset in the pattern.
  static Result<Regex> compile(std::string_view pattern, bool literal);

  // All non-overlapping, non-empty matches of the pattern in `subject` (valid UTF-8) as
  // [begin, end) byte offsets, leftmost first. kInternal when PCRE2 fails (e.g. a resource
  // limit), naming the error.
  Status find_all(std::string_view subject,
                  std::vector<std::pair<std::size_t, std::size_t>>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

class PreTokenizer {
 public:
  void add_split(Regex regex, SplitBehavior behavior, bool invert);
  // HF ByteLevel pre-tokenizer: prepend ' ' to each piece that does not start with one
  // (add_prefix_space), then split with the GPT-2 pattern (use_regex).
  Status add_byte_level(bool add_prefix_space, bool use_regex);
  // HF Metaspace pre-tokenizer (SentencePiece BPE converted without the legacy normalizer):
  // every ' ' becomes `replacement`; a piece not starting with it gets it prepended (kAlways),
  // only the piece at the very start of the input (kFirst: not text after an added token), or
  // none (kNever); with `split`, pieces are then cut before each `replacement`
  // (MergedWithNext).
  enum class Prepend { kAlways, kFirst, kNever };
  Status add_metaspace(std::string replacement, Prepend prepend, bool split);
  bool empty() const { return steps_.empty(); }

  // Splits `text` (valid UTF-8) into pieces. Pieces view into `text` or into strings that are
  // appended to `storage`, which must outlive the pieces. `pieces` is cleared first.
  // `at_input_start`: `text` begins the whole input (Metaspace's kFirst).
  Status run(std::string_view text, std::vector<std::string_view>& pieces,
             std::deque<std::string>& storage, bool at_input_start = false) const;

 private:
  enum class Kind { kSplit, kPrefixSpace, kMetaspace };
  struct Step {
    Kind kind = Kind::kSplit;
    Regex regex;  // kSplit only
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    std::string replacement;            // kMetaspace only
    Prepend prepend = Prepend::kNever;  // kMetaspace only
  };
  std::vector<Step> steps_;
};

// The GPT-2 split pattern that ByteLevel(use_regex = true) applies.
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace packserve::tokenizer
