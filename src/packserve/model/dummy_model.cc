// dummy_model.cc: dummy checkpoint directories (dummy_model.h).
#include "packserve/model/dummy_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include "packserve/common/rng.h"
#include "packserve/model/checkpoint.h"
#include "packserve/model/dummy_tokenizer.h"
#include "packserve/model/fp8_weights.h"
#include "packserve/model/ops_cpu.h"
#include "packserve/model/safetensors.h"
#include "packserve/tokenizer/tokenizer.h"

namespace packserve::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int64_t kChunkElements = int64_t{1} << 20;

struct Shape {
  const char* name;
  Architecture arch;
  int64_t vocab_size;  // 0: the tokenizer's size
  int64_t hidden_size, intermediate_size, num_layers, num_qo_heads, num_kv_heads, head_dim;
  int64_t max_position_embeddings;
  double rms_norm_eps, rope_theta;
  bool tied;
  double llama3_factor;       // 0: no llama3 rope scaling
  double yarn_factor = 0;     // 0: no yarn rope scaling
  int64_t yarn_original = 0;  // yarn's original_max_position_embeddings
};

// Sources: the config.json of Qwen/Qwen3-0.6B, meta-llama/Llama-3.2-1B, meta-llama/Llama-3.1-8B
// and Qwen/Qwen3-8B on the Hugging Face Hub (docs/model.md).
constexpr Shape kShapes[] = {
    {"tiny", Architecture::kQwen3, 0, 64, 128, 2, 4, 2, 64, 4096, 1e-6, 1e6, false, 0},
    {"tiny-llama", Architecture::kLlama, 0, 64, 128, 2, 4, 2, 64, 4096, 1e-5, 5e5, true, 8},
    {"tiny-qwen2", Architecture::kQwen2, 0, 64, 128, 2, 4, 2, 64, 4096, 1e-6, 1e6, true, 0},
    // tiny with YaRN x4 over 1,024 original positions (as Qwen's long-context configs, scaled
    // down so that short prompts already reach the interpolated frequencies).
    {"tiny-yarn", Architecture::kQwen3, 0, 64, 128, 2, 4, 2, 64, 4096, 1e-6, 1e6, false, 0, 4.0,
     1024},
    {"qwen3-0.6b", Architecture::kQwen3, 151936, 1024, 3072, 28, 16, 8, 128, 40960, 1e-6, 1e6, true,
     0},
    {"llama-3.2-1b", Architecture::kLlama, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 1e-5, 5e5,
     true, 32},
    {"llama-3.1-8b", Architecture::kLlama, 128256, 4096, 14336, 32, 32, 8, 128, 131072, 1e-5, 5e5,
     false, 8},
    {"qwen3-8b", Architecture::kQwen3, 151936, 4096, 12288, 36, 32, 8, 128, 40960, 1e-6, 1e6, false,
     0},
};

// How a tensor's elements are made (element e of a [rows, cols] tensor is (e / cols, e % cols);
// a vector is one row).
enum class Fill {
  kNormal,    // base + std * z, z from the random stream named `stream`
  kConstant,  // base
  kCopyQ,     // copy models' layer 0 (make_copy_head): column 0 = the head's q pattern, else 0
  kCopyK,     // column 0 = the k pattern, else 0
  kCopyV,     // column 0 = 0, else a uniform value of std v_std (copy_v_value)
  kCopyO,     // row 0 = 0, else W_v transposed and scaled (copy_o_value)
};

struct TensorPlan {
  SafetensorsTensorSpec spec;  // spec.float8: the tensor's values quantized (write_float8)
  bool float8_scale = false;   // the scale of the float8 tensor before it (f32 [])
  Fill fill = Fill::kNormal;
  double base = 0, std = 0;
  std::string stream;            // kNormal: the stream's name; the tensor's own unless shared
  std::optional<float> column0;  // kNormal: column 0 set to this value
};

std::vector<TensorPlan> plan_tensors(const ModelConfig& c, const DummyModelOptions& options) {
  const DType dt = c.dtype;
  const int64_t h = c.hidden_size;
  std::vector<TensorPlan> plans;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool is_norm) {
    TensorPlan p;
    p.spec = SafetensorsTensorSpec{name, dt, std::move(shape)};
    p.base = is_norm ? 1.0 : 0.0;
    p.std = is_norm ? options.norm_std : options.matrix_std;
    p.stream = std::move(name);
    plans.push_back(std::move(p));
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, false);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto n = [i](const char* suffix) { return layer_tensor_name(i, suffix); };
    add(n("input_layernorm.weight"), {h}, true);
    add(n("self_attn.q_proj.weight"), {c.q_size(), h}, false);
    add(n("self_attn.k_proj.weight"), {c.kv_size(), h}, false);
    add(n("self_attn.v_proj.weight"), {c.kv_size(), h}, false);
    if (c.qkv_bias) {
      add(n("self_attn.q_proj.bias"), {c.q_size()}, false);
      add(n("self_attn.k_proj.bias"), {c.kv_size()}, false);
      add(n("self_attn.v_proj.bias"), {c.kv_size()}, false);
    }
    if (c.qk_norm) {
      add(n("self_attn.q_norm.weight"), {c.head_dim}, true);
      add(n("self_attn.k_norm.weight"), {c.head_dim}, true);
    }
    add(n("self_attn.o_proj.weight"), {h, c.q_size()}, false);
    add(n("post_attention_layernorm.weight"), {h}, true);
    add(n("mlp.gate_proj.weight"), {c.intermediate_size, h}, false);
    add(n("mlp.up_proj.weight"), {c.intermediate_size, h}, false);
    add(n("mlp.down_proj.weight"), {h, c.intermediate_size}, false);
  }
  if (options.float8) {  // every layer's linear weights, each followed by its scale
    std::vector<TensorPlan> with_scales;
    for (TensorPlan& p : plans) {
      const bool linear =
          p.spec.name.starts_with("model.layers.") && p.spec.name.ends_with("_proj.weight");
      const std::string name = p.spec.name;
      with_scales.push_back(std::move(p));
      if (!linear) continue;
      with_scales.back().spec.float8 = true;
      TensorPlan scale;
      scale.spec = SafetensorsTensorSpec{name + "_scale", DType::kF32, {}};
      scale.float8_scale = true;
      with_scales.push_back(std::move(scale));
    }
    plans = std::move(with_scales);
  }
  add("model.norm.weight", {h}, true);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h}, false);
  return plans;
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// ---- Copy models (DummyInit::kCopy; docs/model.md "Copy models") ----
//
// Layer 0's attention scores depend on the query-key distance alone, through RoPE: every
// embedding carries a constant channel 0 (most of its energy), q_proj and k_proj read only that
// channel, so q and k are the same vectors at every position, patterned over the `pairs`
// highest-frequency rotary pairs so that q . k = sum_i a_i^2 cos((distance - D) theta_i), which
// peaks at distance D. v_proj is random (channel 0 left out) and o_proj its scaled transpose, so
// the head adds a multiple of the token D back's normalised embedding to the residual, and the tied
// (or equal) LM head gives that token kCopyLogitRatio times the current token's own logit (the
// final norm's weight is 0 on channel 0, so the logits carry no common offset). The
// other layers' output projections are damped, so their random outputs perturb the logits
// without deciding the argmax.
constexpr double kCopyPeakScore = 300;    // layer 0's q . k / sqrt(head_dim) at distance D
constexpr double kCopyLogitRatio = 3;     // the copied token's logit over the current token's
constexpr double kCopyDamping = 0.01;     // the other layers' output projections' std / matrix_std
constexpr double kCopyChannel0Share = 8;  // channel 0's energy over the random part's
constexpr int64_t kCopyMaxDistance = 4096;

// The largest score at any distance in [0, max_distance] other than `distance`, relative to the
// peak, when the first `pairs` rotary pairs carry equal weight.
double runner_up(std::span<const double> inv_freq, int pairs, int distance, int64_t max_distance) {
  double worst = -1;
  for (int64_t t = 0; t <= max_distance; ++t) {
    if (t == distance) continue;
    double s = 0;
    for (int i = 0; i < pairs; ++i) s += std::cos(static_cast<double>(t - distance) * inv_freq[i]);
    worst = std::max(worst, s / pairs);
  }
  return worst;
}

struct CopyPairs {
  int pairs = 0;
  double runner_up = 1;
};

// The number of highest-frequency pairs (4..16) whose profile has the lowest runner-up.
CopyPairs choose_copy_pairs(std::span<const double> inv_freq, int distance, int64_t max_distance) {
  const int most = static_cast<int>(std::min<size_t>(16, inv_freq.size()));
  CopyPairs best;
  for (int pairs = std::min(4, most); pairs <= most; ++pairs) {
    const double r = runner_up(inv_freq, pairs, distance, max_distance);
    if (r < best.runner_up) best = CopyPairs{pairs, r};
  }
  return best;
}

struct CopyHead {
  std::vector<float> q, k;   // [head_dim]: every head's q_proj / k_proj column 0
  float qk_norm_weight = 1;  // qk_norm configs: layer 0's q_norm and k_norm weights
  float embed_channel0 = 0;  // every embedding row's channel 0
  double v_std = 0;          // layer 0's v_proj entries
  double o_scale = 0;        // layer 0's o_proj = o_scale * v_proj^T per head
  uint64_t v_stream = 0;
  int64_t hidden = 0, head_dim = 0, group = 0;
};

CopyHead make_copy_head(const ModelConfig& c, const DummyModelOptions& options) {
  const double d = static_cast<double>(c.hidden_size);
  const double head_dim = static_cast<double>(c.head_dim);
  const double sigma = options.matrix_std;
  CopyHead h;
  h.hidden = c.hidden_size;
  h.head_dim = c.head_dim;
  h.group = c.num_qo_heads / c.num_kv_heads;
  const int distance = options.copy_distance;
  const std::vector<double> inv_freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  const int pairs = choose_copy_pairs(inv_freq, distance, kCopyMaxDistance).pairs;
  // Channel 0 holds kCopyChannel0Share times the energy of an embedding's random part, so the
  // normalised channel 0 is nearly the same for every token (its spread is the random part's
  // norm's over (1 + share): about 2 % in the 64-wide tiny models).
  const double channel0 = sigma * std::sqrt(kCopyChannel0Share * (d - 1));
  const double rms = std::sqrt((channel0 * channel0 + (d - 1) * sigma * sigma) / d);
  const double x0 = channel0 / rms;
  double a = 1;
  if (c.qk_norm) {
    // q_norm scales q to rms 1 per element, i.e. |q_i| = sqrt(head_dim / pairs) per pair, so the
    // peak score is sqrt(head_dim) * w^2 with w the norm weight.
    h.qk_norm_weight = static_cast<float>(std::sqrt(kCopyPeakScore / std::sqrt(head_dim)));
  } else {
    a = std::sqrt(kCopyPeakScore * std::sqrt(head_dim) / (pairs * x0 * x0));
  }
  h.q.assign(static_cast<size_t>(c.head_dim), 0.0f);
  h.k.assign(static_cast<size_t>(c.head_dim), 0.0f);
  const size_t half = static_cast<size_t>(c.head_dim / 2);
  for (size_t i = 0; i < static_cast<size_t>(pairs); ++i) {
    // As complex numbers (rotate-half pairs i, i + half): k_i = a, q_i = a e^{-j D theta_i}, so
    // Re(q_i e^{j n theta} conj(k_i e^{j m theta})) = a^2 cos((n - m - D) theta_i).
    const double angle = distance * inv_freq[i];
    h.q[i] = static_cast<float>(a * std::cos(angle));
    h.q[i + half] = static_cast<float>(-a * std::sin(angle));
    h.k[i] = static_cast<float>(a);
  }
  h.embed_channel0 = static_cast<float>(channel0);
  // v_proj with entries of std 1/sqrt(d): E[v_proj^T v_proj] = (kv_size / d) I. The copied
  // token's logit is then o_scale * group * (kv_size / d) |r|^2 / rms against |r|^2 for the
  // current token (r: an embedding's random part).
  h.v_std = 1.0 / std::sqrt(d);
  h.o_scale =
      kCopyLogitRatio * rms * d / static_cast<double>(c.kv_size()) / static_cast<double>(h.group);
  h.v_stream = mix(options.seed, fnv1a(layer_tensor_name(0, "self_attn.v_proj.weight")));
  return h;
}

// Element (row, col) of layer 0's v_proj [kv_size, hidden]: uniform, std v_std; column 0 zero.
float copy_v_value(const CopyHead& h, int64_t row, int64_t col) {
  if (col == 0) return 0.0f;
  const uint64_t bits = mix(h.v_stream, static_cast<uint64_t>(row * h.hidden + col)) >> 11;
  const double u = static_cast<double>(bits) * 0x1.0p-53;  // [0, 1)
  return static_cast<float>(h.v_std * std::sqrt(3.0) * (2.0 * u - 1.0));
}

// Element (row, col) of layer 0's o_proj [hidden, q_size]: head col / head_dim reads KV head
// (col / head_dim) / group, so o_proj^T's rows repeat v_proj's rows of that KV head.
float copy_o_value(const CopyHead& h, int64_t row, int64_t col) {
  if (row == 0) return 0.0f;
  const int64_t kv_row = (col / h.head_dim / h.group) * h.head_dim + col % h.head_dim;
  return static_cast<float>(h.o_scale * copy_v_value(h, kv_row, row));
}

// Turns the random plan into the copy model's (the comment above make_copy_head).
void apply_copy_head(std::vector<TensorPlan>& plans, const CopyHead& head) {
  const std::string layer0 = layer_tensor_name(0, "");
  for (TensorPlan& p : plans) {
    const std::string& name = p.spec.name;
    const bool first = name.starts_with(layer0);
    auto is = [&](const char* suffix) { return name.ends_with(suffix); };
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
      p.stream = "model.embed_tokens.weight";  // an untied head equals the embedding
      p.column0 = head.embed_channel0;
    } else if (name == "model.norm.weight") {
      p.column0 = 0.0f;  // no common channel-0 term in the logits
    } else if (first && is("self_attn.q_proj.weight")) {
      p.fill = Fill::kCopyQ;
    } else if (first && is("self_attn.k_proj.weight")) {
      p.fill = Fill::kCopyK;
    } else if (first && is("self_attn.v_proj.weight")) {
      p.fill = Fill::kCopyV;
    } else if (first && is("self_attn.o_proj.weight")) {
      p.fill = Fill::kCopyO;
    } else if (first && (is("q_norm.weight") || is("k_norm.weight"))) {
      p.fill = Fill::kConstant;
      p.base = head.qk_norm_weight;
    } else if (is("self_attn.o_proj.weight") || is("mlp.down_proj.weight")) {
      p.std *= kCopyDamping;
    }
  }
}

// Elements [chunk * kChunkElements, +count) of tensor `plan` into `out`, in its dtype, through
// `values` (the worker's scratch, kept across chunks so that memory stays threads x 4 MB).
void fill_chunk(const TensorPlan& plan, uint64_t seed, int64_t chunk, int64_t count,
                const CopyHead* copy, std::vector<float>& values, std::byte* out) {
  values.resize(static_cast<size_t>(count));
  const int64_t first = chunk * kChunkElements;
  const int64_t cols = plan.spec.shape.back();  // a vector is one row
  auto each = [&](auto value) {
    for (int64_t j = 0; j < count; ++j) {
      values[static_cast<size_t>(j)] = value((first + j) / cols, (first + j) % cols);
    }
  };
  switch (plan.fill) {
    case Fill::kNormal: {
      Rng rng(mix(mix(seed, fnv1a(plan.stream)), static_cast<uint64_t>(chunk)));
      // Irwin-Hall: the sum of four U(0,1) has mean 2 and variance 1/3, so
      // z = (sum - 2) * sqrt(3) has mean 0 and variance 1.
      const float scale = static_cast<float>(plan.std * 1.7320508075688772 / 65536.0);
      const float offset = static_cast<float>(plan.base) - 2.0f * 65536.0f * scale;
      for (float& v : values) {
        const uint64_t u = rng.next_u64();
        const auto sum = static_cast<float>((u & 0xffff) + ((u >> 16) & 0xffff) +
                                            ((u >> 32) & 0xffff) + (u >> 48));
        v = offset + scale * sum;
      }
      if (plan.column0) {
        for (int64_t j = (cols - first % cols) % cols; j < count; j += cols) {
          values[static_cast<size_t>(j)] = *plan.column0;
        }
      }
      break;
    }
    case Fill::kConstant:
      std::fill(values.begin(), values.end(), static_cast<float>(plan.base));
      break;
    case Fill::kCopyQ:
      each([&](int64_t r, int64_t c) { return c == 0 ? copy->q[r % copy->head_dim] : 0.0f; });
      break;
    case Fill::kCopyK:
      each([&](int64_t r, int64_t c) { return c == 0 ? copy->k[r % copy->head_dim] : 0.0f; });
      break;
    case Fill::kCopyV:
      each([&](int64_t r, int64_t c) { return copy_v_value(*copy, r, c); });
      break;
    case Fill::kCopyO:
      each([&](int64_t r, int64_t c) { return copy_o_value(*copy, r, c); });
      break;
  }
  const size_t n = values.size();
  switch (plan.spec.dtype) {
    case DType::kBF16:
      for (size_t j = 0; j < n; ++j) {
        const uint16_t b = float_to_bf16(values[j]);
        std::memcpy(out + 2 * j, &b, 2);
      }
      break;
    case DType::kF16:
      for (size_t j = 0; j < n; ++j) {
        const uint16_t b = float_to_f16(values[j]);
        std::memcpy(out + 2 * j, &b, 2);
      }
      break;
    case DType::kF32:
      std::memcpy(out, values.data(), n * 4);
      break;
    case DType::kFP8E4M3:  // (not a model dtype: make-dummy-model refuses it)
      for (size_t j = 0; j < n; ++j) out[j] = static_cast<std::byte>(e4m3_from_float(values[j]));
      break;
  }
}

// A float8 tensor (and its scale, the next plan): its values as the model's dtype would hold
// them, quantized with one scale, max |value| / 448 (1 when all are 0), chunk by chunk twice
// (the maximum first). Written by this thread alone.
Status write_float8(SafetensorsWriter& writer, const TensorPlan& plan,
                    const DummyModelOptions& options, const CopyHead* copy, float& scale) {
  int64_t numel = 1;
  for (int64_t d : plan.spec.shape) numel *= d;
  const int64_t num_chunks = (numel + kChunkElements - 1) / kChunkElements;
  std::vector<float> values;
  std::vector<std::byte> rounded(static_cast<size_t>(kChunkElements) * 4);
  const auto each_chunk = [&](auto&& fn) -> Status {
    for (int64_t chunk = 0; chunk < num_chunks; ++chunk) {
      const int64_t count = std::min(kChunkElements, numel - chunk * kChunkElements);
      fill_chunk(plan, options.seed, chunk, count, copy, values, rounded.data());
      for (float& v : values) v = round_to_dtype(v, options.dtype);
      PS_RETURN_IF_ERROR(fn());
    }
    return ok_status();
  };
  float amax = 0.0f;
  PS_RETURN_IF_ERROR(each_chunk([&] {
    for (float v : values) amax = std::max(amax, std::fabs(v));
    return ok_status();
  }));
  scale = amax > 0.0f ? amax / 448.0f : 1.0f;
  std::vector<std::byte> bytes;
  return each_chunk([&] {
    bytes.resize(values.size());
    for (size_t j = 0; j < values.size(); ++j) {
      bytes[j] = static_cast<std::byte>(e4m3_from_float(values[j] / scale));
    }
    return writer.write(bytes);
  });
}

Status write_weights(const std::string& path, const std::vector<TensorPlan>& plans,
                     const DummyModelOptions& options, const CopyHead* copy) {
  std::vector<SafetensorsTensorSpec> specs;
  for (const auto& p : plans) specs.push_back(p.spec);
  PS_ASSIGN_OR_RETURN(auto writer, SafetensorsWriter::create(path, specs, {{"format", "pt"}}));
  const int threads = options.num_threads > 0
                          ? options.num_threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const size_t element_bytes = dtype_size_bytes(options.dtype);
  std::vector<std::byte> buffer(static_cast<size_t>(threads) * static_cast<size_t>(kChunkElements) *
                                element_bytes);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(threads));
  float float8_scale = 1.0f;  // of the last float8 tensor
  for (const TensorPlan& plan : plans) {
    if (plan.spec.float8) {
      PS_RETURN_IF_ERROR(write_float8(writer, plan, options, copy, float8_scale));
      continue;
    }
    if (plan.float8_scale) {
      PS_RETURN_IF_ERROR(writer.write(std::as_bytes(std::span(&float8_scale, 1))));
      continue;
    }
    int64_t numel = 1;
    for (int64_t d : plan.spec.shape) numel *= d;
    const int64_t num_chunks = (numel + kChunkElements - 1) / kChunkElements;
    for (int64_t first = 0; first < num_chunks; first += threads) {
      const int64_t batch = std::min<int64_t>(threads, num_chunks - first);
      auto work = [&](int64_t k) {
        const int64_t chunk = first + k;
        const int64_t count = std::min(kChunkElements, numel - chunk * kChunkElements);
        fill_chunk(plan, options.seed, chunk, count, copy, scratch[static_cast<size_t>(k)],
                   buffer.data() + static_cast<size_t>(k * kChunkElements) * element_bytes);
      };
      if (batch == 1) {
        work(0);
      } else {
        std::vector<std::thread> workers;
        for (int64_t k = 0; k < batch; ++k) workers.emplace_back(work, k);
        for (auto& w : workers) w.join();
      }
      const int64_t batch_elements =
          std::min(batch * kChunkElements, numel - first * kChunkElements);
      PS_RETURN_IF_ERROR(writer.write(std::span<const std::byte>(
          buffer.data(), static_cast<size_t>(batch_elements) * element_bytes)));
    }
  }
  return writer.finish();
}

Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return internal_error(path + ": cannot write");
  return ok_status();
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct TokenizerChoice {
  std::string tokenizer_json, tokenizer_config_json;  // config may be empty (none given)
  int64_t vocab_size = 0;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
};

// "<|x|>" or {"content": "<|x|>"} -> "<|x|>"; "" otherwise.
std::string token_content(const Json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

Result<TokenizerChoice> choose_tokenizer(const std::string& dir) {
  TokenizerChoice t;
  if (dir.empty()) {
    DummyTokenizerFiles files = make_dummy_tokenizer();
    t.tokenizer_json = std::move(files.tokenizer_json);
    t.tokenizer_config_json = std::move(files.tokenizer_config_json);
    t.vocab_size = files.vocab_size;
    t.eos_token_ids = files.eos_token_ids;
    t.bos_token_id = files.bos_token_id;
    return t;
  }
  PS_ASSIGN_OR_RETURN(t.tokenizer_json, read_text(dir + "/tokenizer.json"));
  auto tok = tokenizer::Tokenizer::from_json_text(t.tokenizer_json, dir + "/tokenizer.json");
  if (!tok.ok()) return invalid_argument("--tokenizer: " + tok.status().message());
  t.vocab_size = static_cast<int64_t>(tok->vocab_size());
  Json config = Json::object();
  if (fs::exists(dir + "/tokenizer_config.json")) {
    PS_ASSIGN_OR_RETURN(t.tokenizer_config_json, read_text(dir + "/tokenizer_config.json"));
    try {
      config = Json::parse(t.tokenizer_config_json);
    } catch (const Json::exception& e) {
      return invalid_argument(dir + "/tokenizer_config.json: not valid JSON: " + e.what());
    }
    if (!config.is_object())
      return invalid_argument(dir + "/tokenizer_config.json: expected an object");
  }
  auto add_eos = [&](const std::string& content) {
    if (content.empty()) return;
    if (auto id = tok->token_to_id(content)) {
      if (std::find(t.eos_token_ids.begin(), t.eos_token_ids.end(), *id) == t.eos_token_ids.end()) {
        t.eos_token_ids.push_back(*id);
      }
    }
  };
  add_eos(token_content(config, "eos_token"));
  for (const char* known : {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>"}) {
    add_eos(known);
  }
  if (const std::string bos = token_content(config, "bos_token"); !bos.empty()) {
    if (auto id = tok->token_to_id(bos)) t.bos_token_id = *id;
  }
  return t;
}

}  // namespace

Result<DummyInit> parse_dummy_init(std::string_view name) {
  if (name == "random") return DummyInit::kRandom;
  if (name == "copy") return DummyInit::kCopy;
  return invalid_argument("--init: unknown \"" + std::string(name) + "\"; expected random or copy");
}

std::string_view dummy_init_name(DummyInit init) {
  return init == DummyInit::kCopy ? "copy" : "random";
}

double copy_head_runner_up(const ModelConfig& config, int copy_distance, int64_t max_distance) {
  const std::vector<double> inv_freq =
      rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling);
  return choose_copy_pairs(inv_freq, copy_distance, max_distance).runner_up;
}

std::vector<std::string> dummy_model_names() {
  std::vector<std::string> names;
  for (const Shape& s : kShapes) names.emplace_back(s.name);
  return names;
}

Result<ModelConfig> dummy_model_config(std::string_view arch, int64_t vocab_size) {
  for (const Shape& s : kShapes) {
    if (arch != s.name) continue;
    ModelConfig c;
    c.arch = s.arch;
    c.vocab_size = s.vocab_size == 0 ? vocab_size : std::max(s.vocab_size, vocab_size);
    c.hidden_size = s.hidden_size;
    c.intermediate_size = s.intermediate_size;
    c.num_layers = s.num_layers;
    c.num_qo_heads = s.num_qo_heads;
    c.num_kv_heads = s.num_kv_heads;
    c.head_dim = s.head_dim;
    c.max_position_embeddings = s.max_position_embeddings;
    c.rms_norm_eps = s.rms_norm_eps;
    c.rope_theta = s.rope_theta;
    c.tie_word_embeddings = s.tied;
    c.qkv_bias = s.arch == Architecture::kQwen2;
    c.qk_norm = s.arch == Architecture::kQwen3;
    if (s.llama3_factor > 0) c.rope_scaling = llama3_rope_scaling(s.llama3_factor, 1.0, 4.0, 8192);
    if (s.yarn_factor > 0) c.rope_scaling = yarn_rope_scaling(s.yarn_factor, s.yarn_original);
    if (c.vocab_size <= 0) return invalid_argument("vocab_size: expected > 0");
    return c;
  }
  std::string known;
  for (const Shape& s : kShapes) known += std::string(known.empty() ? "" : ", ") + s.name;
  return invalid_argument("--arch: unknown dummy model \"" + std::string(arch) +
                          "\"; expected one of " + known);
}

Result<std::string> make_dummy_model(const DummyModelOptions& options) {
  PS_RETURN_IF_ERROR(dummy_model_config(options.arch, 1).status());  // a known name
  if (!(options.matrix_std >= 0) || !(options.norm_std >= 0) ||
      !std::isfinite(options.matrix_std) || !std::isfinite(options.norm_std)) {
    return invalid_argument("matrix_std / norm_std: expected finite values >= 0");
  }
  if (options.init == DummyInit::kCopy) {
    if (options.copy_distance < 1 || options.copy_distance > 64) {
      return invalid_argument("--copy-distance: expected 1..64, got " +
                              std::to_string(options.copy_distance));
    }
    if (!(options.matrix_std > 0))
      return invalid_argument("matrix_std: expected > 0 for --init copy");
  }
  PS_ASSIGN_OR_RETURN(const TokenizerChoice tok, choose_tokenizer(options.tokenizer_dir));
  PS_ASSIGN_OR_RETURN(ModelConfig config, dummy_model_config(options.arch, tok.vocab_size));
  config.dtype = options.dtype;
  config.eos_token_ids = tok.eos_token_ids;
  config.bos_token_id = tok.bos_token_id;

  const std::string& dir = options.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return internal_error(dir + ": cannot create directory: " + ec.message());
  PS_RETURN_IF_ERROR(write_text(dir + "/tokenizer.json", tok.tokenizer_json));
  if (!tok.tokenizer_config_json.empty()) {
    PS_RETURN_IF_ERROR(write_text(dir + "/tokenizer_config.json", tok.tokenizer_config_json));
  }
  Json generation = {{"do_sample", false}, {"eos_token_id", config.eos_token_ids}};
  if (config.bos_token_id) generation["bos_token_id"] = *config.bos_token_id;
  PS_RETURN_IF_ERROR(write_text(dir + "/generation_config.json", generation.dump(2) + "\n"));
  fs::remove(dir + "/model.safetensors.index.json", ec);  // would shadow model.safetensors
  std::vector<TensorPlan> plans = plan_tensors(config, options);
  std::optional<CopyHead> copy;
  if (options.init == DummyInit::kCopy) {
    copy = make_copy_head(config, options);
    apply_copy_head(plans, *copy);
  }
  PS_RETURN_IF_ERROR(
      write_weights(dir + "/model.safetensors", plans, options, copy ? &*copy : nullptr));
  PS_RETURN_IF_ERROR(write_text(dir + "/config.json", model_config_to_json(config)));
  return dir;
}

Result<std::string> ensure_dummy_model(std::string_view name, const std::string& cache_dir,
                                       uint64_t seed, DType dtype) {
  PS_RETURN_IF_ERROR(dummy_model_config(name, 1).status());
  const std::string final_dir = cache_dir + "/" + std::string(name) + "-seed" +
                                std::to_string(seed) + "-" + std::string(dtype_name(dtype));
  auto complete = [&] {
    return fs::exists(final_dir + "/config.json") && fs::exists(final_dir + "/model.safetensors") &&
           fs::exists(final_dir + "/tokenizer.json");
  };
  if (complete()) return final_dir;
  const std::string tmp_dir =
      final_dir + ".tmp-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  DummyModelOptions options;
  options.arch = std::string(name);
  options.out_dir = tmp_dir;
  options.seed = seed;
  options.dtype = dtype;
  auto made = make_dummy_model(options);
  if (!made.ok()) {
    fs::remove_all(tmp_dir, ec);
    return made.status();
  }
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) {  // another process finished first, or final_dir holds something else
    fs::remove_all(tmp_dir, ec);
    if (complete()) return final_dir;
    return internal_error(final_dir + ": exists but is not a complete dummy model; remove it");
  }
  return final_dir;
}

std::string default_dummy_model_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/packserve/dummy-models";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/packserve/dummy-models";
  }
  return (fs::temp_directory_path() / "packserve-dummy-models").string();
}

}  // namespace packserve::model
