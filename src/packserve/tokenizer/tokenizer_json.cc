// tokenizer_json.cc: builds a TokenizerImpl from Hugging Face tokenizer.json text. Supported:
// model BPE (vocab, merges as "a b" strings or ["a", "b"] pairs, ignore_merges, unk_token);
// normalizer null | NFC | NFD | NFKC | NFKD | Sequence; pre_tokenizer Split (Regex or String
// pattern, any behavior, invert) | ByteLevel | Sequence, which must contain a ByteLevel step;
// post_processor null | ByteLevel | TemplateProcessing (single) | Sequence; decoder ByteLevel;
// added_tokens. SentencePiece-converted BPE (Llama-2, Mistral up to v0.3), recognised by its
// decoder (Sequence of Replace U+2581 -> " ", ByteFallback, Fuse, Strip " " start n): vocabulary
// strings as text, byte_fallback and fuse_unk, and either the legacy conversion's normalizer
// Prepend / Replace (literal) or (legacy = false, Mistral v0.3's) the Metaspace pre-tokenizer
// (replacement U+2581, any prepend_scheme, split or not). Anything else is a kInvalidArgument
// naming the file, the field and what is expected, never a silent default. nlohmann-json is used
// without exceptions escaping.
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "packserve/tokenizer/byte_level.h"
#include "packserve/tokenizer/normalizer.h"
#include "packserve/tokenizer/tokenizer_impl.h"

namespace packserve::tokenizer {
namespace {

using Json = nlohmann::json;

// SentencePiece's meta space (U+2581): a space in its vocabulary strings.
constexpr std::string_view kMetaSpace = "\u2581";

// A SentencePiece vocabulary string's text: "<0xXX>" is that byte, U+2581 a space.
std::string sentencepiece_token_text(const std::string& text) {
  if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>' &&
      std::isxdigit(static_cast<unsigned char>(text[3])) &&
      std::isxdigit(static_cast<unsigned char>(text[4]))) {
    return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
  }
  return replace_all(text, kMetaSpace, " ");
}

class Loader {
 public:
  Loader(std::string source, const TokenizerLoadOptions& options)
      : source_(std::move(source)), options_(options) {}

  Result<std::shared_ptr<const TokenizerImpl>> load(std::string_view text);

 private:
  Status error(const std::string& field, const std::string& message) const {
    return invalid_argument(source_ + ": " + field + ": " + message);
  }
  static std::string describe(const Json& value) {
    std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  }
  // Field `key` of object `object` (path `field`), or nullptr when absent or null.
  static const Json* optional_member(const Json& object, const char* key) {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Result<const Json*> required_object(const Json& object, const char* key,
                                      const std::string& field) const;
  Result<std::string> required_string(const Json& object, const char* key,
                                      const std::string& field) const;
  Result<bool> optional_bool(const Json& object, const char* key, const std::string& field,
                             bool fallback) const;
  Result<TokenId> token_id(const Json& value, const std::string& field) const;

  Status load_model(const Json& model, const std::string& field);
  Status load_added_tokens(const Json& root);
  Status load_normalizer(const Json& node, const std::string& field);
  Status load_pre_tokenizer(const Json& node, const std::string& field);
  Status load_metaspace(const Json& node, const std::string& field);
  Status load_post_processor(const Json& node, const std::string& field);
  Status load_decoder(const Json& node, const std::string& field);
  Status build_decode_table();
  // A vocabulary string as the BPE model's bytes: through the byte-level alphabet, or as is
  // for a SentencePiece tokenizer.
  std::optional<std::string> model_bytes(const std::string& text) const {
    if (impl_->sentencepiece) return text;
    return byte_level_to_bytes(text);
  }

  std::string source_;
  TokenizerLoadOptions options_;
  std::shared_ptr<TokenizerImpl> impl_ = std::make_shared<TokenizerImpl>();
  bool has_byte_level_ = false;
  // Vocabulary tokens as written (byte-level alphabet), for the decode table.
  std::vector<std::pair<std::string, TokenId>> vocab_strings_;
  // The post-processor's special token ids with their fields, checked against the vocabulary
  // and added tokens once the decode table is built.
  std::vector<std::pair<TokenId, std::string>> template_ids_;
};

Result<const Json*> Loader::required_object(const Json& object, const char* key,
                                            const std::string& field) const {
  const Json* value = optional_member(object, key);
  if (value == nullptr) return error(field, "missing; expected an object");
  if (!value->is_object()) return error(field, "expected an object, got " + describe(*value));
  return value;
}

Result<std::string> Loader::required_string(const Json& object, const char* key,
                                            const std::string& field) const {
  const Json* value = optional_member(object, key);
  if (value == nullptr) return error(field, "missing; expected a string");
  if (!value->is_string()) return error(field, "expected a string, got " + describe(*value));
  return value->get<std::string>();
}

Result<bool> Loader::optional_bool(const Json& object, const char* key, const std::string& field,
                                   bool fallback) const {
  const Json* value = optional_member(object, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return error(field, "expected true or false, got " + describe(*value));
  return value->get<bool>();
}

Result<TokenId> Loader::token_id(const Json& value, const std::string& field) const {
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::int64_t>() > std::numeric_limits<TokenId>::max()) {
    return error(field, "expected a token id (an integer in [0, 2^31)), got " + describe(value));
  }
  return static_cast<TokenId>(value.get<std::int64_t>());
}

Status Loader::load_model(const Json& model, const std::string& field) {
  const Json* type = optional_member(model, "type");
  if (type != nullptr && (!type->is_string() || type->get<std::string>() != "BPE")) {
    return error(field + ".type", "expected \"BPE\", got " + describe(*type) +
                                      ": only byte-level BPE tokenizers are supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* value = optional_member(model, key);
    if (value != nullptr && !(value->is_string() && value->get<std::string>().empty())) {
      return error(field + "." + key, "expected null or \"\", got " + describe(*value) +
                                          ": not used by byte-level BPE, unsupported");
    }
  }
  PS_ASSIGN_OR_RETURN(const bool byte_fallback,
                      optional_bool(model, "byte_fallback", field + ".byte_fallback", false));
  if (byte_fallback && !impl_->sentencepiece) {
    return error(field + ".byte_fallback",
                 "expected false for a byte-level tokenizer (true needs the SentencePiece "
                 "decoder: Replace \"\u2581\" -> \" \", ByteFallback, Fuse, Strip)");
  }
  const Json* dropout = optional_member(model, "dropout");
  if (dropout != nullptr && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return error(field + ".dropout",
                 "expected null, got " + describe(*dropout) + ": BPE dropout is unsupported");
  }
  BpeOptions bpe;
  bpe.cache_capacity_words = options_.cache_capacity_words;
  bpe.char_symbols = impl_->sentencepiece;
  bpe.byte_fallback = byte_fallback;
  PS_ASSIGN_OR_RETURN(bpe.fuse_unk, optional_bool(model, "fuse_unk", field + ".fuse_unk", false));
  PS_ASSIGN_OR_RETURN(bpe.ignore_merges,
                      optional_bool(model, "ignore_merges", field + ".ignore_merges", false));

  PS_ASSIGN_OR_RETURN(const Json* vocab_json, required_object(model, "vocab", field + ".vocab"));
  BytesToId vocab;
  vocab.reserve(vocab_json->size());
  vocab_strings_.reserve(vocab_json->size());
  for (auto it = vocab_json->begin(); it != vocab_json->end(); ++it) {
    const std::string entry = field + ".vocab[\"" + it.key() + "\"]";
    PS_ASSIGN_OR_RETURN(const TokenId id, token_id(it.value(), entry));
    vocab_strings_.emplace_back(it.key(), id);
    // Tokens outside the byte-level alphabet cannot come out of BPE; they are decode-only.
    if (auto bytes = model_bytes(it.key())) vocab.emplace(std::move(*bytes), id);
  }
  if (const Json* unk = optional_member(model, "unk_token")) {
    if (!unk->is_string()) return error(field + ".unk_token", "expected a string or null");
    const auto bytes = model_bytes(unk->get<std::string>());
    const auto it = bytes ? vocab.find(*bytes) : vocab.end();
    if (it == vocab.end()) {
      return error(field + ".unk_token", describe(*unk) + " is not in " + field + ".vocab");
    }
    bpe.unk_id = it->second;
  }

  const Json* merges_json = optional_member(model, "merges");
  if (merges_json == nullptr || !merges_json->is_array()) {
    return error(field + ".merges", "expected an array of merges");
  }
  std::vector<BpeMerge> merges;
  merges.reserve(merges_json->size());
  for (std::size_t i = 0; i < merges_json->size(); ++i) {
    const Json& m = (*merges_json)[i];
    const std::string entry = field + ".merges[" + std::to_string(i) + "]";
    std::string left;
    std::string right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return error(entry, "expected \"left right\" (two tokens, one space), got " + describe(m));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return error(entry, "expected \"left right\" or [\"left\", \"right\"], got " + describe(m));
    }
    auto left_bytes = model_bytes(left);
    auto right_bytes = model_bytes(right);
    if (!left_bytes || !right_bytes) {
      return error(entry, "token outside the byte-level alphabet: " + describe(m));
    }
    merges.push_back(BpeMerge{std::move(*left_bytes), std::move(*right_bytes)});
  }
  auto created = BpeModel::create(std::move(vocab), merges, bpe);
  if (!created.ok()) return invalid_argument(source_ + ": " + created.status().message());
  impl_->model = std::move(created).value();
  return ok_status();
}

Status Loader::load_added_tokens(const Json& root) {
  const Json* tokens = optional_member(root, "added_tokens");
  if (tokens == nullptr) return ok_status();
  if (!tokens->is_array()) return error("added_tokens", "expected an array");
  for (std::size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    if (!t.is_object()) return error(field, "expected an object, got " + describe(t));
    AddedToken token;
    const Json* id = optional_member(t, "id");
    if (id == nullptr) return error(field + ".id", "missing; expected a token id");
    PS_ASSIGN_OR_RETURN(token.id, token_id(*id, field + ".id"));
    PS_ASSIGN_OR_RETURN(token.content, required_string(t, "content", field + ".content"));
    if (token.content.empty()) return error(field + ".content", "expected a non-empty string");
    PS_ASSIGN_OR_RETURN(token.special, optional_bool(t, "special", field + ".special", false));
    PS_ASSIGN_OR_RETURN(token.single_word,
                        optional_bool(t, "single_word", field + ".single_word", false));
    PS_ASSIGN_OR_RETURN(token.lstrip, optional_bool(t, "lstrip", field + ".lstrip", false));
    PS_ASSIGN_OR_RETURN(token.rstrip, optional_bool(t, "rstrip", field + ".rstrip", false));
    // HF's default: special tokens match the raw text, others the normalized text.
    PS_ASSIGN_OR_RETURN(token.normalized,
                        optional_bool(t, "normalized", field + ".normalized", !token.special));
    impl_->added_content_to_id[token.content] = token.id;
    impl_->added_tokens.push_back(std::move(token));
  }
  impl_->raw_splitter = AddedTokenSplitter(impl_->added_tokens, /*normalized=*/false);
  impl_->normalized_splitter = AddedTokenSplitter(impl_->added_tokens, /*normalized=*/true);
  return ok_status();
}

Status Loader::load_normalizer(const Json& node, const std::string& field) {
  if (!node.is_object()) return error(field, "expected an object or null");
  PS_ASSIGN_OR_RETURN(const std::string type, required_string(node, "type", field + ".type"));
  if (type == "Sequence") {
    const Json* list = optional_member(node, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return error(field + ".normalizers", "expected an array");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      PS_RETURN_IF_ERROR(
          load_normalizer((*list)[i], field + ".normalizers[" + std::to_string(i) + "]"));
    }
    return ok_status();
  }
  if (type == "NFC") {
    impl_->normalizer.add(NormalizationForm::kNfc);
  } else if (type == "NFD") {
    impl_->normalizer.add(NormalizationForm::kNfd);
  } else if (type == "NFKC") {
    impl_->normalizer.add(NormalizationForm::kNfkc);
  } else if (type == "NFKD") {
    impl_->normalizer.add(NormalizationForm::kNfkd);
  } else if (type == "Prepend") {
    PS_ASSIGN_OR_RETURN(std::string prefix, required_string(node, "prepend", field + ".prepend"));
    impl_->normalizer.add_prepend(std::move(prefix));
  } else if (type == "Replace") {
    PS_ASSIGN_OR_RETURN(const Json* pattern, required_object(node, "pattern", field + ".pattern"));
    const Json* literal = optional_member(*pattern, "String");
    if (literal == nullptr || !literal->is_string() || literal->get<std::string>().empty()) {
      return error(
          field + ".pattern",
          "expected {\"String\": non-empty string} (Regex patterns are unsupported), got " +
              describe(*pattern));
    }
    PS_ASSIGN_OR_RETURN(std::string content, required_string(node, "content", field + ".content"));
    impl_->normalizer.add_replace(literal->get<std::string>(), std::move(content));
  } else {
    return error(field + ".type",
                 "expected NFC, NFD, NFKC, NFKD, Prepend, Replace or Sequence, "
                 "got \"" +
                     type + "\": unsupported normalizer");
  }
  return ok_status();
}

// HF Metaspace (SentencePiece BPE converted with legacy = false): replacement U+2581 (the
// vocabulary's), prepend_scheme "always" | "first" | "never" (older files: add_prefix_space
// true = always, false = never; neither: always), split (default true).
Status Loader::load_metaspace(const Json& node, const std::string& field) {
  if (!impl_->sentencepiece) {
    return error(field + ".type",
                 "Metaspace needs the SentencePiece decoder (Replace \"\u2581\" -> \" \", "
                 "ByteFallback, Fuse, Strip)");
  }
  const Json* replacement = optional_member(node, "replacement");
  if (replacement != nullptr && *replacement != Json(kMetaSpace)) {
    return error(field + ".replacement", "expected \"\u2581\" (the vocabulary's meta space), got " +
                                             describe(*replacement));
  }
  PreTokenizer::Prepend prepend = PreTokenizer::Prepend::kAlways;
  if (const Json* scheme = optional_member(node, "prepend_scheme")) {
    if (*scheme == Json("always")) {
      prepend = PreTokenizer::Prepend::kAlways;
    } else if (*scheme == Json("first")) {
      prepend = PreTokenizer::Prepend::kFirst;
    } else if (*scheme == Json("never")) {
      prepend = PreTokenizer::Prepend::kNever;
    } else {
      return error(field + ".prepend_scheme",
                   "expected \"always\", \"first\" or \"never\", got " + describe(*scheme));
    }
  } else {
    PS_ASSIGN_OR_RETURN(const bool add_prefix_space,
                        optional_bool(node, "add_prefix_space", field + ".add_prefix_space", true));
    if (!add_prefix_space) prepend = PreTokenizer::Prepend::kNever;
  }
  PS_ASSIGN_OR_RETURN(const bool split, optional_bool(node, "split", field + ".split", true));
  return impl_->pre_tokenizer.add_metaspace(std::string(kMetaSpace), prepend, split);
}

Status Loader::load_pre_tokenizer(const Json& node, const std::string& field) {
  if (!node.is_object()) return error(field, "expected an object");
  PS_ASSIGN_OR_RETURN(const std::string type, required_string(node, "type", field + ".type"));
  if (type == "Sequence") {
    const Json* list = optional_member(node, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return error(field + ".pretokenizers", "expected an array");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      PS_RETURN_IF_ERROR(
          load_pre_tokenizer((*list)[i], field + ".pretokenizers[" + std::to_string(i) + "]"));
    }
    return ok_status();
  }
  if (type == "ByteLevel") {
    PS_ASSIGN_OR_RETURN(const bool add_prefix_space,
                        optional_bool(node, "add_prefix_space", field + ".add_prefix_space", true));
    PS_ASSIGN_OR_RETURN(const bool use_regex,
                        optional_bool(node, "use_regex", field + ".use_regex", true));
    has_byte_level_ = true;
    return impl_->pre_tokenizer.add_byte_level(add_prefix_space, use_regex);
  }
  if (type == "Metaspace") return load_metaspace(node, field);
  if (type != "Split") {
    return error(field + ".type", "expected Split, ByteLevel, Metaspace or Sequence, got \"" +
                                      type + "\": unsupported pre-tokenizer");
  }
  PS_ASSIGN_OR_RETURN(const Json* pattern, required_object(node, "pattern", field + ".pattern"));
  bool literal = false;
  std::string pattern_text;
  if (const Json* regex = optional_member(*pattern, "Regex"); regex && regex->is_string()) {
    pattern_text = regex->get<std::string>();
  } else if (const Json* s = optional_member(*pattern, "String"); s && s->is_string()) {
    pattern_text = s->get<std::string>();
    literal = true;
  } else {
    return error(field + ".pattern",
                 "expected {\"Regex\": string} or {\"String\": string}, got " + describe(*pattern));
  }
  PS_ASSIGN_OR_RETURN(const std::string behavior,
                      required_string(node, "behavior", field + ".behavior"));
  SplitBehavior split_behavior = SplitBehavior::kIsolated;
  if (behavior == "Removed") {
    split_behavior = SplitBehavior::kRemoved;
  } else if (behavior == "Isolated") {
    split_behavior = SplitBehavior::kIsolated;
  } else if (behavior == "MergedWithPrevious") {
    split_behavior = SplitBehavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    split_behavior = SplitBehavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    split_behavior = SplitBehavior::kContiguous;
  } else {
    return error(field + ".behavior",
                 "expected Removed, Isolated, MergedWithPrevious, "
                 "MergedWithNext or Contiguous, got \"" +
                     behavior + "\"");
  }
  PS_ASSIGN_OR_RETURN(const bool invert, optional_bool(node, "invert", field + ".invert", false));
  auto regex = Regex::compile(pattern_text, literal);
  if (!regex.ok()) return error(field + ".pattern", regex.status().message());
  impl_->pre_tokenizer.add_split(std::move(regex).value(), split_behavior, invert);
  return ok_status();
}

Status Loader::load_post_processor(const Json& node, const std::string& field) {
  if (!node.is_object()) return error(field, "expected an object or null");
  PS_ASSIGN_OR_RETURN(const std::string type, required_string(node, "type", field + ".type"));
  if (type == "ByteLevel") return ok_status();  // offsets only; ids are unchanged
  if (type == "Sequence") {
    const Json* list = optional_member(node, "processors");
    if (list == nullptr || !list->is_array()) {
      return error(field + ".processors", "expected an array");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      PS_RETURN_IF_ERROR(
          load_post_processor((*list)[i], field + ".processors[" + std::to_string(i) + "]"));
    }
    return ok_status();
  }
  if (type != "TemplateProcessing") {
    return error(field + ".type", "expected ByteLevel, TemplateProcessing or Sequence, got \"" +
                                      type + "\": unsupported post-processor");
  }
  const Json* single = optional_member(node, "single");
  if (single == nullptr || !single->is_array()) {
    return error(field + ".single", "expected an array of template pieces");
  }
  PS_ASSIGN_OR_RETURN(const Json* specials,
                      required_object(node, "special_tokens", field + ".special_tokens"));
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string entry = field + ".single[" + std::to_string(i) + "]";
    if (const Json* seq = piece.is_object() ? optional_member(piece, "Sequence") : nullptr) {
      const Json* seq_id = seq->is_object() ? optional_member(*seq, "id") : nullptr;
      if (seq_id == nullptr || *seq_id != "A" || seen_sequence) {
        return error(entry, "expected one {\"Sequence\": {\"id\": \"A\"}}, got " + describe(piece));
      }
      seen_sequence = true;
      continue;
    }
    const Json* special = piece.is_object() ? optional_member(piece, "SpecialToken") : nullptr;
    if (special == nullptr || !special->is_object()) {
      return error(
          entry, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, got " + describe(piece));
    }
    PS_ASSIGN_OR_RETURN(const std::string name, required_string(*special, "id", entry + ".id"));
    const Json* definition = optional_member(*specials, name.c_str());
    const Json* ids =
        definition && definition->is_object() ? optional_member(*definition, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array()) {
      return error(field + ".special_tokens[\"" + name + "\"].ids", "expected an array of ids");
    }
    for (std::size_t k = 0; k < ids->size(); ++k) {
      std::string id_field =
          field + ".special_tokens[\"" + name + "\"].ids[" + std::to_string(k) + "]";
      PS_ASSIGN_OR_RETURN(const TokenId id, token_id((*ids)[k], id_field));
      (seen_sequence ? impl_->suffix_ids : impl_->prefix_ids).push_back(id);
      template_ids_.emplace_back(id, std::move(id_field));
    }
  }
  if (!seen_sequence) return error(field + ".single", "expected a {\"Sequence\": {\"id\": \"A\"}}");
  return ok_status();
}

Status Loader::load_decoder(const Json& node, const std::string& field) {
  if (!node.is_object()) return error(field, "expected an object");
  PS_ASSIGN_OR_RETURN(const std::string type, required_string(node, "type", field + ".type"));
  if (type == "ByteLevel") return ok_status();
  const std::string expected =
      "expected \"ByteLevel\", or SentencePiece's Sequence of Replace \"\u2581\" -> \" \", "
      "ByteFallback, Fuse and Strip \" \" (start n, stop 0)";
  const Json* steps = optional_member(node, "decoders");
  if (type != "Sequence" || steps == nullptr || !steps->is_array()) {
    return error(field + ".type", expected + ", got \"" + type + "\"");
  }
  bool replace = false;
  for (std::size_t i = 0; i < steps->size(); ++i) {
    const Json& step = (*steps)[i];
    const std::string f = field + ".decoders[" + std::to_string(i) + "]";
    if (!step.is_object()) return error(f, "expected an object");
    PS_ASSIGN_OR_RETURN(const std::string t, required_string(step, "type", f + ".type"));
    if (t == "ByteFallback" || t == "Fuse") continue;  // the decode table's <0xXX> bytes; joins
    if (t == "Replace") {
      const Json* pattern = optional_member(step, "pattern");
      const Json* literal =
          pattern && pattern->is_object() ? optional_member(*pattern, "String") : nullptr;
      const Json* content = optional_member(step, "content");
      if (literal == nullptr || *literal != Json(kMetaSpace) || content == nullptr ||
          *content != Json(" ")) {
        return error(f,
                     "expected Replace {\"String\": \"\u2581\"} -> \" \", got " + describe(step));
      }
      replace = true;
    } else if (t == "Strip") {
      const Json* content = optional_member(step, "content");
      const Json* start = optional_member(step, "start");
      const Json* stop = optional_member(step, "stop");
      if (content == nullptr || *content != Json(" ") || start == nullptr ||
          !start->is_number_unsigned() || stop == nullptr || *stop != Json(0)) {
        return error(f, "expected Strip \" \" with start n and stop 0, got " + describe(step));
      }
      impl_->strip_leading_spaces = start->get<std::size_t>();
    } else {
      return error(f + ".type", expected + ", got \"" + t + "\"");
    }
  }
  if (!replace) return error(field, expected + ": the Replace step is missing");
  impl_->sentencepiece = true;
  return ok_status();
}

Status Loader::build_decode_table() {
  std::size_t vocab_size = 0;
  for (const auto& [text, id] : vocab_strings_) {
    vocab_size = std::max(vocab_size, static_cast<std::size_t>(id) + 1);
  }
  for (const AddedToken& t : impl_->added_tokens) {
    vocab_size = std::max(vocab_size, static_cast<std::size_t>(t.id) + 1);
  }
  std::vector<std::string> bytes(vocab_size);
  impl_->token_kinds.assign(vocab_size, TokenKind::kUnused);
  // HF's ByteLevel decoder: a vocabulary token whose characters are all in the alphabet
  // decodes through it; any other token decodes to its own UTF-8 text.
  // SentencePiece's decoder: "<0xXX>" is that byte (ByteFallback), U+2581 a space (Replace).
  auto decoded = [this](const std::string& text) {
    if (impl_->sentencepiece) return sentencepiece_token_text(text);
    auto b = byte_level_to_bytes(text);
    return b ? std::move(*b) : text;
  };
  for (const auto& [text, id] : vocab_strings_) {
    bytes[static_cast<std::size_t>(id)] = decoded(text);
    impl_->token_kinds[static_cast<std::size_t>(id)] = TokenKind::kVocab;
  }
  // An added token decodes to its content as written, as @huggingface/tokenizers does (so
  // a non-ASCII added token such as "é" round-trips).
  for (const AddedToken& t : impl_->added_tokens) {
    bytes[static_cast<std::size_t>(t.id)] = t.content;
    impl_->token_kinds[static_cast<std::size_t>(t.id)] =
        t.special ? TokenKind::kSpecial : TokenKind::kAdded;
  }
  impl_->token_bytes_indptr.assign(1, 0);
  impl_->token_bytes_indptr.reserve(vocab_size + 1);
  for (const std::string& b : bytes) {
    impl_->token_bytes += b;
    if (impl_->token_bytes.size() > std::numeric_limits<std::uint32_t>::max()) {
      return error("model.vocab", "total token bytes exceed 4 GiB");
    }
    impl_->token_bytes_indptr.push_back(static_cast<std::uint32_t>(impl_->token_bytes.size()));
  }
  return ok_status();
}

Result<std::shared_ptr<const TokenizerImpl>> Loader::load(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return error("(document)", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) return error("(document)", "expected a JSON object");
  // The decoder says whether the vocabulary is byte-level or SentencePiece text.
  const Json* decoder = optional_member(root, "decoder");
  if (decoder == nullptr) return error("decoder", "missing; expected {\"type\": \"ByteLevel\"}");
  PS_RETURN_IF_ERROR(load_decoder(*decoder, "decoder"));
  PS_ASSIGN_OR_RETURN(const Json* model, required_object(root, "model", "model"));
  PS_RETURN_IF_ERROR(load_model(*model, "model"));
  PS_RETURN_IF_ERROR(load_added_tokens(root));
  if (const Json* n = optional_member(root, "normalizer")) {
    PS_RETURN_IF_ERROR(load_normalizer(*n, "normalizer"));
  }
  if (const Json* p = optional_member(root, "pre_tokenizer")) {
    PS_RETURN_IF_ERROR(load_pre_tokenizer(*p, "pre_tokenizer"));
  }
  if (!has_byte_level_ && !impl_->sentencepiece) {
    return error("pre_tokenizer",
                 "expected a ByteLevel step: a byte-level BPE (or a SentencePiece BPE, by its "
                 "decoder) is supported");
  }
  if (has_byte_level_ && impl_->sentencepiece) {
    return error("pre_tokenizer", "a ByteLevel step with a SentencePiece decoder is unsupported");
  }
  if (const Json* p = optional_member(root, "post_processor")) {
    PS_RETURN_IF_ERROR(load_post_processor(*p, "post_processor"));
  }
  PS_RETURN_IF_ERROR(build_decode_table());
  for (const auto& [id, field] : template_ids_) {  // encode adds them: each must decode
    if (static_cast<std::size_t>(id) >= impl_->token_kinds.size() ||
        impl_->token_kinds[static_cast<std::size_t>(id)] == TokenKind::kUnused) {
      return error(field, "token id " + std::to_string(id) +
                              " is neither in model.vocab nor in added_tokens");
    }
  }
  return std::shared_ptr<const TokenizerImpl>(impl_);
}

}  // namespace

Result<Tokenizer> load_tokenizer(std::string_view json_text, const std::string& source_name,
                                 const TokenizerLoadOptions& options) {
  Loader loader(source_name, options);
  PS_ASSIGN_OR_RETURN(auto impl, loader.load(json_text));
  return Tokenizer(std::move(impl));
}

}  // namespace packserve::tokenizer
