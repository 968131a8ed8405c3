// dummy_tokenizer.cc: the BPE trainer, the built-in text and the tokenizer files
// (dummy_tokenizer.h).
#include "packserve/model/dummy_tokenizer.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "packserve/tokenizer/byte_level.h"

namespace packserve::model {
namespace {

using Json = nlohmann::ordered_json;

// Qwen2 / Qwen3 tokenizer.json's Split pattern.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ChatML, the format tokenizer/chat_template.h recognises by <|im_start|> and <|im_end|>.
constexpr const char* kChatmlTemplate =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt "
    "%}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

constexpr const char* kSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

// Written for packserve; any English prose would do. Frequent words and suffixes give the
// merges something to find.
constexpr std::string_view kCorpus =
    "The quick brown fox jumps over the lazy dog. A serving engine reads a request, turns the "
    "prompt into tokens, and then runs the model one step at a time. Each step adds one token to "
    "every request that is still running, and the engine streams the new text back to the user "
    "as soon as it is ready.\n\n"
    "When many requests arrive at the same time, the scheduler packs them into one batch. Short "
    "prompts and long prompts sit side by side, and the attention kernel reads only the pages "
    "that each request owns. Requests that share the same system prompt share the same pages, "
    "so the shared part is computed once and read once.\n\n"
    "This is a small story about a gardener who planted seven rows of beans in the spring. She "
    "watered them every morning and every evening, and she talked to them while she worked. In "
    "the summer the beans were taller than the fence, and the neighbours came to ask how she had "
    "done it. She said that there was nothing special about it: good soil, water, sunlight and "
    "patience were all that the plants needed.\n\n"
    "Numbers appear in text too: 1, 2, 3, 10, 42, 100, 2024 and 3.14159. Code appears as well, "
    "for example: def add(a, b): return a + b. Questions end with a question mark? Some "
    "sentences are loud! Others, quieter, use commas; a few use colons: like this one.\n\n"
    "The weather was cold and the wind was strong, but the children played outside anyway. They "
    "built a house of snow, they threw snowballs at each other, and they laughed until the sun "
    "went down. Then they went home, where their mother was cooking soup and their father was "
    "reading a book about the history of the world.\n\n"
    "Learning is the process of finding patterns in data. A model that has learned well can "
    "predict the next word in a sentence, translate between languages, answer questions and "
    "write new stories. Training takes a long time, but using the trained model is fast when the "
    "serving engine is efficient and the hardware is used well.\n\n"
    "Thank you for reading. Please write to us if you have any questions, comments or ideas "
    "about how to make this better. We are always happy to hear from the people who use what "
    "we build, and we read every message that we receive.\n";

bool is_letter(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
bool is_punct(unsigned char c) { return !is_letter(c) && !is_digit(c) && !is_space(c); }

// Simplified Qwen2 pre-tokenization (see learn_bpe_merges in the header).
std::map<std::string, int64_t> count_words(std::string_view s) {
  std::map<std::string, int64_t> words;
  const size_t n = s.size();
  auto at = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto letters_end = [&](size_t j) {
    while (j < n && is_letter(at(j))) ++j;
    return j;
  };
  size_t i = 0;
  while (i < n) {
    const unsigned char c = at(i);
    size_t j = i + 1;
    if (is_letter(c)) {
      j = letters_end(i);
    } else if (!is_digit(c) && c != '\n' && c != '\r' && i + 1 < n && is_letter(at(i + 1))) {
      j = letters_end(i + 1);  // a space or punctuation mark leads the word
    } else if (is_digit(c)) {
      j = i + 1;
    } else if (is_space(c)) {
      while (j < n && is_space(at(j))) ++j;
      if (j < n && j - i > 1) {
        --j;  // the last space goes with the next word
      } else if (j < n && c == ' ' && is_punct(at(j))) {
        while (j < n && is_punct(at(j))) ++j;
      }
    } else {
      while (j < n && is_punct(at(j))) ++j;
    }
    ++words[std::string(s.substr(i, j - i))];
    i = j;
  }
  return words;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> learn_bpe_merges(std::string_view text,
                                                                  int num_merges) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [word, count] : count_words(text)) {
    std::vector<std::string> symbols;
    for (char c : word) symbols.emplace_back(1, c);
    words.emplace_back(std::move(symbols), count);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int>(merges.size()) < num_merges) {
    std::map<std::pair<std::string, std::string>, int64_t> pair_counts;
    for (const auto& [symbols, count] : words) {
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        pair_counts[{symbols[k], symbols[k + 1]}] += count;
      }
    }
    // Most frequent pair; the map's order makes the smallest pair win ties.
    const std::pair<std::string, std::string>* best = nullptr;
    int64_t best_count = 1;
    for (const auto& [pair, count] : pair_counts) {
      if (count > best_count) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;
    const auto merge = *best;
    for (auto& [symbols, count] : words) {
      std::vector<std::string> merged;
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == merge.first && symbols[k + 1] == merge.second) {
          merged.push_back(merge.first + merge.second);
          ++k;
        } else {
          merged.push_back(symbols[k]);
        }
      }
      symbols = std::move(merged);
    }
    merges.push_back(merge);
  }
  return merges;
}

std::string_view dummy_tokenizer_corpus() { return kCorpus; }

DummyTokenizerFiles make_dummy_tokenizer(int num_merges) {
  using tokenizer::bytes_to_byte_level;
  Json vocab = Json::object();
  std::set<std::string> seen;
  int64_t next_id = 0;
  for (int b = 0; b < 256; ++b) {
    const std::string token = bytes_to_byte_level(std::string(1, static_cast<char>(b)));
    vocab[token] = next_id++;
    seen.insert(token);
  }
  Json merges = Json::array();
  for (const auto& [left, right] : learn_bpe_merges(kCorpus, num_merges)) {
    const std::string l = bytes_to_byte_level(left);
    const std::string r = bytes_to_byte_level(right);
    merges.push_back(l + " " + r);  // the "a b" form every tokenizers version reads
    if (seen.insert(l + r).second) vocab[l + r] = next_id++;
  }
  DummyTokenizerFiles files;
  Json added = Json::array();
  Json added_decoder = Json::object();
  std::map<std::string, int64_t> special_ids;
  for (const char* content : kSpecialTokens) {
    const int64_t id = next_id++;
    special_ids[content] = id;
    added.push_back({{"id", id},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    added_decoder[std::to_string(id)] = {{"content", content},   {"lstrip", false},
                                         {"normalized", false},  {"rstrip", false},
                                         {"single_word", false}, {"special", true}};
  }
  const Json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
  Json tok = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer",
               {{"type", "Sequence"},
                {"pretokenizers", Json::array({{{"type", "Split"},
                                                {"pattern", {{"Regex", kQwen2Pattern}}},
                                                {"behavior", "Isolated"},
                                                {"invert", false}},
                                               byte_level})}}},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", merges}}}};
  Json config = {{"add_bos_token", false},
                 {"add_prefix_space", false},
                 {"added_tokens_decoder", added_decoder},
                 {"bos_token", nullptr},
                 {"chat_template", kChatmlTemplate},
                 {"clean_up_tokenization_spaces", false},
                 {"eos_token", "<|im_end|>"},
                 {"errors", "replace"},
                 {"model_max_length", 131072},
                 {"pad_token", "<|endoftext|>"},
                 {"split_special_tokens", false},
                 {"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"unk_token", nullptr}};
  files.tokenizer_json = tok.dump(2) + "\n";
  files.tokenizer_config_json = config.dump(2) + "\n";
  files.vocab_size = next_id;
  files.eos_token_ids = {special_ids["<|im_end|>"], special_ids["<|endoftext|>"]};
  files.bos_token_id = special_ids["<|endoftext|>"];
  return files;
}

}  // namespace packserve::model
