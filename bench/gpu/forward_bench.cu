// forward_bench.cu: GPU timings of the CUDA forward backend (issue 4 "Benchmarks") beside the
// ceilings measured in the same process (bench_harness.cuh: device-to-device copy bandwidth
// counting bytes read + written; cuBLAS bf16 GEMM 8192^3).
//
// Model: llama-3.1-8b shapes (32 layers, hidden 4096, MLP 14336, 32 qo / 8 kv heads, head_dim
// 128, vocab 128256, untied), bf16, random weights drawn ON THE DEVICE
// (CudaForwardBackend::create_random; no checkpoint is read). KV pool: page size 16, enough
// pages for 128 requests x 2048 tokens + one 8192-token prompt, zeroed.
// Cases (one JSON line each on stdout):
//   decode_b{1,32,128}: one step of B decode rows, each request at kv_len 2048 (its own 128
//     pages); time = host wall time of forward() (validate + plan + upload + all kernels +
//     logits copy + sync), median of 10 after 2 warm-ups. roofline_ms = (matrix weight bytes
//     read per step (all layers + LM head, not the embedding table) + K/V bytes of the
//     context) / copy bandwidth.
//   prefill_8k: one request of 8192 tokens; wall time of forward(), median of 3 after 1
//     warm-up; model TFLOP/s = (GEMM FLOPs + causal attention FLOPs) / time.
//   decode_gemms_b{1,32,128}: the decode step's GEMMs alone (32 x {Wqkv, Wo, Wgu, Wd} + LM
//     head, distinct random weights, 15 GB), eager with L2 flush, median of 5; GB/s of weights.
//     One line per weight type and path: "bf16"/"cublas" (Gemm::linear timed per shape),
//     "fp8"/"cublas" (the layer matrices in e4m3, x quantized per GEMM: row_absmax +
//     quantize_fp8 + linear_fp8, the heuristic's algorithm as the forward's default),
//     "fp8"/"cublas-tuned" (the same, timed per shape),
//     and for B <= kSkinnyMaxRows "fp8"/"skinny" (skinny_linear_fp8, x not quantized); the
//     LM head is bf16 through cuBLASLt in all of them.
//   prefill_8k_gemms: the same 32 x 4 GEMM shapes ([8192, 4096] x Wqkv^T, x Wo^T, x Wgu^T,
//     x Wd^T) through the backend's Gemm alone, CUDA events, median of 5; TFLOP/s vs the
//     measured cuBLAS bf16 rate.
//   gemm_tuning (only with --cases tuning): the decode GEMM set above (32 layers + LM head)
//     at row counts that a server's steps wander over (1..48, then 64 to 512; one shuffled
//     order), on a fresh Gemm per GemmTuning mode (gemm.h), the modes side by side at each
//     row count: the host wall time of the first pass (its shapes' tuning included) and the
//     median of 5 eager passes after it (L2 flushed). One line per mode: the first passes' time
//     beyond the steady one summed over the sweep ("tuning_ms"), the shapes timed, and the steady
//     time summed over the sweep; "rows" lists each row count's steady ms in sweep order.
//   Each decode case runs these ways on the same backend: "eager" (graphs off), "graph" (the
//     step replayed from a CUDA graph, CudaStepOptions::max_graph_rows) and, with --profile,
//     "ops" (eager with a CUDA event after every op: per-op GPU ms summed over layers), each
//     with "output":"logits" (every row's f32 logits copied to the host); "graph" also with
//     "output":"argmax" (kOutputArgmax: only the argmax ids leave the GPU, as the engine runs
//     greedy requests without logprobs) and "output":"sample" (kOutputSample: the draw on the
//     device, "draw" naming its parameters: t1 = temperature 1; topk50; topp0.9; all =
//     temperature 0.7, top-k 50, top-p 0.9 and the logprob; rows the device leaves to the host
//     are counted in host.host_sampled_rows); "graph" again with "masked":true for argmax and
//     t1 draws, every row with a random token mask of its own (ForwardBatch::masks, given
//     before the step: structured outputs' cost on the device). The JSON line of each carries
//     the host phases of its last step (CudaStepProfile).
//   decode_b{B}_host_sample: the same draws on the host (sample_draw, the engine's sampler
//     arithmetic) over the B logits rows of a "logits" step, on 8 threads (the engine's
//     default --sampler-threads), median of 5: what a step paid for them before the device
//     drew them.
//   --cost-alpha A,B: the decode graph (and ops) runs once per attention PlanOptions::cost.alpha
//     (the planner's cost per folded query row of a work item; default 1).
//   --quantization fp8: the decode and prefill cases with float8 e4m3 layer matrices
//     (CudaForwardOptions::quantization); roofline_ms then counts a byte per layer weight. The
//     gemms cases stay bf16.
//   --kv-cache-dtype fp8: the decode and prefill cases with a float8 e4m3 KV pool
//     (CudaForwardOptions::kv_cache_dtype); roofline_ms then counts a byte per K/V element.
//   --skinny-rows N: CudaForwardOptions::skinny_gemm_rows (default kSkinnyMaxRows; 0: every fp8
//     GEMM through cuBLASLt) for the decode and prefill cases.
//   --tensor-parallel N: the decode and prefill cases on N devices (CudaForwardOptions::
//     tensor_parallel; each rank's share drawn on its device); roofline_ms is then rank 0's
//     bytes (its 1/N of the layers' matrices and of the context's K/V, and the whole LM head)
//     at one device's copy bandwidth.
// Usage: forward_bench [--cases decode,prefill,gemms,tuning] [--batches 1,32,128]
//                      [--cost-alpha 1] [--profile] [--tensor-parallel N]
//                      [--quantization none|fp8] [--kv-cache-dtype auto|fp8]
//                      [--skinny-rows N]
//   (default: every case, batches 1,32,128, no per-op profile; needs ~55 GB of GPU memory)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gpu/bench_harness.cuh"
#include "packserve/common/rng.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/worker_pool.h"
#include "packserve/model/cuda/forward_cuda.h"
#include "packserve/model/cuda/gemm.h"
#include "packserve/model/cuda/ops.h"
#include "packserve/model/cuda/skinny_gemm.h"

namespace packserve::bench {
namespace {

using model::CudaForwardBackend;
using model::ForwardBatch;

void die(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.to_string().c_str());
    std::exit(3);
  }
}

model::ModelConfig llama31_8b() {
  model::ModelConfig c;
  c.arch = model::Architecture::kLlama;
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_qo_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling = model::llama3_rope_scaling(8.0, 1.0, 4.0, 8192);
  c.dtype = DType::kBF16;
  return c;
}

constexpr int kPageSize = 16, kDecodeCtx = 2048, kMaxDecode = 128, kPrefill = 8192;

ForwardBatch make_batch(int num_requests, int q_len, int kv_len, int first_page, Rng& rng) {
  ForwardBatch b;
  b.qo_indptr.push_back(0);
  b.page_indptr.push_back(0);
  const int pages = (kv_len + kPageSize - 1) / kPageSize;
  for (int r = 0; r < num_requests; ++r) {
    for (int i = 0; i < q_len; ++i)
      b.token_ids.push_back(static_cast<int32_t>(rng.uniform_int(0, 128255)));
    b.qo_indptr.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.kv_len.push_back(kv_len);
    for (int p = 0; p < pages; ++p) b.page_ids.push_back(first_page + r * pages + p);
    b.page_indptr.push_back(static_cast<int32_t>(b.page_ids.size()));
    b.samples.push_back(1);
  }
  return b;
}

double wall_ms(CudaForwardBackend& m, const ForwardBatch& b, int warmup, int reps) {
  model::ForwardOutput out;
  for (int i = 0; i < warmup; ++i) die(m.forward(b, out), "forward");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    die(m.forward(b, out), "forward");
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

std::string profile_json(const model::CudaStepProfile& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"host\":{\"validate_ms\":%.3f,\"plan_ms\":%.3f,\"upload_ms\":%.3f,"
                "\"metadata_ms\":%.3f,\"enqueue_ms\":%.3f,\"sync_ms\":%.3f,"
                "\"logits_copy_ms\":%.3f,\"host_sampled_rows\":%d,\"host_sample_ms\":%.3f,"
                "\"masks_ms\":%.3f,\"total_ms\":%.3f},\"gpu_ms\":%.3f,\"graph_replayed\":%s",
                p.validate_ms, p.plan_ms, p.upload_ms, p.metadata_ms, p.enqueue_ms, p.sync_ms,
                p.logits_copy_ms, p.host_sampled_rows, p.host_sample_ms, p.masks_ms, p.total_ms,
                p.gpu_ms, p.graph_replayed ? "true" : "false");
  std::string s = buf;
  bool any = false;
  for (double v : p.op_gpu_ms) any = any || v > 0;
  if (any) {
    s += ",\"op_gpu_ms\":{";
    for (int i = 0; i < model::kNumStepOps; ++i) {
      std::snprintf(buf, sizeof buf, "%s\"%s\":%.3f", i ? "," : "",
                    model::step_op_name(static_cast<model::StepOp>(i)), p.op_gpu_ms[i]);
      s += buf;
    }
    s += "}";
  }
  return s;
}

// CudaStepOptions with graphs of up to max_graph_rows rows (0: none), captured at a shape's
// first step, and per-op events when profile_ops (eager only).
model::CudaStepOptions step_options(int max_graph_rows, bool profile_ops) {
  model::CudaStepOptions o;
  o.max_graph_rows = max_graph_rows;
  o.max_cuda_graphs = 128;
  o.graph_capture_after = 1;
  o.profile_ops = profile_ops;
  return o;
}

struct Args {
  bool decode = true, prefill = true, gemms = true, tuning = false, profile = false;
  std::vector<int> batches{1, 32, 128};
  std::vector<double> cost_alphas{1.0};
  int tensor_parallel = 1;
  bool fp8 = false;                               // --quantization fp8
  bool fp8_kv = false;                            // --kv-cache-dtype fp8
  int skinny_rows = model::cuda::kSkinnyMaxRows;  // CudaForwardOptions::skinny_gemm_rows
};

Args parse_args(int argc, char** argv) {
  Args a;
  auto usage = [](const std::string& why) {
    std::fprintf(stderr,
                 "forward_bench: %s\nusage: forward_bench [--cases decode,prefill,gemms,tuning] "
                 "[--batches 1,32,128] [--cost-alpha 1,64] [--profile] [--tensor-parallel N] "
                 "[--quantization none|fp8] [--kv-cache-dtype auto|fp8] [--skinny-rows N]\n",
                 why.c_str());
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--profile") {
      a.profile = true;
    } else if (arg == "--quantization" && i + 1 < argc) {
      const std::string q = argv[++i];
      if (q != "none" && q != "fp8") usage("--quantization: '" + q + "', expected none or fp8");
      a.fp8 = q == "fp8";
    } else if (arg == "--kv-cache-dtype" && i + 1 < argc) {
      const std::string q = argv[++i];
      if (q != "auto" && q != "fp8") usage("--kv-cache-dtype: '" + q + "', expected auto or fp8");
      a.fp8_kv = q == "fp8";
    } else if (arg == "--skinny-rows" && i + 1 < argc) {
      const std::string v = argv[++i];
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 0 || n > model::cuda::kSkinnyMaxRows) {
        usage("--skinny-rows: '" + v + "', expected an integer in [0, " +
              std::to_string(model::cuda::kSkinnyMaxRows) + "]");
      }
      a.skinny_rows = static_cast<int>(n);
    } else if (arg == "--tensor-parallel" && i + 1 < argc) {
      a.tensor_parallel = std::atoi(argv[++i]);
      if (a.tensor_parallel < 1) usage("--tensor-parallel: expected an integer >= 1");
    } else if (arg == "--cost-alpha" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      std::string item;
      a.cost_alphas.clear();
      while (std::getline(list, item, ',')) {
        char* end = nullptr;
        const double v = std::strtod(item.c_str(), &end);
        if (end == item.c_str() || *end != '\0' || !(v >= 0)) {
          usage("--cost-alpha: '" + item + "' is not a number >= 0");
        }
        a.cost_alphas.push_back(v);
      }
      if (a.cost_alphas.empty()) usage("--cost-alpha: expected a list of numbers");
    } else if ((arg == "--cases" || arg == "--batches") && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      std::string item;
      if (arg == "--cases") {
        a.decode = a.prefill = a.gemms = false;
        while (std::getline(list, item, ',')) {
          if (item == "decode")
            a.decode = true;
          else if (item == "prefill")
            a.prefill = true;
          else if (item == "gemms")
            a.gemms = true;
          else if (item == "tuning")
            a.tuning = true;
          else
            usage("--cases: unknown case '" + item +
                  "', expected decode, prefill, gemms or tuning");
        }
      } else {
        a.batches.clear();
        while (std::getline(list, item, ',')) {
          const int b = std::atoi(item.c_str());
          if (b < 1 || b > kMaxDecode) {
            usage("--batches: '" + item + "' is not an integer in [1, " +
                  std::to_string(kMaxDecode) + "]");
          }
          a.batches.push_back(b);
        }
      }
    } else {
      usage("unknown or incomplete argument '" + arg + "'");
    }
  }
  return a;
}

}  // namespace
}  // namespace packserve::bench

int main(int argc, char** argv) {
  using namespace packserve;
  using namespace packserve::bench;
  const Args args = parse_args(argc, argv);
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  Timer timer;
  const Ceilings ceil = measure_ceilings(timer);
  std::printf("{\"ceilings\":true,\"device\":\"%s\",\"copy_gbps\":%.1f,\"matmul_tflops\":%.1f}\n",
              prop.name, ceil.copy_gbps, ceil.bf16_tflops);
  std::fflush(stdout);

  // Decode GEMMs alone (the step's 32 x 4 GEMMs + LM head, distinct weights for every layer so
  // nothing is served from L2), before the model is created: tells GEMM time from the rest.
  if (args.gemms || args.tuning) {
    const size_t Hs = 4096, Is = 14336, Vs = 128256, Qs = 4096, KVs = 1024;
    const size_t qkv_n = (Qs + 2 * KVs) * Hs, o_n = Hs * Qs, gu_n = 2 * Is * Hs, d_n = Hs * Is;
    const size_t layer_n = qkv_n + o_n + gu_n + d_n, total_n = 32 * layer_n + Vs * Hs;
    constexpr size_t kMaxSweepRows = 512;  // the tuning sweep's largest row count
    const size_t max_rows = args.tuning ? kMaxSweepRows : kMaxDecode;
    uint16_t *w, *x, *yb;
    float* yf;
    BENCH_CUDA(cudaMalloc(&w, total_n * 2));
    BENCH_CUDA(cudaMalloc(&x, max_rows * Is * 2));
    BENCH_CUDA(cudaMalloc(&yf, max_rows * Vs * 4));
    BENCH_CUDA(cudaMalloc(&yb, max_rows * 2 * Is * 2));
    fill_random(w, total_n, 7);
    fill_random(x, max_rows * Is, 8);
    BENCH_CUDA(cudaDeviceSynchronize());
    // The 32 layers' four GEMMs, each as lin(x, rows, in, offset of the matrix, out, y, ...).
    using Linear = std::function<void(const uint16_t* x, int rows, size_t in, size_t offset,
                                      size_t out, void* y, DType dt, bool acc)>;
    const auto layers = [&](int batch, const Linear& lin) {
      for (size_t l = 0; l < 32; ++l) {
        const size_t o = l * layer_n;
        lin(x, batch, Hs, o, Qs + 2 * KVs, yf, DType::kF32, false);
        lin(x, batch, Qs, o + qkv_n, Hs, yf, DType::kF32, true);
        lin(x, batch, Hs, o + qkv_n + o_n, 2 * Is, yb, DType::kBF16, false);
        lin(x, batch, Is, o + qkv_n + o_n + gu_n, Hs, yf, DType::kF32, true);
      }
    };
    const auto pass = [&](model::cuda::Gemm& g, int batch) {
      layers(batch,
             [&](const uint16_t* xx, int rows, size_t in, size_t off, size_t out, void* y, DType dt,
                 bool acc) { die(g.linear(xx, rows, in, w + off, out, y, dt, acc), "linear"); });
      die(g.linear(x, batch, Hs, w + 32 * layer_n, Vs, yf, DType::kF32), "lm_head");
    };
    const double bytes = total_n * 2.0;
    if (args.gemms) {
      // Timed per shape, as these rows were measured since issue 4 (docs/forward-cuda.md).
      auto g = model::cuda::Gemm::create(timer.stream(), model::GemmTuning::kPerShape);
      die(g.status(), "gemm");
      // The same GEMMs with float8 layer matrices (the LM head stays bf16), as the CUDA forward
      // runs them: through cuBLASLt on quantized x (row_absmax + quantize_fp8 + linear_fp8),
      // or through skinny_linear_fp8 (rows <= kSkinnyMaxRows, x not quantized). The e4m3 bytes
      // are random bits (a few NaN: the time does not depend on the values).
      const size_t layers_n = 32 * layer_n;
      uint8_t *wq, *xq;
      float *amax, *scales;
      BENCH_CUDA(cudaMalloc(&wq, layers_n));
      BENCH_CUDA(cudaMalloc(&xq, max_rows * Is));
      BENCH_CUDA(cudaMalloc(&amax, max_rows * 4));
      BENCH_CUDA(cudaMalloc(&scales, 8 * 4));  // w scale [0], x scale [4]: 16-byte aligned
      fill_random(wq, layers_n / 2, 9);
      const std::vector<float> one(8, 1.0f);
      BENCH_CUDA(cudaMemcpy(scales, one.data(), 8 * 4, cudaMemcpyHostToDevice));
      // The forward's default (GemmTuning::kHeuristic) and timed per shape.
      auto heuristic = model::cuda::Gemm::create(timer.stream(), model::GemmTuning::kHeuristic);
      die(heuristic.status(), "gemm");
      const auto cublas_fp8 = [&](model::cuda::Gemm& fg, int batch) {
        layers(batch, [&](const uint16_t* xx, int rows, size_t in, size_t off, size_t out, void* y,
                          DType dt, bool acc) {
          const int c = static_cast<int>(in);
          die(model::cuda::row_absmax(xx, rows, c, amax, timer.stream()), "row_absmax");
          die(model::cuda::quantize_fp8(xx, rows, c, amax, rows, xq, scales + 4, timer.stream()),
              "quantize_fp8");
          die(fg.linear_fp8(xq, scales + 4, rows, in, wq + off, scales, out, y, dt, acc),
              "linear_fp8");
        });
        die(g.value().linear(x, batch, Hs, w + 32 * layer_n, Vs, yf, DType::kF32), "lm_head");
      };
      const auto skinny_fp8 = [&](int batch) {
        layers(batch, [&](const uint16_t* xx, int rows, size_t in, size_t off, size_t out, void* y,
                          DType dt, bool acc) {
          die(model::cuda::skinny_linear_fp8(xx, rows, in, wq + off, scales, out, y, dt, acc,
                                             timer.stream()),
              "skinny_linear_fp8");
        });
        die(g.value().linear(x, batch, Hs, w + 32 * layer_n, Vs, yf, DType::kF32), "lm_head");
      };
      const double bytes_fp8 = layers_n + 2.0 * Vs * Hs;
      const auto report = [&](int batch, const char* weights, const char* path, double ms,
                              double b) {
        std::printf(
            "{\"case\":\"decode_gemms_b%d\",\"weights\":\"%s\",\"path\":\"%s\","
            "\"ms\":%.3f,\"weight_bytes\":%.0f,\"gbps\":%.1f,\"frac_copy_bw\":%.3f}\n",
            batch, weights, path, ms, b, b / (ms * 1e-3) / 1e9,
            b / (ms * 1e-3) / 1e9 / ceil.copy_gbps);
        std::fflush(stdout);
      };
      for (int batch : args.batches) {
        const auto eager = [&](const std::function<void()>& f) {
          return timer.eager_ms([&](cudaStream_t) { f(); }, 2, 5);
        };
        report(batch, "bf16", "cublas", eager([&] { pass(g.value(), batch); }), bytes);
        report(batch, "fp8", "cublas", eager([&] { cublas_fp8(heuristic.value(), batch); }),
               bytes_fp8);
        report(batch, "fp8", "cublas-tuned", eager([&] { cublas_fp8(g.value(), batch); }),
               bytes_fp8);
        if (batch <= model::cuda::kSkinnyMaxRows) {
          report(batch, "fp8", "skinny", eager([&] { skinny_fp8(batch); }), bytes_fp8);
        }
      }
      BENCH_CUDA(cudaFree(wq));
      BENCH_CUDA(cudaFree(xq));
      BENCH_CUDA(cudaFree(amax));
      BENCH_CUDA(cudaFree(scales));
    }
    if (args.tuning) {
      std::vector<int> sweep;
      for (int r = 1; r <= 48; ++r) sweep.push_back(r);
      for (int r : {64, 80, 100, 128, 160, 200, 256, 300, 384, 450, int{kMaxSweepRows}}) {
        sweep.push_back(r);
      }
      Rng order(11);
      for (size_t i = sweep.size() - 1; i > 0; --i) {
        std::swap(sweep[i], sweep[static_cast<size_t>(order.uniform_int(0, static_cast<int>(i)))]);
      }
      // The three modes side by side at every row count (the GPU warms up over the sweep, and
      // the compute-bound row counts slow down with it: run one mode after the other and the
      // last one looks up to 1.1x slower at 512 rows with the very same algorithm).
      using model::GemmTuning;
      struct Mode {
        GemmTuning tuning;
        const char* name;
        std::optional<model::cuda::Gemm> gemm;
        double tuning_ms = 0, steady_sum = 0;
        std::string rows = "[";
      };
      Mode modes[] = {{GemmTuning::kHeuristic, "heuristic", {}},
                      {GemmTuning::kPerShape, "per_shape", {}},
                      {GemmTuning::kPerBucket, "per_bucket", {}}};
      for (Mode& m : modes) {
        auto g = model::cuda::Gemm::create(timer.stream(), m.tuning);
        die(g.status(), "gemm");
        m.gemm.emplace(std::move(g).value());
      }
      for (int batch : sweep) {
        for (Mode& m : modes) {
          BENCH_CUDA(cudaStreamSynchronize(timer.stream()));
          const auto t0 = std::chrono::steady_clock::now();
          pass(*m.gemm, batch);
          BENCH_CUDA(cudaStreamSynchronize(timer.stream()));
          const double first =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          const double ms = timer.eager_ms([&](cudaStream_t) { pass(*m.gemm, batch); }, 0, 5);
          m.tuning_ms += std::max(0.0, first - ms);
          m.steady_sum += ms;
          char item[48];
          std::snprintf(item, sizeof item, "%s[%d,%.3f]", m.rows.size() > 1 ? "," : "", batch, ms);
          m.rows += item;
        }
      }
      for (Mode& m : modes) {
        std::printf(
            "{\"case\":\"gemm_tuning\",\"tuning\":\"%s\",\"row_counts\":%zu,"
            "\"tuning_ms\":%.1f,\"tuned_shapes\":%d,\"bucket_shapes\":%d,"
            "\"steady_ms_sum\":%.2f,\"rows\":%s]}\n",
            m.name, sweep.size(), m.tuning_ms, m.gemm->num_tuned_shapes(),
            m.gemm->num_bucket_shapes(), m.steady_sum, m.rows.c_str());
      }
      std::fflush(stdout);
    }
    BENCH_CUDA(cudaFree(w));
    BENCH_CUDA(cudaFree(x));
    BENCH_CUDA(cudaFree(yf));
    BENCH_CUDA(cudaFree(yb));
  }

  if (!args.decode && !args.prefill) return 0;
  const model::ModelConfig c = llama31_8b();
  const int decode_pages = kMaxDecode * (kDecodeCtx / kPageSize);
  const int prefill_pages = kPrefill / kPageSize;
  model::KvPoolShape pool{decode_pages + prefill_pages + 8, kPageSize};
  model::CudaForwardOptions options;
  options.max_batch_rows = kPrefill;
  options.max_batch_page_ids = pool.num_pages;
  options.tensor_parallel = args.tensor_parallel;
  if (args.fp8) options.quantization = model::WeightQuantization::kFp8;
  if (args.fp8_kv) options.kv_cache_dtype = model::KvCacheDtype::kFp8E4m3;
  options.skinny_gemm_rows = args.skinny_rows;
  auto created = CudaForwardBackend::create_random(c, pool, options, 1234);
  die(created.status(), "create_random");
  CudaForwardBackend& m = *created.value();
  const double H = 4096, I = 14336, V = 128256, Q = 4096, KV = 1024, L = 32;
  const double layer_params = H * (Q + 2 * KV) + Q * H + 2 * I * H + I * H;
  // Rank 0's matrices (its share of the layers' and the whole LM head) per step.
  const double tp = args.tensor_parallel;
  // fp8: a byte per layer weight (the row scales are under 0.1 % of it), the LM head bf16.
  const double read_weight_bytes = (args.fp8 ? 1.0 : 2.0) * L * layer_params / tp + 2.0 * V * H;
  std::printf(
      "{\"model\":\"llama-3.1-8b shapes, random %s weights drawn on the device\","
      "\"quantization\":\"%s\",\"kv_cache_dtype\":\"%s\",\"tensor_parallel\":%d,"
      "\"weight_bytes\":%zu,"
      "\"kv_pool_bytes\":%zu,\"read_weight_bytes_per_step\":%.0f}\n",
      args.fp8 ? "float8 e4m3 layer" : "bf16", args.fp8 ? "fp8" : "none",
      args.fp8_kv ? "fp8_e4m3" : "bf16", args.tensor_parallel, m.weight_bytes(), m.kv_pool_bytes(),
      read_weight_bytes);
  std::fflush(stdout);

  Rng rng(5);
  for (int batch : args.decode ? args.batches : std::vector<int>{}) {
    ForwardBatch b = make_batch(batch, 1, kDecodeCtx, 0, rng);
    const double kv_bytes = batch * double(kDecodeCtx) * L * KV * 2 * (args.fp8_kv ? 1 : 2) / tp;
    const double roof_ms = (read_weight_bytes + kv_bytes) / (ceil.copy_gbps * 1e9) * 1e3;
    struct Mode {
      const char* name;
      model::CudaStepOptions step;
      double cost_alpha;
      uint8_t output;       // of every row: kOutputLogits, kOutputArgmax or kOutputSample
      int draw = -1;        // kOutputSample: index in draws
      bool masked = false;  // every row with its own token mask (ForwardBatch::masks)
    };
    struct Draw {
      const char* name;
      SampleDraw draw;
    };
    const std::vector<Draw> draws = {{"t1", {}},
                                     {"topk50", {1.0f, 0.0f, 0.0, 1.0, 50, 0, 0}},
                                     {"topp0.9", {1.0f, 0.0f, 0.0, 0.9, 0, 0, 0}},
                                     {"all", {1.0f / 0.7f, 0.0f, 0.0, 0.9, 50, 0, 1}}};
    std::vector<Mode> modes;
    modes.push_back({"eager", step_options(0, false), args.cost_alphas[0], model::kOutputLogits});
    for (double alpha : args.cost_alphas) {
      modes.push_back({"graph", step_options(kMaxDecode, false), alpha, model::kOutputLogits});
      modes.push_back({"graph", step_options(kMaxDecode, false), alpha, model::kOutputArgmax});
      for (int d = 0; d < static_cast<int>(draws.size()); ++d) {
        modes.push_back({"graph", step_options(kMaxDecode, false), alpha, model::kOutputSample, d});
      }
      modes.push_back(
          {"graph", step_options(kMaxDecode, false), alpha, model::kOutputArgmax, -1, true});
      modes.push_back(
          {"graph", step_options(kMaxDecode, false), alpha, model::kOutputSample, 0, true});
      if (args.profile)
        modes.push_back({"ops", step_options(0, true), alpha, model::kOutputLogits});
    }
    for (const Mode& mode : modes) {
      std::fill(b.samples.begin(), b.samples.end(), mode.output);
      b.draws.clear();
      if (mode.output == model::kOutputSample) {
        for (int r = 0; r < batch; ++r) {
          b.draws.push_back(draws[static_cast<size_t>(mode.draw)].draw);
          b.draws.back().u = rng.uniform();
        }
      }
      b.mask_index.clear();
      b.masks.clear();
      if (mode.masked) {  // random masks allowing about half of the vocabulary, one per row
        const auto words = static_cast<size_t>(model::mask_words(c.vocab_size));
        for (int r = 0; r < batch; ++r) b.mask_index.push_back(r);
        b.masks.resize(static_cast<size_t>(batch) * words);
        for (uint32_t& w : b.masks) w = static_cast<uint32_t>(rng.next_u64());
      }
      die(m.set_step_options(mode.step), "set_step_options");
      attention::PlanOptions plan;
      plan.cost.alpha = mode.cost_alpha;
      die(m.set_plan_options(plan), "set_plan_options");
      const double ms = wall_ms(m, b, 2, mode.step.profile_ops ? 3 : 10);
      std::printf(
          "{\"case\":\"decode_b%d\",\"mode\":\"%s\",\"output\":\"%s\",\"draw\":\"%s\","
          "\"masked\":%s,\"cost_alpha\":%g,\"ctx\":%d,"
          "\"step_ms\":%.3f,\"roofline_ms\":%.3f,\"x_roofline\":%.2f,\"bytes\":%.0f,"
          "\"effective_gbps\":%.1f,\"tokens_per_s\":%.0f,\"plan_items\":%zu,%s}\n",
          batch, mode.name,
          mode.output == model::kOutputArgmax   ? "argmax"
          : mode.output == model::kOutputSample ? "sample"
                                                : "logits",
          mode.draw >= 0 ? draws[static_cast<size_t>(mode.draw)].name : "-",
          mode.masked ? "true" : "false", mode.cost_alpha, kDecodeCtx, ms, roof_ms, ms / roof_ms,
          read_weight_bytes + kv_bytes, (read_weight_bytes + kv_bytes) / (ms * 1e-3) / 1e9,
          batch / (ms * 1e-3), m.last_plan().items.size(),
          profile_json(m.last_step_profile()).c_str());
      std::fflush(stdout);
    }
    // The same draws on the host, from a logits step's rows.
    std::fill(b.samples.begin(), b.samples.end(), model::kOutputLogits);
    b.draws.clear();
    b.mask_index.clear();
    b.masks.clear();
    die(m.set_step_options(step_options(kMaxDecode, false)), "set_step_options");
    model::ForwardOutput logits;
    die(m.forward(b, logits), "forward");
    WorkerPool pool(8);
    std::vector<TemperatureScratch> scratch(static_cast<size_t>(batch));
    const size_t V = static_cast<size_t>(c.vocab_size);
    for (const Draw& d : draws) {
      std::vector<double> t;
      for (int rep = 0; rep < 6; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.run(batch, [&](int64_t r) {
          SampleDraw dr = d.draw;
          dr.u = 0.5;
          (void)sample_draw({logits.logits.data() + static_cast<size_t>(r) * V, V}, dr,
                            scratch[static_cast<size_t>(r)]);
        });
        if (rep > 0) {
          t.push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());
        }
      }
      std::printf(
          "{\"case\":\"decode_b%d_host_sample\",\"draw\":\"%s\",\"threads\":8,"
          "\"sample_ms\":%.3f}\n",
          batch, d.name, median(t));
      std::fflush(stdout);
    }
  }
  if (!args.prefill) return 0;
  die(m.set_step_options(model::CudaStepOptions{}), "set_step_options");  // prefill: eager

  const ForwardBatch pf = make_batch(1, kPrefill, kPrefill, decode_pages, rng);
  const double pf_ms = wall_ms(m, pf, 1, 3);
  const double T = kPrefill;
  const double gemm_flops = 2.0 * T * L * layer_params + 2.0 * H * V;
  const double attn_flops = L * 4.0 * 128 * 32 * (T * (T + 1) / 2);
  std::printf(
      "{\"case\":\"prefill_8k\",\"ms\":%.2f,\"tflops\":%.1f,\"gemm_tflop\":%.2f,"
      "\"attn_tflop\":%.2f,\"frac_matmul\":%.3f,\"tokens_per_s\":%.0f}\n",
      pf_ms, (gemm_flops + attn_flops) / (pf_ms * 1e-3) / 1e12, gemm_flops / 1e12,
      attn_flops / 1e12, (gemm_flops + attn_flops) / (pf_ms * 1e-3) / 1e12 / ceil.bf16_tflops,
      T / (pf_ms * 1e-3));
  std::fflush(stdout);

  // The GEMMs alone, same shapes, through the backend's Gemm.
  if (args.gemms) {
    auto g = model::cuda::Gemm::create(timer.stream(), model::GemmTuning::kHeuristic);
    die(g.status(), "gemm");
    uint16_t *x, *w;
    float* yf;
    uint16_t* yb;
    const size_t Ts = kPrefill;
    BENCH_CUDA(cudaMalloc(&x, Ts * 14336 * 2));
    BENCH_CUDA(cudaMalloc(&w, size_t(2 * 14336) * 4096 * 2));
    BENCH_CUDA(cudaMalloc(&yf, Ts * 6144 * 4));
    BENCH_CUDA(cudaMalloc(&yb, Ts * 28672 * 2));
    fill_random(x, Ts * 14336, 3);
    fill_random(w, size_t(2 * 14336) * 4096, 4);
    BENCH_CUDA(cudaDeviceSynchronize());
    auto run = [&](cudaStream_t) {
      for (int l = 0; l < 32; ++l) {
        die(g.value().linear(x, Ts, 4096, w, 6144, yf, DType::kF32), "qkv");
        die(g.value().linear(x, Ts, 4096, w, 4096, yf, DType::kF32, true), "o");
        die(g.value().linear(x, Ts, 4096, w, 28672, yb, DType::kBF16), "gate_up");
        die(g.value().linear(x, Ts, 14336, w, 4096, yf, DType::kF32, true), "down");
      }
    };
    const double ms = timer.eager_ms(run, 1, 5);
    const double flops = 2.0 * T * L * layer_params;
    std::printf(
        "{\"case\":\"prefill_8k_gemms\",\"ms\":%.2f,\"tflops\":%.1f,\"frac_matmul\":%.3f}\n", ms,
        flops / (ms * 1e-3) / 1e12, flops / (ms * 1e-3) / 1e12 / ceil.bf16_tflops);
    BENCH_CUDA(cudaFree(x));
    BENCH_CUDA(cudaFree(w));
    BENCH_CUDA(cudaFree(yf));
    BENCH_CUDA(cudaFree(yb));
  }
  return 0;
}
