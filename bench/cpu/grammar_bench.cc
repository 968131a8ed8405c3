// grammar_bench.cc: structured-output costs on a synthetic 150,000-token vocabulary
// (grammar/synthetic_vocabulary.h, shaped like a byte-level BPE one), one thread:
//   - BM_ColdMask: fill_mask in a state whose mask is not cached (the trie walk), for a JSON
//     object inside a string / before a value, a regex inside a string, and `(.|\n)*`;
//   - BM_CachedMask: the same masks from the grammar's cache (a copy of mask_words() words);
//   - BM_CompileRegex: a JSON-schema-like regex to a DFA;
//   - BM_BuildVocabulary: the vocabulary's byte trie.
//   grammar_bench [benchmark flags]
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "packserve/grammar/grammar.h"
#include "packserve/grammar/synthetic_vocabulary.h"

namespace {

using packserve::grammar::Grammar;
using packserve::grammar::Matcher;
using packserve::grammar::Vocabulary;

constexpr int32_t kVocabSize = 150000;

const std::shared_ptr<const Vocabulary>& vocabulary() {
  static const auto vocab = packserve::grammar::testing::synthetic_vocabulary(kVocabSize, 1);
  return vocab;
}

struct MaskCase {
  const char* name;
  const char* pattern;  // nullptr: json_object
  const char* prefix;   // fed as single-byte tokens (ids 0..255 are the bytes)
};
const MaskCase kCases[] = {
    {"json_object_in_string", nullptr, "{\"ab"},
    {"json_object_before_value", nullptr, "{\"ab\": "},
    {"regex_in_string", "\\{\"name\": \"[^\"\\\\]{0,40}\", \"age\": \\d{1,3}\\}", "{\"name\": \"x"},
    {"regex_any", "(.|\\n)*", ""},
};

std::shared_ptr<const Grammar> make_grammar(const MaskCase& c) {
  auto g = c.pattern == nullptr ? Grammar::json_object(vocabulary())
                                : Grammar::regex(c.pattern, vocabulary());
  return g.ok() ? *g : nullptr;
}

std::unique_ptr<Matcher> matcher_after_prefix(const Grammar& g, const MaskCase& c) {
  auto m = g.matcher();
  for (const char* p = c.prefix; *p != '\0'; ++p) {
    if (!m->accept(static_cast<uint8_t>(*p)).ok()) return nullptr;
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
  state.SetItemsProcessed(state.iterations() * kVocabSize);  // tokens decided per second
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

void BM_BuildVocabulary(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(packserve::grammar::testing::synthetic_vocabulary(kVocabSize, 2));
  }
  state.SetItemsProcessed(state.iterations() * kVocabSize);
}

BENCHMARK(BM_ColdMask)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CachedMask)->DenseRange(0, 3)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileRegex)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildVocabulary)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
