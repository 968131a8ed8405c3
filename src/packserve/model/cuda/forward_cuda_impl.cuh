// forward_cuda_impl.cuh: CudaForwardBackend::Impl, shared by forward_cuda.cu (creation,
// weights, accessors) and forward_step.cu (one step: host preparation, the eager or graphed
// device work, logits). Internal to model/cuda.
//
// Device memory owned, all allocated by setup() except the logits (grown on demand):
//   mat   bf16 matrices: embed, lm_head unless tied, per layer Wqkv [Q + 2 KV, H], Wo [H, Q],
//         Wgu [2 I, H], Wd [H, I]; each 256-byte aligned
//   mat8  WeightQuantization::kFp8: the layers' matrices instead, e4m3 bytes, 256-byte aligned
//   vec   f32 vectors: norms, Qwen2 biases, the e4m3 matrices' row scales
//   kv    the pool: layer l's k at 2 l, v at 2 l + 1 (units of [num_pages, page_size, KV] bf16,
//         or e4m3 bytes with KvCacheDtype::kFp8E4m3)
//   scratch  activations for max_batch_rows
//   meta  the step's int32 metadata (MetaLayout), capacity for max_batch_rows and
//         max_batch_page_ids; fixed address (graphs read it)
//   argmax  a step's argmax ids of the kOutputArgmax rows [A], the sampled ids and logprobs of
//           the kOutputSample rows [D] and [D], then their top_logprobs [D, kMaxTopLogprobs];
//           sized for max_batch_rows, fixed address (argmax_top_offset)
// Graph invariant: every pointer and size a captured graph bakes in is fixed for a GraphKey
// (rows, requests, sampling rows, argmax rows, draw rows): the scratch, meta and workspace
// addresses never
// change, the MetaLayout offsets depend only on the key, and the logits buffer only changes when it
// grows, which drops every graph.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/workspace.h"
#include "packserve/model/cuda/device_util.cuh"
#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/cuda/gemm.h"
#include "packserve/model/cuda/parallel_copy.h"
#include "packserve/model/cuda/step_profile.cuh"
#include "packserve/model/cuda/tp_group.h"
#include "packserve/model/forward_batch.h"

namespace packserve::model {

namespace cuda {

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

// Owning cudaGraphExec_t (move-only).
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t e) : exec_(e) {}
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

// Owning cudaEvent_t pair around a step's device work.
class EventPair {
 public:
  EventPair() = default;
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  ~EventPair() {
    if (start_ != nullptr) (void)cudaEventDestroy(start_);
    if (stop_ != nullptr) (void)cudaEventDestroy(stop_);
  }
  Status create() {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_));
    return ok_status();
  }
  cudaEvent_t start() const { return start_; }
  cudaEvent_t stop() const { return stop_; }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Owning timing-free events, created once.
class EventList {
 public:
  EventList() = default;
  EventList(const EventList&) = delete;
  EventList& operator=(const EventList&) = delete;
  ~EventList() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  Status create(int n) {
    for (int i = 0; i < n; ++i) {
      cudaEvent_t e = nullptr;
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      events_.push_back(e);
    }
    return ok_status();
  }
  cudaEvent_t get(int i) const { return events_[static_cast<size_t>(i)]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// One weight matrix [rows = out, cols = in] on the device: bf16, or with
// WeightQuantization::kFp8 e4m3 bytes and one f32 scale for the matrix (ops.h quantize_fp8).
struct Matrix {
  uint16_t* bf16 = nullptr;
  uint8_t* fp8 = nullptr;
  float* scale = nullptr;  // fp8 only
  size_t rows = 0, cols = 0;
};

struct LayerDev {
  Matrix qkv, o, gate_up, down;  // [Q + 2 KV, H], [H, Q], [2 I, H], [H, I]
  float *input_norm = nullptr, *post_norm = nullptr, *qkv_b = nullptr, *q_norm = nullptr,
        *k_norm = nullptr;
  float k_scale = 1.0f, v_scale = 1.0f;  // LayerWeights': used by a float8 KV pool
};

// int32 offsets of the step's metadata regions; every offset but the end depends only on
// (rows R, requests n, sampling rows S, draw rows D), page_ids last (P varies between steps of
// one shape):
//   token_ids [R] | positions [R] | kv_page [R] | kv_slot [R] | page_indptr [n + 1] |
//   sample_rows [S] | (one int32 of padding when needed) draws [D] SampleDraw
//   (8 int32 each, 8-byte aligned) | adjust_indptr [D + 1] | mask_index [S] | page_ids [P]
// sample_rows lists the kOutputLogits rows first, then the kOutputArgmax rows, then the
// kOutputSample rows (each in request order), so the logits to copy are the first rows of the
// LM head's output; draws holds the kOutputSample rows' draws in the same order, and
// adjust_indptr their ranges in the adjust buffer (ops.h SampleAdjusts); mask_index, in
// sample_rows order, each row's token mask in the mask buffer or -1 (ops.h mask_rows).
struct MetaLayout {
  size_t tok = 0, pos = 0, kv_page = 0, kv_slot = 0, pind = 0, samp = 0, draw = 0, adj = 0,
         mask = 0, pids = 0, end = 0;
};
static_assert(sizeof(SampleDraw) == 32 && alignof(SampleDraw) == 8);
inline MetaLayout meta_layout(size_t R, size_t n, size_t S, size_t D, size_t P) {
  MetaLayout m;
  m.pos = m.tok + R;
  m.kv_page = m.pos + R;
  m.kv_slot = m.kv_page + R;
  m.pind = m.kv_slot + R;
  m.samp = m.pind + n + 1;
  m.draw = (m.samp + S + 1) / 2 * 2;
  m.adj = m.draw + sizeof(SampleDraw) / 4 * D;
  m.mask = m.adj + D + 1;
  m.pids = m.mask + S;
  m.end = m.pids + P;
  return m;
}

struct GraphKey {
  // argmax_rows + draw_rows <= sample_rows; masked: the step has token masks, so the graph
  // ends at the LM head and the sampling (mask_rows, argmax, draws) is launched after it, once
  // the host has the masks
  int rows = 0, requests = 0, sample_rows = 0, argmax_rows = 0, draw_rows = 0;
  bool masked = false;
  auto operator<=>(const GraphKey&) const = default;
};
struct CachedGraph {
  GraphExec exec;
  uint64_t last_used = 0;
};

}  // namespace cuda

struct CudaForwardBackend::Impl {
  ModelConfig config;  // this rank's share (tensor_parallel.h shard_config)
  KvPoolShape pool;
  CudaForwardOptions options;
  int num_ctas = 0;
  cudaStream_t stream = nullptr;
  std::optional<cuda::Gemm> gemm;
  std::optional<cuda::ParallelCopier> copier;  // logits: pinned staging -> caller
  std::optional<attention::cuda::Workspace> workspace;
  // mat8 / stage: WeightQuantization::kFp8 only: the layers' e4m3 matrices, and the bf16
  // rows a matrix is written through before they are quantized (freed once the weights are in).
  static constexpr size_t kStageBytes = size_t{32} << 20;  // then kStageAmaxRows floats
  static constexpr size_t kStageAmaxRows = 65536;
  cuda::DeviceMemory mat, mat8, stage, vec, inv_freq, kv, scratch, meta, logits_dev, argmax_dev;
  double rope_attention_factor = 1.0;  // of cos and sin (YaRN), from config.rope_scaling
  // argmax_dev / argmax_pinned: a step's argmax ids [A], sampled ids [D], their logprobs [D],
  // their top_logprobs [D, kMaxTopLogprobs] (TopLogprob, at argmax_top_offset(A, D) bytes).
  cuda::PinnedMemory meta_pinned, logits_pinned, argmax_pinned;
  // The draw rows' logit bias and penalties: adjust_capacity LogitAdjust, then as many floats
  // (SampleAdjusts::raw); fixed address (graphs read it), so growing it drops every graph.
  // From kInitialAdjusts (2.9 MB, in the fixed reserve of the memory budget: 64 rows of a
  // 1,000-token prompt's repetition penalty); doubled when a step needs more.
  static constexpr size_t kInitialAdjusts = 65536;
  cuda::DeviceMemory adjust_dev;
  cuda::PinnedMemory adjust_pinned;
  size_t adjust_capacity = 0;
  // The argmax and draw rows' token masks (ForwardBatch::masks): mask_capacity uint32 words
  // on the device and as pinned staging, allocated by the first step with masks (64 rows of the
  // vocabulary's words) and doubled when a step needs more. A step with masks launches its
  // layers (graph or eager) first, then the host writes the masks (ForwardBatch::fill_masks,
  // while the device runs the layers) into the staging, copies them over and launches the
  // sampling (upload_masks, enqueue_sampling): no kernel ever waits for the host.
  static constexpr size_t kInitialMaskRows = 64;
  cuda::DeviceMemory mask_dev;
  cuda::PinnedMemory mask_pinned;
  size_t mask_capacity = 0;
  // The step's draw rows (forward_batch.h draw_rows), and those sample_rows left to the host
  // (their indices in it); host_logits holds their logits.
  std::vector<DrawRow> draw_list;
  std::vector<int> host_draws;
  cuda::PinnedMemory host_logits;
  // Scored rows (ForwardBatch::score_targets) run after the step in blocks of the whole
  // kScoreBlockRows that logits_dev holds (at least one): final norm, LM head into logits_dev
  // (on whole kScoreBlockRows), score_rows (ops.h). score_dev (staged in score_pinned): the rows'
  // indices in x, targets and alternatives ([3 x n] int32 at 0), their logprobs ([R] f32 at
  // score_out_offset()) and alternatives ([R, kMaxTopLogprobs] TopLogprob after them), R =
  // max_batch_rows.
  static constexpr size_t kScoreBlockRows = kMinLogitsRows;
  cuda::DeviceMemory score_dev;
  cuda::PinnedMemory score_pinned;
  size_t score_out_offset() const { return static_cast<size_t>(options.max_batch_rows) * 12; }
  size_t score_bytes() const {
    return score_out_offset() +
           static_cast<size_t>(options.max_batch_rows) * (4 + kMaxTopLogprobs * sizeof(TopLogprob));
  }
  uint16_t *embed = nullptr, *lm_head = nullptr;
  float* final_norm = nullptr;
  std::vector<cuda::LayerDev> layers;
  size_t layer_kv_elems = 0;  // one layer's k (or v) pool, elements
  size_t meta_capacity = 0;   // int32 elements of meta / meta_pinned
  float* x = nullptr;
  float* qkv = nullptr;
  float* rope = nullptr;  // the step's RoPE table [R, head_dim / 2, 2]
  uint16_t *h = nullptr, *q = nullptr, *attn = nullptr, *gate_up = nullptr, *act = nullptr;
  // kFp8: a GEMM input quantized, [R, max(H, Q, I)] e4m3, its rows' maxima [R] and its scale.
  uint8_t* xq = nullptr;
  float *xq_amax = nullptr, *xq_scale = nullptr;
  // y = x w^T for the step's R rows of x (bf16 [R, m.cols]): linear; with an fp8 matrix
  // skinny_linear_fp8 when R <= options.skinny_gemm_rows, else x quantized into xq first and
  // linear_fp8.
  Status linear(const uint16_t* x, int64_t R, const cuda::Matrix& w, void* y, DType y_dtype,
                bool accumulate = false);
  // Whether linear takes the few-row kernel for w at R rows (then the step runs the gate/up
  // GEMM and silu_mul as one skinny_gate_up_silu_fp8).
  bool skinny(int64_t R, const cuda::Matrix& w) const;
  attention::BatchLayout layout;
  attention::Plan plan;
  std::map<cuda::GraphKey, cuda::CachedGraph> graphs;
  // Steps run so far of each shape not captured yet (CudaStepOptions::graph_capture_after).
  std::map<cuda::GraphKey, int> uncaptured_steps;
  uint64_t graph_clock = 0;
  BackendStats stats;
  CudaStepProfile profile;
  cuda::EventPair step_events;
  static constexpr int kLogitsChunks = 4;
  cuda::EventList logits_events;  // [kLogitsChunks]
  cuda::OpTimeline timeline;
  // Tensor parallelism (docs/forward-cuda.md): this Impl is rank tp_rank of tp's group. Rank 0
  // drives every step: it validates, plans and writes the metadata, then its peers (ranks 1..,
  // each on its device, with the same local config and plan) upload and run their layers on
  // rank_threads while rank 0 runs its own; after each o_proj and down_proj product every
  // rank's x (rank 0's accumulated into the residual, the others' partial products alone) is
  // summed in place by an all-reduce, so x is the whole residual stream on every rank. Only
  // rank 0 computes the LM head and samples. whole_config: the model's, reported by config().
  ModelConfig whole_config;
  int tp_rank = 0;
  cuda::TpGroup* tp = nullptr;  // null without tensor parallelism; owned by rank 0's tp_owner
  std::unique_ptr<cuda::TpGroup> tp_owner;
  std::vector<std::unique_ptr<Impl>> peers;
  std::optional<cuda::RankThreads> rank_threads;
  std::vector<std::function<Status()>> peer_tasks;  // of the step in flight

  ~Impl() {
    rank_threads.reset();  // joins (no task is in flight between steps)
    tp_owner.reset();
    for (std::unique_ptr<Impl>& p : peers) {
      (void)cudaSetDevice(p->options.device);
      p.reset();
    }
    if (!peers.empty()) (void)cudaSetDevice(options.device);
    graphs.clear();
    workspace.reset();
    gemm.reset();
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }
  bool kv_fp8() const { return options.kv_cache_dtype == KvCacheDtype::kFp8E4m3; }
  size_t kv_elem_bytes() const { return kv_cache_element_bytes(options.kv_cache_dtype); }
  std::byte* k_pages(size_t l) const {
    return kv.as<std::byte>() + 2 * l * layer_kv_elems * kv_elem_bytes();
  }
  static size_t argmax_top_offset(int A, int D) { return static_cast<size_t>(A + 2 * D) * 4; }
  static size_t argmax_bytes(int A, int D, bool top) {
    return argmax_top_offset(A, D) +
           (top ? static_cast<size_t>(D) * kMaxTopLogprobs * sizeof(TopLogprob) : 0);
  }
  LogitAdjust* adjust_entries() const { return adjust_dev.as<LogitAdjust>(); }
  float* adjust_raw() const {
    return reinterpret_cast<float*>(adjust_dev.as<LogitAdjust>() + adjust_capacity);
  }
  // Grows the adjust buffer to hold `entries` (dropping the graphs when it moves).
  Status reserve_adjusts(size_t entries);
  // Grows the mask buffers to hold `words`.
  Status reserve_masks(size_t words);
  // Writes the batch's masks into the staging (fill_masks, or a copy of masks) and copies
  // them to mask_dev on the stream.
  Status upload_masks(const ForwardBatch& batch);
  // Grows logits_dev to `bytes`; graphs bake its address, so growing it drops them.
  Status reserve_logits(size_t bytes) {
    if (bytes <= logits_dev.bytes()) return ok_status();
    graphs.clear();
    return logits_dev.reserve(bytes, "logits");
  }
  std::byte* v_pages(size_t l) const {
    return kv.as<std::byte>() + (2 * l + 1) * layer_kv_elems * kv_elem_bytes();
  }

  Status setup(const ModelConfig& c, const KvPoolShape& p, const CudaForwardOptions& o);
  // forward_step.cu
  Status run(const ForwardBatch& batch, ForwardOutput& out);
  // After the step: the kOutputSample rows sample_rows left to the host (out.sampled[i] < 0;
  // ops.h), drawn by sample_draw from their logits, still on the device from `first_row` on.
  Status sample_left_rows(const ForwardBatch& batch, int first_row, ForwardOutput& out);
  // After the step: out.scores of the batch's scored rows (the block pass above).
  Status score_rows(const ForwardBatch& batch, ForwardOutput& out);
  // The batch's page copies (copy-on-write of shared pages) in every layer's k and v.
  Status enqueue_page_copies(const ForwardBatch& batch);
  // A peer's part of a step (rank > 0, on its own thread): the plan, the page copies, rank 0's
  // metadata `host_meta` (MetaLayout m) and the layers of key's shape (replayed when
  // use_graph); then waits for its device. key.requests == 0: the page copies alone.
  Status peer_step(const ForwardBatch& batch, const attention::Plan& rank0_plan,
                   const int32_t* host_meta, const cuda::GraphKey& key, const cuda::MetaLayout& m,
                   bool use_graph);
  // Rank 0: hands the peers their part of this step (peer_step), then after rank 0's own part
  // (`step`) collects theirs; a failure anywhere aborts the group (a rank left waiting in an
  // all-reduce would never return) and is returned, naming the rank.
  void start_peers(const ForwardBatch& batch, const int32_t* host_meta, const cuda::GraphKey& key,
                   const cuda::MetaLayout& m, bool use_graph);
  Status join_peers(Status step);
  // Launches embedding -> layers -> final norm -> LM head -> (unless key.masked) the
  // sampling of enqueue_sampling for a step of key's shape whose
  // metadata sits at `m` in meta; `timeline` (may be null) gets an event after every op.
  Status enqueue_device_step(const cuda::GraphKey& key, const cuda::MetaLayout& m,
                             cuda::OpTimeline* timeline);
  // The masks (key.masked), the argmax of the argmax rows and the draws of the draw rows.
  Status enqueue_sampling(const cuda::GraphKey& key, const cuda::MetaLayout& m,
                          cuda::OpTimeline* timeline);
  // Replays the graph of `key`; for a new key the step runs eagerly and is then captured
  // (not launched) for the following steps of that shape.
  Status launch_graph(const cuda::GraphKey& key, const cuda::MetaLayout& m);
};

}  // namespace packserve::model
