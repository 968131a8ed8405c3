// dummy_model.h: complete checkpoint directories with seeded random weights for the shapes of
// known models (issue 4 "Loading"; vLLM calls the idea `--load-format dummy`): performance
// work needs the shape, not the knowledge.
//
// A dummy model directory holds config.json, generation_config.json, model.safetensors,
// tokenizer.json and tokenizer_config.json, loadable by load_checkpoint(), packserve's tokenizer
// and Hugging Face transformers. Shapes (docs/model.md says where each comes from):
//   tiny         Qwen3-style (q/k norm), hidden 64, 2 layers, 4 q / 2 kv heads, head_dim 64,
//                intermediate 128, untied, vocab = the tokenizer's size (a few MB)
//   tiny-llama   Llama-style, same sizes, tied, llama3 rope scaling
//   tiny-qwen2   Qwen2-style (qkv bias), same sizes, tied
//   tiny-yarn    tiny with YaRN rope scaling x4 over 1,024 original positions
//   qwen3-0.6b, llama-3.2-1b, llama-3.1-8b, qwen3-8b: the published configs' shapes.
// Weights (DummyInit::kRandom, the default): matrices, embeddings and biases ~ matrix_std * z,
// norm weights 1 + norm_std * z, with z an approximately standard normal (sum of four uniforms,
// rescaled), rounded to `dtype`. Their logits are nearly flat: two bf16 implementations break
// the near-ties differently, so greedy tokens diverge after a few steps (docs/forward-cuda.md).
// DummyInit::kCopy makes a model whose greedy tokens are decided by wide margins and still
// depend on the KV cache: layer 0 is a copy head, every other layer adds a damped random
// perturbation (docs/model.md, "Copy models", says how each tensor is built). Greedy decoding
// continues each prompt with period copy_distance + 1: the token after position n is the token
// at position n - copy_distance (for positions >= copy_distance, up to 4096 tokens back).
// Determinism: every tensor is drawn in chunks of 2^20 elements, chunk c of tensor `name` from
// Rng(hash(seed, name, c)), so the bytes depend only on (arch, seed, dtype, tokenizer) and not on
// the thread count. Generation streams through SafetensorsWriter: memory stays O(threads x 4
// MB) even for llama-3.1-8b (16 GB in bf16).
// Thread-safety: make_dummy_model uses worker threads internally; calls on different
// directories may run concurrently; ensure_dummy_model is safe across processes (it builds in a
// temporary directory and renames it into place).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/status.h"
#include "packserve/model/config.h"

namespace packserve::model {

enum class DummyInit { kRandom, kCopy };

// "random" / "copy" and back; kInvalidArgument naming the known names.
Result<DummyInit> parse_dummy_init(std::string_view name);
std::string_view dummy_init_name(DummyInit init);

struct DummyModelOptions {
  std::string arch;           // one of dummy_model_names()
  std::string out_dir;        // created when missing; files already there are replaced
  uint64_t seed = 0;          // weights are a pure function of (arch, seed, dtype, tokenizer)
  std::string tokenizer_dir;  // empty: the built-in dummy BPE; else copy DIR's tokenizer files
  DType dtype = DType::kBF16;
  double matrix_std = 0.02;  // standard deviation of projections, embeddings and biases
  double norm_std = 0.02;    // norm weights are 1 + N(0, norm_std)
  int num_threads = 0;       // weight generation threads; 0: hardware concurrency
  DummyInit init = DummyInit::kRandom;
  int copy_distance = 7;  // kCopy: how far back layer 0 looks, 1..64
  // Every layer's linear weights (*_proj.weight) stored as F8_E4M3 with a per-tensor
  // "<name>_scale" (f32 []): the dtype's values / (max |value| / 448), rounded to nearest even
  // (fp8_weights.h reads them back); a float8 checkpoint as compressed-tensors writes one.
  bool float8 = false;
};

// kCopy's layer-0 attention score (q . k / sqrt(head_dim), before softmax) is a function of the
// query-key distance that peaks at copy_distance. This is its largest value at any other
// distance in [0, max_distance], over the peak: 0.87 means every other key scores at least 13 %
// of the peak (39 of 300) lower. For tests and docs.
double copy_head_runner_up(const ModelConfig& config, int copy_distance, int64_t max_distance);

// "tiny", "tiny-llama", "tiny-qwen2", "tiny-yarn", "qwen3-0.6b", "llama-3.2-1b", "llama-3.1-8b",
// "qwen3-8b".
std::vector<std::string> dummy_model_names();

// The shape of `arch` with vocab_size = `vocab_size` (tiny*: exactly; others: at least the
// published vocabulary) and no token ids. kInvalidArgument naming the known names.
Result<ModelConfig> dummy_model_config(std::string_view arch, int64_t vocab_size);

// Writes the checkpoint directory; returns options.out_dir. Errors: kInvalidArgument for an
// unknown arch or a tokenizer dir without a loadable tokenizer.json; kInternal for I/O failures.
Result<std::string> make_dummy_model(const DummyModelOptions& options);

// The directory "<cache_dir>/<name>-seed<seed>-<dtype>", made (atomically) when missing, with
// the built-in tokenizer. Returns its path.
Result<std::string> ensure_dummy_model(std::string_view name, const std::string& cache_dir,
                                       uint64_t seed = 0, DType dtype = DType::kBF16);

// $XDG_CACHE_HOME/packserve/dummy-models, else $HOME/.cache/packserve/dummy-models, else
// <temp dir>/packserve-dummy-models.
std::string default_dummy_model_cache_dir();

}  // namespace packserve::model
