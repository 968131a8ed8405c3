// forward_cuda.cu: CudaForwardBackend (forward_cuda.h). Weight storage: one bf16 blob of the
// matrices (embed, lm_head unless tied, per layer Wqkv [Q + 2 KV, H], Wo [H, Q], Wgu [2 I, H],
// Wd [H, I]) and one f32 blob of the vectors (norms, Qwen2 biases), every tensor 256-byte
// aligned; KV pool: one allocation, layer l's k at 2 l and v at 2 l + 1 (units of one layer's
// [num_pages, page_size, KV] bf16). Per step the host sends one int32 metadata array:
//   token_ids [R] | positions [R] | kv_page [R] | kv_slot [R] | qo_indptr [n + 1] |
//   page_indptr [n + 1] | page_ids [P] | last_page_len [n] | sample_rows [S]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/workspace.h"
#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/cuda/gemm.h"
#include "packserve/model/cuda/ops.h"
#include "packserve/model/forward_batch.h"
#include "packserve/model/ops_cpu.h"

namespace packserve::model {

using cuda::DeviceMemory;
namespace acuda = attention::cuda;

namespace {
std::string str(int64_t v) { return std::to_string(v); }
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Owning pinned host bytes (grow-only).
class PinnedMemory {
 public:
  PinnedMemory() = default;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  ~PinnedMemory() {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
  }
  Status reserve(size_t bytes) {
    if (ptr_ != nullptr && bytes <= bytes_) return ok_status();
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, std::max<size_t>(bytes, 4096)));
    bytes_ = std::max<size_t>(bytes, 4096);
    return ok_status();
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct LayerDev {
  uint16_t *qkv_w = nullptr, *o_w = nullptr, *gate_up_w = nullptr, *down_w = nullptr;
  float *input_norm = nullptr, *post_norm = nullptr, *qkv_b = nullptr, *q_norm = nullptr,
        *k_norm = nullptr;
};

}  // namespace

struct CudaForwardBackend::Impl {
  ModelConfig config;
  KvPoolShape pool;
  CudaForwardOptions options;
  int num_ctas = 0;
  cudaStream_t stream = nullptr;
  std::optional<cuda::Gemm> gemm;
  std::optional<acuda::Workspace> workspace;
  DeviceMemory mat, vec, inv_freq, kv, scratch, meta, logits_dev;
  PinnedMemory meta_pinned, logits_pinned;
  uint16_t *embed = nullptr, *lm_head = nullptr;
  float* final_norm = nullptr;
  std::vector<LayerDev> layers;
  size_t layer_kv_elems = 0;  // one layer's k (or v) pool, elements
  float* x = nullptr;
  float* qkv = nullptr;
  uint16_t *h = nullptr, *q = nullptr, *attn = nullptr, *gate_up = nullptr, *act = nullptr;
  attention::BatchLayout layout;
  attention::Plan plan;

  ~Impl() {
    workspace.reset();
    gemm.reset();
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  uint16_t* k_pages(size_t l) const { return kv.as<uint16_t>() + 2 * l * layer_kv_elems; }
  uint16_t* v_pages(size_t l) const { return kv.as<uint16_t>() + (2 * l + 1) * layer_kv_elems; }

  Status setup(const ModelConfig& c, const KvPoolShape& p, const CudaForwardOptions& o);
  Status run(const ForwardBatch& batch, std::vector<float>& logits);
};

Status CudaForwardBackend::Impl::setup(const ModelConfig& c, const KvPoolShape& p,
                                       const CudaForwardOptions& o) {
  PS_RETURN_IF_ERROR(validate_kv_pool_shape(p));
  if (std::find(std::begin(attention::kSupportedHeadDims), std::end(attention::kSupportedHeadDims),
                c.head_dim) == std::end(attention::kSupportedHeadDims)) {
    return invalid_argument("head_dim = " + str(c.head_dim) +
                            ": the attention engine supports 64, 128 or 256");
  }
  if (c.num_qo_heads / c.num_kv_heads > attention::kMaxGroupSize) {
    return invalid_argument("num_qo_heads / num_kv_heads = " +
                            str(c.num_qo_heads / c.num_kv_heads) + ": expected <= " +
                            str(attention::kMaxGroupSize));
  }
  if (o.max_batch_rows < 1) {
    return invalid_argument("max_batch_rows = " + str(o.max_batch_rows) + ": expected >= 1");
  }
  if (o.max_batch_page_ids < 0) {
    return invalid_argument("max_batch_page_ids = " + str(o.max_batch_page_ids) +
                            ": expected >= 0 (0: the pool's num_pages)");
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
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(o.device));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  PS_ASSIGN_OR_RETURN(cuda::Gemm g, cuda::Gemm::create(stream));
  gemm.emplace(std::move(g));

  const size_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, Q = c.q_size(),
               KV = c.kv_size(), D = c.head_dim, L = c.num_layers;
  // Matrices (bf16, 128-element = 256-byte alignment) and vectors (f32, 64 elements).
  size_t mat_elems = 0, vec_elems = 0;
  auto take_mat = [&](size_t n) { const size_t at = mat_elems; mat_elems += align_up(n, 128); return at; };
  auto take_vec = [&](size_t n) { const size_t at = vec_elems; vec_elems += align_up(n, 64); return at; };
  const size_t embed_at = take_mat(V * H);
  const size_t lm_at = c.tie_word_embeddings ? embed_at : take_mat(V * H);
  const size_t final_norm_at = take_vec(H);
  struct Offsets { size_t qkv_w, o_w, gu_w, d_w, in_n, post_n, b, qn, kn; };
  std::vector<Offsets> offs(L);
  for (Offsets& f : offs) {
    f.qkv_w = take_mat((Q + 2 * KV) * H);
    f.o_w = take_mat(H * Q);
    f.gu_w = take_mat(2 * I * H);
    f.d_w = take_mat(H * I);
    f.in_n = take_vec(H);
    f.post_n = take_vec(H);
    f.b = c.qkv_bias ? take_vec(Q + 2 * KV) : 0;
    f.qn = c.qk_norm ? take_vec(D) : 0;
    f.kn = c.qk_norm ? take_vec(D) : 0;
  }
  PS_RETURN_IF_ERROR(mat.alloc(mat_elems * 2, "bf16 weight matrices"));
  PS_RETURN_IF_ERROR(vec.alloc(vec_elems * 4, "f32 norm weights and biases"));
  uint16_t* mb = mat.as<uint16_t>();
  float* vb = vec.as<float>();
  embed = mb + embed_at;
  lm_head = mb + lm_at;
  final_norm = vb + final_norm_at;
  layers.resize(L);
  for (size_t l = 0; l < L; ++l) {
    const Offsets& f = offs[l];
    LayerDev& d = layers[l];
    d.qkv_w = mb + f.qkv_w;
    d.o_w = mb + f.o_w;
    d.gate_up_w = mb + f.gu_w;
    d.down_w = mb + f.d_w;
    d.input_norm = vb + f.in_n;
    d.post_norm = vb + f.post_n;
    d.qkv_b = c.qkv_bias ? vb + f.b : nullptr;
    d.q_norm = c.qk_norm ? vb + f.qn : nullptr;
    d.k_norm = c.qk_norm ? vb + f.kn : nullptr;
  }

  layer_kv_elems = static_cast<size_t>(p.num_pages) * static_cast<size_t>(p.page_size) * KV;
  PS_RETURN_IF_ERROR(kv.alloc(2 * L * layer_kv_elems * 2,
                              "the KV pool (" + str(p.num_pages) + " pages x " +
                                  str(p.page_size) + " tokens x " + str(L) + " layers)"));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(kv.as<void>(), 0, kv.bytes(), stream));

  const size_t R = static_cast<size_t>(options.max_batch_rows);
  const size_t x_b = align_up(R * H * 4, 256), qkv_b = align_up(R * (Q + 2 * KV) * 4, 256),
               h_b = align_up(R * H * 2, 256), q_b = align_up(R * Q * 2, 256),
               gu_b = align_up(R * 2 * I * 2, 256), act_b = align_up(R * I * 2, 256);
  PS_RETURN_IF_ERROR(scratch.alloc(x_b + qkv_b + h_b + 2 * q_b + gu_b + act_b,
                                   "activations of max_batch_rows = " + str(R)));
  auto* s = scratch.as<std::byte>();
  x = reinterpret_cast<float*>(s);
  qkv = reinterpret_cast<float*>(s + x_b);
  h = reinterpret_cast<uint16_t*>(s + x_b + qkv_b);
  q = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b);
  attn = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + q_b);
  gate_up = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + 2 * q_b);
  act = reinterpret_cast<uint16_t*>(s + x_b + qkv_b + h_b + 2 * q_b + gu_b);

  const std::vector<double> freq = rope_inv_freq(c.head_dim, c.rope_theta, c.rope_scaling);
  PS_RETURN_IF_ERROR(inv_freq.alloc(freq.size() * sizeof(double), "rope inv_freq"));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq.as<void>(), freq.data(),
                                           freq.size() * sizeof(double), cudaMemcpyHostToDevice));

  PS_ASSIGN_OR_RETURN(acuda::KernelOccupancy occ,
                      acuda::kernel_occupancy(static_cast<int>(D), DType::kBF16));
  num_ctas = occ.num_sms * occ.ctas_per_sm;
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

// Converts a validated host tensor to bf16 (or f32) and copies it to dst.
Status upload_tensor(const HostTensor& t, void* dst, DType to) {
  const size_t n = static_cast<size_t>(t.num_elements());
  const auto* src = static_cast<const std::byte*>(t.data);
  if (t.dtype == to) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, n * dtype_size_bytes(to),
                                             cudaMemcpyHostToDevice));
    return ok_status();
  }
  std::vector<std::byte> staging(n * dtype_size_bytes(to));
  for (size_t i = 0; i < n; ++i) store_from_float(staging.data(), i, to, load_as_float(src, i, t.dtype));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, staging.data(), staging.size(),
                                           cudaMemcpyHostToDevice));
  return ok_status();
}

}  // namespace

CudaForwardBackend::CudaForwardBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaForwardBackend::~CudaForwardBackend() = default;
const ModelConfig& CudaForwardBackend::config() const { return impl_->config; }
const KvPoolShape& CudaForwardBackend::pool_shape() const { return impl_->pool; }
const attention::Plan& CudaForwardBackend::last_plan() const { return impl_->plan; }
size_t CudaForwardBackend::weight_bytes() const { return impl_->mat.bytes() + impl_->vec.bytes(); }
size_t CudaForwardBackend::kv_pool_bytes() const { return impl_->kv.bytes(); }

Result<std::unique_ptr<CudaForwardBackend>> CudaForwardBackend::create(
    const ModelWeights& weights, const KvPoolShape& pool, const CudaForwardOptions& options) {
  PS_RETURN_IF_ERROR(validate_weights(weights));
  auto impl = std::make_unique<Impl>();
  PS_RETURN_IF_ERROR(impl->setup(weights.config, pool, options));
  const ModelConfig& c = weights.config;
  const size_t H = c.hidden_size, I = c.intermediate_size, Q = c.q_size(), KV = c.kv_size();
  constexpr DType kB = DType::kBF16, kF = DType::kF32;
  PS_RETURN_IF_ERROR(upload_tensor(weights.embed_tokens, impl->embed, kB));
  if (!c.tie_word_embeddings) PS_RETURN_IF_ERROR(upload_tensor(weights.lm_head, impl->lm_head, kB));
  PS_RETURN_IF_ERROR(upload_tensor(weights.final_norm, impl->final_norm, kF));
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& w = weights.layers[l];
    const LayerDev& d = impl->layers[l];
    PS_RETURN_IF_ERROR(upload_tensor(w.q_proj, d.qkv_w, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.k_proj, d.qkv_w + Q * H, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.v_proj, d.qkv_w + (Q + KV) * H, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.o_proj, d.o_w, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.gate_proj, d.gate_up_w, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.up_proj, d.gate_up_w + I * H, kB));
    PS_RETURN_IF_ERROR(upload_tensor(w.down_proj, d.down_w, kB));
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
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl->stream));
  return std::unique_ptr<CudaForwardBackend>(new CudaForwardBackend(std::move(impl)));
}

Result<std::unique_ptr<CudaForwardBackend>> CudaForwardBackend::create_random(
    const ModelConfig& config, const KvPoolShape& pool, const CudaForwardOptions& options,
    uint64_t seed) {
  if (config.vocab_size < 1 || config.hidden_size < 1 || config.intermediate_size < 1 ||
      config.num_layers < 1 || config.num_qo_heads < 1 || config.num_kv_heads < 1 ||
      config.head_dim < 2 || config.num_qo_heads % config.num_kv_heads != 0) {
    return invalid_argument("create_random: config counts must be positive and num_qo_heads "
                            "a multiple of num_kv_heads");
  }
  auto impl = std::make_unique<Impl>();
  PS_RETURN_IF_ERROR(impl->setup(config, pool, options));
  Impl& m = *impl;
  PS_RETURN_IF_ERROR(cuda::fill_random(m.mat.as<void>(), m.mat.bytes() / 2, DType::kBF16, seed,
                                       0.0f, 0.02f, m.stream));
  PS_RETURN_IF_ERROR(cuda::fill_random(m.vec.as<void>(), m.vec.bytes() / 4, DType::kF32,
                                       seed + 1, 1.0f, 0.1f, m.stream));
  if (config.qkv_bias) {  // biases N(0, 0.02), not 1 + N(0, 0.1)
    for (size_t l = 0; l < m.layers.size(); ++l) {
      PS_RETURN_IF_ERROR(cuda::fill_random(m.layers[l].qkv_b,
                                           static_cast<size_t>(config.q_size() + 2 * config.kv_size()),
                                           DType::kF32, seed + 2 + l, 0.0f, 0.02f, m.stream));
    }
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  return std::unique_ptr<CudaForwardBackend>(new CudaForwardBackend(std::move(impl)));
}

Status CudaForwardBackend::read_kv_pages(int layer, std::vector<uint16_t>& k,
                                         std::vector<uint16_t>& v) const {
  const Impl& m = *impl_;
  if (layer < 0 || layer >= static_cast<int>(m.layers.size())) {
    return invalid_argument("layer = " + str(layer) + ": expected in [0, " +
                            str(m.layers.size()) + ")");
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m.stream));
  k.resize(m.layer_kv_elems);
  v.resize(m.layer_kv_elems);
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(k.data(), m.k_pages(static_cast<size_t>(layer)),
                                           m.layer_kv_elems * 2, cudaMemcpyDeviceToHost));
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpy(v.data(), m.v_pages(static_cast<size_t>(layer)),
                                           m.layer_kv_elems * 2, cudaMemcpyDeviceToHost));
  return ok_status();
}

Status CudaForwardBackend::forward(const ForwardBatch& batch, std::vector<float>& logits) {
  return impl_->run(batch, logits);
}

Status CudaForwardBackend::Impl::run(const ForwardBatch& batch, std::vector<float>& logits) {
  const ModelConfig& c = config;
  PS_RETURN_IF_ERROR(validate_forward_batch(batch, c, pool));
  const int n = batch.num_requests();
  const int R = batch.total_rows();
  const int P = static_cast<int>(batch.page_ids.size());
  if (R > options.max_batch_rows) {
    return resource_exhausted("token_ids: " + str(R) + " rows, the backend was created for "
                              "max_batch_rows = " + str(options.max_batch_rows));
  }
  if (P > options.max_batch_page_ids) {
    return resource_exhausted("page_ids: " + str(P) + " entries, the backend was created for "
                              "max_batch_page_ids = " + str(options.max_batch_page_ids));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  std::vector<int32_t> sample_rows;
  for (int r = 0; r < n; ++r) {
    if (batch.samples[r]) sample_rows.push_back(batch.qo_indptr[r + 1] - 1);
  }
  const int S = static_cast<int>(sample_rows.size());
  const size_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size, Q = c.q_size(),
               KV = c.kv_size();
  const size_t meta_elems = 4 * static_cast<size_t>(R) + 3 * static_cast<size_t>(n) + 2 + P + S;
  // Allocations (which synchronise) and the plan upload before anything is written.
  PS_RETURN_IF_ERROR(meta.reserve(meta_elems * 4, "step metadata"));
  PS_RETURN_IF_ERROR(meta_pinned.reserve(meta_elems * 4));
  PS_RETURN_IF_ERROR(logits_dev.reserve(static_cast<size_t>(S) * V * 4, "logits"));
  PS_RETURN_IF_ERROR(logits_pinned.reserve(static_cast<size_t>(S) * V * 4));
  if (n > 0) {
    layout = make_attention_layout(batch, c, pool, DType::kBF16);
    PS_RETURN_IF_ERROR(attention::validate(layout));
    PS_ASSIGN_OR_RETURN(attention::Plan p, attention::make_plan(layout,
                                                                attention::DeviceShape{num_ctas},
                                                                options.plan));
    PS_RETURN_IF_ERROR(workspace->upload(p, stream));
    plan = std::move(p);
  }
  // From here on the pool is written.
  const size_t token_bytes = KV * 2;
  const size_t page_bytes = token_bytes * static_cast<size_t>(pool.page_size);
  for (size_t l = 0; l < layers.size(); ++l) {
    for (const kv::PageCopy& pc : batch.page_copies) {
      for (uint16_t* base : {k_pages(l), v_pages(l)}) {
        auto* b = reinterpret_cast<std::byte*>(base);
        PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
            b + static_cast<size_t>(pc.dst_page) * page_bytes,
            b + static_cast<size_t>(pc.src_page) * page_bytes,
            token_bytes * static_cast<size_t>(pc.num_tokens), cudaMemcpyDeviceToDevice, stream));
      }
    }
  }
  logits.clear();
  if (n == 0) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return ok_status();
  }

  // Metadata: one pinned staging array, one copy.
  int32_t* hm = meta_pinned.as<int32_t>();
  int32_t* tok = hm;
  int32_t* pos = tok + R;
  int32_t* kv_page = pos + R;
  int32_t* kv_slot = kv_page + R;
  int32_t* qo = kv_slot + R;
  int32_t* pind = qo + n + 1;
  int32_t* pids = pind + n + 1;
  int32_t* last = pids + P;
  int32_t* samp = last + n;
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), tok);
  const int32_t ps = pool.page_size;
  for (int r = 0; r < n; ++r) {
    const int32_t q_len = batch.qo_indptr[r + 1] - batch.qo_indptr[r];
    for (int32_t i = 0; i < q_len; ++i) {
      const int32_t row = batch.qo_indptr[r] + i;
      const int32_t p = batch.kv_len[r] - q_len + i;
      pos[row] = p;
      kv_page[row] = batch.page_ids[static_cast<size_t>(batch.page_indptr[r] + p / ps)];
      kv_slot[row] = p % ps;
    }
  }
  std::copy(batch.qo_indptr.begin(), batch.qo_indptr.end(), qo);
  std::copy(batch.page_indptr.begin(), batch.page_indptr.end(), pind);
  std::copy(batch.page_ids.begin(), batch.page_ids.end(), pids);
  std::copy(layout.kv_last_page_len.begin(), layout.kv_last_page_len.end(), last);
  std::copy(sample_rows.begin(), sample_rows.end(), samp);
  PS_MODEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta.as<void>(), hm, meta_elems * 4, cudaMemcpyHostToDevice, stream));
  const int32_t* dm = meta.as<int32_t>();
  const auto dev = [&](const int32_t* host_ptr) { return dm + (host_ptr - hm); };

  const float eps = static_cast<float>(c.rms_norm_eps);
  PS_RETURN_IF_ERROR(cuda::embed_gather(embed, dev(tok), R, static_cast<int>(H), x, stream));
  acuda::DeviceBatch db;
  db.q = q;
  db.qo_indptr = dev(qo);
  db.kv_page_indptr = dev(pind);
  db.kv_page_indices = dev(pids);
  db.kv_last_page_len = dev(last);
  db.batch_size = n;
  db.page_size = ps;
  db.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  db.out = attn;
  cuda::QkvEpilogueArgs ep;
  ep.qkv = qkv;
  ep.inv_freq = inv_freq.as<double>();
  ep.positions = dev(pos);
  ep.kv_page = dev(kv_page);
  ep.kv_slot = dev(kv_slot);
  ep.rows = R;
  ep.num_qo_heads = static_cast<int>(c.num_qo_heads);
  ep.num_kv_heads = static_cast<int>(c.num_kv_heads);
  ep.head_dim = static_cast<int>(c.head_dim);
  ep.page_size = ps;
  ep.eps = eps;
  ep.q_out = q;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerDev& w = layers[l];
    PS_RETURN_IF_ERROR(cuda::rmsnorm(x, nullptr, R, static_cast<int>(H), w.input_norm, eps, h,
                                     stream));
    PS_RETURN_IF_ERROR(gemm->linear(h, R, H, w.qkv_w, Q + 2 * KV, qkv, DType::kF32));
    ep.bias = w.qkv_b;
    ep.q_norm = w.q_norm;
    ep.k_norm = w.k_norm;
    ep.k_pages = k_pages(l);
    ep.v_pages = v_pages(l);
    PS_RETURN_IF_ERROR(cuda::qkv_epilogue(ep, stream));
    db.k_pages = ep.k_pages;
    db.v_pages = ep.v_pages;
    PS_RETURN_IF_ERROR(acuda::run_cuda(*workspace, db, stream));
    PS_RETURN_IF_ERROR(gemm->linear(attn, R, Q, w.o_w, H, x, DType::kF32, /*accumulate=*/true));
    PS_RETURN_IF_ERROR(cuda::rmsnorm(x, nullptr, R, static_cast<int>(H), w.post_norm, eps, h,
                                     stream));
    PS_RETURN_IF_ERROR(gemm->linear(h, R, H, w.gate_up_w, 2 * I, gate_up, DType::kBF16));
    PS_RETURN_IF_ERROR(cuda::silu_mul(gate_up, R, static_cast<int>(I), act, stream));
    PS_RETURN_IF_ERROR(gemm->linear(act, R, I, w.down_w, H, x, DType::kF32, /*accumulate=*/true));
  }
  if (S > 0) {
    PS_RETURN_IF_ERROR(cuda::rmsnorm(x, dev(samp), S, static_cast<int>(H), final_norm, eps, h,
                                     stream));
    PS_RETURN_IF_ERROR(gemm->linear(h, S, H, lm_head, V, logits_dev.as<void>(), DType::kF32));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_pinned.as<void>(), logits_dev.as<void>(),
                                                  static_cast<size_t>(S) * V * 4,
                                                  cudaMemcpyDeviceToHost, stream));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  logits.assign(logits_pinned.as<float>(), logits_pinned.as<float>() + static_cast<size_t>(S) * V);
  return ok_status();
}

}  // namespace packserve::model
