// forward_step.cu: one CudaForwardBackend step (forward_cuda.h "forward"):
//   host:   validate -> capacity checks -> attention layout + make_plan -> Workspace::upload
//   stream: page copies -> metadata (one pinned copy) -> the device step -> logits of the
//           kOutputLogits rows, argmax ids of the kOutputArgmax rows and sampled ids of the
//           kOutputSample rows -> host
// The device step (embedding, every layer, final norm of the sampling rows, LM head, argmax,
// draws) is
// launched eagerly, or, for steps of at most max_graph_rows rows, replayed from a CUDA graph
// captured for the step's GraphKey (forward_cuda_impl.cuh states why that is sound: every
// argument a launch bakes in is fixed per key; what varies between steps of one shape, the
// plan, token ids, positions, page table and page copies, is device data written before the
// replay). The timings of every phase go to last_step_profile().
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "packserve/model/cuda/forward_cuda_impl.cuh"
#include "packserve/model/cuda/ops.h"
#include "packserve/model/forward_batch.h"

namespace packserve::model {

namespace acuda = attention::cuda;
using cuda::GraphKey;
using cuda::MetaLayout;

namespace {
std::string str(int64_t v) { return std::to_string(v); }
}  // namespace

const char* step_op_name(StepOp op) {
  switch (op) {
    case StepOp::kUpload:
      return "upload";
    case StepOp::kEmbed:
      return "embed";
    case StepOp::kRopeTable:
      return "rope_table";
    case StepOp::kInputNorm:
      return "input_norm";
    case StepOp::kQkvGemm:
      return "qkv_gemm";
    case StepOp::kQkvEpilogue:
      return "qkv_epilogue";
    case StepOp::kAttention:
      return "attention";
    case StepOp::kOGemm:
      return "o_gemm";
    case StepOp::kPostNorm:
      return "post_norm";
    case StepOp::kGateUpGemm:
      return "gate_up_gemm";
    case StepOp::kSiluMul:
      return "silu_mul";
    case StepOp::kDownGemm:
      return "down_gemm";
    case StepOp::kFinalNorm:
      return "final_norm";
    case StepOp::kLmHead:
      return "lm_head";
    case StepOp::kMask:
      return "mask";
    case StepOp::kArgmax:
      return "argmax";
    case StepOp::kSample:
      return "sample";
    case StepOp::kLogitsCopy:
      return "logits_copy";
    case StepOp::kCount:
      break;
  }
  return "?";
}

bool CudaForwardBackend::Impl::skinny(int64_t R, const cuda::Matrix& w) const {
  return w.fp8 != nullptr && R <= options.skinny_gemm_rows &&
         cuda::skinny_fits(R, static_cast<int64_t>(w.cols));
}

Status CudaForwardBackend::Impl::linear(const uint16_t* x_in, int64_t R, const cuda::Matrix& w,
                                        void* y, DType y_dtype, bool accumulate) {
  const auto rows = static_cast<int64_t>(w.rows), cols = static_cast<int64_t>(w.cols);
  if (w.fp8 == nullptr) return gemm->linear(x_in, R, cols, w.bf16, rows, y, y_dtype, accumulate);
  if (skinny(R, w)) {
    return cuda::skinny_linear_fp8(x_in, R, cols, w.fp8, w.scale, rows, y, y_dtype, accumulate,
                                   stream);
  }
  const int r = static_cast<int>(R), c = static_cast<int>(cols);
  PS_RETURN_IF_ERROR(cuda::row_absmax(x_in, r, c, xq_amax, stream));
  PS_RETURN_IF_ERROR(cuda::quantize_fp8(x_in, r, c, xq_amax, r, xq, xq_scale, stream));
  return gemm->linear_fp8(xq, xq_scale, R, cols, w.fp8, w.scale, rows, y, y_dtype, accumulate);
}

Status CudaForwardBackend::Impl::enqueue_device_step(const GraphKey& key, const MetaLayout& m,
                                                     cuda::OpTimeline* timeline) {
  const ModelConfig& c = config;
  const int R = key.rows, S = key.sample_rows;
  const size_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size, Q = c.q_size(),
               KV = c.kv_size();
  const int32_t* dm = meta.as<int32_t>();
  const auto mark = [&](StepOp op) {
    return timeline != nullptr ? timeline->mark(op, stream) : ok_status();
  };
  const float eps = static_cast<float>(c.rms_norm_eps);
  PS_RETURN_IF_ERROR(cuda::embed_gather(embed, dm + m.tok, R, static_cast<int>(H), x, stream));
  PS_RETURN_IF_ERROR(mark(StepOp::kEmbed));
  acuda::DeviceBatch db;
  db.q = q;
  db.q_positions = dm + m.pos;
  db.kv_page_indptr = dm + m.pind;
  db.kv_page_indices = dm + m.pids;
  db.page_size = pool.page_size;
  db.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  db.out = attn;
  cuda::QkvEpilogueArgs ep;
  ep.qkv = qkv;
  ep.inv_freq = inv_freq.as<double>();
  ep.cos_sin = rope;
  ep.rope_attention_factor = rope_attention_factor;
  PS_RETURN_IF_ERROR(cuda::rope_cos_sin(dm + m.pos, R, inv_freq.as<double>(),
                                        static_cast<int>(c.head_dim), ep.rope_attention_factor,
                                        rope, stream));
  PS_RETURN_IF_ERROR(mark(StepOp::kRopeTable));
  ep.positions = dm + m.pos;
  ep.kv_page = dm + m.kv_page;
  ep.kv_slot = dm + m.kv_slot;
  ep.rows = R;
  ep.num_qo_heads = static_cast<int>(c.num_qo_heads);
  ep.num_kv_heads = static_cast<int>(c.num_kv_heads);
  ep.head_dim = static_cast<int>(c.head_dim);
  ep.page_size = pool.page_size;
  ep.eps = eps;
  ep.q_out = q;
  ep.kv_fp8 = kv_fp8();
  for (size_t l = 0; l < layers.size(); ++l) {
    const cuda::LayerDev& w = layers[l];
    PS_RETURN_IF_ERROR(
        cuda::rmsnorm(x, nullptr, R, static_cast<int>(H), w.input_norm, eps, h, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kInputNorm));
    PS_RETURN_IF_ERROR(linear(h, R, w.qkv, qkv, DType::kF32));
    PS_RETURN_IF_ERROR(mark(StepOp::kQkvGemm));
    ep.bias = w.qkv_b;
    ep.q_norm = w.q_norm;
    ep.k_norm = w.k_norm;
    ep.k_pages = k_pages(l);
    ep.v_pages = v_pages(l);
    if (ep.kv_fp8) {
      ep.k_scale = db.k_scale = w.k_scale;
      ep.v_scale = db.v_scale = w.v_scale;
    }
    PS_RETURN_IF_ERROR(cuda::qkv_epilogue(ep, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kQkvEpilogue));
    db.k_pages = ep.k_pages;
    db.v_pages = ep.v_pages;
    db.kv_fp8 = ep.kv_fp8;
    PS_RETURN_IF_ERROR(acuda::run_cuda(*workspace, db, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kAttention));
    // Tensor parallelism: rank 0 adds its partial product to the residual, the others write
    // theirs alone, and the all-reduce sums them into every rank's x.
    PS_RETURN_IF_ERROR(linear(attn, R, w.o, x, DType::kF32, /*accumulate=*/tp_rank == 0));
    if (tp != nullptr) PS_RETURN_IF_ERROR(tp->all_reduce_sum(tp_rank, x, R * H, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kOGemm));
    PS_RETURN_IF_ERROR(
        cuda::rmsnorm(x, nullptr, R, static_cast<int>(H), w.post_norm, eps, h, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kPostNorm));
    if (skinny(R, w.gate_up)) {  // the GEMM and silu_mul in one kernel
      PS_RETURN_IF_ERROR(cuda::skinny_gate_up_silu_fp8(h, R, static_cast<int64_t>(H), w.gate_up.fp8,
                                                       w.gate_up.scale, static_cast<int64_t>(I),
                                                       act, stream));
      PS_RETURN_IF_ERROR(mark(StepOp::kGateUpGemm));
    } else {
      PS_RETURN_IF_ERROR(linear(h, R, w.gate_up, gate_up, DType::kBF16));
      PS_RETURN_IF_ERROR(mark(StepOp::kGateUpGemm));
      PS_RETURN_IF_ERROR(cuda::silu_mul(gate_up, R, static_cast<int>(I), act, stream));
      PS_RETURN_IF_ERROR(mark(StepOp::kSiluMul));
    }
    PS_RETURN_IF_ERROR(linear(act, R, w.down, x, DType::kF32, /*accumulate=*/tp_rank == 0));
    if (tp != nullptr) PS_RETURN_IF_ERROR(tp->all_reduce_sum(tp_rank, x, R * H, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kDownGemm));
  }
  if (tp_rank > 0) return ok_status();  // rank 0 alone computes the logits and samples
  if (S > 0) {
    PS_RETURN_IF_ERROR(
        cuda::rmsnorm(x, dm + m.samp, S, static_cast<int>(H), final_norm, eps, h, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kFinalNorm));
    PS_RETURN_IF_ERROR(gemm->linear(h, S, H, lm_head, V, logits_dev.as<void>(), DType::kF32));
    PS_RETURN_IF_ERROR(mark(StepOp::kLmHead));
  }
  // A step with masks ends at the LM head: its sampling runs once the host has its masks.
  if (!key.masked) PS_RETURN_IF_ERROR(enqueue_sampling(key, m, timeline));
  return ok_status();
}

Status CudaForwardBackend::Impl::enqueue_sampling(const GraphKey& key, const MetaLayout& m,
                                                  cuda::OpTimeline* timeline) {
  const int S = key.sample_rows, A = key.argmax_rows, D = key.draw_rows;
  const size_t V = config.vocab_size;
  const int32_t* dm = meta.as<int32_t>();
  const auto mark = [&](StepOp op) {
    return timeline != nullptr ? timeline->mark(op, stream) : ok_status();
  };
  if (key.masked) {  // before any kernel reads the argmax and draw rows
    PS_RETURN_IF_ERROR(cuda::mask_rows(logits_dev.as<float>(), S, static_cast<int>(V), dm + m.mask,
                                       mask_dev.as<uint32_t>(), stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kMask));
  }
  if (A > 0) {  // the argmax rows come after the logits rows, before the D draw rows
    PS_RETURN_IF_ERROR(
        cuda::argmax_rows(logits_dev.as<float>() + static_cast<size_t>(S - D - A) * V, A,
                          static_cast<int>(V), argmax_dev.as<int32_t>(), stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kArgmax));
  }
  if (D > 0) {  // the last D rows; their ids after the argmax ids, their logprobs, alternatives
    int32_t* ids = argmax_dev.as<int32_t>() + A;
    auto* top = reinterpret_cast<TopLogprob*>(argmax_dev.as<std::byte>() + argmax_top_offset(A, D));
    const cuda::SampleAdjusts adjusts{dm + m.adj, adjust_entries(), adjust_raw()};
    PS_RETURN_IF_ERROR(cuda::sample_rows(logits_dev.as<float>() + static_cast<size_t>(S - D) * V, D,
                                         static_cast<int>(V),
                                         reinterpret_cast<const SampleDraw*>(dm + m.draw), adjusts,
                                         ids, reinterpret_cast<float*>(ids + D), top, stream));
    PS_RETURN_IF_ERROR(mark(StepOp::kSample));
  }
  return ok_status();
}

Status CudaForwardBackend::Impl::launch_graph(const GraphKey& key, const MetaLayout& m) {
  auto it = graphs.find(key);
  if (it == graphs.end()) {
    if (options.step.graph_capture_after > 1) {
      if (uncaptured_steps.size() > 4096) uncaptured_steps.clear();  // bounded
      int& steps = uncaptured_steps[key];
      if (++steps < options.step.graph_capture_after) {
        return enqueue_device_step(key, m, nullptr);
      }
      uncaptured_steps.erase(key);
    }
    if (static_cast<int>(graphs.size()) >= options.step.max_cuda_graphs) {
      auto lru = std::min_element(graphs.begin(), graphs.end(), [](const auto& a, const auto& b) {
        return a.second.last_used < b.second.last_used;
      });
      graphs.erase(lru);
      ++stats.graph_evictions;
    }
    // This step runs eagerly (so every GEMM shape is prepared, and tuned, outside the
    // capture); the capture only records the launches for the next steps of this shape.
    PS_RETURN_IF_ERROR(enqueue_device_step(key, m, nullptr));
    cuda::Stopwatch capture_clock;
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const Status enqueued = enqueue_device_step(key, m, nullptr);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (!enqueued.ok() || ended != cudaSuccess) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      PS_RETURN_IF_ERROR(enqueued);
      PS_MODEL_CUDA_RETURN_IF_ERROR(ended);
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    PS_MODEL_CUDA_RETURN_IF_ERROR(instantiated);
    graphs.emplace(key, cuda::CachedGraph{cuda::GraphExec(exec), ++graph_clock});
    profile.graph_captured = true;
    ++stats.graph_captures;
    stats.capture_seconds += capture_clock.lap() / 1000.0;
    return ok_status();
  }
  it->second.last_used = ++graph_clock;
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second.exec.get(), stream));
  profile.graph_replayed = true;
  ++stats.graph_replays;
  return ok_status();
}

Status CudaForwardBackend::Impl::run(const ForwardBatch& batch, ForwardOutput& out) {
  profile = CudaStepProfile{};
  cuda::Stopwatch clock;
  cuda::Stopwatch total;
  const ModelConfig& c = config;
  PS_RETURN_IF_ERROR(validate_forward_batch(batch, c, pool));
  const int n = batch.num_requests();
  const int R = batch.total_rows();
  const int P = static_cast<int>(batch.page_ids.size());
  if (R > options.max_batch_rows) {
    return resource_exhausted("token_ids: " + str(R) +
                              " rows, the backend was created for "
                              "max_batch_rows = " +
                              str(options.max_batch_rows));
  }
  if (P > options.max_batch_page_ids) {
    return resource_exhausted("page_ids: " + str(P) +
                              " entries, the backend was created for "
                              "max_batch_page_ids = " +
                              str(options.max_batch_page_ids));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  // Sampling rows S: the SL logits rows first, then the A argmax rows, then the D draw rows.
  const auto count = [&](uint8_t kind) {
    return static_cast<int>(std::count(batch.samples.begin(), batch.samples.end(), kind));
  };
  int A = 0, D = 0;  // argmax and draw rows: an argmax or draw request's extra_rows too
  for (int r = 0; r < n; ++r) {
    A += batch.argmax_rows_of(r);
    D += batch.draw_rows_of(r);
  }
  const int SL = count(kOutputLogits);
  const int S = SL + A + D;
  const size_t V = c.vocab_size;
  const MetaLayout m = cuda::meta_layout(R, n, S, D, P);
  // Allocations (which synchronise) and the plan upload before anything is written.
  const size_t logits_bytes = static_cast<size_t>(S) * V * 4;
  const bool use_graph = options.step.max_graph_rows > 0 && R <= options.step.max_graph_rows &&
                         !options.step.profile_ops;
  // Growing the logits buffer drops the graphs (reserve_logits): a graphed step therefore
  // reserves at once the most sampling rows a graphed step is expected to have, and the
  // scoring pass's block.
  const size_t graph_rows = static_cast<size_t>(std::max(
      std::min({options.step.max_graph_rows, options.max_batch_rows, options.max_sampling_rows}),
      kMinLogitsRows));
  PS_RETURN_IF_ERROR(
      reserve_logits(use_graph ? std::max(logits_bytes, graph_rows * V * 4) : logits_bytes));
  PS_RETURN_IF_ERROR(logits_pinned.reserve(static_cast<size_t>(SL) * V * 4));
  PS_RETURN_IF_ERROR(reserve_adjusts(batch.adjusts.size()));
  const bool masked = !batch.masks.empty();
  if (masked) PS_RETURN_IF_ERROR(reserve_masks(batch.masks.size()));
  profile.validate_ms = clock.lap();
  if (n > 0) {
    layout = make_attention_layout(batch, c, pool, DType::kBF16);
    layout.kv_fp8 = kv_fp8();
    PS_RETURN_IF_ERROR(attention::validate(layout));
    PS_ASSIGN_OR_RETURN(
        attention::Plan p,
        attention::make_plan(layout, attention::DeviceShape{num_ctas}, options.plan));
    profile.plan_ms = clock.lap();
    PS_RETURN_IF_ERROR(workspace->upload(p, stream));
    plan = std::move(p);
    profile.upload_ms = clock.lap();
  }
  // From here on the pool is written.
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_events.start(), stream));
  if (options.step.profile_ops) {
    timeline.begin();
    PS_RETURN_IF_ERROR(timeline.mark(StepOp::kUpload, stream));
  }
  PS_RETURN_IF_ERROR(enqueue_page_copies(batch));
  if (n == 0) {
    if (!peers.empty()) {  // their page copies
      start_peers(batch, nullptr, GraphKey{}, m, false);
      PS_RETURN_IF_ERROR(join_peers(ok_status()));
    }
    out.logits.clear();
    out.argmax.clear();
    out.sampled.clear();
    out.sampled_logprobs.clear();
    out.top_logprobs.clear();
    out.scores.clear();
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    profile.total_ms = total.lap();
    return ok_status();
  }

  // Metadata: one pinned staging array in MetaLayout order, one copy.
  int32_t* hm = meta_pinned.as<int32_t>();
  std::copy(batch.token_ids.begin(), batch.token_ids.end(), hm + m.tok);
  const int32_t ps = pool.page_size;
  for (int r = 0; r < n; ++r) {
    const int32_t q_len = batch.qo_indptr[r + 1] - batch.qo_indptr[r];
    for (int32_t i = 0; i < q_len; ++i) {
      const int32_t row = batch.qo_indptr[r] + i;
      const int32_t p = batch.kv_len[r] - q_len + i;
      hm[m.pos + row] = p;
      hm[m.kv_page + row] = batch.page_ids[static_cast<size_t>(batch.page_indptr[r] + p / ps)];
      hm[m.kv_slot + row] = p % ps;
    }
  }
  std::copy(batch.page_indptr.begin(), batch.page_indptr.end(), hm + m.pind);
  auto* draws = reinterpret_cast<SampleDraw*>(hm + m.draw);
  // The rows' places in sample_rows order: logits rows, then argmax rows, then draw rows; an
  // argmax or draw request's extra_rows before its last row (no mask with them).
  for (int r = 0, l = 0, a = SL; r < n; ++r) {
    const uint8_t kind = batch.samples[r];
    if (kind != kOutputLogits && kind != kOutputArgmax) continue;
    const int rows = kind == kOutputLogits ? 1 : batch.argmax_rows_of(r);
    for (int j = rows; j > 0; --j) {
      const int i = kind == kOutputLogits ? l++ : a++;
      hm[m.samp + i] = batch.qo_indptr[r + 1] - j;
      hm[m.mask + i] = masked ? batch.mask_index[static_cast<size_t>(r)] : -1;
    }
  }
  draw_rows(batch, draw_list);
  for (int d = 0; d < D; ++d) {
    const DrawRow& row = draw_list[static_cast<size_t>(d)];
    hm[m.samp + SL + A + d] = row.row;
    hm[m.mask + SL + A + d] = masked ? batch.mask_index[static_cast<size_t>(row.request)] : -1;
    // Only draw rows have adjusts, and those with extra rows none (forward_batch.h), so the
    // rows' ranges are contiguous.
    hm[m.adj + d] = batch.adjust_indptr.empty() ? 0 : batch.adjust_indptr[row.request];
    draws[d] = *row.draw;
  }
  hm[m.adj + D] = static_cast<int32_t>(batch.adjusts.size());
  if (!batch.adjusts.empty()) {
    std::copy(batch.adjusts.begin(), batch.adjusts.end(), adjust_pinned.as<LogitAdjust>());
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(adjust_entries(), adjust_pinned.as<void>(),
                                                  batch.adjusts.size() * sizeof(LogitAdjust),
                                                  cudaMemcpyHostToDevice, stream));
  }
  std::copy(batch.page_ids.begin(), batch.page_ids.end(), hm + m.pids);
  PS_MODEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta.as<void>(), hm, m.end * 4, cudaMemcpyHostToDevice, stream));
  profile.metadata_ms = clock.lap();

  const GraphKey key{R, n, S, A, D, masked};
  if (!peers.empty()) start_peers(batch, hm, key, m, use_graph);  // hm is written
  const Status step = [&]() -> Status {
    cuda::OpTimeline* ops = use_graph || !options.step.profile_ops ? nullptr : &timeline;
    if (use_graph) {
      PS_RETURN_IF_ERROR(launch_graph(key, m));
    } else {
      if (ops != nullptr) PS_RETURN_IF_ERROR(timeline.mark(StepOp::kUpload, stream));
      PS_RETURN_IF_ERROR(enqueue_device_step(key, m, ops));
    }
    if (masked) {  // the device runs the layers meanwhile
      PS_RETURN_IF_ERROR(upload_masks(batch));
      PS_RETURN_IF_ERROR(enqueue_sampling(key, m, ops));
    }
    // The argmax and sampled ids (tiny; the alternatives only when a draw row asks for them)
    // first; then the logits in up to kLogitsChunks pieces of whole rows, an event after each:
    // the host copies piece i into the caller's vector while piece i + 1 is still on its way.
    const bool any_top =
        std::any_of(draws, draws + D, [](const SampleDraw& d) { return d.top_logprobs > 0; });
    if (A + D > 0) {
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(argmax_pinned.as<void>(), argmax_dev.as<void>(),
                                                    argmax_bytes(A, D, any_top),
                                                    cudaMemcpyDeviceToHost, stream));
    }
    const int rows_per_chunk = SL > 0 ? (SL + kLogitsChunks - 1) / kLogitsChunks : 1;
    const int chunks =
        (SL + rows_per_chunk - 1) / rows_per_chunk;  // <= kLogitsChunks, >= 1 row each
    const size_t row_bytes = V * 4;
    for (int i = 0; i < chunks; ++i) {
      const size_t first = static_cast<size_t>(i) * rows_per_chunk;
      const size_t rows = std::min<size_t>(rows_per_chunk, SL - first);
      PS_MODEL_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(logits_pinned.as<std::byte>() + first * row_bytes,
                          logits_dev.as<std::byte>() + first * row_bytes, rows * row_bytes,
                          cudaMemcpyDeviceToHost, stream));
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(logits_events.get(i), stream));
    }
    if (options.step.profile_ops) PS_RETURN_IF_ERROR(timeline.mark(StepOp::kLogitsCopy, stream));
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventRecord(step_events.stop(), stream));
    profile.enqueue_ms = clock.lap();
    // resize() fills only elements beyond the old size (a caller that reuses its vector for
    // steps of one shape pays no fill), and runs while the device works.
    out.logits.resize(static_cast<size_t>(SL) * V);
    for (int i = 0; i < chunks; ++i) {
      const size_t first = static_cast<size_t>(i) * rows_per_chunk;
      const size_t rows = std::min<size_t>(rows_per_chunk, SL - first);
      PS_MODEL_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(logits_events.get(i)));
      profile.sync_ms += clock.lap();
      copier->copy(reinterpret_cast<std::byte*>(out.logits.data()) + first * row_bytes,
                   logits_pinned.as<std::byte>() + first * row_bytes, rows * row_bytes);
      profile.logits_copy_ms += clock.lap();
    }
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    profile.sync_ms += clock.lap();
    out.argmax.assign(argmax_pinned.as<int32_t>(), argmax_pinned.as<int32_t>() + A);
    out.sampled.assign(argmax_pinned.as<int32_t>() + A, argmax_pinned.as<int32_t>() + A + D);
    const auto* logprobs = reinterpret_cast<const float*>(argmax_pinned.as<int32_t>() + A + D);
    out.sampled_logprobs.assign(logprobs, logprobs + D);
    out.top_logprobs.resize(static_cast<size_t>(D));
    const auto* top = reinterpret_cast<const TopLogprob*>(argmax_pinned.as<std::byte>() +
                                                          argmax_top_offset(A, D));
    for (int i = 0; i < D; ++i) {  // a row left to the host gets its alternatives there
      const size_t k = out.sampled[i] < 0 ? 0 : std::min<size_t>(draws[i].top_logprobs, V);
      const TopLogprob* row_top = top + static_cast<size_t>(i) * kMaxTopLogprobs;
      out.top_logprobs[i].assign(row_top, row_top + k);
    }
    PS_RETURN_IF_ERROR(sample_left_rows(batch, S - D, out));
    PS_RETURN_IF_ERROR(score_rows(batch, out));
    float gpu_ms = 0.0f;
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&gpu_ms, step_events.start(), step_events.stop()));
    profile.gpu_ms = gpu_ms;
    if (options.step.profile_ops) PS_RETURN_IF_ERROR(timeline.accumulate(profile.op_gpu_ms));
    return ok_status();
  }();
  const Status joined = peers.empty() ? step : join_peers(step);
  profile.total_ms = total.lap();
  return joined;
}

Status CudaForwardBackend::Impl::enqueue_page_copies(const ForwardBatch& batch) {
  const size_t token_bytes = static_cast<size_t>(config.kv_size()) * kv_elem_bytes();
  const size_t page_bytes = token_bytes * static_cast<size_t>(pool.page_size);
  for (size_t l = 0; l < layers.size(); ++l) {
    for (const kv::PageCopy& pc : batch.page_copies) {
      for (std::byte* b : {k_pages(l), v_pages(l)}) {
        PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
            b + static_cast<size_t>(pc.dst_page) * page_bytes,
            b + static_cast<size_t>(pc.src_page) * page_bytes,
            token_bytes * static_cast<size_t>(pc.num_tokens), cudaMemcpyDeviceToDevice, stream));
      }
    }
  }
  return ok_status();
}

Status CudaForwardBackend::Impl::peer_step(const ForwardBatch& batch,
                                           const attention::Plan& rank0_plan,
                                           const int32_t* host_meta, const GraphKey& key,
                                           const MetaLayout& m, bool use_graph) {
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  if (key.requests > 0) PS_RETURN_IF_ERROR(workspace->upload(rank0_plan, stream));
  PS_RETURN_IF_ERROR(enqueue_page_copies(batch));
  if (key.requests > 0) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(meta.as<void>(), host_meta, m.end * 4, cudaMemcpyHostToDevice, stream));
    PS_RETURN_IF_ERROR(use_graph ? launch_graph(key, m) : enqueue_device_step(key, m, nullptr));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return ok_status();
}

void CudaForwardBackend::Impl::start_peers(const ForwardBatch& batch, const int32_t* host_meta,
                                           const GraphKey& key, const MetaLayout& m,
                                           bool use_graph) {
  peer_tasks.clear();
  for (std::unique_ptr<Impl>& p : peers) {
    Impl* peer = p.get();
    peer_tasks.emplace_back(
        [=, this, &batch] { return peer->peer_step(batch, plan, host_meta, key, m, use_graph); });
  }
  rank_threads->start(peer_tasks);
}

Status CudaForwardBackend::Impl::join_peers(Status step) {
  if (!step.ok()) tp->abort();  // the peers may wait in an all-reduce rank 0 never joins
  std::vector<Status> results = rank_threads->wait();
  if (!step.ok()) return step;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].ok()) continue;
    tp->abort();
    return Status(results[i].code(), "tensor-parallel rank " + str(static_cast<int64_t>(i) + 1) +
                                         ": " + results[i].message());
  }
  return ok_status();
}

Status CudaForwardBackend::Impl::reserve_adjusts(size_t entries) {
  if (entries <= adjust_capacity && adjust_dev.bytes() > 0) return ok_status();
  const size_t capacity = std::max({entries, 2 * adjust_capacity, kInitialAdjusts});
  graphs.clear();
  adjust_capacity = 0;
  PS_RETURN_IF_ERROR(
      adjust_dev.alloc(capacity * (sizeof(LogitAdjust) + sizeof(float)), "logit adjustments"));
  PS_RETURN_IF_ERROR(adjust_pinned.reserve(capacity * sizeof(LogitAdjust)));
  adjust_capacity = capacity;
  return ok_status();
}

Status CudaForwardBackend::Impl::upload_masks(const ForwardBatch& batch) {
  cuda::Stopwatch clock;
  auto* dest = mask_pinned.as<uint32_t>();
  write_masks(batch, std::span<uint32_t>(dest, batch.masks.size()));
  profile.masks_ms = clock.lap();
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mask_dev.as<void>(), dest, batch.masks.size() * 4,
                                                cudaMemcpyHostToDevice, stream));
  return ok_status();
}

Status CudaForwardBackend::Impl::reserve_masks(size_t words) {
  if (words <= mask_capacity) return ok_status();
  const size_t capacity =
      std::max({words, 2 * mask_capacity,
                kInitialMaskRows * static_cast<size_t>(mask_words(config.vocab_size))});
  mask_capacity = 0;  // until both allocations succeed (no graph reads these buffers)
  PS_RETURN_IF_ERROR(mask_dev.alloc(capacity * 4, "token masks"));
  PS_RETURN_IF_ERROR(mask_pinned.reserve(capacity * 4));
  mask_capacity = capacity;
  return ok_status();
}

Status CudaForwardBackend::Impl::sample_left_rows(const ForwardBatch& batch, int first_row,
                                                  ForwardOutput& out) {
  cuda::Stopwatch clock;
  host_draws.clear();  // draw_list was filled for this batch
  for (size_t i = 0; i < draw_list.size(); ++i) {
    if (out.sampled[i] < 0) host_draws.push_back(static_cast<int>(i));
  }
  if (host_draws.empty()) return ok_status();
  const size_t V = config.vocab_size, F = host_draws.size();
  PS_RETURN_IF_ERROR(host_logits.reserve(F * V * 4));
  auto* rows = host_logits.as<float>();
  for (size_t j = 0; j < F; ++j) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(rows + j * V, logits_dev.as<float>() + (first_row + host_draws[j]) * V,
                        V * 4, cudaMemcpyDeviceToHost, stream));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  copier->workers().run(static_cast<int64_t>(F), [&](int64_t j) {
    const auto i = static_cast<size_t>(host_draws[static_cast<size_t>(j)]);
    const DrawRow& d = draw_list[i];
    const SampleResult s =
        sample_draw_adjusted({rows + j * V, V}, batch.adjusts_of(d.request), *d.draw);
    out.sampled[i] = s.token_id;
    out.sampled_logprobs[i] = s.logprob;
    out.top_logprobs[i] = top_logprobs({rows + j * V, V}, d.draw->top_logprobs);
  });
  profile.host_sampled_rows = static_cast<int>(F);
  profile.host_sample_ms = clock.lap();
  return ok_status();
}

Status CudaForwardBackend::Impl::score_rows(const ForwardBatch& batch, ForwardOutput& out) {
  const size_t total = batch.score_targets.size();
  out.scores.resize(total);
  if (total == 0) return ok_status();
  const size_t V = config.vocab_size;
  const int H = static_cast<int>(config.hidden_size);
  const std::vector<std::pair<int32_t, int>> rows = scored_rows(batch);  // (row in x, request)
  // Each row's index in x, target and alternatives, uploaded at once.
  auto* args = score_pinned.as<int32_t>();
  bool any_top = false;
  for (size_t i = 0; i < total; ++i) {
    const int32_t k = batch.score_top[static_cast<size_t>(rows[i].second)];
    args[i] = rows[i].first;
    args[total + i] = batch.score_targets[i];
    args[2 * total + i] = k;
    any_top = any_top || k > 0;
  }
  auto* dev_args = score_dev.as<int32_t>();
  auto* dev_logprobs = reinterpret_cast<float*>(score_dev.as<std::byte>() + score_out_offset());
  auto* dev_top = reinterpret_cast<TopLogprob*>(dev_logprobs + options.max_batch_rows);
  PS_MODEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dev_args, args, 3 * total * 4, cudaMemcpyHostToDevice, stream));
  // logits_dev is free once the step is done: blocks of as many whole kScoreBlockRows as it
  // holds (at least one: growing it drops the graphs). The LM head runs on a
  // whole number of kScoreBlockRows (rows of h past the block's are stale, their logits
  // unread), so the GEMM shapes -- each new one is timed once (gemm.h) -- do not follow the
  // prompt lengths.
  const size_t R = static_cast<size_t>(options.max_batch_rows);
  PS_RETURN_IF_ERROR(reserve_logits(kScoreBlockRows * V * 4));
  const size_t block = logits_dev.bytes() / (V * 4) / kScoreBlockRows * kScoreBlockRows;
  for (size_t first = 0; first < total; first += block) {
    const int n = static_cast<int>(std::min(block, total - first));
    const size_t whole = (static_cast<size_t>(n) + kScoreBlockRows - 1) / kScoreBlockRows;
    const int gemm_rows = static_cast<int>(std::min(whole * kScoreBlockRows, R));
    PS_RETURN_IF_ERROR(cuda::rmsnorm(x, dev_args + first, n, H, final_norm,
                                     static_cast<float>(config.rms_norm_eps), h, stream));
    PS_RETURN_IF_ERROR(gemm->linear(h, gemm_rows, config.hidden_size, lm_head, config.vocab_size,
                                    logits_dev.as<void>(), DType::kF32));
    PS_RETURN_IF_ERROR(cuda::score_rows(logits_dev.as<float>(), n, static_cast<int>(V),
                                        dev_args + total + first, dev_args + 2 * total + first,
                                        dev_logprobs + first, dev_top + first * kMaxTopLogprobs,
                                        stream));
  }
  auto* logprobs = reinterpret_cast<float*>(score_pinned.as<std::byte>() + score_out_offset());
  auto* top = reinterpret_cast<TopLogprob*>(logprobs + options.max_batch_rows);
  PS_MODEL_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(logprobs, dev_logprobs, total * 4, cudaMemcpyDeviceToHost, stream));
  if (any_top) {
    PS_MODEL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(top, dev_top,
                                                  total * kMaxTopLogprobs * sizeof(TopLogprob),
                                                  cudaMemcpyDeviceToHost, stream));
  }
  PS_MODEL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < total; ++i) {
    const size_t k = std::min<size_t>(static_cast<size_t>(args[2 * total + i]), V);
    const TopLogprob* t = top + i * kMaxTopLogprobs;
    out.scores[i].logprob = logprobs[i];
    out.scores[i].top.assign(t, t + k);
  }
  return ok_status();
}

}  // namespace packserve::model
