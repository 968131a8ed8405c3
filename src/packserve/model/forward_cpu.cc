#include "packserve/model/forward_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <utility>

#include "packserve/attention/run_cpu.h"
#include "packserve/attention/tensors.h"
#include "packserve/common/argmax.h"
#include "packserve/model/forward_batch.h"
#include "packserve/model/ops_cpu.h"

namespace packserve::model {
namespace {

// Appends tensor t (validated by validate_weights) converted to f32 to `out`.
void append_f32(const HostTensor& t, std::vector<float>& out) {
  if (!t.present()) return;
  const size_t base = out.size();
  const size_t n = static_cast<size_t>(t.num_elements());
  out.resize(base + n);
  const auto* data = static_cast<const std::byte*>(t.data);
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data() + base, data, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) out[base + i] = load_as_float(data, i, t.dtype);
}

std::vector<float> to_f32(const HostTensor& t) {
  std::vector<float> out;
  append_f32(t, out);
  return out;
}

std::span<const std::byte> as_bytes(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

// The first num_tokens token slots of each copy's src_page onto its dst_page, in one pool.
template <typename T>
void copy_page_tokens(const std::vector<kv::PageCopy>& copies, size_t token_elems,
                      size_t page_elems, std::vector<T>& pages) {
  for (const kv::PageCopy& c : copies) {
    std::copy_n(pages.data() + static_cast<size_t>(c.src_page) * page_elems,
                token_elems * static_cast<size_t>(c.num_tokens),
                pages.data() + static_cast<size_t>(c.dst_page) * page_elems);
  }
}

}  // namespace

Result<std::unique_ptr<CpuForwardBackend>> CpuForwardBackend::create(
    const ModelWeights& weights, const KvPoolShape& pool, const CpuForwardOptions& options) {
  PS_RETURN_IF_ERROR(validate_weights(weights));
  PS_RETURN_IF_ERROR(validate_kv_pool_shape(pool));
  const ModelConfig& c = weights.config;
  if (options.num_threads < 1) {
    return invalid_argument("num_threads = " + std::to_string(options.num_threads) +
                            ": expected >= 1");
  }
  if (options.sample_threads < 0 || options.sample_threads > 64) {
    return invalid_argument("sample_threads = " + std::to_string(options.sample_threads) +
                            ": expected 0 (auto) to 64");
  }
  if (options.num_ctas < 1) {
    return invalid_argument("num_ctas = " + std::to_string(options.num_ctas) + ": expected >= 1");
  }
  const bool fp8 = options.kv_cache_dtype == KvCacheDtype::kFp8E4m3;
  if (!fp8 && options.kv_cache_dtype != KvCacheDtype::kAuto) {
    return invalid_argument(
        "kv_cache_dtype = " + std::to_string(static_cast<int>(options.kv_cache_dtype)) +
        ": expected auto or fp8_e4m3");
  }
  for (size_t i = 0; fp8 && i < weights.layers.size(); ++i) {
    const LayerWeights& w = weights.layers[i];
    for (const auto& [scale, name] : {std::pair{w.k_scale, "k_scale"}, {w.v_scale, "v_scale"}}) {
      if (!(scale > 0.0f && std::isfinite(scale))) {
        return invalid_argument("layers[" + std::to_string(i) + "]." + name + " = " +
                                std::to_string(scale) +
                                ": expected a finite KV cache scale > 0 (kv_cache_dtype fp8_e4m3)");
      }
    }
  }
  if (std::find(std::begin(attention::kSupportedHeadDims), std::end(attention::kSupportedHeadDims),
                c.head_dim) == std::end(attention::kSupportedHeadDims)) {
    return invalid_argument("head_dim = " + std::to_string(c.head_dim) +
                            ": the attention engine supports 64, 128 or 256");
  }
  if (c.num_qo_heads / c.num_kv_heads > attention::kMaxGroupSize) {
    return invalid_argument(
        "num_qo_heads / num_kv_heads = " + std::to_string(c.num_qo_heads / c.num_kv_heads) +
        ": expected <= " + std::to_string(attention::kMaxGroupSize));
  }
  const size_t pool_elements = static_cast<size_t>(pool.num_pages) *
                               static_cast<size_t>(pool.page_size) *
                               static_cast<size_t>(c.kv_size());
  std::unique_ptr<CpuForwardBackend> b(new CpuForwardBackend());
  b->config_ = c;
  b->pool_ = pool;
  b->options_ = options;
  b->sample_pool_ = std::make_unique<WorkerPool>(
      options.sample_threads > 0 ? options.sample_threads : default_worker_threads());
  b->inv_freq_ = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  try {
    b->embed_ = to_f32(weights.embed_tokens);
    b->final_norm_ = to_f32(weights.final_norm);
    b->lm_head_ = to_f32(weights.lm_head);
    b->layers_.resize(weights.layers.size());
    for (size_t i = 0; i < weights.layers.size(); ++i) {
      const LayerWeights& w = weights.layers[i];
      Layer& l = b->layers_[i];
      l.input_norm = to_f32(w.input_norm);
      for (const HostTensor* t : {&w.q_proj, &w.k_proj, &w.v_proj}) append_f32(*t, l.qkv_w);
      for (const HostTensor* t : {&w.q_bias, &w.k_bias, &w.v_bias}) append_f32(*t, l.qkv_b);
      l.q_norm = to_f32(w.q_norm);
      l.k_norm = to_f32(w.k_norm);
      l.o_w = to_f32(w.o_proj);
      l.post_norm = to_f32(w.post_attention_norm);
      append_f32(w.gate_proj, l.gate_up_w);
      append_f32(w.up_proj, l.gate_up_w);
      l.down_w = to_f32(w.down_proj);
      if (fp8) {
        l.k_fp8.assign(pool_elements, 0);  // e4m3 +0
        l.v_fp8.assign(pool_elements, 0);
        l.k_scale = w.k_scale;
        l.v_scale = w.v_scale;
      } else {
        l.k_pages.assign(pool_elements, 0.0f);
        l.v_pages.assign(pool_elements, 0.0f);
      }
    }
  } catch (const std::bad_alloc&) {
    return resource_exhausted("cpu forward: cannot allocate f32 weights and a KV pool of " +
                              std::to_string(pool.num_pages) + " pages x " +
                              std::to_string(pool.page_size) + " tokens x " +
                              std::to_string(c.num_layers) + " layers (" +
                              (fp8 ? "fp8_e4m3" : "f32") + ")");
  }
  return b;
}

std::span<const float> CpuForwardBackend::k_pages(int layer) const {
  return layers_.at(static_cast<size_t>(layer)).k_pages;
}
std::span<const float> CpuForwardBackend::v_pages(int layer) const {
  return layers_.at(static_cast<size_t>(layer)).v_pages;
}

std::span<const uint8_t> CpuForwardBackend::k_pages_fp8(int layer) const {
  return layers_.at(static_cast<size_t>(layer)).k_fp8;
}
std::span<const uint8_t> CpuForwardBackend::v_pages_fp8(int layer) const {
  return layers_.at(static_cast<size_t>(layer)).v_fp8;
}

size_t CpuForwardBackend::kv_pool_bytes() const {
  size_t bytes = 0;
  for (const Layer& l : layers_) {
    bytes +=
        (l.k_pages.size() + l.v_pages.size()) * sizeof(float) + l.k_fp8.size() + l.v_fp8.size();
  }
  return bytes;
}

void CpuForwardBackend::copy_pages(const std::vector<kv::PageCopy>& copies) {
  const size_t token_elems = static_cast<size_t>(config_.kv_size());
  const size_t page_elems = token_elems * static_cast<size_t>(pool_.page_size);
  for (Layer& l : layers_) {
    if (kv_fp8()) {  // a byte per element: the bytes are copied, never re-rounded
      copy_page_tokens(copies, token_elems, page_elems, l.k_fp8);
      copy_page_tokens(copies, token_elems, page_elems, l.v_fp8);
    } else {
      copy_page_tokens(copies, token_elems, page_elems, l.k_pages);
      copy_page_tokens(copies, token_elems, page_elems, l.v_pages);
    }
  }
}

Status CpuForwardBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  PS_RETURN_IF_ERROR(validate_forward_batch(batch, config_, pool_));
  const int num_requests = batch.num_requests();
  if (num_requests > 0) {
    layout_ = make_attention_layout(batch, config_, pool_, DType::kF32);
    layout_.kv_fp8 = kv_fp8();
    PS_RETURN_IF_ERROR(attention::validate(layout_));
    PS_ASSIGN_OR_RETURN(
        plan_,
        attention::make_plan(layout_, attention::DeviceShape{options_.num_ctas}, options_.plan));
  }
  // Everything is checked: from here on the pool is written.
  copy_pages(batch.page_copies);
  out.logits.clear();
  out.argmax.clear();
  out.sampled.clear();
  out.sampled_logprobs.clear();
  out.top_logprobs.clear();
  out.scores.clear();
  if (num_requests == 0) return ok_status();

  const int64_t rows = batch.total_rows();
  const int64_t hid = config_.hidden_size;
  positions_ = row_positions(batch);
  rope_table(positions_, inv_freq_, rope_attention_factor(config_.rope_scaling), cos_sin_);
  x_.resize(static_cast<size_t>(rows * hid));
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = embed_.data() + static_cast<int64_t>(batch.token_ids[r]) * hid;
    std::copy_n(e, hid, x_.data() + r * hid);
  }
  for (Layer& layer : layers_) PS_RETURN_IF_ERROR(run_layer(layer, batch));

  // Final norm and LM head on the last row of each sampling request (an argmax or draw
  // request's extra_rows before it, forward.h): the logits rows first,
  // then the argmax rows and the sample rows, whose logits are reduced to their token and
  // dropped; then the scored rows, reduced to their scores.
  std::vector<float> last;
  const auto add_row = [&](int32_t row) {
    const float* xr = x_.data() + static_cast<int64_t>(row) * hid;
    last.insert(last.end(), xr, xr + hid);
  };
  for (uint8_t kind : {kOutputLogits, kOutputArgmax, kOutputSample}) {
    for (int r = 0; r < num_requests; ++r) {
      if (batch.samples[r] != kind) continue;
      const int32_t n = kind == kOutputLogits ? 1 : batch.argmax_rows_of(r) + batch.draw_rows_of(r);
      for (int32_t j = n; j > 0; --j) add_row(batch.qo_indptr[r + 1] - j);
    }
  }
  const int64_t first_score = static_cast<int64_t>(last.size()) / hid;
  const std::vector<std::pair<int32_t, int>> scored = scored_rows(batch);  // rows first_score..
  for (const auto& [row, r] : scored) add_row(row);
  const int64_t num_samples = static_cast<int64_t>(last.size()) / hid;
  rmsnorm(last, final_norm_, hid, static_cast<float>(config_.rms_norm_eps), last);
  const int64_t vocab = config_.vocab_size;
  std::vector<float> logits(static_cast<size_t>(num_samples * vocab));
  linear(last, num_samples, hid, lm_head_, vocab, {}, logits);
  const auto num_logits =
      static_cast<int64_t>(std::count(batch.samples.begin(), batch.samples.end(), kOutputLogits));
  const auto row = [&](int64_t i) {
    return std::span<const float>(logits).subspan(static_cast<size_t>(i * vocab), vocab);
  };
  if (!batch.masks.empty()) {  // the argmax and sample rows' masks, before anything reads them
    std::vector<uint32_t> masks(batch.masks.size());
    write_masks(batch, masks);
    int64_t j = num_logits;  // the argmax rows, then the sample rows, as above
    for (uint8_t kind : {kOutputArgmax, kOutputSample}) {
      for (int r = 0; r < num_requests; ++r) {
        if (batch.samples[r] != kind) continue;
        const std::span<const uint32_t> mask = request_mask(batch, r, masks, vocab);
        if (!mask.empty()) {  // (a masked request has one row)
          mask_logits(std::span<float>(logits).subspan(static_cast<size_t>(j * vocab), vocab),
                      mask);
        }
        j += batch.argmax_rows_of(r) + batch.draw_rows_of(r);
      }
    }
  }
  int64_t i = num_logits;
  for (int r = 0; r < num_requests; ++r) {
    for (int32_t j = batch.argmax_rows_of(r); j > 0; --j) {
      out.argmax.push_back(argmax_lowest(row(i++)));
    }
  }
  draw_rows(batch, draws_);  // the draw rows, rows i, i + 1, ...
  out.sampled.resize(draws_.size());
  out.sampled_logprobs.resize(draws_.size());
  out.top_logprobs.resize(draws_.size());
  sample_pool_->run(static_cast<int64_t>(draws_.size()), [&](int64_t k) {
    const DrawRow& d = draws_[static_cast<size_t>(k)];
    const SampleResult s = sample_draw_adjusted(row(i + k), batch.adjusts_of(d.request), *d.draw);
    out.sampled[k] = s.token_id;
    out.sampled_logprobs[k] = s.logprob;
    out.top_logprobs[k] = top_logprobs(row(i + k), d.draw->top_logprobs);
  });
  out.scores.resize(scored.size());
  sample_pool_->run(static_cast<int64_t>(scored.size()), [&](int64_t k) {
    const int r = scored[static_cast<size_t>(k)].second;
    out.scores[k] = score_row(row(first_score + k), batch.score_targets[static_cast<size_t>(k)],
                              batch.score_top[static_cast<size_t>(r)]);
  });
  logits.resize(static_cast<size_t>(num_logits * vocab));
  out.logits = std::move(logits);
  return ok_status();
}

Status CpuForwardBackend::run_layer(Layer& l, const ForwardBatch& batch) {
  const ModelConfig& c = config_;
  const int64_t rows = batch.total_rows();
  const int64_t hid = c.hidden_size;
  const int64_t inter = c.intermediate_size;
  const int64_t hd = c.head_dim;
  const int64_t qs = c.q_size();
  const int64_t kvs = c.kv_size();
  const int64_t stride = qs + 2 * kvs;
  const auto eps = static_cast<float>(c.rms_norm_eps);

  h_.resize(x_.size());
  rmsnorm(x_, l.input_norm, hid, eps, h_);
  qkv_.resize(static_cast<size_t>(rows * stride));
  linear(h_, rows, hid, l.qkv_w, stride, l.qkv_b, qkv_);
  if (c.qk_norm) {
    for (int64_t r = 0; r < rows; ++r) {
      const std::span<float> q(qkv_.data() + r * stride, static_cast<size_t>(qs));
      const std::span<float> k(qkv_.data() + r * stride + qs, static_cast<size_t>(kvs));
      rmsnorm(q, l.q_norm, hd, eps, q);
      rmsnorm(k, l.k_norm, hd, eps, k);
    }
  }
  apply_rope(qkv_, rows, stride, c.num_qo_heads, hd, cos_sin_);
  apply_rope(std::span<float>(qkv_).subspan(static_cast<size_t>(qs)), rows, stride, c.num_kv_heads,
             hd, cos_sin_);

  // q rows side by side for attention; k and v of each row into its page slot.
  q_.resize(static_cast<size_t>(rows * qs));
  const int64_t ps = pool_.page_size;
  for (int r = 0; r < batch.num_requests(); ++r) {
    for (int32_t row = batch.qo_indptr[r]; row < batch.qo_indptr[r + 1]; ++row) {
      const float* src = qkv_.data() + row * stride;
      std::copy_n(src, qs, q_.data() + row * qs);
      const int64_t p = positions_[static_cast<size_t>(row)];
      const int64_t page = batch.page_ids[static_cast<size_t>(batch.page_indptr[r] + p / ps)];
      const int64_t slot = (page * ps + p % ps) * kvs;
      if (kv_fp8()) {
        // value / scale divided in f32 (as __fdiv_rn), then rounded once to e4m3.
        for (int64_t i = 0; i < kvs; ++i) {
          l.k_fp8[static_cast<size_t>(slot + i)] = e4m3_from_float(src[qs + i] / l.k_scale);
          l.v_fp8[static_cast<size_t>(slot + i)] = e4m3_from_float(src[qs + kvs + i] / l.v_scale);
        }
      } else {
        std::copy_n(src + qs, kvs, l.k_pages.data() + slot);
        std::copy_n(src + qs + kvs, kvs, l.v_pages.data() + slot);
      }
    }
  }

  attn_.resize(static_cast<size_t>(rows * qs));
  attention::AttentionTensors tensors;
  tensors.q = as_bytes(q_);
  if (kv_fp8()) {  // run_cpu reads byte b as e4m3_value(b) * scale
    tensors.k_pages = std::as_bytes(std::span<const uint8_t>(l.k_fp8));
    tensors.v_pages = std::as_bytes(std::span<const uint8_t>(l.v_fp8));
    tensors.k_scale = l.k_scale;
    tensors.v_scale = l.v_scale;
  } else {
    tensors.k_pages = as_bytes(l.k_pages);
    tensors.v_pages = as_bytes(l.v_pages);
  }
  tensors.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  PS_RETURN_IF_ERROR(attention::run_cpu(plan_, layout_, tensors, attn_,
                                        attention::RunCpuOptions{options_.num_threads}));
  linear(attn_, rows, qs, l.o_w, hid, {}, x_, /*accumulate=*/true);

  rmsnorm(x_, l.post_norm, hid, eps, h_);
  gate_up_.resize(static_cast<size_t>(rows * 2 * inter));
  linear(h_, rows, hid, l.gate_up_w, 2 * inter, {}, gate_up_);
  act_.resize(static_cast<size_t>(rows * inter));
  silu_mul(gate_up_, rows, inter, act_);
  linear(act_, rows, inter, l.down_w, hid, {}, x_, /*accumulate=*/true);
  return ok_status();
}

}  // namespace packserve::model
