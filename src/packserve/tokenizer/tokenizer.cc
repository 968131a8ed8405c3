// tokenizer.cc: encode and decode of Tokenizer (tokenizer.h); loading is tokenizer_json.cc.
#include "packserve/tokenizer/tokenizer.h"

#include <deque>
#include <fstream>
#include <sstream>

#include "packserve/tokenizer/byte_level.h"
#include "packserve/tokenizer/tokenizer_impl.h"
#include "packserve/tokenizer/utf8.h"

namespace packserve::tokenizer {

Result<Tokenizer> Tokenizer::from_json_text(std::string_view json_text,
                                            const std::string& source_name,
                                            const TokenizerLoadOptions& options) {
  return load_tokenizer(json_text, source_name, options);
}

Result<Tokenizer> Tokenizer::from_file(const std::string& path,
                                       const TokenizerLoadOptions& options) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found(path + ": cannot open the tokenizer file");
  std::ostringstream text;
  text << file.rdbuf();
  if (!file.good() && !file.eof()) return internal_error(path + ": read failed");
  return load_tokenizer(text.str(), path, options);
}

Result<Tokenizer> Tokenizer::from_dir(const std::string& dir, const TokenizerLoadOptions& options) {
  return from_file(dir + "/tokenizer.json", options);
}

Result<std::vector<TokenId>> Tokenizer::encode(std::string_view text,
                                               const EncodeOptions& options) const {
  PS_RETURN_IF_ERROR(validate_utf8(text));
  const TokenizerImpl& impl = *impl_;
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (options.add_special_tokens) ids = impl.prefix_ids;

  std::vector<TextSegment> raw_segments;
  impl.raw_splitter.split(text, raw_segments);
  std::string normalized;
  std::vector<TextSegment> segments;
  std::vector<std::string_view> words;
  std::deque<std::string> storage;
  for (const TextSegment& raw : raw_segments) {
    if (raw.added_id) {
      ids.push_back(*raw.added_id);
      continue;
    }
    std::string_view model_text = raw.text;
    if (!impl.normalizer.empty()) {
      PS_RETURN_IF_ERROR(impl.normalizer.apply(raw.text, normalized));
      model_text = normalized;
    }
    segments.clear();
    if (impl.normalized_splitter.empty()) {
      segments.push_back(TextSegment{model_text, {}});
    } else {
      impl.normalized_splitter.split(model_text, segments);
    }
    // Metaspace's prepend_scheme "first": only the text that begins the input.
    const bool raw_at_start = raw.text.data() == text.data();
    for (const TextSegment& segment : segments) {
      if (segment.added_id) {
        ids.push_back(*segment.added_id);
        continue;
      }
      storage.clear();
      PS_RETURN_IF_ERROR(impl.pre_tokenizer.run(segment.text, words, storage,
                                                raw_at_start && &segment == &segments.front()));
      for (const std::string_view word : words) impl.model.encode_word(word, ids);
    }
  }
  if (options.add_special_tokens) {
    ids.insert(ids.end(), impl.suffix_ids.begin(), impl.suffix_ids.end());
  }
  return ids;
}

Status Tokenizer::append_token_bytes(TokenId id, const DecodeOptions& options,
                                     std::string& bytes) const {
  const TokenizerImpl& impl = *impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= impl.token_kinds.size() ||
      impl.token_kinds[static_cast<std::size_t>(id)] == TokenKind::kUnused) {
    return invalid_argument("token id " + std::to_string(id) +
                            " is not a token of this tokenizer (vocab_size " +
                            std::to_string(impl.token_kinds.size()) + ")");
  }
  const auto index = static_cast<std::size_t>(id);
  if (options.skip_special_tokens && impl.token_kinds[index] == TokenKind::kSpecial) {
    return ok_status();
  }
  const std::uint32_t begin = impl.token_bytes_indptr[index];
  const std::uint32_t end = impl.token_bytes_indptr[index + 1];
  bytes.append(impl.token_bytes, begin, end - begin);
  return ok_status();
}

Result<std::string> Tokenizer::decode(std::span<const TokenId> ids,
                                      const DecodeOptions& options) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const Status status = append_token_bytes(ids[i], options, bytes);
    if (!status.ok()) {
      return invalid_argument("ids[" + std::to_string(i) + "]: " + status.message());
    }
  }
  std::size_t strip = 0;
  while (strip < impl_->strip_leading_spaces && strip < bytes.size() && bytes[strip] == ' ') {
    ++strip;
  }
  std::string text;
  text.reserve(bytes.size());
  (void)append_utf8_lossy(std::string_view(bytes).substr(strip), /*final=*/true, text);
  return text;
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  const auto added = impl_->added_content_to_id.find(token);
  if (added != impl_->added_content_to_id.end()) return added->second;
  if (impl_->sentencepiece) return impl_->model.find(token);
  const auto bytes = byte_level_to_bytes(token);
  if (!bytes) return std::nullopt;
  return impl_->model.find(*bytes);
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->token_kinds.size() &&
         impl_->token_kinds[static_cast<std::size_t>(id)] == TokenKind::kSpecial;
}

std::size_t Tokenizer::vocab_size() const { return impl_->token_kinds.size(); }

}  // namespace packserve::tokenizer
