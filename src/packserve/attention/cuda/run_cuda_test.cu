// run_cuda_test.cu [label gpu]: the CUDA executor against the CPU executor and the float64
// reference, on the shared random batch generator (tests/testing/random_batch.h).
// Every test skips with "no CUDA device" when there is none. Outputs are poisoned (NaN)
// before each run and every element is checked.
// Tolerances: bf16 |x - ref| <= 5e-3 + 1e-2 |ref|; f16 2e-3 + 5e-3 |ref|. Where they come
// from: the output is rounded once to the dtype (relative 2^-9 bf16, 2^-12 f16) and P is
// rounded to the dtype before the PV product (FA2 does the same), an absolute error of at
// most ~2^-9 max|v| (|v| <= ~4 for N(0,1) draws) in bf16; f32 accumulation adds < 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "packserve/attention/batch_spec.h"
#include "packserve/attention/cuda/gpu_batch.h"
#include "packserve/attention/cuda/kernel_launch.h"
#include "packserve/attention/cuda/persistent_kernel.cuh"
#include "packserve/attention/cuda/run_cuda.h"
#include "packserve/attention/cuda/tile_mma.cuh"
#include "packserve/attention/cuda/wgmma.cuh"
#include "packserve/attention/cuda/workspace.h"
#include "packserve/attention/plan.h"
#include "packserve/attention/plan_buffer.h"
#include "packserve/attention/reference.h"
#include "packserve/attention/run_cpu.h"
#include "packserve/common/dtype.h"
#include "testing/random_batch.h"

namespace packserve::attention::cuda {
namespace {

constexpr Policy kPolicies[] = {Policy::kNaive, Policy::kBalanced, Policy::kPrefix};
constexpr int kCtaCounts[] = {1, 7, 32, 132};

bool has_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

struct Tolerance {
  double atol, rtol;
};
Tolerance tolerance(DType dtype) {
  return dtype == DType::kBF16 ? Tolerance{5e-3, 1e-2} : Tolerance{2e-3, 5e-3};
}

BatchData build(const BatchSpec& spec) {
  Result<BatchData> data = build_batch(spec);
  PS_CHECK(data.ok()) << data.status().to_string() << " spec " << to_json(spec);
  return std::move(data).value();
}

PlanCapacity capacity_for(const BatchLayout& l, int num_ctas) {
  return PlanCapacity{l.total_rows(), static_cast<int>(l.kv_page_indices.size()), num_ctas,
                      l.num_kv_heads};
}

HeadConfig heads_of(const BatchLayout& l) {
  return HeadConfig{l.num_qo_heads, l.num_kv_heads, l.head_dim, l.dtype};
}

testing::RandomBatchOptions gpu_options() {
  testing::RandomBatchOptions o;
  o.dtypes = {DType::kBF16, DType::kF16};
  return o;
}

// Plans, uploads, runs on the GPU (output poisoned first) and reads the output back.
std::vector<float> plan_and_run_gpu(const BatchData& data, Policy policy, bool deterministic,
                                    int ctas) {
  PlanOptions options;
  options.policy = policy;
  options.deterministic = deterministic;
  const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, options);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {};
  Result<Workspace> ws = Workspace::create(capacity_for(data.layout, ctas), heads_of(data.layout));
  EXPECT_TRUE(ws.ok()) << ws.status().to_string();
  if (!ws.ok()) return {};
  GpuBatch gpu;
  Status s = gpu.assign(data);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = ws->upload(*plan, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = gpu.poison_output(nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = run_cuda(*ws, gpu.view, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
  const cudaError_t sync = cudaDeviceSynchronize();
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  Result<std::vector<float>> out = gpu.read_output(data.layout);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return out.ok() ? std::move(out).value() : std::vector<float>{};
}

void expect_matches(const BatchLayout& layout, const std::vector<float>& out,
                    std::span<const double> ref, const char* what) {
  ASSERT_EQ(out.size(), ref.size()) << what;
  const Tolerance tol = tolerance(layout.dtype);
  const OutputComparison c = compare_with_reference(layout, out, ref, tol.atol, tol.rtol);
  ASSERT_TRUE(c.ok) << what << ": " << c.num_failed << " of " << out.size() << " elements fail ("
                    << c.num_nonfinite << " non-finite), first: " << c.first_failure
                    << " max_abs_err=" << c.max_abs_err;
}

TEST(RunCuda, SupportsNamesCompiledConfigurations) {
  EXPECT_TRUE(supports(TileConfig{16, 64}, 128, DType::kBF16));
  EXPECT_TRUE(supports(TileConfig{128, 128}, 256, DType::kF16));
  EXPECT_FALSE(supports(TileConfig{16, 64}, 128, DType::kF32));
  EXPECT_FALSE(supports(TileConfig{48, 64}, 128, DType::kBF16));
  EXPECT_FALSE(supports(TileConfig{16, 64}, 96, DType::kBF16));
}

// Host-only (no device needed): the kernel's ldmatrix lane addresses, lane_base ^ (kk << 5)
// (+ 16-row block offsets), are the byte offsets of the swizzled (row, chunk) each lane must
// read, for the q (A), K (B) and V (B, transposed) patterns of persistent_kernel.cuh, any
// tile base aligned to the row stride, every head_dim.
template <int HeadDim>
void check_lane_addresses() {
  constexpr uint32_t kRowBytes = 2 * HeadDim;
  struct Pattern {
    const char* name;
    int (*row)(int lane);
    int (*lo)(int lane);
  };
  const Pattern patterns[] = {
      {"q", [](int l) { return l & 15; }, [](int l) { return l >> 4; }},
      {"k", [](int l) { return (l & 7) + ((l >> 4) << 3); }, [](int l) { return (l >> 3) & 1; }},
      {"v", [](int l) { return (l & 7) + (((l >> 3) & 1) << 3); }, [](int l) { return l >> 4; }}};
  for (const Pattern& pat : patterns) {
    for (const uint32_t base : {0u, 7u * kRowBytes, 96u * kRowBytes + 0x8000u}) {
      for (const int r0 : {0, 16, 48, 112}) {  // the warp's first row (a multiple of 16)
        for (int lane = 0; lane < 32; ++lane) {
          const uint32_t lane_base =
              base + ldmatrix_lane_offset<HeadDim>(pat.row(lane), pat.lo(lane), lane);
          for (int kk = 0; kk < HeadDim / 16; ++kk) {
            const uint32_t got = ((lane_base + r0 * kRowBytes) ^ (kk << 5)) - base;
            const int want = 2 * swizzle<HeadDim>(r0 + pat.row(lane), 2 * kk + pat.lo(lane));
            ASSERT_EQ(got, static_cast<uint32_t>(want))
                << pat.name << " head_dim " << HeadDim << " base " << base << " row0 " << r0
                << " lane " << lane << " kk " << kk;
            // The K and V reads add the 16-row block after the XOR.
            const uint32_t got_after = ((lane_base ^ (kk << 5)) + r0 * kRowBytes) - base;
            ASSERT_EQ(got_after, static_cast<uint32_t>(want)) << pat.name << " (block after)";
          }
        }
      }
    }
  }
}

TEST(RunCuda, LdmatrixLaneAddressesAreTheSwizzledChunks) {
  check_lane_addresses<64>();
  check_lane_addresses<128>();
  check_lane_addresses<256>();
}

// The split tiles of the wgmma pass (wgmma.cuh): every (row, chunk) of a [rows][128] tile gets
// its own 16-byte slot; chunk c of row r lies in half c / 8, row r of that half (128 bytes at
// r * 128), at chunk (c % 8) ^ (r % 8): the 128-byte swizzle the descriptors declare.
TEST(RunCuda, SplitTilesAreTheHardwareSwizzle) {
  for (const int rows : {64, 128}) {
    std::vector<int> seen(static_cast<size_t>(rows) * 128 / 8, 0);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < 16; ++c) {
        const int off = swizzle_split(r, c, rows);
        ASSERT_EQ(off % 8, 0);
        const int byte = off * 2;
        const int half = c / 8;
        EXPECT_EQ(byte / (rows * 128), half) << "row " << r << " chunk " << c;
        EXPECT_EQ(byte % (rows * 128) / 128, r) << "row " << r << " chunk " << c;
        EXPECT_EQ(byte % 128 / 16, (c % 8) ^ (r % 8)) << "row " << r << " chunk " << c;
        ++seen[static_cast<size_t>(off / 8)];
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

// Every policy, deterministic or not, on random batches (page sizes 1..256, GQA 1/4/8,
// head_dim 64/128/256, prefix forests, mixed prefill/decode): GPU vs reference and vs CPU.
TEST(RunCuda, EveryPolicyMatchesCpuAndReferenceOnRandomBatches) {
  SKIP_WITHOUT_DEVICE();
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed, gpu_options());
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    const int ctas = kCtaCounts[seed % 4];
    for (Policy policy : kPolicies) {
      for (bool deterministic : {false, true}) {
        SCOPED_TRACE(std::string("policy ") + std::string(policy_name(policy)) +
                     (deterministic ? " deterministic" : "") + " ctas " + std::to_string(ctas));
        const std::vector<float> gpu = plan_and_run_gpu(data, policy, deterministic, ctas);
        expect_matches(data.layout, gpu, *ref, "gpu vs reference");
        // CPU executor on the same plan, as the second oracle.
        PlanOptions options;
        options.policy = policy;
        options.deterministic = deterministic;
        const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, options);
        ASSERT_TRUE(plan.ok());
        std::vector<float> cpu(data.layout.q_elements());
        ASSERT_TRUE(run_cpu(*plan, data.layout, data.tensors(), cpu).ok());
        const std::vector<double> cpu_d(cpu.begin(), cpu.end());
        expect_matches(data.layout, gpu, cpu_d, "gpu vs cpu executor");
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// Every policy's plan, deterministic or not, on `ctas` queues against the reference.
void expect_policies_match(const BatchData& data, int ctas, const char* what) {
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (Policy policy : kPolicies) {
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE(std::string(policy_name(policy)) + (deterministic ? " deterministic" : "") +
                   " ctas " + std::to_string(ctas));
      expect_matches(data.layout, plan_and_run_gpu(data, policy, deterministic, ctas), *ref, what);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A float8 KV cache (DeviceBatch::kv_fp8): the pages hold e4m3 bytes, converted exactly in
// each stage, so the tolerance is the 16-bit one against a reference on the same bytes. Random
// batches (every policy, the CPU executor as the second oracle), then shapes that reach each
// pass: 16/32-row decode and prefill passes at head_dim 64/128/256, the wgmma 64- and 128-row
// passes, quad tickets, plans with wide items (run on the persistent kernel: the wide kernel
// has no float8 variant), page sizes 1, 3 and 16.
TEST(RunCuda, Fp8KvEveryPolicyMatchesCpuAndReference) {
  SKIP_WITHOUT_DEVICE();
  testing::RandomBatchOptions fp8 = gpu_options();
  fp8.kv_fp8 = true;
  for (uint64_t seed = 600; seed < 616; ++seed) {
    const BatchSpec spec = testing::random_batch_spec(seed, fp8);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(spec));
    const BatchData data = build(spec);
    ASSERT_TRUE(data.layout.kv_fp8);
    const int ctas = kCtaCounts[seed % 4];
    expect_policies_match(data, ctas, "float8 KV vs reference");
    if (::testing::Test::HasFatalFailure()) return;
    const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, {});
    ASSERT_TRUE(plan.ok());
    std::vector<float> cpu(data.layout.q_elements());
    ASSERT_TRUE(run_cpu(*plan, data.layout, data.tensors(), cpu).ok());
    expect_matches(data.layout, plan_and_run_gpu(data, Policy::kBalanced, false, ctas),
                   std::vector<double>(cpu.begin(), cpu.end()), "float8 KV vs cpu executor");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(RunCuda, Fp8KvEveryPassShape) {
  SKIP_WITHOUT_DEVICE();
  struct Case {
    int kv, group, head_dim, page_size;
    DType dtype;
  };
  for (const Case& c : {Case{2, 4, 128, 16, DType::kBF16}, Case{2, 8, 128, 3, DType::kF16},
                        Case{8, 4, 128, 16, DType::kBF16}, Case{4, 2, 64, 1, DType::kF16},
                        Case{4, 4, 256, 16, DType::kBF16}}) {
    BatchSpec spec;
    spec.num_kv_heads = c.kv;
    spec.num_qo_heads = c.kv * c.group;
    spec.head_dim = c.head_dim;
    spec.page_size = c.page_size;
    spec.dtype = c.dtype;
    spec.kv_fp8 = true;
    spec.seed = 41 + static_cast<uint64_t>(c.head_dim + c.group);
    spec.prefixes = {{"p", 48 * c.page_size, ""}};
    // prefill filling 128-row passes, a chunk over cached keys, short prefills, decode rows
    // over the prefix (quad tickets where the heads allow) and alone; at head_dim 128 a
    // 256 x 2048 request (wide items).
    spec.requests = {{200, 200, ""}, {33, 500, ""}, {7, 71, ""}, {1, 1, ""}};
    if (c.head_dim == 128) spec.requests.push_back({256, 2048, ""});
    for (int i = 0; i < 24; ++i) {
      spec.requests.push_back({1, 48 * c.page_size + 1 + (i * 37) % 300, "p"});
      if (i % 3 == 0) spec.requests.push_back({1, 1 + (i * 53) % 128, ""});
    }
    SCOPED_TRACE(to_json(spec));
    const BatchData data = build(spec);
    for (int ctas : {3, 132}) {
      expect_policies_match(data, ctas, "float8 KV pass");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Float8 KV at head_dim 128 has two kernel variants (launch_persistent): plans whose passes all
// take <= 64 rows (decode) run the one without 128-row passes, the others and every
// deterministic plan the one with them. Workspace::max_pass_rows selects; both give the
// reference's results on a decode-only batch.
TEST(RunCuda, Fp8KvDecodePlansTakeTheVariantWithoutWidePasses) {
  SKIP_WITHOUT_DEVICE();
  BatchSpec spec;
  spec.num_kv_heads = 2;
  spec.num_qo_heads = 8;
  spec.head_dim = 128;
  spec.page_size = 16;
  spec.dtype = DType::kBF16;
  spec.kv_fp8 = true;
  spec.seed = 77;
  spec.prefixes = {{"p", 256, ""}};
  for (int i = 0; i < 40; ++i) {
    spec.requests.push_back({1, 257 + (i * 97) % 900, i % 2 == 0 ? "p" : ""});
  }
  const BatchData decode = build(spec);
  spec.requests.push_back({300, 300, ""});  // a prefill: 1200 folded rows
  const BatchData mixed = build(spec);
  auto widest = [](const BatchData& data, Policy policy, bool deterministic) {
    PlanOptions options;
    options.policy = policy;
    options.deterministic = deterministic;
    const Result<Plan> plan = make_plan(data.layout, DeviceShape{16}, options);
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    Result<Workspace> ws = Workspace::create(capacity_for(data.layout, 16), heads_of(data.layout));
    EXPECT_TRUE(ws.ok()) << ws.status().to_string();
    if (!plan.ok() || !ws.ok()) return -1;
    EXPECT_EQ(ws->max_pass_rows(), 0);
    const Status s = ws->upload(*plan, nullptr);
    EXPECT_TRUE(s.ok()) << s.to_string();
    int expected = deterministic ? 128 : 0;  // the item's folded rows up to its tile_q
    for (const WorkItem& it : plan->items) {
      expected = std::max(expected, std::min(it.num_rows() * 4, static_cast<int>(it.tile.tile_q)));
    }
    EXPECT_EQ(ws->max_pass_rows(), std::min(expected, 128));
    return ws->max_pass_rows();
  };
  for (Policy policy : kPolicies) {
    SCOPED_TRACE(policy_name(policy));
    const int d = widest(decode, policy, false);
    EXPECT_GE(d, 1);
    // decode rows alone fold into 4 rows; the prefix policy's shared items hold many requests'
    if (policy != Policy::kPrefix) EXPECT_LE(d, 64);
    EXPECT_EQ(widest(decode, policy, true), 128);
    EXPECT_EQ(widest(mixed, policy, false), 128);
  }
  for (int ctas : {5, 132}) {
    expect_policies_match(decode, ctas, "float8 KV decode");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// k_scale and v_scale: out = v_scale * softmax(sm_scale * k_scale * q.k) v, the reference's
// attention with sm_scale * k_scale, times v_scale.
TEST(RunCuda, Fp8KvScalesFoldIntoTheSoftmaxAndTheOutput) {
  SKIP_WITHOUT_DEVICE();
  testing::RandomBatchOptions fp8 = gpu_options();
  fp8.kv_fp8 = true;
  const BatchData data = build(testing::random_batch_spec(620, fp8));
  const float k_scale = 0.375f, v_scale = 3.0f;
  AttentionTensors scaled = data.tensors();
  scaled.sm_scale *= k_scale;
  Result<std::vector<double>> ref = reference_attention(data.layout, scaled);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (double& x : *ref) x *= v_scale;
  const Result<Plan> plan = make_plan(data.layout, DeviceShape{32}, {});
  ASSERT_TRUE(plan.ok());
  Result<Workspace> ws = Workspace::create(capacity_for(data.layout, 32), heads_of(data.layout));
  ASSERT_TRUE(ws.ok());
  GpuBatch gpu;
  ASSERT_TRUE(gpu.assign(data).ok());
  ASSERT_TRUE(ws->upload(*plan, nullptr).ok());
  ASSERT_TRUE(gpu.poison_output(nullptr).ok());
  DeviceBatch view = gpu.view;
  view.k_scale = k_scale;
  view.v_scale = v_scale;
  ASSERT_TRUE(run_cuda(*ws, view, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Result<std::vector<float>> out = gpu.read_output(data.layout);
  ASSERT_TRUE(out.ok());
  expect_matches(data.layout, *out, *ref, "scaled float8 KV");
}

// Over float8 KV a bf16 q tile is computed as f16 times 2^-6 (persistent_kernel.cuh
// convert_q): q far past f16's range (the N(0, 1) draws times 2^17, most above 65504) with
// sm_scale times 2^-17, so the logits are those of the unscaled batch, stays finite and exact.
TEST(RunCuda, Fp8KvBf16QueriesPastTheF16Range) {
  SKIP_WITHOUT_DEVICE();
  testing::RandomBatchOptions fp8 = gpu_options();
  fp8.kv_fp8 = true;
  BatchSpec spec = testing::random_batch_spec(621, fp8);
  spec.dtype = DType::kBF16;
  BatchData data = build(spec);
  float max_q = 0.0f;
  for (size_t i = 0; i + 2 <= data.q.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &data.q[i], 2);
    const float x = std::ldexp(bf16_to_float(h), 17);
    max_q = std::max(max_q, std::fabs(x));
    h = float_to_bf16(x);
    std::memcpy(&data.q[i], &h, 2);
  }
  ASSERT_GT(max_q, 65504.0f * 4);
  data.sm_scale = std::ldexp(data.sm_scale, -17);
  for (int ctas : {7, 132}) {
    expect_policies_match(data, ctas, "float8 KV, q past f16's range");
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Edge shapes the random draw reaches rarely: page sizes 1, 3, 256, head_dim 256, a long
// prefill with a chunked tail, a 2-page shared prefix.
TEST(RunCuda, EdgeShapes) {
  SKIP_WITHOUT_DEVICE();
  struct Case {
    int page_size, head_dim, qo, kv;
    DType dtype;
  };
  const Case cases[] = {{1, 64, 8, 8, DType::kBF16},
                        {3, 128, 4, 1, DType::kF16},
                        {256, 256, 8, 2, DType::kBF16},
                        {16, 256, 16, 2, DType::kF16}};
  for (const Case& c : cases) {
    BatchSpec spec;
    spec.num_qo_heads = c.qo;
    spec.num_kv_heads = c.kv;
    spec.head_dim = c.head_dim;
    spec.page_size = c.page_size;
    spec.dtype = c.dtype;
    spec.seed = 11;
    spec.prefixes = {{"p", 2 * c.page_size, ""}};
    spec.requests = {{1, 700, "p"},
                     {150, 300, ""},
                     {37, 37 + 2 * c.page_size, "p"},
                     {1, 1, ""},
                     {1, 2 * c.page_size + 1, "p"}};
    SCOPED_TRACE(to_json(spec));
    const BatchData data = build(spec);
    const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    for (Policy policy : kPolicies) {
      SCOPED_TRACE(std::string(policy_name(policy)));
      expect_matches(data.layout, plan_and_run_gpu(data, policy, false, 5), *ref, "edge");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Quad tickets (plan_buffer.h is_quad_item): short single-row items run four KV heads per warp
// group, two groups per ticket. KV heads 8 (one ticket of two groups per item), 4 (one group)
// and 12 (two groups, then one), GQA groups 4, 2 and 1, head_dim 128 / 64 / 256, page sizes 16
// and 3, 1..128 keys (partial stages; a shared prefix's leaves write partial states, the other
// requests' items their final rows). Each plan must hold quad items, or the test would not
// reach the quad pass. The last grid / 2 quad items take a ticket per four heads: on the grid
// of kv x kv CTAs that is every quad item, on the grid of kv CTAs only some (8 and 12 heads).
TEST(RunCuda, QuadTicketsMatchTheReference) {
  struct Case {
    int kv, group, head_dim, page_size;
  };
  for (const Case& c : {Case{8, 4, 128, 16}, Case{4, 2, 64, 3}, Case{12, 1, 256, 16}}) {
    BatchSpec spec;
    spec.num_qo_heads = c.kv * c.group;
    spec.num_kv_heads = c.kv;
    spec.head_dim = c.head_dim;
    spec.page_size = c.page_size;
    spec.dtype = DType::kBF16;
    spec.seed = 23;
    const int prefix_len = 4 * c.page_size;
    spec.prefixes = {{"p", prefix_len, ""}};
    for (int i = 0; i < 24; ++i) {
      if (i % 2 == 0) {
        spec.requests.push_back({1, prefix_len + 1 + (i * 37) % 127, "p"});
      } else {
        spec.requests.push_back({1, 1 + (i * 53) % 128, ""});
      }
    }
    SCOPED_TRACE(to_json(spec));
    const BatchData data = build(spec);
    const Result<std::vector<double>> ref =
        has_device() ? reference_attention(data.layout, data.tensors())
                     : Result<std::vector<double>>(std::vector<double>{});
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    for (Policy policy : kPolicies) {
      for (const int ctas : {c.kv, 1}) {
        SCOPED_TRACE(std::string(policy_name(policy)) + " ctas " + std::to_string(ctas));
        PlanOptions options;
        options.policy = policy;
        const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, options);
        ASSERT_TRUE(plan.ok());
        int32_t num_quad = 0;
        buffer_dispatch_order(*plan, nullptr, &num_quad);
        // On the smaller grid (kv CTAs: kv / 2 halved items), some quad items keep whole tickets.
        EXPECT_GE(num_quad, ctas == 1 ? c.kv / 2 + 1 : 4);
        if (!has_device()) continue;  // (the plans are checked; skipped below)
        expect_matches(data.layout, plan_and_run_gpu(data, policy, false, ctas), *ref, "quad");
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
  SKIP_WITHOUT_DEVICE();
}

// The 64- and 128-row passes at head_dim 128 (wgmma on sm_90a, mma.sync in the compute_90
// PTX): both dtypes, GQA groups 4 and 8, prefill chunks that fill a pass and leave it partial,
// causal diagonals inside a 64-key stage, cached keys before a chunk, a shared prefix read by
// more than 128 folded rows. Every policy's plan must contain 64- and 128-row items, or the
// test would not reach both passes.
TEST(RunCuda, FullPassesAtHeadDim128MatchTheReference) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int group : {4, 8}) {
      BatchSpec spec;
      spec.num_kv_heads = 2;
      spec.num_qo_heads = 2 * group;
      spec.head_dim = 128;
      spec.page_size = 16;
      spec.dtype = dtype;
      spec.seed = 31 + static_cast<uint64_t>(group);
      spec.prefixes = {{"p", 320, ""}};
      spec.requests = {{200, 200, ""},
                       {33, 500, ""},
                       {130, 900, ""},
                       {7, 71, ""},
                       {64 / group, 64 / group, ""},
                       {48 / group, 400, ""}};
      for (int i = 0; i < 40; ++i) spec.requests.push_back({1, 321 + i, "p"});
      SCOPED_TRACE(to_json(spec));
      const BatchData data = build(spec);
      for (Policy policy : kPolicies) {
        PlanOptions options;
        options.policy = policy;
        const Result<Plan> plan = make_plan(data.layout, DeviceShape{7}, options);
        ASSERT_TRUE(plan.ok()) << plan.status().to_string();
        for (const int tile_q : {64, 128}) {
          EXPECT_TRUE(std::any_of(plan->items.begin(), plan->items.end(),
                                  [&](const WorkItem& w) { return w.tile.tile_q == tile_q; }))
              << policy_name(policy) << " has no item of tile_q " << tile_q;
        }
      }
      SKIP_WITHOUT_DEVICE();
      const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
      ASSERT_TRUE(ref.ok()) << ref.status().to_string();
      for (Policy policy : kPolicies) {
        for (bool deterministic : {false, true}) {
          SCOPED_TRACE(std::string(policy_name(policy)) + (deterministic ? " deterministic" : ""));
          expect_matches(data.layout, plan_and_run_gpu(data, policy, deterministic, 7), *ref,
                         "full pass");
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The merge's threads per pair (kernel_launch.h): the most of a warp, 16-byte and 32-byte
// chunks with which every pair fits in one round of the 264 x 256-thread grid (67,584 threads).
TEST(RunCuda, MergeThreadsPerPairFillOneRound) {
  EXPECT_EQ(merge_threads_per_pair(128, 1), 32);
  EXPECT_EQ(merge_threads_per_pair(128, 2112), 32);  // 2112 x 32 = 67,584
  EXPECT_EQ(merge_threads_per_pair(128, 2113), 16);
  EXPECT_EQ(merge_threads_per_pair(128, 4224), 16);
  EXPECT_EQ(merge_threads_per_pair(128, 4225), 8);
  EXPECT_EQ(merge_threads_per_pair(128, 8192), 8);    // PAT [1,256]
  EXPECT_EQ(merge_threads_per_pair(128, 100000), 8);  // several rounds at the fewest threads
  EXPECT_EQ(merge_threads_per_pair(64, 2113), 8);
  EXPECT_EQ(merge_threads_per_pair(64, 8448), 8);
  EXPECT_EQ(merge_threads_per_pair(64, 8449), 4);
  EXPECT_EQ(merge_threads_per_pair(256, 2112), 32);
  EXPECT_EQ(merge_threads_per_pair(256, 2113), 16);
  EXPECT_EQ(merge_threads_per_pair(256, 9000), 16);
}

// Merges of more (entry, KV head, qo head) pairs than the grid has warps, at every chunk width
// and in one or two rounds: decode rows under a shared prefix, so every request's row is one
// merge entry and a plan of R requests merges R x 8 pairs; bf16 and f16, every element checked
// against the reference.
TEST(RunCuda, LargeMergesMatchTheReference) {
  struct Case {
    int head_dim, requests, threads_per_pair;
  };
  // 2560 / 5120 / 8800 pairs; 8800 x 8 threads (head_dim 128) and 5120 x 16 (256) take two rounds.
  for (const Case c : {Case{64, 320, 8}, Case{64, 1100, 4}, Case{128, 320, 16}, Case{128, 640, 8},
                       Case{128, 1100, 8}, Case{256, 320, 16}, Case{256, 640, 16}}) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      BatchSpec spec;
      spec.num_kv_heads = 2;
      spec.num_qo_heads = 8;
      spec.head_dim = c.head_dim;
      spec.page_size = 16;
      spec.dtype = dtype;
      spec.seed = 71 + static_cast<uint64_t>(c.head_dim + c.requests);
      spec.prefixes = {{"p", 192, ""}};
      for (int i = 0; i < c.requests; ++i) spec.requests.push_back({1, 192 + 9 + i % 41, "p"});
      SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + ", " + std::to_string(c.requests) +
                   " requests, " + std::string(dtype_name(dtype)));
      const BatchData data = build(spec);
      PlanOptions options;
      options.policy = Policy::kPrefix;
      const Result<Plan> plan = make_plan(data.layout, DeviceShape{33}, options);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      const int64_t pairs = int64_t{plan->num_merges()} * spec.num_qo_heads;
      ASSERT_EQ(pairs, int64_t{c.requests} * spec.num_qo_heads) << "one merge entry per request";
      ASSERT_EQ(merge_threads_per_pair(c.head_dim, pairs), c.threads_per_pair);
      if (!has_device()) continue;  // (the plans are checked; skipped below)
      const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
      ASSERT_TRUE(ref.ok()) << ref.status().to_string();
      expect_matches(data.layout, plan_and_run_gpu(data, Policy::kPrefix, false, 33), *ref,
                     "large merge");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  SKIP_WITHOUT_DEVICE();
}

// Runs `spec` under each policy and CTA count on the GPU against the reference; for the policies
// in `two_kernels` the plan must put the wide kernel to work beside the persistent kernel
// (plan_buffer.h buffer_dispatch_order: some but not all items are the wide kernel's).
void expect_wide_plans_match(const BatchSpec& spec, std::initializer_list<Policy> policies,
                             std::initializer_list<Policy> two_kernels,
                             std::initializer_list<int> cta_counts) {
  SCOPED_TRACE(to_json(spec));
  const BatchData data = build(spec);
  const Result<std::vector<double>> ref = has_device()
                                              ? reference_attention(data.layout, data.tensors())
                                              : Result<std::vector<double>>(std::vector<double>{});
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (Policy policy : policies) {
    for (int ctas : cta_counts) {
      SCOPED_TRACE(std::string(policy_name(policy)) + " ctas " + std::to_string(ctas));
      PlanOptions options;
      options.policy = policy;
      const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, options);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      int32_t wide = 0;
      buffer_dispatch_order(*plan, &wide);
      if (std::find(two_kernels.begin(), two_kernels.end(), policy) != two_kernels.end()) {
        ASSERT_GT(wide, 0) << "the wide kernel has no item";
        ASSERT_LT(wide, static_cast<int32_t>(plan->items.size())) << "no narrow item";
      }
      if (!has_device()) continue;
      expect_matches(data.layout, plan_and_run_gpu(data, policy, false, ctas), *ref,
                     "plan with wide items");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Plans whose wide items (plan_buffer.h is_wide_item: 128-row passes at head_dim 128) carry
// most of the cost run them on the wide kernel (wide_kernel.cuh) before the persistent kernel
// runs the rest, on an sm_90 device unless PACKSERVE_WIDE_KERNEL=0: prefill tiles of 32 rows x
// group 4 (causal at the diagonal, chunked KV), a 256-row request over 4096 keys (the shape of
// a shared-prefix root), decode rows; then, for the prefix policy, a prefix of 48 tokens under
// 20 decode rows (a wide root, narrow leaves) beside the 256-row request; page sizes 16 and 3.
// The wide phase runs on 3 CTA queues; on 132 the wide items spread so thin that the phase
// would save less than the narrow items then take alone (plan_buffer.h runs_wide_phase), so
// those plans run as one kernel. Every element matches the reference.
TEST(RunCuda, PlansWithWideItemsMatchTheReference) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int page_size : {16, 3}) {
      BatchSpec spec;
      spec.num_kv_heads = 2;
      spec.num_qo_heads = 8;
      spec.head_dim = 128;
      spec.page_size = page_size;
      spec.dtype = dtype;
      spec.seed = 77 + static_cast<uint64_t>(page_size);
      spec.requests = {{256, 4096, ""}, {96, 96, ""}, {64, 1000, ""}, {32, 33, ""},
                       {1, 300, ""},    {1, 17, ""},  {1, 1, ""}};
      expect_wide_plans_match(spec, {Policy::kNaive, Policy::kBalanced, Policy::kPrefix},
                              {Policy::kNaive, Policy::kBalanced}, {3});
      if (::testing::Test::HasFatalFailure()) return;
      expect_wide_plans_match(spec, {Policy::kNaive, Policy::kBalanced, Policy::kPrefix}, {},
                              {132});
      if (::testing::Test::HasFatalFailure()) return;
      spec.prefixes = {{"p", 48, ""}};  // a multiple of both page sizes
      spec.requests = {{256, 4096, ""}};
      for (int i = 0; i < 20; ++i) spec.requests.push_back({1, 49 + i, "p"});
      expect_wide_plans_match(spec, {Policy::kPrefix}, {Policy::kPrefix}, {3});
      if (::testing::Test::HasFatalFailure()) return;
      expect_wide_plans_match(spec, {Policy::kPrefix}, {}, {132});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A small batch of the same kinds for compute-sanitizer's racecheck (gpu-check.sh).
TEST(RunCuda, WideKernelSmallBatch) {
  BatchSpec spec;
  spec.num_kv_heads = 2;
  spec.num_qo_heads = 8;
  spec.head_dim = 128;
  spec.page_size = 16;
  spec.dtype = DType::kBF16;
  spec.seed = 5;
  spec.requests = {{96, 96, ""}, {64, 300, ""}, {1, 40, ""}};
  expect_wide_plans_match(spec, {Policy::kBalanced}, {Policy::kBalanced}, {3});
}

// One CTA queue per KV head walks every item in order, so one CTA runs passes of equal and of
// different shapes back to back: a shared prefix of 40 decode rows (160 folded rows: two
// passes of one item), decode items of 1, 2 and more stages, a 150-row prefill, in each
// policy's order.
TEST(RunCuda, ChainedPassesInOneQueueMatchTheReference) {
  SKIP_WITHOUT_DEVICE();
  BatchSpec spec;
  spec.num_qo_heads = 8;
  spec.num_kv_heads = 2;
  spec.head_dim = 128;
  spec.page_size = 16;
  spec.dtype = DType::kBF16;
  spec.seed = 23;
  spec.prefixes = {{"p", 608, ""}};
  for (int i = 0; i < 40; ++i) spec.requests.push_back({1, 608 + 1 + 7 * i, "p"});
  for (int kv : {1, 64, 65, 128, 129, 1000, 3000}) spec.requests.push_back({1, kv, ""});
  spec.requests.push_back({150, 470, ""});
  const BatchData data = build(spec);
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  for (Policy policy : kPolicies) {
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE(std::string(policy_name(policy)) + (deterministic ? " deterministic" : ""));
      expect_matches(data.layout, plan_and_run_gpu(data, policy, deterministic, 2), *ref, "chain");
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Deterministic plans: a request's output bits are the same in any batch, and beside requests
// over its very pages with other numbers of rows (testing::with_sharers: the prefix policy
// puts their rows into the same chunks' items, with the tile_q of their own class).
TEST(RunCuda, DeterministicPlansGiveBatchIndependentBits) {
  SKIP_WITHOUT_DEVICE();
  for (uint64_t seed = 500; seed < 508; ++seed) {
    testing::RandomBatchOptions small = gpu_options();
    small.max_requests = 3;
    small.kv_fp8 = seed % 2 == 1;  // (and a float8 KV cache)
    const BatchSpec alone_spec = testing::random_batch_spec(seed, small);
    SCOPED_TRACE("seed " + std::to_string(seed) + " spec " + to_json(alone_spec));
    const BatchData alone = build(alone_spec);
    testing::RandomBatchOptions same_shape = gpu_options();
    same_shape.num_qo_heads = alone_spec.num_qo_heads;
    same_shape.num_kv_heads = alone_spec.num_kv_heads;
    same_shape.head_dim = alone_spec.head_dim;
    same_shape.page_size = alone_spec.page_size;
    same_shape.dtypes = {alone_spec.dtype};
    same_shape.kv_fp8 = alone_spec.kv_fp8;
    const int ctas = kCtaCounts[seed % 4];
    const size_t alone_floats = alone.layout.q_elements();
    for (Policy policy : kPolicies) {
      SCOPED_TRACE(std::string(policy_name(policy)));
      const std::vector<float> a = plan_and_run_gpu(alone, policy, true, ctas);
      ASSERT_EQ(a.size(), alone_floats);
      for (uint64_t other_seed : {seed + 1000, seed + 2000}) {
        const BatchData others = build(testing::random_batch_spec(other_seed, same_shape));
        const int at = static_cast<int>(other_seed % (others.layout.batch_size() + 1));
        Result<BatchData> mixed = testing::insert_batch(
            others, other_seed == seed + 1000 ? alone : testing::with_sharers(alone), at);
        ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
        const std::vector<float> b = plan_and_run_gpu(*mixed, policy, true, ctas);
        const size_t offset = static_cast<size_t>(mixed->layout.qo_indptr[at]) *
                              alone.layout.num_qo_heads * alone.layout.head_dim;
        ASSERT_GE(b.size(), offset + alone_floats);
        ASSERT_EQ(std::memcmp(a.data(), b.data() + offset, alone_floats * 4), 0)
            << "request bits differ when inserted at request " << at << " of batch seed "
            << other_seed;
      }
    }
  }
}

BatchSpec decode_spec(uint64_t seed, int batch, int base_len) {
  BatchSpec spec;
  spec.num_qo_heads = 32;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.page_size = 16;
  spec.dtype = DType::kBF16;
  spec.seed = seed;
  for (int i = 0; i < batch; ++i) spec.requests.push_back({1, base_len + 97 * i, ""});
  return spec;
}

// Back-to-back runs on one stream, no synchronisation between them: each run's attention
// kernel is a programmatic dependent of the previous run's merge kernel and may start during
// its tail, so it must not write the workspace's partial states before that merge has read
// them, nor claim a ticket before that merge has reset the claim counter (a counter left at
// the last run's value would skip this run's items: NaN rows). Three batches of the same
// layout and different values share one plan (with merged rows) and one workspace; each output
// is written once and must match its own reference. The window of the partial-state hazard is
// short (a build without the waits passed this test 20 times out of 20 on an H100); the next
// test pins the wait itself.
TEST(RunCuda, BackToBackRunsOnOneStreamKeepTheirOrder) {
  SKIP_WITHOUT_DEVICE();
  const int ctas = 128;
  std::vector<BatchData> data;
  for (uint64_t seed = 11; seed < 14; ++seed) data.push_back(build(decode_spec(seed, 8, 900)));
  const Result<Plan> plan = make_plan(data[0].layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_GT(plan->num_merges(), 0);
  Result<Workspace> ws =
      Workspace::create(capacity_for(data[0].layout, ctas), heads_of(data[0].layout));
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  std::vector<GpuBatch> gpu(data.size());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(ws->upload(*plan, stream).ok());
  for (size_t i = 0; i < data.size(); ++i) {
    ASSERT_TRUE(gpu[i].assign(data[i]).ok());
    ASSERT_TRUE(gpu[i].poison_output(stream).ok());
  }
  for (GpuBatch& g : gpu) {
    const Status s = run_cuda(*ws, g.view, stream);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t i = 0; i < data.size(); ++i) {
    SCOPED_TRACE("batch " + std::to_string(i));
    const Result<std::vector<float>> out = gpu[i].read_output(data[i].layout);
    ASSERT_TRUE(out.ok());
    const Result<std::vector<double>> ref = reference_attention(data[i].layout, data[i].tensors());
    ASSERT_TRUE(ref.ok());
    expect_matches(data[i].layout, *out, *ref, "back-to-back runs");
  }
  cudaStreamDestroy(stream);
}

// Test-only kernel standing for the RoPE or KV-append kernel of a model step: it lets the next
// launch be scheduled at once, then, after `cycles` clock cycles, copies `bytes` (a multiple
// of 16) from `src` to `dst`.
__global__ void copy_late(void* dst, const void* src, size_t bytes, long long cycles) {
  allow_dependent_launch();
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (size_t i = threadIdx.x * 16; i < bytes; i += blockDim.x * 16) {
    *reinterpret_cast<uint4*>(static_cast<char*>(dst) + i) =
        *reinterpret_cast<const uint4*>(static_cast<const char*>(src) + i);
  }
}

// The attention kernel starts during the tail of the kernel before it (a programmatic
// dependent launch) and must wait for that grid before it reads q: here q holds NaN until a
// kernel launched just before run_cuda writes it, about a millisecond after run_cuda's CTAs
// could have started.
TEST(RunCuda, AttentionWaitsForTheKernelBeforeIt) {
  SKIP_WITHOUT_DEVICE();
  const int ctas = 128;
  const BatchData data = build(decode_spec(21, 8, 900));
  const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_GT(plan->num_merges(), 0);
  Result<Workspace> ws = Workspace::create(capacity_for(data.layout, ctas), heads_of(data.layout));
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  GpuBatch gpu;
  ASSERT_TRUE(gpu.assign(data).ok());
  DeviceBuffer q_late;
  ASSERT_TRUE(q_late.upload(data.q.data(), data.q.size()).ok());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(ws->upload(*plan, stream).ok());
  ASSERT_EQ(cudaMemsetAsync(gpu.q.get(), 0xFF, data.q.size(), stream), cudaSuccess);
  ASSERT_TRUE(gpu.poison_output(stream).ok());
  copy_late<<<1, 256, 0, stream>>>(gpu.q.get(), q_late.get(), data.q.size(), 2'000'000);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const Status s = run_cuda(*ws, gpu.view, stream);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const Result<std::vector<float>> out = gpu.read_output(data.layout);
  ASSERT_TRUE(out.ok());
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok());
  expect_matches(data.layout, *out, *ref, "q written by the kernel before run_cuda");
  cudaStreamDestroy(stream);
}

// A decode step captured in a CUDA graph, replayed with a different plan of the same capacity
// uploaded into the same workspace and a different batch copied into the same device arrays.
// 128 queues split the requests, so both plans merge rows (the merge kernel is part of the
// graph); each plan is replayed twice.
// Captures run_cuda over the batch `gpu` holds and the plan `ws` holds into a graph, then for
// each replay assigns its batch into the captured arrays (they must fit), uploads its plan,
// replays the graph on poisoned outputs and checks every output against the reference.
struct Replay {
  const BatchData* data;
  const Plan* plan;
  const char* name;
};
void capture_then_replay(Workspace& ws, GpuBatch& gpu, cudaStream_t stream,
                         std::initializer_list<Replay> replays) {
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = run_cuda(ws, gpu.view, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const Replay& r : replays) {
    SCOPED_TRACE(r.name);
    const void* q_before = gpu.view.q;
    const void* pages_before = gpu.view.kv_page_indices;
    ASSERT_TRUE(gpu.assign(*r.data).ok());
    ASSERT_EQ(gpu.view.q, q_before) << "each batch must fit the arrays the graph captured";
    ASSERT_EQ(gpu.view.kv_page_indices, pages_before);
    ASSERT_TRUE(ws.upload(*r.plan, stream).ok());
    ASSERT_TRUE(gpu.poison_output(stream).ok());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const Result<std::vector<float>> out = gpu.read_output(r.data->layout);
    ASSERT_TRUE(out.ok());
    const Result<std::vector<double>> ref = reference_attention(r.data->layout, r.data->tensors());
    ASSERT_TRUE(ref.ok());
    expect_matches(r.data->layout, *out, *ref, "graph replay");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// The float8 variant a graph captured keeps running whatever plan is uploaded later: a graph
// captured over a decode plan (the 64-row variant) replays a plan with 128-row passes, and
// one captured over that plan replays the decode plan, both with the reference's results.
TEST(RunCuda, Fp8KvGraphReplayAcrossKernelVariants) {
  SKIP_WITHOUT_DEVICE();
  BatchSpec spec = decode_spec(5, 0, 0);
  spec.kv_fp8 = true;
  for (int i = 0; i < 160; ++i) spec.requests.push_back({1, 64 + (i * 37) % 200, ""});
  const BatchData decode = build(spec);
  spec.requests.resize(40);
  spec.requests.push_back({100, 100, ""});  // 400 folded rows: 128-row passes
  const BatchData mixed = build(spec);
  const int ctas = 64;
  const Result<Plan> decode_plan = make_plan(decode.layout, DeviceShape{ctas}, {});
  const Result<Plan> mixed_plan = make_plan(mixed.layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(decode_plan.ok() && mixed_plan.ok());
  for (const bool capture_decode : {true, false}) {
    SCOPED_TRACE(capture_decode ? "captured over the decode plan" : "captured over the mixed plan");
    Result<Workspace> ws =
        Workspace::create(capacity_for(decode.layout, ctas), heads_of(decode.layout));
    ASSERT_TRUE(ws.ok()) << ws.status().to_string();
    GpuBatch gpu;
    ASSERT_TRUE(gpu.assign(decode).ok());  // the larger batch: its arrays hold the other
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_TRUE(gpu.assign(capture_decode ? decode : mixed).ok());
    ASSERT_TRUE(ws->upload(capture_decode ? *decode_plan : *mixed_plan, stream).ok());
    EXPECT_EQ(ws->max_pass_rows() <= 64, capture_decode);
    const Replay d{&decode, &*decode_plan, "decode plan"}, m{&mixed, &*mixed_plan, "mixed plan"};
    capture_then_replay(*ws, gpu, stream, {d, m, d, m});
    cudaStreamDestroy(stream);
  }
}

TEST(RunCuda, GraphReplayRunsANewPlanUploadedIntoTheSameWorkspace) {
  SKIP_WITHOUT_DEVICE();
  const BatchData first = build(decode_spec(1, 8, 900));
  const BatchData second = build(decode_spec(2, 8, 300));  // same batch size, other lengths
  const int ctas = 128;
  PlanCapacity cap = capacity_for(first.layout, ctas);
  Result<Workspace> ws = Workspace::create(cap, heads_of(first.layout));
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  const Result<Plan> plan1 = make_plan(first.layout, DeviceShape{ctas}, {});
  const Result<Plan> plan2 = make_plan(second.layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(plan1.ok() && plan2.ok());
  ASSERT_GT(plan1->num_merges(), 0);
  ASSERT_GT(plan2->num_merges(), 0);
  GpuBatch gpu;
  ASSERT_TRUE(gpu.assign(first).ok());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(ws->upload(*plan1, stream).ok());
  const Replay r1{&first, &*plan1, "first plan"}, r2{&second, &*plan2, "second plan"};
  capture_then_replay(*ws, gpu, stream, {r1, r2, r1, r2});
  cudaStreamDestroy(stream);
}

// A graph captured with the wide kernel's launch (a plan whose wide items carry the cost) replays
// a plan without wide items, and one captured without it replays a plan with them: the wide
// kernel takes only the wide tickets there are, the persistent kernel the rest (docs/gpu.md,
// "Wide-kernel items"). Two batches of the same shape (2 requests, 257 rows, 272 pages) on 3
// CTA queues: a 256-row prefill over 4096 keys beside a 256-key decode row (the wide phase
// runs: plan_buffer.h runs_wide_phase), and a 4096-key decode row beside a 256-row prefill over
// 256 keys (it does not).
TEST(RunCuda, GraphReplayMixesPlansWithAndWithoutWideItems) {
  auto spec_of = [](uint64_t seed, RequestSpec a, RequestSpec b) {
    BatchSpec spec = decode_spec(seed, 0, 0);
    spec.requests = {a, b};
    return spec;
  };
  const BatchData wide = build(spec_of(11, {256, 4096, ""}, {1, 256, ""}));
  const BatchData narrow = build(spec_of(12, {1, 4096, ""}, {256, 256, ""}));
  const int ctas = 3;
  const Result<Plan> plan_wide = make_plan(wide.layout, DeviceShape{ctas}, {});
  const Result<Plan> plan_narrow = make_plan(narrow.layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(plan_wide.ok() && plan_narrow.ok());
  int32_t num_wide = 0;
  buffer_dispatch_order(*plan_wide, &num_wide);
  ASSERT_GT(num_wide, 0);
  buffer_dispatch_order(*plan_narrow, &num_wide);
  ASSERT_EQ(num_wide, 0);
  SKIP_WITHOUT_DEVICE();
  Result<Workspace> ws = Workspace::create(capacity_for(wide.layout, ctas), heads_of(wide.layout));
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const BatchData* captured : {&wide, &narrow}) {
    SCOPED_TRACE(captured == &wide ? "captured with wide items" : "captured without");
    GpuBatch gpu;
    ASSERT_TRUE(gpu.assign(*captured).ok());
    ASSERT_TRUE(ws->upload(captured == &wide ? *plan_wide : *plan_narrow, stream).ok());
    ASSERT_EQ(ws->num_wide_items() > 0, captured == &wide);
    const Replay w{&wide, &*plan_wide, "replayed with wide items"},
        n{&narrow, &*plan_narrow, "replayed without"};
    capture_then_replay(*ws, gpu, stream, {w, n, w, n});
  }
  cudaStreamDestroy(stream);
}

// The kernel timeline (DeviceBatch::timeline): one record per (KV head, item), written by the
// CTA that claimed it (dispatch_order, plan.h), a CTA's items one after the other, each item's
// phases in order; the output is unchanged by recording, and the dispatch counters are back at
// 0 after the launch.
TEST(RunCuda, TimelineRecordsEveryItemOfEveryHead) {
  SKIP_WITHOUT_DEVICE();
  const BatchData data = build(decode_spec(4, 8, 700));
  const int ctas = 16;
  const Result<Plan> plan = make_plan(data.layout, DeviceShape{ctas}, {});
  ASSERT_TRUE(plan.ok());
  Result<Workspace> ws = Workspace::create(capacity_for(data.layout, ctas), heads_of(data.layout));
  ASSERT_TRUE(ws.ok()) << ws.status().to_string();
  ASSERT_TRUE(ws->upload(*plan, nullptr).ok());
  GpuBatch gpu;
  ASSERT_TRUE(gpu.assign(data).ok());
  const size_t items = plan->items.size(), heads = plan->num_kv_heads;
  DeviceBuffer buf;
  ASSERT_TRUE(buf.reserve(items * heads * kTimelineFields * 8).ok());
  ASSERT_EQ(cudaMemset(buf.get(), 0, items * heads * kTimelineFields * 8), cudaSuccess);
  DeviceBatch view = gpu.view;
  view.timeline = static_cast<uint64_t*>(buf.get());
  ASSERT_TRUE(gpu.poison_output(nullptr).ok());
  ASSERT_TRUE(run_cuda(*ws, view, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint64_t> rec(items * heads * kTimelineFields);
  ASSERT_EQ(cudaMemcpy(rec.data(), buf.get(), rec.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const uint64_t grid = static_cast<uint64_t>(plan->grid_ctas());
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> by_block(grid);  // (start, end)
  for (size_t h = 0; h < heads; ++h) {
    for (size_t i = 0; i < items; ++i) {
      const uint64_t* r = rec.data() + (h * items + i) * kTimelineFields;
      SCOPED_TRACE("head " + std::to_string(h) + " item " + std::to_string(i));
      EXPECT_GT(r[0], 0u);    // recorded: the item ran for this head
      EXPECT_LE(r[0], r[1]);  // globaltimer start <= end
      EXPECT_LT(r[2], r[3]);  // clock64 start < end
      EXPECT_LT(r[4], static_cast<uint64_t>(sms));
      ASSERT_LT(r[5], grid);
      by_block[r[5]].push_back({r[0], r[1]});
      // Phases of the first pass, in order (every item of this batch walks some keys).
      EXPECT_LE(r[0], r[kTimelinePositions]);
      EXPECT_LE(r[kTimelinePositions], r[kTimelineFirstStage]);
      EXPECT_LE(r[kTimelineFirstStage], r[kTimelineWalkDone]);
      EXPECT_LE(r[kTimelineWalkDone], r[1]);
    }
  }
  for (auto& runs : by_block) {  // a CTA's items one after the other
    std::sort(runs.begin(), runs.end());
    for (size_t k = 1; k < runs.size(); ++k) EXPECT_LE(runs[k - 1].second, runs[k].first);
  }
  int32_t counter = -1;  // reset for the next launch
  ASSERT_EQ(cudaMemcpy(&counter, ws->dispatch_counters(), sizeof(counter), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(counter, 0);
  const Result<std::vector<float>> out = gpu.read_output(data.layout);
  ASSERT_TRUE(out.ok());
  const Result<std::vector<double>> ref = reference_attention(data.layout, data.tensors());
  ASSERT_TRUE(ref.ok());
  expect_matches(data.layout, *out, *ref, "with timeline");
}

TEST(RunCuda, ErrorsNameTheCause) {
  SKIP_WITHOUT_DEVICE();
  const BatchData data = build(decode_spec(3, 6, 500));
  const HeadConfig heads = heads_of(data.layout);
  // Plan larger than the workspace.
  Result<Workspace> tiny = Workspace::create(PlanCapacity{1, 1, 4, 8}, heads);
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  const Result<Plan> plan = make_plan(data.layout, DeviceShape{4}, {});
  ASSERT_TRUE(plan.ok());
  const Status too_big = tiny->upload(*plan, nullptr);
  EXPECT_EQ(too_big.code(), StatusCode::kResourceExhausted) << too_big.to_string();
  EXPECT_NE(too_big.message().find("larger PlanCapacity"), std::string::npos)
      << too_big.to_string();
  // run before any successful upload.
  GpuBatch gpu;
  ASSERT_TRUE(gpu.assign(data).ok());
  EXPECT_EQ(run_cuda(*tiny, gpu.view, nullptr).code(), StatusCode::kFailedPrecondition);
  // num_ctas mismatch: 32 CTAs over 8 KV heads are 4 queues, the plan (4 CTAs) has 1.
  Result<Workspace> ws = Workspace::create(capacity_for(data.layout, 32), heads);
  ASSERT_TRUE(ws.ok());
  const Status ctas = ws->upload(*plan, nullptr);
  EXPECT_EQ(ctas.code(), StatusCode::kInvalidArgument) << ctas.to_string();
  EXPECT_NE(ctas.message().find("num_ctas"), std::string::npos) << ctas.to_string();
  // Unsupported tile and dtype.
  Plan bad = make_plan(data.layout, DeviceShape{32}, {}).value();
  bad.items[0].tile.tile_q = 48;
  const Status tile = ws->upload(bad, nullptr);
  EXPECT_EQ(tile.code(), StatusCode::kUnimplemented) << tile.to_string();
  EXPECT_NE(tile.message().find("48x"), std::string::npos) << tile.to_string();
  HeadConfig f32 = heads;
  f32.dtype = DType::kF32;
  const Result<Workspace> ws32 = Workspace::create(capacity_for(data.layout, 8), f32);
  EXPECT_EQ(ws32.status().code(), StatusCode::kUnimplemented) << ws32.status().to_string();
  // Bad batch fields.
  DeviceBatch bad_batch = gpu.view;
  bad_batch.page_size = 0;
  ASSERT_TRUE(ws->upload(make_plan(data.layout, DeviceShape{32}, {}).value(), nullptr).ok());
  const Status page = run_cuda(*ws, bad_batch, nullptr);
  EXPECT_EQ(page.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(page.message().find("page_size"), std::string::npos) << page.to_string();
  DeviceBatch no_positions = gpu.view;
  no_positions.q_positions = nullptr;
  const Status positions = run_cuda(*ws, no_positions, nullptr);
  EXPECT_EQ(positions.code(), StatusCode::kInvalidArgument) << positions.to_string();
  // KV scales: only with float8 pages, and finite > 0 there.
  DeviceBatch scaled = gpu.view;
  scaled.v_scale = 2.0f;
  const Status not_fp8 = run_cuda(*ws, scaled, nullptr);
  EXPECT_EQ(not_fp8.code(), StatusCode::kInvalidArgument) << not_fp8.to_string();
  EXPECT_NE(not_fp8.message().find("batch.v_scale = 2.000000: expected 1"), std::string::npos)
      << not_fp8.to_string();
  scaled.kv_fp8 = true;
  scaled.v_scale = 1.0f;
  scaled.k_scale = -1.0f;
  const Status negative = run_cuda(*ws, scaled, nullptr);
  EXPECT_NE(negative.message().find("batch.k_scale = -1.000000: expected a finite value > 0"),
            std::string::npos)
      << negative.to_string();
}

// KV append writes each new row into its (page, slot) and nothing else.
TEST(RunCuda, KvAppendWritesRowsIntoTheirPages) {
  SKIP_WITHOUT_DEVICE();
  const int pages = 5, page_size = 16, heads = 2, dim = 64, rows = 7;
  const size_t row_elems = static_cast<size_t>(heads) * dim;
  std::vector<uint16_t> k_pool(pages * page_size * row_elems, 0x1234);
  std::vector<uint16_t> v_pool = k_pool;
  std::vector<uint16_t> k_new(rows * row_elems), v_new(rows * row_elems);
  for (size_t i = 0; i < k_new.size(); ++i) {
    k_new[i] = static_cast<uint16_t>(i * 7 + 1);
    v_new[i] = static_cast<uint16_t>(i * 5 + 3);
  }
  const std::vector<int32_t> page = {4, 0, 2, 2, 1, 3, 4}, slot = {0, 15, 3, 4, 9, 1, 7};
  DeviceBuffer dk, dv, dkn, dvn, dp, ds;
  ASSERT_TRUE(dk.upload(k_pool.data(), k_pool.size() * 2).ok());
  ASSERT_TRUE(dv.upload(v_pool.data(), v_pool.size() * 2).ok());
  ASSERT_TRUE(dkn.upload(k_new.data(), k_new.size() * 2).ok());
  ASSERT_TRUE(dvn.upload(v_new.data(), v_new.size() * 2).ok());
  ASSERT_TRUE(dp.upload(page.data(), page.size() * 4).ok());
  ASSERT_TRUE(ds.upload(slot.data(), slot.size() * 4).ok());
  KvAppendArgs a;
  a.k_new = dkn.get();
  a.v_new = dvn.get();
  a.page = static_cast<const int32_t*>(dp.get());
  a.slot = static_cast<const int32_t*>(ds.get());
  a.num_rows = rows;
  a.k_pages = dk.get();
  a.v_pages = dv.get();
  a.page_size = page_size;
  a.num_kv_heads = heads;
  a.head_dim = dim;
  a.dtype = DType::kBF16;
  ASSERT_TRUE(kv_append(a, nullptr).ok());
  std::vector<uint16_t> k_out(k_pool.size()), v_out(v_pool.size());
  ASSERT_EQ(cudaMemcpy(k_out.data(), dk.get(), k_out.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(v_out.data(), dv.get(), v_out.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int r = 0; r < rows; ++r) {
    const size_t dst = (static_cast<size_t>(page[r]) * page_size + slot[r]) * row_elems;
    std::memcpy(k_pool.data() + dst, k_new.data() + r * row_elems, row_elems * 2);
    std::memcpy(v_pool.data() + dst, v_new.data() + r * row_elems, row_elems * 2);
  }
  EXPECT_EQ(k_out, k_pool);
  EXPECT_EQ(v_out, v_pool);
  a.num_rows = -1;
  EXPECT_EQ(kv_append(a, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace packserve::attention::cuda
