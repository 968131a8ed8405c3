// make_dummy_model_cmd.cc: `packserve make-dummy-model --arch NAME --out DIR` (issue 4
// "Loading"): a complete checkpoint directory with seeded random weights for the shape of a
// known model (model/dummy_model.h; docs/model.md).
// Writes one JSON line to stdout: {"dir", "arch", "dtype", "seed", "init", "vocab_size",
// "num_params", "float8", "weight_bytes" (in the dtype, as if no weight were float8),
// "seconds"}.
// Exit codes (commands.h): 0 success; 2 bad input (unknown arch or init, --copy-distance out of
// range, --tokenizer without a loadable tokenizer.json); 1 an I/O failure while writing.
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "packserve/cli/commands.h"
#include "packserve/model/config.h"
#include "packserve/model/dummy_model.h"

namespace packserve::cli {
namespace {

struct MakeDummyModelArgs {
  std::string arch;
  std::string out_dir;
  uint64_t seed = 0;
  std::string tokenizer_dir;
  std::string dtype = "bf16";
  int threads = 0;
  std::string init = "random";
  int copy_distance = 7;
  bool float8 = false;
};

int run_make_dummy_model(const MakeDummyModelArgs& args) {
  auto dtype = parse_dtype(args.dtype);
  if (!dtype.ok()) {
    std::cerr << "error: --" << dtype.status().message() << "\n";
    return 2;
  }
  auto init = model::parse_dummy_init(args.init);
  if (!init.ok()) {
    std::cerr << "error: " << init.status().message() << "\n";
    return 2;
  }
  model::DummyModelOptions options;
  options.init = *init;
  options.copy_distance = args.copy_distance;
  options.arch = args.arch;
  options.out_dir = args.out_dir;
  options.seed = args.seed;
  options.tokenizer_dir = args.tokenizer_dir;
  options.dtype = *dtype;
  options.num_threads = args.threads;
  options.float8 = args.float8;
  const auto start = std::chrono::steady_clock::now();
  auto made = model::make_dummy_model(options);
  if (!made.ok()) {
    std::cerr << "error: " << made.status().message() << "\n";
    return made.status().code() == StatusCode::kInternal ? 1 : 2;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto config = model::load_model_config(*made + "/config.json");
  if (!config.ok()) {
    std::cerr << "error: " << config.status().message() << "\n";
    return 1;
  }
  const model::ModelConfig& c = *config;
  const int64_t h = c.hidden_size;
  const int64_t per_layer =
      h * (c.q_size() + 2 * c.kv_size()) + c.q_size() * h + 3 * h * c.intermediate_size + 2 * h +
      (c.qkv_bias ? c.q_size() + 2 * c.kv_size() : 0) + (c.qk_norm ? 2 * c.head_dim : 0);
  const int64_t num_params =
      c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + c.num_layers * per_layer + h;
  nlohmann::json out = {
      {"dir", *made},
      {"arch", args.arch},
      {"dtype", dtype_name(*dtype)},
      {"seed", args.seed},
      {"init", model::dummy_init_name(*init)},
      {"vocab_size", c.vocab_size},
      {"num_params", num_params},
      {"float8", args.float8},
      {"weight_bytes", num_params * static_cast<int64_t>(dtype_size_bytes(*dtype))},
      {"seconds", seconds}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

void register_make_dummy_model_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MakeDummyModelArgs>();
  std::string names;
  for (const std::string& n : model::dummy_model_names()) names += (names.empty() ? "" : ", ") + n;
  auto* cmd = app.add_subcommand(
      "make-dummy-model",
      "write a checkpoint directory (config.json, model.safetensors, tokenizer.json, "
      "tokenizer_config.json) with seeded random weights in the shape of a known model");
  cmd->add_option("--arch", args->arch, "model shape: " + names)
      ->required()
      ->check(CLI::IsMember(model::dummy_model_names()));
  cmd->add_option("--out", args->out_dir, "output directory (created; files in it are replaced)")
      ->required();
  cmd->add_option("--seed", args->seed,
                  "weights are a pure function of arch, seed, dtype and tokenizer")
      ->capture_default_str();
  cmd->add_option("--tokenizer", args->tokenizer_dir,
                  "copy DIR's tokenizer.json (+ tokenizer_config.json) instead of the built-in "
                  "byte-level BPE; vocab_size and eos ids follow it");
  cmd->add_option("--dtype", args->dtype, "weight dtype")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "weight generation threads (0: all cores; the bytes do not depend on it)")
      ->capture_default_str();
  cmd->add_option("--init", args->init,
                  "random: every tensor random (near-flat logits); copy: layer 0 copies the "
                  "token --copy-distance positions back and the other layers are damped, so "
                  "greedy tokens are decided by wide margins (docs/model.md)")
      ->check(CLI::IsMember({"random", "copy"}))
      ->capture_default_str();
  cmd->add_option("--copy-distance", args->copy_distance,
                  "--init copy: the token after position n is the one at n - this (1..64)")
      ->capture_default_str();
  cmd->add_flag("--float8", args->float8,
                "store every layer's linear weights as F8_E4M3 with a per-tensor "
                "<name>_scale, as a compressed-tensors float8 checkpoint (loaded back "
                "dequantized; docs/model.md)");
  cmd->callback([args, &exit_code] { exit_code = run_make_dummy_model(*args); });
}

}  // namespace packserve::cli
