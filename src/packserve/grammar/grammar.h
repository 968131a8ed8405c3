// grammar.h: structured outputs. A Grammar is a compiled constraint on the bytes a request may
// generate; a Matcher walks one request's output through it and says which tokens of the
// model's vocabulary may come next (a bit mask the sampler applies before drawing).
//
// Kinds (vLLM's structured outputs / OpenAI's response_format):
//   - regex: the whole output matches the pattern (grammar/regex.h's dialect);
//   - choice: the output is exactly one of the given strings;
//   - json_object: the output is one JSON object (any keys, values nested up to
//     kMaxJsonDepth), RFC 8259, whitespace between tokens at most kMaxWhitespaceRun bytes in a
//     row, nothing after the closing brace;
//   - json_schema: compiled to a regex (grammar/json_schema.h) and matched as one, its
//     free-form values by json_object's recognizer (any depth to kMaxJsonDepth);
//   - structural_tag: free text in which each trigger starts a structure: a begin string,
//     JSON of a schema, an end string;
//   - ebnf: a GBNF / EBNF grammar, compiled to a regex (grammar/ebnf.h, recursion unrolled
//     kMaxEbnfNesting deep) and matched as one.
// A token is allowed when its bytes keep the output a prefix of some match; the model's EOS
// tokens are allowed exactly when the output so far is a complete match. A token with no bytes
// (a special token other than EOS, an id the tokenizer lacks) is never allowed.
//
// Thread-safety: a Grammar is immutable after compilation except for its cache of masks, which
// is locked, so requests on several threads share one. A Matcher is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::grammar {

inline constexpr int kMaxJsonDepth = 32;
inline constexpr int kMaxWhitespaceRun = 20;
// Grammar::structural_tag's limits: structures, triggers, and bytes of a begin, end or trigger.
inline constexpr std::size_t kMaxStructuralTagStructures = 64;
inline constexpr std::size_t kMaxStructuralTagTriggers = 16;
inline constexpr std::size_t kMaxStructuralTagBytes = 256;

// The tokens of a model's vocabulary as raw bytes (what each decodes to on its own).
class Vocabulary {
 public:
  // token_bytes[id]: the token's bytes; an empty string marks a token that is never allowed
  // (special tokens, ids the tokenizer lacks). eos_ids: allowed exactly when the output is a
  // complete match; each in [0, token_bytes.size()).
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);
  ~Vocabulary();
  Vocabulary(const Vocabulary&) = delete;
  Vocabulary& operator=(const Vocabulary&) = delete;

  int32_t size() const;                      // number of token ids (mask bits)
  int32_t mask_words() const;                // (size() + 31) / 32
  std::string_view bytes(int32_t id) const;  // empty for a token never allowed
  bool is_eos(int32_t id) const;

  struct Impl;  // the byte trie the masks walk (grammar.cc)
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Matcher;

class Grammar {
 public:
  virtual ~Grammar() = default;
  // kInvalidArgument naming the position and what was expected, e.g.
  // "regex: position 4: unmatched ')'"; kUnimplemented for a construct the dialect lacks
  // ("regex: position 2: lookahead (?= is not supported").
  static Result<std::shared_ptr<const Grammar>> regex(std::string_view pattern,
                                                      std::shared_ptr<const Vocabulary> vocab);
  // choices: at least one; the output is exactly one of them (they may be empty strings).
  static Result<std::shared_ptr<const Grammar>> choice(std::span<const std::string> choices,
                                                       std::shared_ptr<const Vocabulary> vocab);
  // allow_whitespace false: no whitespace between tokens (vLLM's disable_any_whitespace).
  static Result<std::shared_ptr<const Grammar>> json_object(std::shared_ptr<const Vocabulary> vocab,
                                                            bool allow_whitespace = true);
  // The schema as JSON text (object key order matters: properties are generated in the order
  // written). Errors name the JSON pointer of the offending keyword (json_schema.h).
  // whitespace: JsonSchemaOptions::whitespace (json_schema.h), the regex of the whitespace
  // between tokens; a pattern the regex compiler rejects is kInvalidArgument naming
  // "whitespace".
  static Result<std::shared_ptr<const Grammar>> json_schema(
      std::string_view schema_json, std::shared_ptr<const Vocabulary> vocab,
      std::optional<std::string> whitespace = std::nullopt);
  // A regex around JSON schemas' regexes whose free-form values are holes: `pattern` holds
  // json_schema_to_regex's output compiled with JsonSchemaOptions::free_form_holes (and the
  // default whitespace, or none: allow_whitespace false) inside any regex (a tool call's
  // syntax), and each hole is any JSON value, as in Grammar::json_schema; `spelt_out` is the
  // same regex built from json_schema_to_regex without holes, matched instead when a hole is
  // ambiguous (json_schema.h). Errors: the regex compiler's.
  static Result<std::shared_ptr<const Grammar>> regex_with_json_values(
      std::string_view pattern, std::string_view spelt_out, std::shared_ptr<const Vocabulary> vocab,
      bool allow_whitespace = true);
  // vLLM's / xgrammar's structural tag, as JSON text: {"type": "structural_tag" (optional),
  // "structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}, or xgrammar's newer
  // {"format": {"type": "triggered_tags", "triggers", "tags": [{"begin", "content": {"type":
  // "json_schema", "json_schema"}, "end"}], "at_least_one", "stop_after_first"}} (other
  // formats and contents: kUnimplemented; at_least_one: the output opens with a tag). The output is
  // free text (any bytes, EOS anywhere) until one of the triggers appears in it; from there it must
  // go on as one of the structures whose begin starts with that trigger, its begin string, then
  // JSON its schema allows (as json_schema: free-form values by the recognizer), then its end
  // string, after which free text goes on (a structure ends where its text is first complete; with
  // xgrammar's "stop_after_first": true the output ends there instead). Every begin must start with
  // a trigger, every trigger start some begin, and no trigger hold another except at its start (the
  // shorter would always open first, or at the same byte: which structure starts would be
  // ambiguous); begin, end and triggers are non-empty strings of at most kMaxStructuralTagBytes,
  // without U+0001. kInvalidArgument naming the field
  // ("structural_tag: structures[1].end: required"); a schema's errors are json_schema's,
  // after "structural_tag: structures[i].schema: ".
  static Result<std::shared_ptr<const Grammar>> structural_tag(
      std::string_view tag_json, std::shared_ptr<const Vocabulary> vocab);
  // GBNF / EBNF text whose `root` rule the output matches. Errors name the line and column
  // (ebnf.h).
  static Result<std::shared_ptr<const Grammar>> ebnf(std::string_view grammar,
                                                     std::shared_ptr<const Vocabulary> vocab);
  // vLLM's allowed_token_ids: only the `allowed` tokens, within what `inner` allows (null: any
  // token sequence, every one a complete match; an EOS token then only when listed, and it is
  // the engine's stop tokens that end the output). Special tokens are allowed when listed.
  // kInvalidArgument naming `allowed_token_ids[i]` for an id outside the vocabulary, or for an
  // empty list.
  static Result<std::shared_ptr<const Grammar>> restrict_tokens(
      std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
      std::span<const int32_t> allowed);
  // vLLM's bad_words (as token sequences): token t is not allowed where the output so far,
  // then t, ends with one of `sequences` (a one-token sequence bans its token everywhere);
  // otherwise what `inner` allows (null: any token, every output a complete match). The
  // sequences look at the output only, not the prompt. kInvalidArgument naming
  // `bad_words_token_ids[i]` (or `[i][j]`) for an empty list or sequence, or an id outside the
  // vocabulary.
  static Result<std::shared_ptr<const Grammar>> ban_sequences(
      std::shared_ptr<const Grammar> inner, std::shared_ptr<const Vocabulary> vocab,
      std::span<const std::vector<int32_t>> sequences);

  // A matcher at the start of the output.
  virtual std::unique_ptr<Matcher> matcher() const = 0;
  virtual const Vocabulary& vocabulary() const = 0;
};

class Matcher {
 public:
  virtual ~Matcher() = default;
  // Sets bit (t % 32) of mask[t / 32] iff token t may come next, clears every other bit
  // (mask.size() == vocabulary().mask_words()); returns the number of allowed tokens.
  virtual int64_t fill_mask(std::span<uint32_t> mask) = 0;
  // Moves past token t. kInvalidArgument ("token 17 ("}x") is not allowed here") when t is
  // not allowed; the state is then unchanged.
  virtual Status accept(int32_t token) = 0;
  // The output so far is a complete match.
  virtual bool accepting() const = 0;
  // Nothing may follow: an EOS token was accepted, or the output is a complete match that no
  // byte extends. The request ends here.
  virtual bool finished() const = 0;
};

}  // namespace packserve::grammar
