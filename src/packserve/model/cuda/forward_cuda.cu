// forward_cuda.cu: CudaForwardBackend (forward_cuda.h): creation (device buffers, weight upload
// or device-side random weights, the attention workspace) and accessors. The step itself is
// forward_step.cu; the memory layout is described in forward_cuda_impl.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "packserve/common/dtype.h"
#include "packserve/model/cuda/forward_cuda_impl.cuh"
#include "packserve/model/cuda/ops.h"
#include "packserve/model/forward_batch.h"
#include "packserve/model/ops_cpu.h"
#include "packserve/model/tensor_parallel.h"

namespace packserve::model {

namespace acuda = attention::cuda;

namespace {
std::string str(int64_t v) { return std::to_string(v); }
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

Status validate_step_options(const CudaStepOptions& o) {
  if (o.max_graph_rows < 0) {
    return invalid_argument("step.max_graph_rows = " + str(o.max_graph_rows) +
                            ": expected >= 0 (0: no CUDA graphs)");
  }
  if (o.max_cuda_graphs < 1) {
    return invalid_argument("step.max_cuda_graphs = " + str(o.max_cuda_graphs) + ": expected >= 1");
  }
  if (o.graph_capture_after < 1) {
    return invalid_argument("step.graph_capture_after = " + str(o.graph_capture_after) +
                            ": expected >= 1");
  }
  return ok_status();
}

// kUnimplemented naming `what` and what it lacks unless the device has compute capability 8.9
// or later (float8 e4m3).
Status check_fp8_capability(int device, const std::string& what, const char* lacks) {
  cudaDeviceProp prop{};
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  if (prop.major * 10 + prop.minor < 89) {
    return unimplemented(what + ": device " + str(device) + " (" + prop.name +
                         ", compute capability " + str(prop.major) + "." + str(prop.minor) +
                         ") has no " + lacks + "; expected 8.9 or later");
  }
  return ok_status();
}

// WeightQuantization::kFp8: float8 tensor cores (sm_89 on) and K dimensions cuBLASLt takes.
Status check_fp8_device(int device, const ModelConfig& c) {
  PS_RETURN_IF_ERROR(check_fp8_capability(device, "quantization fp8", "float8 tensor cores"));
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"hidden_size", c.hidden_size},
                                {"num_qo_heads * head_dim", c.q_size()},
                                {"intermediate_size", c.intermediate_size}}) {
    if (v % 16 != 0) {
      return invalid_argument("quantization fp8: " + std::string(name) + " = " + str(v) +
                              " (of this rank): float8 GEMMs need a multiple of 16");
    }
  }
  return ok_status();
}
}  // namespace

Status CudaForwardBackend::Impl::setup(const ModelConfig& c, const KvPoolShape& p,
                                       const CudaForwardOptions& o) {
  PS_RETURN_IF_ERROR(validate_kv_pool_shape(p));
  if (std::find(std::begin(attention::kSupportedHeadDims), std::end(attention::kSupportedHeadDims),
                c.head_dim) == std::end(attention::kSupportedHeadDims)) {
    return invalid_argument("head_dim = " + str(c.head_dim) +
                            ": the attention engine supports 64, 128 or 256");
  }
  if (c.num_qo_heads / c.num_kv_heads > attention::kMaxGroupSize) {
    return invalid_argument(
        "num_qo_heads / num_kv_heads = " + str(c.num_qo_heads / c.num_kv_heads) +
        ": expected <= " + str(attention::kMaxGroupSize));
  }
  if (o.max_batch_rows < 1) {
    return invalid_argument("max_batch_rows = " + str(o.max_batch_rows) + ": expected >= 1");
  }
  if (o.max_sampling_rows < 0) {
    return invalid_argument("max_sampling_rows = " + str(o.max_sampling_rows) +
                            ": expected >= 0 (0: max_batch_rows)");
  }
  if (o.max_batch_page_ids < 0) {
    return invalid_argument("max_batch_page_ids = " + str(o.max_batch_page_ids) +
                            ": expected >= 0 (0: the pool's num_pages)");
  }
  PS_RETURN_IF_ERROR(validate_step_options(o.step));
  if (o.logits_copy_threads < 0) {
    return invalid_argument("logits_copy_threads = " + str(o.logits_copy_threads) +
                            ": expected >= 0 (0: automatic)");
  }
  if (o.skinny_gemm_rows < 0 || o.skinny_gemm_rows > cuda::kSkinnyMaxRows) {
    return invalid_argument("skinny_gemm_rows = " + str(o.skinny_gemm_rows) + ": expected in [0, " +
                            str(cuda::kSkinnyMaxRows) + "]");
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return unimplemented("cuda forward: no CUDA device");
  }
  if (o.device < 0 || o.device >= devices) {
    return invalid_argument("device = " + str(o.device) + ": expected in [0, " + str(devices) +
                            ")");
  }
  config = c;
  pool = p;
  options = o;
  if (options.max_batch_page_ids == 0) options.max_batch_page_ids = p.num_pages;
  if (options.max_sampling_rows == 0) options.max_sampling_rows = o.max_batch_rows;
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PS_ASSIGN_OR_RETURN(cuda::Gemm g, cuda::Gemm::create(stream, o.gemm_tuning));
  gemm.emplace(std::move(g));

  const size_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, Q = c.q_size(),
               KV = c.kv_size(), D = c.head_dim, L = c.num_layers;
  // Matrices (bf16, 128-element = 256-byte alignment) and vectors (f32, 64 elements).
  size_t mat_elems = 0, vec_elems = 0;
  auto take_mat = [&](size_t n) {
    const size_t at = mat_elems;
    mat_elems += align_up(n, 128);
    return at;
  };
  auto take_vec = [&](size_t n) {
    const size_t at = vec_elems;
    vec_elems += align_up(n, 64);
    return at;
  };
  // kFp8: the layers' matrices in mat8 (bytes, 256-byte alignment), their scales in vec.
  const bool fp8 = o.quantization == WeightQuantization::kFp8;
  if (fp8) PS_RETURN_IF_ERROR(check_fp8_device(o.device, c));
  if (o.kv_cache_dtype == KvCacheDtype::kFp8E4m3) {
    // (the attention engine's float8 KV path converts e4m3 pairs with cvt: sm_89 on)
    PS_RETURN_IF_ERROR(
        check_fp8_capability(o.device, "kv_cache_dtype fp8_e4m3", "float8 conversions"));
  }
  size_t mat8_bytes = 0;
  struct MatrixAt {
    size_t at = 0, scale_at = 0, rows = 0, cols = 0;
  };
  auto take_matrix = [&](size_t rows, size_t cols) {
    MatrixAt f{0, 0, rows, cols};
    if (!fp8) {
      f.at = take_mat(rows * cols);
      return f;
    }
    f.at = mat8_bytes;
    mat8_bytes += align_up(rows * cols, 256);
    f.scale_at = take_vec(1);
    return f;
  };
  const size_t embed_at = take_mat(V * H);
  const size_t lm_at = c.tie_word_embeddings ? embed_at : take_mat(V * H);
  const size_t final_norm_at = take_vec(H);
  struct Offsets {
    MatrixAt qkv, o, gu, d;
    size_t in_n, post_n, b, qn, kn;
  };
  std::vector<Offsets> offs(L);
  for (Offsets& f : offs) {
    f.qkv = take_matrix(Q + 2 * KV, H);
    f.o = take_matrix(H, Q);
    f.gu = take_matrix(2 * I, H);
    f.d = take_matrix(H, I);
    f.in_n = take_vec(H);
    f.post_n = take_vec(H);
    f.b = c.qkv_bias ? take_vec(Q + 2 * KV) : 0;
    f.qn = c.qk_norm ? take_vec(D) : 0;
    f.kn = c.qk_norm ? take_vec(D) : 0;
  }
  PS_RETURN_IF_ERROR(mat.alloc(mat_elems * 2, "bf16 weight matrices"));
  PS_RETURN_IF_ERROR(vec.alloc(vec_elems * 4, "f32 norm weights, biases and scales"));
  if (fp8) {
    PS_RETURN_IF_ERROR(mat8.alloc(mat8_bytes, "float8 weight matrices"));
    PS_RETURN_IF_ERROR(stage.alloc(kStageBytes + kStageAmaxRows * sizeof(float),
                                   "the bf16 staging of the float8 matrices"));
  }
  uint16_t* mb = mat.as<uint16_t>();
  float* vb = vec.as<float>();
  const auto matrix = [&](const MatrixAt& f) {
    cuda::Matrix w;
    w.rows = f.rows;
    w.cols = f.cols;
    if (fp8) {
      w.fp8 = mat8.as<uint8_t>() + f.at;
      w.scale = vb + f.scale_at;
    } else {
      w.bf16 = mb + f.at;
    }
    return w;
  };
  embed = mb + embed_at;
  lm_head = mb + lm_at;
  final_norm = vb + final_norm_at;
  layers.resize(L);
  for (size_t l = 0; l < L; ++l) {
    const Offsets& f = offs[l];
    cuda::LayerDev& d = layers[l];
    d.qkv = matrix(f.qkv);
    d.o = matrix(f.o);
    d.gate_up = matrix(f.gu);
    d.down = matrix(f.d);
    d.input_norm = vb + f.in_n;
    d.post_norm = vb + f.post_n;
    d.qkv_b = c.qkv_bias ? vb + f.b : nullptr;
    d.q_norm = c.qk_norm ? vb + f.qn : nullptr;
    d.k_norm = c.qk_norm ? vb + f.kn : nullptr;
  }

  layer_kv_elems = static_cast<size_t>(p.num_pages) * static_cast<size_t>(p.page_size) * KV;
  PS_RETURN_IF_ERROR(kv.alloc(2 * L * layer_kv_elems * kv_elem_bytes(),
                              "the KV pool (" + str(p.num_pages) + " pages x " + str(p.page_size) +
                                  " tokens x " + str(L) + " layers" +
                                  (kv_fp8() ? ", e4m3)" : ")")));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(kv.as<void>(), 0, kv.bytes(), stream));

  const size_t R = static_cast<size_t>(options.max_batch_rows);
  const size_t x_b = align_up(R * H * 4, 256), qkv_b = align_up(R * (Q + 2 * KV) * 4, 256),
               h_b = align_up(R * H * 2, 256), q_b = align_up(R * Q * 2, 256),
               gu_b = align_up(R * 2 * I * 2, 256), act_b = align_up(R * I * 2, 256);
  const size_t rope_b = align_up(R * D * 4, 256);  // [R, D / 2] (cos, sin) f32
  const size_t xq_b = fp8 ? align_up(R * std::max({H, Q, I}), 256) : 0,
               xs_b = fp8 ? align_up(R * 4 + 4, 256) : 0;  // the rows' maxima, the scale
  PS_RETURN_IF_ERROR(
      scratch.alloc(x_b + qkv_b + h_b + 2 * q_b + gu_b + act_b + rope_b + xq_b + xs_b,
                    "activations of max_batch_rows = " + str(R)));
  // Zeroed once: the scored rows' LM head reads rows of h past a step's (forward_step.cu).
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(scratch.as<void>(), 0, scratch.bytes(), stream));
  auto* s = scratch.as<std::byte>();
  x = reinterpret_cast<float*>(s);
  qkv = reinterpret_cast<float*>(s + x_b);
  h = reinterpret_cast<uint16_t*>(s + x_b + qkv_b);
  q = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b);
  attn = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + q_b);
  gate_up = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + 2 * q_b);
  act = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + 2 * q_b + gu_b);
  rope = reinterpret_cast<float*>(s + x_b + qkv_b + h_b + 2 * q_b + gu_b + act_b);
  if (fp8) {
    xq = reinterpret_cast<uint8_t*>(s + x_b + qkv_b + h_b + 2 * q_b + gu_b + act_b + rope_b);
    xq_amax =
        reinterpret_cast<float*>(s + x_b + qkv_b + h_b + 2 * q_b + gu_b + act_b + rope_b + xq_b);
    xq_scale = xq_amax + R;
  }

  // Metadata at a fixed address (graphs read it): MetaLayout at the largest R = n = S, P.
  meta_capacity =
      cuda::meta_layout(R, R, R, R, static_cast<size_t>(options.max_batch_page_ids)).end;
  PS_RETURN_IF_ERROR(meta.alloc(meta_capacity * 4, "step metadata"));
  PS_RETURN_IF_ERROR(meta_pinned.reserve(meta_capacity * 4));
  PS_RETURN_IF_ERROR(argmax_dev.alloc(argmax_bytes(0, R, true), "argmax and sampled ids"));
  PS_RETURN_IF_ERROR(argmax_pinned.reserve(argmax_bytes(0, R, true)));
  PS_RETURN_IF_ERROR(reserve_adjusts(0));
  PS_RETURN_IF_ERROR(score_dev.alloc(score_bytes(), "scored rows"));
  PS_RETURN_IF_ERROR(score_pinned.reserve(score_bytes()));
  PS_RETURN_IF_ERROR(step_events.create());
  PS_RETURN_IF_ERROR(logits_events.create(kLogitsChunks));
  const int hw_threads = static_cast<int>(std::thread::hardware_concurrency());
  copier.emplace(o.logits_copy_threads > 0 ? o.logits_copy_threads
                                           : std::clamp(hw_threads / 2, 1, 8));

  const std::vector<double> freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  rope_attention_factor = model::rope_attention_factor(c.rope_scaling);
  PS_RETURN_IF_ERROR(inv_freq.alloc(freq.size() * sizeof(double), "rope inv_freq"));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq.as<void>(), freq.data(),
                                           freq.size() * sizeof(double), cudaMemcpyHostToDevice));

  PS_ASSIGN_OR_RETURN(acuda::KernelOccupancy occ,
                      acuda::kernel_occupancy(static_cast<int>(D), DType::kBF16));
  num_ctas = occ.grid_ctas();
  PS_ASSIGN_OR_RETURN(
      acuda::Workspace ws,
      acuda::Workspace::create(
          attention::PlanCapacity{options.max_batch_rows, options.max_batch_page_ids, num_ctas,
                                  static_cast<int>(KV / D)},
          acuda::HeadConfig{static_cast<int>(c.num_qo_heads), static_cast<int>(c.num_kv_heads),
                            static_cast<int>(D), DType::kBF16}));
  workspace.emplace(std::move(ws));
  return ok_status();
}

namespace {

// Converts elements [first, first + n) of a validated host tensor to bf16 (or f32) and copies
// them to dst.
Status upload_elements(const HostTensor& t, size_t first, size_t n, void* dst, DType to) {
  const auto* src = static_cast<const std::byte*>(t.data);
  if (t.dtype == to) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src + first * dtype_size_bytes(to),
                                             n * dtype_size_bytes(to), cudaMemcpyHostToDevice));
    return ok_status();
  }
  std::vector<std::byte> staging(n * dtype_size_bytes(to));
  for (size_t i = 0; i < n; ++i)
    store_from_float(staging.data(), i, to, load_as_float(src, first + i, t.dtype));
  PS_MODEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(dst, staging.data(), staging.size(), cudaMemcpyHostToDevice));
  return ok_status();
}
Status upload_tensor(const HostTensor& t, void* dst, DType to) {
  return upload_elements(t, 0, static_cast<size_t>(t.num_elements()), dst, to);
}

// Rows [row0, row0 + rows) of a matrix, whose bf16 values fill(first, n, dst) writes at dst
// (elements [first, first + n) counted from the part's first); fill must write the same values
// when called again.
struct MatrixPart {
  size_t row0 = 0, rows = 0;
  std::function<Status(size_t first, size_t n, uint16_t* dst)> fill;
};

// Writes matrix w from its parts. bf16: in place. fp8: through m.stage, as many whole rows at a
// time as it holds, in two passes: the matrix's largest magnitude (row_absmax, the maxima to the
// host), then each batch quantized with the matrix's scale (quantize_fp8).
Status write_matrix(CudaForwardBackend::Impl& m, const cuda::Matrix& w,
                    const std::vector<MatrixPart>& parts) {
  if (w.fp8 == nullptr) {
    for (const MatrixPart& p : parts) {
      PS_RETURN_IF_ERROR(p.fill(0, p.rows * w.cols, w.bf16 + p.row0 * w.cols));
    }
    return ok_status();
  }
  const size_t batch = std::clamp<size_t>(CudaForwardBackend::Impl::kStageBytes / 2 / w.cols, 1,
                                          CudaForwardBackend::Impl::kStageAmaxRows);
  auto* stage = m.stage.as<uint16_t>();
  auto* amax_dev =
      reinterpret_cast<float*>(m.stage.as<std::byte>() + CudaForwardBackend::Impl::kStageBytes);
  const int cols = static_cast<int>(w.cols);
  // The copies of fill (on the legacy stream) must not overwrite what the last kernel reads.
  const auto each_batch = [&](const auto& body) -> Status {
    for (const MatrixPart& p : parts) {
      for (size_t r = 0; r < p.rows; r += batch) {
        const size_t n = std::min(batch, p.rows - r);
        PS_RETURN_IF_ERROR(p.fill(r * w.cols, n * w.cols, stage));
        PS_RETURN_IF_ERROR(body(p.row0 + r, static_cast<int>(n)));
        PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
      }
    }
    return ok_status();
  };
  float amax = 0.0f;
  std::vector<float> host(batch);
  PS_RETURN_IF_ERROR(each_batch([&](size_t, int n) -> Status {
    PS_RETURN_IF_ERROR(cuda::row_absmax(stage, n, cols, amax_dev, m.stream));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), amax_dev, sizeof(float) * n,
                                                  cudaMemcpyDeviceToHost, m.stream));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
    for (int i = 0; i < n; ++i) amax = std::max(amax, host[static_cast<size_t>(i)]);
    return ok_status();
  }));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(amax_dev, &amax, sizeof amax, cudaMemcpyHostToDevice));
  return each_batch([&](size_t row, int n) {
    return cuda::quantize_fp8(stage, n, cols, amax_dev, 1, w.fp8 + row * w.cols, w.scale, m.stream);
  });
}

// The part of w at row0 from host tensor t ([rows, w.cols]).
MatrixPart host_part(const HostTensor& t, const cuda::Matrix& w, size_t row0) {
  return {row0, static_cast<size_t>(t.num_elements()) / w.cols,
          [&t](size_t first, size_t n, uint16_t* dst) {
            return upload_elements(t, first, n, dst, DType::kBF16);
          }};
}

}  // namespace

CudaForwardBackend::CudaForwardBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaForwardBackend::~CudaForwardBackend() = default;
const ModelConfig& CudaForwardBackend::config() const { return impl_->whole_config; }
const KvPoolShape& CudaForwardBackend::pool_shape() const { return impl_->pool; }
const attention::Plan& CudaForwardBackend::last_plan() const { return impl_->plan; }
Status CudaForwardBackend::set_step_options(const CudaStepOptions& step) {
  PS_RETURN_IF_ERROR(validate_step_options(step));
  if (impl_->tp != nullptr && impl_->tp->on_one_device() && step.max_graph_rows != 0) {
    return invalid_argument("step.max_graph_rows = " + str(step.max_graph_rows) +
                            ": a one-device tensor-parallel backend runs eagerly (0)");
  }
  CudaStepOptions& cur = impl_->options.step;
  if (step.max_graph_rows != cur.max_graph_rows || step.max_cuda_graphs != cur.max_cuda_graphs) {
    impl_->graphs.clear();
  }
  cur = step;
  return ok_status();
}
Status CudaForwardBackend::set_plan_options(const attention::PlanOptions& plan) {
  PS_RETURN_IF_ERROR(attention::check_plan_options(plan));
  impl_->options.plan = plan;
  return ok_status();
}
const CudaStepProfile& CudaForwardBackend::last_step_profile() const { return impl_->profile; }
BackendStats CudaForwardBackend::stats() const { return impl_->stats; }
int CudaForwardBackend::num_cuda_graphs() const { return static_cast<int>(impl_->graphs.size()); }
size_t CudaForwardBackend::weight_bytes() const {
  size_t bytes = impl_->mat.bytes() + impl_->mat8.bytes() + impl_->vec.bytes();
  for (const auto& p : impl_->peers) bytes += p->mat.bytes() + p->mat8.bytes() + p->vec.bytes();
  return bytes;
}
size_t CudaForwardBackend::kv_pool_bytes() const {
  size_t bytes = impl_->kv.bytes();
  for (const auto& p : impl_->peers) bytes += p->kv.bytes();
  return bytes;
}
size_t CudaForwardBackend::logits_bytes() const { return impl_->logits_dev.bytes(); }

namespace {

// The weights of one rank (its shard_weights share), onto its device.
Status upload_weights(CudaForwardBackend::Impl& m, const ModelWeights& weights) {
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.options.device));
  const ModelConfig& c = weights.config;
  const size_t I = c.intermediate_size, Q = c.q_size(), KV = c.kv_size();
  constexpr DType kB = DType::kBF16, kF = DType::kF32;
  PS_RETURN_IF_ERROR(upload_tensor(weights.embed_tokens, m.embed, kB));
  if (!c.tie_word_embeddings) PS_RETURN_IF_ERROR(upload_tensor(weights.lm_head, m.lm_head, kB));
  PS_RETURN_IF_ERROR(upload_tensor(weights.final_norm, m.final_norm, kF));
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& w = weights.layers[l];
    m.layers[l].k_scale = w.k_scale;
    m.layers[l].v_scale = w.v_scale;
    const cuda::LayerDev& d = m.layers[l];
    PS_RETURN_IF_ERROR(write_matrix(m, d.qkv,
                                    {host_part(w.q_proj, d.qkv, 0), host_part(w.k_proj, d.qkv, Q),
                                     host_part(w.v_proj, d.qkv, Q + KV)}));
    PS_RETURN_IF_ERROR(write_matrix(m, d.o, {host_part(w.o_proj, d.o, 0)}));
    PS_RETURN_IF_ERROR(write_matrix(
        m, d.gate_up, {host_part(w.gate_proj, d.gate_up, 0), host_part(w.up_proj, d.gate_up, I)}));
    PS_RETURN_IF_ERROR(write_matrix(m, d.down, {host_part(w.down_proj, d.down, 0)}));
    PS_RETURN_IF_ERROR(upload_tensor(w.input_norm, d.input_norm, kF));
    PS_RETURN_IF_ERROR(upload_tensor(w.post_attention_norm, d.post_norm, kF));
    if (c.qkv_bias) {
      PS_RETURN_IF_ERROR(upload_tensor(w.q_bias, d.qkv_b, kF));
      PS_RETURN_IF_ERROR(upload_tensor(w.k_bias, d.qkv_b + Q, kF));
      PS_RETURN_IF_ERROR(upload_tensor(w.v_bias, d.qkv_b + Q + KV, kF));
    }
    if (c.qk_norm) {
      PS_RETURN_IF_ERROR(upload_tensor(w.q_norm, d.q_norm, kF));
      PS_RETURN_IF_ERROR(upload_tensor(w.k_norm, d.k_norm, kF));
    }
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  m.stage = cuda::DeviceMemory();
  return ok_status();
}

// Seeded device-side weights of one rank (create_random).
Status fill_random_weights(CudaForwardBackend::Impl& m, uint64_t seed) {
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(m.options.device));
  const ModelConfig& c = m.config;
  // bf16: every matrix in mat at once. fp8: mat holds the embedding and the LM head, and each
  // layer matrix is drawn through the staging, a seed per staged batch of rows, after the
  // vectors (its scales are in vec).
  PS_RETURN_IF_ERROR(cuda::fill_random(m.mat.as<void>(), m.mat.bytes() / 2, DType::kBF16, seed,
                                       0.0f, 0.02f, m.stream));
  PS_RETURN_IF_ERROR(cuda::fill_random(m.vec.as<void>(), m.vec.bytes() / 4, DType::kF32, seed + 1,
                                       1.0f, 0.1f, m.stream));
  if (c.qkv_bias) {  // biases N(0, 0.02), not 1 + N(0, 0.1)
    for (size_t l = 0; l < m.layers.size(); ++l) {
      PS_RETURN_IF_ERROR(cuda::fill_random(m.layers[l].qkv_b,
                                           static_cast<size_t>(c.q_size() + 2 * c.kv_size()),
                                           DType::kF32, seed + 2 + l, 0.0f, 0.02f, m.stream));
    }
  }
  if (m.mat8.as<void>() != nullptr) {
    uint64_t matrix_seed = seed + 1000003;
    for (const cuda::LayerDev& d : m.layers) {
      for (const cuda::Matrix* w : {&d.qkv, &d.o, &d.gate_up, &d.down}) {
        const uint64_t s = matrix_seed++ << 32;  // a batch's seed: its matrix's and its offset
        PS_RETURN_IF_ERROR(
            write_matrix(m, *w, {{0, w->rows, [&](size_t first, size_t n, uint16_t* dst) {
                                    return cuda::fill_random(dst, n, DType::kBF16, s + first, 0.0f,
                                                             0.02f, m.stream);
                                  }}}));
      }
    }
    m.stage = cuda::DeviceMemory();
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return ok_status();
}

// Rank 0 (`root`) and, with tensor parallelism, its peers on the next devices, each set up for
// its share of `whole`, and the group that joins them.
Status setup_ranks(CudaForwardBackend::Impl& root, const ModelConfig& whole,
                   const KvPoolShape& pool, const CudaForwardOptions& options) {
  const int tp = options.tensor_parallel;
  PS_ASSIGN_OR_RETURN(const ModelConfig local, shard_config(whole, tp));
  if (options.tensor_parallel_on_one_device && options.step.max_graph_rows != 0) {
    return invalid_argument("tensor_parallel_on_one_device needs step.max_graph_rows = 0 (got " +
                            str(options.step.max_graph_rows) + "): its all-reduce is not captured");
  }
  if (tp > 1 && !options.tensor_parallel_on_one_device) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) {
      (void)cudaGetLastError();
      devices = 0;
    }
    if (options.device < 0 || options.device + tp > devices) {
      return invalid_argument("tensor_parallel = " + str(tp) + " from device = " +
                              str(options.device) + " needs devices " + str(options.device) + ".." +
                              str(options.device + tp - 1) + "; " + str(devices) + " visible");
    }
  }
  PS_RETURN_IF_ERROR(root.setup(local, pool, options));
  root.whole_config = whole;
  if (tp == 1) return ok_status();
  std::vector<int> devices = {options.device};
  for (int r = 1; r < tp; ++r) {
    auto peer = std::make_unique<CudaForwardBackend::Impl>();
    CudaForwardOptions o = options;
    o.device = options.tensor_parallel_on_one_device ? options.device : options.device + r;
    o.logits_copy_threads = 1;  // a peer copies no logits
    PS_RETURN_IF_ERROR(peer->setup(local, pool, o));
    peer->whole_config = whole;
    peer->tp_rank = r;
    devices.push_back(o.device);
    root.peers.push_back(std::move(peer));
  }
  if (options.tensor_parallel_on_one_device) {
    PS_ASSIGN_OR_RETURN(root.tp_owner, cuda::TpGroup::create_on_one_device(tp));
  } else {
    PS_ASSIGN_OR_RETURN(root.tp_owner, cuda::TpGroup::create(devices));
  }
  root.tp = root.tp_owner.get();
  for (auto& p : root.peers) p->tp = root.tp;
  root.rank_threads.emplace(tp - 1);
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<CudaForwardBackend>> CudaForwardBackend::create(
    const ModelWeights& weights, const KvPoolShape& pool, const CudaForwardOptions& options) {
  PS_RETURN_IF_ERROR(validate_weights(weights));
  auto impl = std::make_unique<Impl>();
  PS_RETURN_IF_ERROR(setup_ranks(*impl, weights.config, pool, options));
  const int tp = options.tensor_parallel;
  if (tp == 1) {
    PS_RETURN_IF_ERROR(upload_weights(*impl, weights));
  } else {
    for (int r = 0; r < tp; ++r) {
      PS_ASSIGN_OR_RETURN(const ModelWeights shard, shard_weights(weights, r, tp));
      PS_RETURN_IF_ERROR(upload_weights(r == 0 ? *impl : *impl->peers[r - 1], shard));
    }
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  }
  return std::unique_ptr<CudaForwardBackend>(new CudaForwardBackend(std::move(impl)));
}

Result<std::unique_ptr<CudaForwardBackend>> CudaForwardBackend::create_random(
    const ModelConfig& config, const KvPoolShape& pool, const CudaForwardOptions& options,
    uint64_t seed) {
  if (config.vocab_size < 1 || config.hidden_size < 1 || config.intermediate_size < 1 ||
      config.num_layers < 1 || config.num_qo_heads < 1 || config.num_kv_heads < 1 ||
      config.head_dim < 2 || config.num_qo_heads % config.num_kv_heads != 0) {
    return invalid_argument(
        "create_random: config counts must be positive and num_qo_heads "
        "a multiple of num_kv_heads");
  }
  auto impl = std::make_unique<Impl>();
  PS_RETURN_IF_ERROR(setup_ranks(*impl, config, pool, options));
  PS_RETURN_IF_ERROR(fill_random_weights(*impl, seed));
  for (size_t r = 0; r < impl->peers.size(); ++r) {  // every rank's share its own draw
    PS_RETURN_IF_ERROR(fill_random_weights(*impl->peers[r], seed + 7919 * (r + 1)));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  return std::unique_ptr<CudaForwardBackend>(new CudaForwardBackend(std::move(impl)));
}

Status CudaForwardBackend::read_kv_pages(int layer, std::vector<uint16_t>& k,
                                         std::vector<uint16_t>& v) const {
  const Impl& m = *impl_;
  if (layer < 0 || layer >= static_cast<int>(m.layers.size())) {
    return invalid_argument("layer = " + str(layer) + ": expected in [0, " + str(m.layers.size()) +
                            ")");
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  const size_t l = static_cast<size_t>(layer), n = m.layer_kv_elems;
  if (!m.kv_fp8()) {
    k.resize(n);
    v.resize(n);
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(k.data(), m.k_pages(l), n * 2, cudaMemcpyDeviceToHost));
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(v.data(), m.v_pages(l), n * 2, cudaMemcpyDeviceToHost));
    return ok_status();
  }
  // Every e4m3 value is a bf16 value: exact with scale 1.
  std::vector<uint8_t> bytes(n);
  const cuda::LayerDev& d = m.layers[l];
  for (auto [dst, src, scale] :
       {std::tuple{&k, m.k_pages(l), d.k_scale}, std::tuple{&v, m.v_pages(l), d.v_scale}}) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(bytes.data(), src, n, cudaMemcpyDeviceToHost));
    dst->resize(n);
    for (size_t i = 0; i < n; ++i) (*dst)[i] = float_to_bf16(e4m3_value(bytes[i]) * scale);
  }
  return ok_status();
}

Status CudaForwardBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  return impl_->run(batch, out);
}

}  // namespace packserve::model
