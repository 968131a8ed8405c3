// grammar_bench.cc: structured-output costs on a synthetic 150,000-token vocabulary
// (grammar/synthetic_vocabulary.h, shaped like a byte-level BPE one), one thread:
//   - BM_ColdMask: fill_mask in a state whose mask is not cached (the trie walk), for a JSON
//     object inside a string / before a value, a regex inside a string, `(.|\n)*`, and a
//     JSON schema inside a free-form value (run by the JSON recognizer, and spelt out as a
//     regex, which a whitespace pattern of the request's forces), and a structural tag in
//     free text and inside a structure's arguments;
//   - BM_CachedMask: the same masks from the grammar's cache (a copy of mask_words() words);
//   - BM_CompileRegex: a JSON-schema-like regex to a DFA;
//   - BM_CompileSchema: a tool call's schema with free-form values to a grammar, /0 with the
//     values run by the recognizer, /1 spelt out kMaxFreeFormDepth levels deep;
//   - BM_BuildVocabulary: the vocabulary's byte trie.
//   grammar_bench [--tokenizer=DIR] [benchmark flags]
// --tokenizer=DIR: the masks over that tokenizer.json's vocabulary (built as the engine does,
// engine/structured_output.h make_vocabulary; EOS <|im_end|>) instead of the synthetic one.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "packserve/engine/structured_output.h"
#include "packserve/grammar/grammar.h"
#include "packserve/grammar/synthetic_vocabulary.h"
#include "packserve/tokenizer/tokenizer.h"

namespace {

using packserve::grammar::Grammar;
using packserve::grammar::Matcher;
using packserve::grammar::Vocabulary;

constexpr int32_t kVocabSize = 150000;

std::string g_tokenizer_dir;  // --tokenizer=DIR: that tokenizer's vocabulary, else synthetic

const std::shared_ptr<const Vocabulary>& vocabulary() {
  static const auto vocab = [] {
    if (g_tokenizer_dir.empty()) {
      return packserve::grammar::testing::synthetic_vocabulary(kVocabSize, 1);
    }
    auto tok = packserve::tokenizer::Tokenizer::from_dir(g_tokenizer_dir);
    if (!tok.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", tok.status().to_string().c_str());
      std::exit(2);
    }
    const auto eos = tok->token_to_id("<|im_end|>");
    std::vector<int32_t> eos_ids;
    if (eos) eos_ids.push_back(*eos);
    return packserve::engine::make_vocabulary(*tok, static_cast<int64_t>(tok->vocab_size()),
                                              eos_ids);
  }();
  return vocab;
}

// The id of the token that is exactly byte b (byte-level vocabularies have all 256).
int32_t byte_token(uint8_t b) {
  static const std::vector<int32_t> ids = [] {
    std::vector<int32_t> out(256, -1);
    const Vocabulary& v = *vocabulary();
    for (int32_t id = 0; id < v.size(); ++id) {
      const std::string_view bytes = v.bytes(id);
      if (bytes.size() == 1 && out[static_cast<uint8_t>(bytes[0])] < 0) {
        out[static_cast<uint8_t>(bytes[0])] = id;
      }
    }
    return out;
  }();
  return ids[b];
}

// A tool call's arguments with free-form values (json_schema.h).
constexpr const char* kToolSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"arguments":{"type":"object"},)"
    R"("meta":{}},"required":["name","arguments"]})";
// kJsonWs's language, but not its text: the free-form values are spelt out.
constexpr const char* kSpeltOutWs = "[ \\t\\n\\r]{0,20}|";

// Tool calls as a structural tag: free text, and the call's JSON after "<tool_call>".
constexpr const char* kToolTag =
    R"({"structures":[{"begin":"<tool_call>","schema":{"type":"object","properties":)"
    R"({"name":{"type":"string"},"arguments":{"type":"object"},"meta":{}},)"
    R"("required":["name","arguments"]},"end":"</tool_call>"}],"triggers":["<tool_call>"]})";

struct MaskCase {
  const char* name;
  const char* pattern;  // nullptr: json_object, or the schema below
  const char* prefix;   // fed as single-byte tokens (ids 0..255 are the bytes)
  const char* schema = nullptr;
  const char* whitespace = nullptr;  // the schema's whitespace pattern
  const char* tag = nullptr;         // a structural tag
};
const MaskCase kCases[] = {
    {"json_object_in_string", nullptr, "{\"ab"},
    {"json_object_before_value", nullptr, "{\"ab\": "},
    {"regex_in_string", "\\{\"name\": \"[^\"\\\\]{0,40}\", \"age\": \\d{1,3}\\}", "{\"name\": \"x"},
    {"regex_any", "(.|\\n)*", ""},
    {"schema_free_form_value", nullptr, R"({"name":"f","arguments":{"x":[1, )", kToolSchema},
    {"schema_free_form_spelt_out", nullptr, R"({"name":"f","arguments":{"x":[1, )", kToolSchema,
     kSpeltOutWs},
    {"tag_free_text", nullptr, "Let me check. <tool", nullptr, nullptr, kToolTag},
    {"tag_in_structure", nullptr, R"(Sure. <tool_call>{"name":"f","arguments":{"x":[1, )", nullptr,
     nullptr, kToolTag},
};

std::shared_ptr<const Grammar> make_grammar(const MaskCase& c) {
  std::optional<std::string> ws;
  if (c.whitespace != nullptr) ws = c.whitespace;
  auto g = c.tag != nullptr       ? Grammar::structural_tag(c.tag, vocabulary())
           : c.schema != nullptr  ? Grammar::json_schema(c.schema, vocabulary(), ws)
           : c.pattern == nullptr ? Grammar::json_object(vocabulary())
                                  : Grammar::regex(c.pattern, vocabulary());
  return g.ok() ? *g : nullptr;
}

std::unique_ptr<Matcher> matcher_after_prefix(const Grammar& g, const MaskCase& c) {
  auto m = g.matcher();
  for (const char* p = c.prefix; *p != '\0'; ++p) {
    if (!m->accept(byte_token(static_cast<uint8_t>(*p))).ok()) return nullptr;
  }
  return m;
}

void BM_ColdMask(benchmark::State& state) {
  const MaskCase& c = kCases[state.range(0)];
  state.SetLabel(c.name);
  std::vector<uint32_t> mask(static_cast<std::size_t>(vocabulary()->mask_words()));
  int64_t num_allowed = 0;
  for (auto _ : state) {
    state.PauseTiming();  // a fresh grammar: an empty mask cache
    const auto g = make_grammar(c);
    auto m = g == nullptr ? nullptr : matcher_after_prefix(*g, c);
    state.ResumeTiming();
    if (m == nullptr) {
      state.SkipWithError("grammar or prefix refused");
      return;
    }
    num_allowed = m->fill_mask(mask);
    benchmark::DoNotOptimize(mask.data());
  }
  state.counters["allowed_tokens"] = static_cast<double>(num_allowed);
  state.SetItemsProcessed(state.iterations() * vocabulary()->size());  // tokens decided per s
}

void BM_CachedMask(benchmark::State& state) {
  const MaskCase& c = kCases[state.range(0)];
  state.SetLabel(c.name);
  const auto g = make_grammar(c);
  auto m = g == nullptr ? nullptr : matcher_after_prefix(*g, c);
  if (m == nullptr) {
    state.SkipWithError("grammar or prefix refused");
    return;
  }
  std::vector<uint32_t> mask(static_cast<std::size_t>(vocabulary()->mask_words()));
  m->fill_mask(mask);  // now cached
  for (auto _ : state) {
    benchmark::DoNotOptimize(m->fill_mask(mask));
    benchmark::DoNotOptimize(mask.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(mask.size() * 4));
}

void BM_CompileRegex(benchmark::State& state) {
  // The shape json_schema.h emits for {name: string (maxLength 64), age: integer, tags:
  // array of strings}, with its whitespace and string-character sub-patterns.
  const std::string ws = "[ \\t\\n\\r]{0,20}";
  const std::string ch = R"((?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";
  const std::string pattern =
      "\\{" + ws + "\"name\"" + ws + ":" + ws + "\"" + ch + "{0,64}\"" + ws + "," + ws + "\"age\"" +
      ws + ":" + ws + "-?(0|[1-9][0-9]*)" + ws + "," + ws + "\"tags\"" + ws + ":" + ws + "\\[" +
      ws + "(\"" + ch + "*\"(" + ws + "," + ws + "\"" + ch + "*\")*)?" + ws + "\\]" + ws + "\\}";
  for (auto _ : state) {
    auto g = Grammar::regex(pattern, vocabulary());
    if (!g.ok()) {
      state.SkipWithError(g.status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(g->get());
  }
}

void BM_CompileSchema(benchmark::State& state) {
  std::optional<std::string> ws;
  if (state.range(0) == 1) ws = kSpeltOutWs;
  state.SetLabel(ws ? "spelt_out" : "free_form_values");
  for (auto _ : state) {
    auto g = Grammar::json_schema(kToolSchema, vocabulary(), ws);
    if (!g.ok()) {
      state.SkipWithError(g.status().to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(g->get());
  }
}

void BM_BuildVocabulary(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(packserve::grammar::testing::synthetic_vocabulary(kVocabSize, 2));
  }
  state.SetItemsProcessed(state.iterations() * kVocabSize);
}

BENCHMARK(BM_ColdMask)->DenseRange(0, 7)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CachedMask)->DenseRange(0, 7)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileRegex)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileSchema)->DenseRange(0, 1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildVocabulary)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--tokenizer=", 0) == 0) {
      g_tokenizer_dir = arg.substr(12);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
