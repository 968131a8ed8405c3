// ops_cuda_test.cu [label gpu]: each kernel of ops.h, Gemm (gemm.h) and skinny_linear_fp8
// (skinny_gemm.h) against a float64 host reference on the same (bf16-rounded) inputs. Tolerances: a
// bf16 output is one rounding of an f32 value (relative 2^-9) plus f32 arithmetic, so |gpu - ref|
// <= 1e-5 + 2^-7 |ref|; f32 outputs (embed_gather exact, GEMM into f32: sums of <= 512 products)
// 1e-4 of max |ref|. Every test skips without a CUDA device.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>
#include <vector>

#include "packserve/common/argmax.h"
#include "packserve/common/dtype.h"
#include "packserve/common/rng.h"
#include "packserve/common/sample_draw.h"
#include "packserve/common/temperature_sample.h"
#include "packserve/model/cuda/gemm.h"
#include "packserve/model/cuda/ops.h"
#include "packserve/model/cuda/skinny_gemm.h"
#include "packserve/model/forward.h"
#include "packserve/model/ops_cpu.h"

namespace packserve::model::cuda {
namespace {

bool has_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}
#define SKIP_WITHOUT_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

template <typename T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}
template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}
std::vector<uint16_t> random_bf16(size_t n, Rng& rng, double scale = 1.0) {
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = float_to_bf16(static_cast<float>(rng.normal() * scale));
  return v;
}
std::vector<float> random_f32(size_t n, Rng& rng, double mean, double scale) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(mean + rng.normal() * scale);
  return v;
}
void expect_bf16_near(const std::vector<uint16_t>& got, const std::vector<double>& ref,
                      const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = bf16_to_float(got[i]);
    if (!(std::abs(g - ref[i]) <= 1e-5 + std::ldexp(1.0, -7) * std::abs(ref[i])) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << g << ", float64 reference " << ref[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(ModelCudaOps, EmbedGatherIsExact) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(1);
  const int vocab = 50, hidden = 300;
  auto embed = random_bf16(static_cast<size_t>(vocab) * hidden, rng);
  std::vector<int32_t> tok = {3, 49, 0, 3, 17};
  auto* de = to_device(embed);
  auto* dt = to_device(tok);
  float* dx = nullptr;
  ASSERT_EQ(cudaMalloc(&dx, tok.size() * hidden * 4), cudaSuccess);
  ASSERT_TRUE(embed_gather(de, dt, 5, hidden, dx, nullptr).ok());
  auto x = to_host(dx, tok.size() * hidden);
  for (size_t r = 0; r < tok.size(); ++r) {
    for (int j = 0; j < hidden; ++j) {
      ASSERT_EQ(x[r * hidden + j], bf16_to_float(embed[static_cast<size_t>(tok[r]) * hidden + j]));
    }
  }
  cudaFree(de), cudaFree(dt), cudaFree(dx);
}

TEST(ModelCudaOps, RmsNormWithAndWithoutRowIndex) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(2);
  // 64, 300, 4096: the one-pass float4 kernel; 301 (not a multiple of 4) and 10000 (> 8192,
  // more than the registers hold): the two-pass scalar kernel.
  for (int hidden : {64, 300, 301, 4096, 10000}) {
    SCOPED_TRACE(hidden);
    const int rows = 7;
    auto x = random_f32(static_cast<size_t>(rows) * hidden, rng, 0.3, 2.0);
    auto w = random_f32(hidden, rng, 1.0, 0.2);
    const std::vector<int32_t> index = {6, 0, 3};
    auto* dx = to_device(x);
    auto* dw = to_device(w);
    auto* di = to_device(index);
    uint16_t* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(rows) * hidden * 2), cudaSuccess);
    for (bool gather : {false, true}) {
      const int n = gather ? 3 : rows;
      ASSERT_TRUE(rmsnorm(dx, gather ? di : nullptr, n, hidden, dw, 1e-5f, dy, nullptr).ok());
      std::vector<double> ref;
      for (int i = 0; i < n; ++i) {
        const size_t s = gather ? static_cast<size_t>(index[i]) : static_cast<size_t>(i);
        double ss = 0;
        for (int j = 0; j < hidden; ++j) ss += double(x[s * hidden + j]) * x[s * hidden + j];
        const double inv = 1.0 / std::sqrt(ss / hidden + 1e-5);
        for (int j = 0; j < hidden; ++j) ref.push_back(x[s * hidden + j] * inv * w[j]);
      }
      expect_bf16_near(to_host(dy, ref.size()), ref, gather ? "rmsnorm gathered" : "rmsnorm");
    }
    cudaFree(dx), cudaFree(dw), cudaFree(di), cudaFree(dy);
  }
}

// Bias + q/k norm + RoPE (Llama-3 scaled frequencies) + KV write into pages, vs float64;
// cos/sin from the step's rope_cos_sin table or computed in the epilogue; head_dim 64/128/256;
// a YaRN attention factor on cos and sin in one variant of each path. Variants 4-7: the same
// into float8 e4m3 pages (kv_fp8): each byte within half an e4m3 step of the float64 value,
// and the values past +-448 saturated (k and v scaled up by 100 there). Variants 8-9: float8
// with k_scale 0.3 and v_scale 7, each byte within half a step of the value / its scale.
TEST(ModelCudaOps, QkvEpilogueMatchesFloat64) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(3);
  for (int variant = 0; variant < 10; ++variant) {
    const bool qwen3 = variant % 2 == 1, table = variant % 4 >= 2, fp8 = variant >= 4;
    const float k_scale = variant >= 8 ? 0.3f : 1.0f, v_scale = variant >= 8 ? 7.0f : 1.0f;
    const double factor = variant % 4 == 1 || variant % 4 == 2 ? 1.1386 : 1.0;
    SCOPED_TRACE(::testing::Message()
                 << "qwen3 " << qwen3 << " table " << table << " factor " << factor << " fp8 "
                 << fp8 << " scales " << k_scale << ", " << v_scale);
    const int hq = 4, hkv = 2, d = variant % 4 == 3 ? 256 : (qwen3 ? 128 : 64), rows = 5, ps = 4,
              pages = 6;
    const int qs = hq * d, kvs = hkv * d, stride = qs + 2 * kvs;
    auto qkv = random_f32(static_cast<size_t>(rows) * stride, rng, 0.0, 1.5);
    if (fp8 && !qwen3) {  // (Qwen3's k norm would undo the scaling)
      for (int r = 0; r < rows; ++r) {
        for (int i = qs; i < stride; ++i) qkv[static_cast<size_t>(r) * stride + i] *= 100.0f;
      }
    }
    auto bias = random_f32(stride, rng, 0.0, 0.5);
    auto qn = random_f32(d, rng, 1.0, 0.2), kn = random_f32(d, rng, 1.0, 0.2);
    const std::vector<double> freq =
        rope_inv_freq(d, 500000.0, llama3_rope_scaling(8.0, 1.0, 4.0, 64));
    const std::vector<int32_t> pos = {0, 1, 9, 4000, 77}, page = {5, 5, 0, 2, 3},
                               slot = {0, 1, 3, 2, 0};
    QkvEpilogueArgs a;
    a.qkv = to_device(qkv);
    a.bias = qwen3 ? nullptr : to_device(bias);
    a.q_norm = qwen3 ? to_device(qn) : nullptr;
    a.k_norm = qwen3 ? to_device(kn) : nullptr;
    a.inv_freq = to_device(freq);
    a.rope_attention_factor = factor;
    a.positions = to_device(pos);
    a.kv_page = to_device(page);
    a.kv_slot = to_device(slot);
    a.rows = rows, a.num_qo_heads = hq, a.num_kv_heads = hkv, a.head_dim = d, a.page_size = ps;
    a.eps = 1e-6f;
    a.kv_fp8 = fp8;
    a.k_scale = k_scale;
    a.v_scale = v_scale;
    const size_t pool = static_cast<size_t>(pages) * ps * kvs, elem = fp8 ? 1 : 2;
    ASSERT_EQ(cudaMalloc(&a.q_out, static_cast<size_t>(rows) * qs * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&a.k_pages, pool * elem), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&a.v_pages, pool * elem), cudaSuccess);
    ASSERT_EQ(cudaMemset(a.k_pages, 0, pool * elem), cudaSuccess);
    ASSERT_EQ(cudaMemset(a.v_pages, 0, pool * elem), cudaSuccess);
    float* cos_sin = nullptr;
    if (table) {
      ASSERT_EQ(cudaMalloc(&cos_sin, static_cast<size_t>(rows) * d * 4), cudaSuccess);
      ASSERT_TRUE(rope_cos_sin(a.positions, rows, a.inv_freq, d, factor, cos_sin, nullptr).ok());
      a.cos_sin = cos_sin;
    }
    ASSERT_TRUE(qkv_epilogue(a, nullptr).ok());
    cudaFree(cos_sin);
    std::vector<double> q_ref(static_cast<size_t>(rows) * qs), k_ref(pool, 0.0), v_ref(pool, 0.0);
    for (int r = 0; r < rows; ++r) {
      std::vector<double> v(stride);
      for (int i = 0; i < stride; ++i) v[i] = qkv[r * stride + i] + (qwen3 ? 0.0 : bias[i]);
      for (int head = 0; head < hq + hkv; ++head) {
        double* hp = v.data() + head * d;
        if (qwen3) {
          double ss = 0;
          for (int i = 0; i < d; ++i) ss += hp[i] * hp[i];
          const double inv = 1.0 / std::sqrt(ss / d + 1e-6);
          for (int i = 0; i < d; ++i) hp[i] *= inv * (head < hq ? qn[i] : kn[i]);
        }
        for (int p = 0; p < d / 2; ++p) {
          const double ang = pos[r] * freq[p], c = std::cos(ang) * factor,
                       s = std::sin(ang) * factor;
          const double x0 = hp[p], x1 = hp[p + d / 2];
          hp[p] = x0 * c - x1 * s;
          hp[p + d / 2] = x1 * c + x0 * s;
        }
      }
      for (int i = 0; i < qs; ++i) q_ref[r * qs + i] = v[i];
      const size_t dst = (static_cast<size_t>(page[r]) * ps + slot[r]) * kvs;
      for (int i = 0; i < kvs; ++i) {
        k_ref[dst + i] = v[qs + i];
        v_ref[dst + i] = v[qs + kvs + i];
      }
    }
    expect_bf16_near(to_host(a.q_out, q_ref.size()), q_ref, "q");
    if (fp8) {
      int saturated = 0;
      for (const auto& [pages_dev, ref, scale, name] :
           {std::tuple{a.k_pages, &k_ref, k_scale, "k_pages"},
            std::tuple{a.v_pages, &v_ref, v_scale, "v_pages"}}) {
        const auto got = to_host(static_cast<const uint8_t*>(pages_dev), pool);
        for (size_t i = 0; i < pool; ++i) {
          const double want = (*ref)[i] / scale, value = e4m3_value(got[i]);
          if (std::abs(want) > 448.0) {  // saturated, with the sign
            ++saturated;
            ASSERT_EQ(value, std::copysign(448.0, want)) << name << " element " << i;
            continue;
          }
          // Half a step of e4m3 (3 mantissa bits; subnormal steps 2^-9), plus f32's rounding.
          ASSERT_LE(std::abs(value - want), std::abs(want) / 16 * (1 + 1e-5) + 0x1p-10)
              << name << " element " << i << ": e4m3 " << value << ", float64 " << want;
        }
      }
      if (!qwen3) EXPECT_GT(saturated, 0);  // the scaled rows reach past 448
    } else {
      expect_bf16_near(to_host(static_cast<const uint16_t*>(a.k_pages), pool), k_ref, "k_pages");
      expect_bf16_near(to_host(static_cast<const uint16_t*>(a.v_pages), pool), v_ref, "v_pages");
    }
    for (const void* p : {(const void*)a.qkv, (const void*)a.bias, (const void*)a.q_norm,
                          (const void*)a.k_norm, (const void*)a.inv_freq, (const void*)a.positions,
                          (const void*)a.kv_page, (const void*)a.kv_slot, (const void*)a.q_out,
                          (const void*)a.k_pages, (const void*)a.v_pages}) {
      cudaFree(const_cast<void*>(p));
    }
  }
}

TEST(ModelCudaOps, QkvEpilogueRejectsBadArguments) {
  SKIP_WITHOUT_DEVICE();
  QkvEpilogueArgs a;
  a.rows = 1, a.num_qo_heads = 1, a.num_kv_heads = 1, a.head_dim = 64, a.page_size = 1;
  a.q_norm = reinterpret_cast<const float*>(16);
  EXPECT_EQ(qkv_epilogue(a, nullptr).code(), StatusCode::kInvalidArgument);
  a.q_norm = nullptr;
  a.head_dim = 96;
  const Status s = qkv_epilogue(a, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("head_dim = 96"), std::string::npos) << s.to_string();
  // Float8 KV scales: finite and > 0, and 1 without kv_fp8.
  a.head_dim = 64;
  const auto refused = [&](const std::string& part) {
    const Status r = qkv_epilogue(a, nullptr);
    EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << r.to_string();
    EXPECT_NE(r.message().find(part), std::string::npos) << r.to_string();
  };
  a.v_scale = 2.0f;
  refused("v_scale = 2.000000: expected 1 without kv_fp8");
  a.kv_fp8 = true;
  a.k_scale = 0.0f;
  refused("k_scale = 0.000000: expected a finite scale > 0");
  a.k_scale = std::numeric_limits<float>::infinity();
  refused("k_scale = inf");
}

// inner 333: the scalar kernel; 336 (a multiple of 8): the 16-byte vector kernel.
TEST(ModelCudaOps, SiluMulMatchesFloat64) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(4);
  for (int inner : {333, 336}) {
    SCOPED_TRACE(inner);
    const int rows = 9;
    auto gu = random_bf16(static_cast<size_t>(rows) * 2 * inner, rng, 3.0);
    auto* dg = to_device(gu);
    uint16_t* dy = nullptr;
    ASSERT_EQ(cudaMalloc(&dy, static_cast<size_t>(rows) * inner * 2), cudaSuccess);
    ASSERT_TRUE(silu_mul(dg, rows, inner, dy, nullptr).ok());
    std::vector<double> ref;
    for (int r = 0; r < rows; ++r) {
      for (int i = 0; i < inner; ++i) {
        const double g = bf16_to_float(gu[r * 2 * inner + i]);
        const double u = bf16_to_float(gu[r * 2 * inner + inner + i]);
        ref.push_back(g / (1.0 + std::exp(-g)) * u);
      }
    }
    expect_bf16_near(to_host(dy, ref.size()), ref, "silu_mul");
    cudaFree(dg), cudaFree(dy);
  }
}

// The tuning buckets: every row count up to 16, then multiples of 16 up to kMaxTunedRows (512);
// each row count rounded up to the least of them.
TEST(ModelCudaOps, GemmTuneBucketsAreRowsUpTo16ThenMultiplesOf16) {
  std::vector<int64_t> buckets;
  for (int64_t r = 1; r <= Gemm::kMaxTunedRows; ++r) {
    const int64_t b = Gemm::tune_bucket(r);
    ASSERT_GE(b, r);
    ASSERT_LT(b - r, 16);
    if (buckets.empty() || buckets.back() != b) buckets.push_back(b);
  }
  std::vector<int64_t> expected;
  for (int64_t r = 1; r <= 16; ++r) expected.push_back(r);
  for (int64_t r = 32; r <= 512; r += 16) expected.push_back(r);
  EXPECT_EQ(buckets, expected);
  for (int64_t b : expected) EXPECT_EQ(Gemm::tune_bucket(b), b);
}

// With tuning the first call of a shape times several algorithms, writing into y (bf16) or
// into a scratch buffer (accumulate): the accumulate result must still be y0 + x w^T once.
// 600 rows > kMaxTunedRows takes the heuristic's pick; with buckets the first 20-row call times
// its bucket's 32 rows on scratch and takes that algorithm, which the 32-row call then finds.
TEST(ModelCudaOps, GemmLinearBf16AndAccumulateF32) {
  SKIP_WITHOUT_DEVICE();
  for (GemmTuning tuning :
       {GemmTuning::kPerBucket, GemmTuning::kPerShape, GemmTuning::kHeuristic}) {
    SCOPED_TRACE(static_cast<int>(tuning));
    Rng rng(5);
    auto g = Gemm::create(nullptr, tuning);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (int rows : {1, 3, 20, 32, 64, 600}) {
      const int in = 512, out = 200;
      auto x = random_bf16(static_cast<size_t>(rows) * in, rng);
      auto w = random_bf16(static_cast<size_t>(out) * in, rng, 0.05);
      auto y0 = random_f32(static_cast<size_t>(rows) * out, rng, 0.0, 1.0);
      auto* dx = to_device(x);
      auto* dw = to_device(w);
      auto* dyf = to_device(y0);
      uint16_t* dyb = nullptr;
      ASSERT_EQ(cudaMalloc(&dyb, static_cast<size_t>(rows) * out * 2), cudaSuccess);
      ASSERT_TRUE(g.value().linear(dx, rows, in, dw, out, dyb, DType::kBF16).ok());
      ASSERT_TRUE(g.value().linear(dx, rows, in, dw, out, dyf, DType::kF32, true).ok());
      std::vector<double> ref(static_cast<size_t>(rows) * out);
      double max_ref = 0;
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < out; ++o) {
          double s = 0;
          for (int i = 0; i < in; ++i) {
            s += double(bf16_to_float(x[r * in + i])) * bf16_to_float(w[o * in + i]);
          }
          ref[r * out + o] = s;
          max_ref = std::max(max_ref, std::abs(s + y0[r * out + o]));
        }
      }
      expect_bf16_near(to_host(dyb, ref.size()), ref, "gemm bf16");
      auto yf = to_host(dyf, ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(yf[i], ref[i] + y0[i], 1e-4 * max_ref) << "gemm f32 accumulate " << i;
      }
      cudaFree(dx), cudaFree(dw), cudaFree(dyf), cudaFree(dyb);
    }
    EXPECT_EQ(g.value().num_cached_shapes(), 12);  // 6 row counts x {bf16, f32}
    const int tuned = g.value().num_tuned_shapes(), borrowed = g.value().num_bucket_shapes();
    switch (tuning) {
      case GemmTuning::kPerBucket:
        EXPECT_GE(tuned, 1);
        EXPECT_LE(tuned, 8);     // 1, 3, 32 and 64 rows; never 20 or 600
        EXPECT_GE(borrowed, 1);  // a 20-row shape took its bucket's algorithm
        EXPECT_LE(borrowed, 2);  // only the 20-row shapes are inside a bucket
        break;
      case GemmTuning::kPerShape:
        EXPECT_GE(tuned, 1);
        EXPECT_LE(tuned, 10);  // never the 600-row shapes
        EXPECT_EQ(borrowed, 0);
        break;
      case GemmTuning::kHeuristic:
        EXPECT_EQ(tuned, 0);
        EXPECT_EQ(borrowed, 0);
        break;
    }
    EXPECT_EQ(g.value().linear(nullptr, 1, 1, nullptr, 1, nullptr, DType::kF32).code(),
              StatusCode::kInvalidArgument);
  }
}

// n random e4m3 bytes, every finite value (no NaN).
std::vector<uint8_t> random_fp8(Rng& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) {
    do {
      b = static_cast<uint8_t>(rng.uniform_int(0, 255));
    } while ((b & 0x7f) == 0x7f);  // e4m3's NaN
  }
  return v;
}

// e4m3 bits to their value (host, through cuda_fp8.h's own conversion).
double fp8_value(uint8_t q) {
  __nv_fp8_e4m3 v;
  v.__x = q;
  return static_cast<double>(static_cast<float>(v));
}

// row_absmax and quantize_fp8 against the host: each row's maximum exactly, the scale max /
// 448 (1 for all zeros) and each byte the host's e4m3 rounding (cuda_fp8.h, nearest even,
// saturated) of x / scale, bit for bit; the tensor's largest element lands on +-448. Rows of 1,
// 1000 and 4096 columns (strided loops), a zero row, rows 3e4 and 1e-6 times the others (these
// saturate no value and flush tiny ones to zero); 300 rows: more than the quantizer's grid;
// the maxima of the whole tensor or a single given one.
TEST(ModelCudaOps, QuantizeFp8MatchesTheHostRounding) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(71);
  for (const int cols : {1, 1000, 4096}) {
    for (const int rows : {5, 300}) {
      std::vector<uint16_t> x = random_bf16(static_cast<size_t>(rows) * cols, rng);
      for (int j = 0; j < cols; ++j) {
        const size_t c = static_cast<size_t>(cols);
        x[c + j] = float_to_bf16(0.0f);  // row 1: zeros
        x[2 * c + j] = float_to_bf16(bf16_to_float(x[2 * c + j]) * 3e4f);
        x[3 * c + j] = float_to_bf16(bf16_to_float(x[3 * c + j]) * 1e-6f);
      }
      auto* dx = to_device(x);
      uint8_t* dq = nullptr;
      float *damax = nullptr, *ds = nullptr;
      ASSERT_EQ(cudaMalloc(&dq, x.size()), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&damax, rows * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&ds, sizeof(float)), cudaSuccess);
      ASSERT_TRUE(row_absmax(dx, rows, cols, damax, nullptr).ok());
      const auto amax = to_host(damax, rows);
      float m = 0.0f;
      for (int r = 0; r < rows; ++r) {
        float mr = 0.0f;
        for (int j = 0; j < cols; ++j) mr = std::max(mr, std::fabs(bf16_to_float(x[r * cols + j])));
        ASSERT_EQ(amax[r], mr) << "cols " << cols << " row " << r;
        m = std::max(m, mr);
      }
      for (const bool given : {false, true}) {  // the rows' maxima, or one value
        if (given) ASSERT_EQ(cudaMemcpy(damax, &m, sizeof m, cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_TRUE(quantize_fp8(dx, rows, cols, damax, given ? 1 : rows, dq, ds, nullptr).ok());
        const auto q = to_host(dq, x.size());
        const float s = to_host(ds, 1)[0];
        ASSERT_EQ(s, m / kFp8E4m3Max) << "cols " << cols;
        double largest = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const uint8_t want =
              __nv_cvt_float_to_fp8(bf16_to_float(x[i]) / s, __NV_SATFINITE, __NV_E4M3);
          ASSERT_EQ(q[i], want) << "cols " << cols << " element " << i;
          largest = std::max(largest, std::abs(fp8_value(want)));
        }
        EXPECT_EQ(largest, 448.0) << "cols " << cols;
      }
      cudaFree(dx), cudaFree(dq), cudaFree(damax), cudaFree(ds);
    }
  }
  // All zeros: scale 1, zero bytes.
  const std::vector<uint16_t> zeros(64, float_to_bf16(0.0f));
  auto* dz = to_device(zeros);
  uint8_t* dq = nullptr;
  float *damax = nullptr, *ds = nullptr;
  ASSERT_EQ(cudaMalloc(&dq, 64), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&damax, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds, sizeof(float)), cudaSuccess);
  ASSERT_TRUE(row_absmax(dz, 4, 16, damax, nullptr).ok());
  ASSERT_TRUE(quantize_fp8(dz, 4, 16, damax, 4, dq, ds, nullptr).ok());
  EXPECT_EQ(to_host(ds, 1)[0], 1.0f);
  EXPECT_EQ(to_host(dq, 64), std::vector<uint8_t>(64, 0));
  cudaFree(dz), cudaFree(dq), cudaFree(damax), cudaFree(ds);
  EXPECT_EQ(row_absmax(nullptr, 2, 0, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_fp8(nullptr, 2, 4, nullptr, 0, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// linear_fp8 against float64 on the same e4m3 values and scales: y = x_scale w_scale sum_k xq
// wq, into bf16 and accumulated into f32 (tolerances below). Random finite e4m3 bytes (no NaN
// pattern), scales of 2^-8..2^8 (a missing one shows); row counts 1..600 (decode to prefill).
// Every tuning mode: timing writes into y or scratch (accumulate) with the call's scales, and
// with buckets the 20-row call times its bucket's 32 rows on scratch copies of its e4m3 rows.
// Bad calls: in not a multiple of 16, a pointer off 16-byte alignment, a null scale.
TEST(ModelCudaOps, GemmLinearFp8MatchesFloat64) {
  SKIP_WITHOUT_DEVICE();
  for (GemmTuning tuning :
       {GemmTuning::kPerBucket, GemmTuning::kPerShape, GemmTuning::kHeuristic}) {
    SCOPED_TRACE(static_cast<int>(tuning));
    Rng rng(9);
    auto g = Gemm::create(nullptr, tuning);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    const auto random_scales = [&](size_t n) {
      std::vector<float> v(n);
      for (float& s : v)
        s = std::ldexp(1.0f + static_cast<float>(rng.uniform()),
                       static_cast<int>(rng.uniform_int(-8, 8)));
      return v;
    };
    for (const int rows : {1, 7, 20, 64, 600}) {
      const int in = 256, out = 208;
      const auto xq = random_fp8(rng, static_cast<size_t>(rows) * in),
                 wq = random_fp8(rng, size_t{out} * in);
      const auto xs = random_scales(1), ws = random_scales(1);
      auto y0 = random_f32(static_cast<size_t>(rows) * out, rng, 0.0, 1.0);
      auto* dxq = to_device(xq);
      auto* dwq = to_device(wq);
      auto* dxs = to_device(xs);
      auto* dws = to_device(ws);
      auto* dyf = to_device(y0);
      uint16_t* dyb = nullptr;
      ASSERT_EQ(cudaMalloc(&dyb, static_cast<size_t>(rows) * out * 2), cudaSuccess);
      Status st = g.value().linear_fp8(dxq, dxs, rows, in, dwq, dws, out, dyb, DType::kBF16);
      ASSERT_TRUE(st.ok()) << st.to_string();
      st = g.value().linear_fp8(dxq, dxs, rows, in, dwq, dws, out, dyf, DType::kF32, true);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::vector<double> ref(static_cast<size_t>(rows) * out);
      double max_ref = 0;
      for (int r = 0; r < rows; ++r) {
        for (int o = 0; o < out; ++o) {
          double sum = 0;
          for (int i = 0; i < in; ++i) sum += fp8_value(xq[r * in + i]) * fp8_value(wq[o * in + i]);
          ref[r * out + o] = sum * xs[0] * ws[0];
          max_ref = std::max(max_ref, std::abs(ref[r * out + o] + y0[r * out + o]));
        }
      }
      // Hopper's float8 products accumulate with fewer bits between promotions to f32 than
      // bf16 ones: 1e-3 of max |ref| (against 1e-4), plus a bf16 rounding for the bf16 y.
      const auto yb = to_host(dyb, ref.size());
      const auto yf = to_host(dyf, ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(bf16_to_float(yb[i]), ref[i], std::ldexp(std::abs(ref[i]), -8) + 1e-3 * max_ref)
            << "gemm fp8 -> bf16 " << i << ", rows " << rows;
        ASSERT_NEAR(yf[i], ref[i] + y0[i], 1e-3 * max_ref)
            << "gemm fp8 f32 accumulate " << i << ", rows " << rows;
      }
      if (rows == 7) {
        EXPECT_EQ(
            g.value().linear_fp8(dxq, dxs, rows, 200, dwq, dws, out, dyb, DType::kBF16).code(),
            StatusCode::kInvalidArgument);  // in % 16 != 0
        EXPECT_EQ(
            g.value().linear_fp8(dxq + 8, dxs, rows, 240, dwq, dws, out, dyb, DType::kBF16).code(),
            StatusCode::kInvalidArgument);  // x off 16-byte alignment
        EXPECT_EQ(
            g.value().linear_fp8(dxq, nullptr, rows, in, dwq, dws, out, dyb, DType::kBF16).code(),
            StatusCode::kInvalidArgument);
      }
      cudaFree(dxq), cudaFree(dwq), cudaFree(dxs), cudaFree(dws), cudaFree(dyf), cudaFree(dyb);
    }
    const int tuned = g.value().num_tuned_shapes(), borrowed = g.value().num_bucket_shapes();
    switch (tuning) {
      case GemmTuning::kPerBucket:
        EXPECT_EQ(g.value().num_cached_shapes(), 12);  // 5 row counts and bucket 32, x 2 dtypes
        EXPECT_GE(tuned, 1);
        EXPECT_LE(tuned, 8);     // 1, 7, 32 and 64 rows; never 20 or 600
        EXPECT_GE(borrowed, 1);  // a 20-row shape took its bucket's algorithm
        EXPECT_LE(borrowed, 2);
        break;
      case GemmTuning::kPerShape:
        EXPECT_EQ(g.value().num_cached_shapes(), 10);
        EXPECT_GE(tuned, 1);
        EXPECT_LE(tuned, 8);  // never the 600-row shapes
        EXPECT_EQ(borrowed, 0);
        break;
      case GemmTuning::kHeuristic:
        EXPECT_EQ(g.value().num_cached_shapes(), 10);
        EXPECT_EQ(tuned, 0);
        EXPECT_EQ(borrowed, 0);
        break;
    }
  }
}

// skinny_linear_fp8 (skinny_gemm.h) against float64 on the same inputs: e4m3 weights (every
// byte but NaN) with a scale, rows 1..16 across the one- and two-tile kernels, `in` with and
// without a partial 128-column block and split over 1 to 8 warps, `out` with a partial 16-row
// tile; y bf16, f32 and f32 accumulate. Outputs are poisoned (NaN) before each call, and the
// guard past the last row stays poisoned. Then: a row's result is the same bits whatever rows
// share the call.
TEST(ModelCudaOps, SkinnyLinearFp8MatchesFloat64) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(21);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Shape {
    int in, out;
  };
  for (const Shape sh : {Shape{16, 16}, Shape{144, 40}, Shape{1024, 1000}, Shape{4624, 48}}) {
    for (const int rows : {1, 5, 8, 9, 16}) {
      const size_t in = sh.in, out = sh.out, guard = 64;
      const auto x = random_bf16(rows * in, rng);
      const auto wq = random_fp8(rng, out * in);
      const std::vector<float> ws = {0.0137f};
      const auto y0 = random_f32(rows * out, rng, 0.0, 1.0);
      auto* dx = to_device(x);
      auto* dwq = to_device(wq);
      auto* dws = to_device(ws);
      std::vector<float> yf_init(rows * out + guard, nan);
      std::copy(y0.begin(), y0.end(), yf_init.begin());
      auto* dyf = to_device(yf_init);  // accumulated into
      auto* dyp = to_device(std::vector<float>(rows * out + guard, nan));
      auto* dyb = to_device(std::vector<uint16_t>(rows * out + guard, 0x7fc0));  // bf16 NaN
      for (const auto& [y, dt, acc] : {std::tuple<void*, DType, bool>{dyp, DType::kF32, false},
                                       {dyb, DType::kBF16, false},
                                       {dyf, DType::kF32, true}}) {
        const Status st = skinny_linear_fp8(dx, rows, sh.in, dwq, dws, sh.out, y, dt, acc, nullptr);
        ASSERT_TRUE(st.ok()) << st.to_string();
      }
      const auto yp = to_host(dyp, rows * out + guard);
      const auto yb = to_host(dyb, rows * out + guard);
      const auto yf = to_host(dyf, rows * out + guard);
      for (size_t r = 0; r < static_cast<size_t>(rows); ++r) {
        for (size_t o = 0; o < out; ++o) {
          double sum = 0, sum_abs = 0;
          for (size_t i = 0; i < in; ++i) {
            const double p = bf16_to_float(x[r * in + i]) * fp8_value(wq[o * in + i]);
            sum += p;
            sum_abs += std::abs(p);
          }
          const double ref = sum * ws[0], tol = 1e-5 * sum_abs * ws[0] + 1e-30;
          const size_t at = r * out + o;
          ASSERT_NEAR(yp[at], ref, tol)
              << "f32 y, rows " << rows << " in " << in << " out " << out << " at " << at;
          ASSERT_NEAR(yf[at], ref + y0[at], tol + 1e-6 * std::abs(y0[at])) << "accumulate";
          ASSERT_NEAR(bf16_to_float(yb[at]), ref, tol + std::ldexp(std::abs(ref), -8)) << "bf16 y";
        }
      }
      for (size_t i = rows * out; i < rows * out + guard; ++i) {
        ASSERT_TRUE(std::isnan(yp[i]) && std::isnan(yf[i]) && yb[i] == 0x7fc0)
            << "written past the last row at " << i;
      }
      // Row by row: the same bits as inside the call of `rows` rows.
      if (rows == 9 || rows == 16) {
        for (size_t r = 0; r < static_cast<size_t>(rows); r += 4) {
          const Status st = skinny_linear_fp8(dx + r * in, 1, sh.in, dwq, dws, sh.out, dyp,
                                              DType::kF32, false, nullptr);
          ASSERT_TRUE(st.ok()) << st.to_string();
          const auto one = to_host(dyp, out);
          for (size_t o = 0; o < out; ++o) {
            ASSERT_EQ(std::memcmp(&one[o], &yp[r * out + o], 4), 0)
                << "row " << r << " alone differs at " << o << ", rows " << rows;
          }
        }
      }
      cudaFree(dx), cudaFree(dwq), cudaFree(dws), cudaFree(dyf), cudaFree(dyp), cudaFree(dyb);
    }
  }
}

// skinny_gate_up_silu_fp8 (skinny_gemm.h): act bit for bit equal to skinny_linear_fp8 into a
// bf16 gate_up followed by silu_mul, and within bf16 rounding of float64 silu(g) * u on the
// rounded g and u; rows 1..16 (both kernels), inner with a partial 8-row group, `in` with a
// partial column block. act is poisoned and its guard stays so. Bad calls are refused.
TEST(ModelCudaOps, SkinnyGateUpSiluFp8EqualsTheGemmThenSiluMul) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(23);
  struct Shape {
    int in, inner;
  };
  for (const Shape sh : {Shape{16, 8}, Shape{144, 20}, Shape{1024, 1000}, Shape{4624, 24}}) {
    for (const int rows : {1, 5, 8, 9, 16}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " in " + std::to_string(sh.in) + " inner " +
                   std::to_string(sh.inner));
      const size_t in = sh.in, inner = sh.inner, guard = 64, n = rows * inner;
      const auto x = random_bf16(rows * in, rng);
      const auto wq = random_fp8(rng, 2 * inner * in);
      const std::vector<float> ws = {0.0137f};
      auto* dx = to_device(x);
      auto* dwq = to_device(wq);
      auto* dws = to_device(ws);
      auto* dgu = to_device(std::vector<uint16_t>(2 * n, 0x7fc0));
      auto* dref = to_device(std::vector<uint16_t>(n + guard, 0x7fc0));
      auto* dact = to_device(std::vector<uint16_t>(n + guard, 0x7fc0));
      Status st = skinny_linear_fp8(dx, rows, sh.in, dwq, dws, 2 * sh.inner, dgu, DType::kBF16,
                                    false, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_TRUE(silu_mul(dgu, rows, sh.inner, dref, nullptr).ok());
      st = skinny_gate_up_silu_fp8(dx, rows, sh.in, dwq, dws, sh.inner, dact, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      const auto act = to_host(dact, n + guard);
      const auto ref = to_host(dref, n);
      const auto gu = to_host(dgu, 2 * n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(act[i], ref[i]) << "act " << i << " differs from gemm + silu_mul";
        const size_t r = i / inner, m = i % inner;
        const double g = bf16_to_float(gu[r * 2 * inner + m]);
        const double u = bf16_to_float(gu[r * 2 * inner + inner + m]);
        const double want = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(bf16_to_float(act[i]), want, std::ldexp(std::abs(want), -7) + 1e-30)
            << "act " << i << " against float64";
      }
      for (size_t i = n; i < n + guard; ++i) ASSERT_EQ(act[i], 0x7fc0) << "written past at " << i;
      cudaFree(dx), cudaFree(dwq), cudaFree(dws), cudaFree(dgu), cudaFree(dref), cudaFree(dact);
    }
  }
  auto* dx = to_device(std::vector<uint16_t>(256, 0));
  auto* dwq = to_device(std::vector<uint8_t>(512, 0));
  auto* dws = to_device(std::vector<float>{1.0f});
  auto* dact = to_device(std::vector<uint16_t>(256, 0));
  const auto code = [&](int64_t rows, int64_t in, int64_t inner, uint16_t* a) {
    return skinny_gate_up_silu_fp8(dx, rows, in, dwq, dws, inner, a, nullptr).code();
  };
  constexpr auto kBad = StatusCode::kInvalidArgument;
  EXPECT_EQ(code(17, 16, 16, dact), kBad);    // rows
  EXPECT_EQ(code(1, 24, 16, dact), kBad);     // in % 16
  EXPECT_EQ(code(1, 16, 0, dact), kBad);      // inner
  EXPECT_EQ(code(1, 16, 16, nullptr), kBad);  // no act
  EXPECT_EQ(code(0, 16, 16, dact), StatusCode::kOk);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(dx), cudaFree(dwq), cudaFree(dws), cudaFree(dact);
}

// Every e4m3 byte decodes exactly (one-hot x, scale 1), and bad calls are refused.
TEST(ModelCudaOps, SkinnyLinearFp8DecodesEveryByteAndRefusesBadCalls) {
  SKIP_WITHOUT_DEVICE();
  // w [16, 16]: byte 16 o + i in row o, column i (NaNs as 0); x = the 16 x 16 identity, so
  // y[r, o] = value(w[o, r]).
  std::vector<uint8_t> wq(256);
  for (int b = 0; b < 256; ++b) wq[b] = (b & 0x7f) == 0x7f ? 0 : static_cast<uint8_t>(b);
  std::vector<uint16_t> x(256, float_to_bf16(0.0f));
  for (int r = 0; r < 16; ++r) x[r * 16 + r] = float_to_bf16(1.0f);
  auto* dx = to_device(x);
  auto* dwq = to_device(wq);
  auto* dws = to_device(std::vector<float>{1.0f});
  float* dy = nullptr;
  ASSERT_EQ(cudaMalloc(&dy, 256 * sizeof(float)), cudaSuccess);
  Status st = skinny_linear_fp8(dx, 16, 16, dwq, dws, 16, dy, DType::kF32, false, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const auto y = to_host(dy, 256);
  for (int r = 0; r < 16; ++r) {
    for (int o = 0; o < 16; ++o) {
      ASSERT_EQ(static_cast<double>(y[r * 16 + o]), fp8_value(wq[o * 16 + r]))
          << "byte " << int{wq[o * 16 + r]};
    }
  }
  const auto code = [&](const uint16_t* xx, int64_t rows, int64_t in, const uint8_t* wq8,
                        const float* ws, int64_t out, void* yy, DType dt, bool acc) {
    return skinny_linear_fp8(xx, rows, in, wq8, ws, out, yy, dt, acc, nullptr).code();
  };
  constexpr auto kBad = StatusCode::kInvalidArgument;
  EXPECT_EQ(code(dx, 17, 16, dwq, dws, 16, dy, DType::kF32, false), kBad);     // rows
  EXPECT_EQ(code(dx, 1, 24, dwq, dws, 16, dy, DType::kF32, false), kBad);      // in % 16
  EXPECT_EQ(code(dx, 1, 16, dwq, dws, 0, dy, DType::kF32, false), kBad);       // out
  EXPECT_EQ(code(dx, 1, 16, nullptr, dws, 16, dy, DType::kF32, false), kBad);  // no w
  EXPECT_EQ(code(dx, 1, 16, dwq, nullptr, 16, dy, DType::kF32, false), kBad);  // no scale
  EXPECT_EQ(code(dx + 4, 1, 16, dwq, dws, 16, dy, DType::kF32, false), kBad);  // alignment
  EXPECT_EQ(code(dx, 1, 16, dwq + 8, dws, 16, dy, DType::kF32, false), kBad);  // alignment
  EXPECT_EQ(code(dx, 1, 16, dwq, dws, 16, dy, DType::kF16, false), kBad);      // dtype
  EXPECT_EQ(code(dx, 1, 16, dwq, dws, 16, dy, DType::kBF16, true), kBad);      // acc bf16
  EXPECT_EQ(code(dx, 0, 16, dwq, dws, 16, dy, DType::kF32, false), StatusCode::kOk);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(dx), cudaFree(dwq), cudaFree(dws), cudaFree(dy);
}

// argmax_rows equals argmax_lowest (common/argmax.h) on every row: random rows (vocab a
// multiple of 4: the float4 path; 1001, 4099: the scalar path) with planted ties, NaN, -inf,
// +inf and signed zeros at places that cross threads and vector lanes.
// mask_rows: each masked row equals forward.h's mask_logits of it bit for bit (NaN and +inf
// logits cleared too), rows with mask index -1 are untouched; vocabularies around word
// boundaries (1, 31, 32, 33) and Qwen3's; masks of random words, all-ones and all-zero words.
TEST(ModelCudaOps, MaskRowsEqualsTheHostMask) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(44);
  for (int vocab : {1, 31, 32, 33, 1000, 151669}) {
    SCOPED_TRACE(vocab);
    const int rows = 5;
    const auto words = static_cast<size_t>((vocab + 31) / 32);
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 3.0);
    x[0] = NAN;
    x[static_cast<size_t>(vocab) - 1] = INFINITY;
    // Three masks: random words with some all-ones and all-zero ones; all ones; all zeros.
    std::vector<uint32_t> masks(3 * words, 0);
    for (size_t w = 0; w < words; ++w) {
      const double u = rng.uniform();
      masks[w] = u < 0.3 ? ~0u : u < 0.5 ? 0u : static_cast<uint32_t>(rng.next_u64());
      masks[words + w] = ~0u;
    }
    const std::vector<int32_t> index = {0, -1, 2, 1, 0};
    float* dx = to_device(x);
    uint32_t* dm = to_device(masks);
    int32_t* di = to_device(index);
    ASSERT_TRUE(mask_rows(dx, rows, vocab, di, dm, nullptr).ok());
    const std::vector<float> got = to_host(dx, x.size());
    for (int r = 0; r < rows; ++r) {
      std::vector<float> want(x.begin() + static_cast<int64_t>(r) * vocab,
                              x.begin() + static_cast<int64_t>(r + 1) * vocab);
      if (index[static_cast<size_t>(r)] >= 0) {
        mask_logits(want, std::span<const uint32_t>(masks).subspan(
                              static_cast<size_t>(index[static_cast<size_t>(r)]) * words, words));
      }
      EXPECT_EQ(
          std::memcmp(want.data(), got.data() + static_cast<size_t>(r) * vocab, want.size() * 4), 0)
          << "row " << r;
    }
    for (int i = 0; i < vocab; ++i) {
      EXPECT_EQ(got[static_cast<size_t>(2 * vocab + i)], -INFINITY);  // mask 2 allows nothing
    }
    cudaFree(dx);
    cudaFree(dm);
    cudaFree(di);
  }
  EXPECT_EQ(mask_rows(nullptr, 1, 0, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(ModelCudaOps, ArgmaxRowsEqualsTheHostArgmax) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(12);
  const float inf = INFINITY;
  for (int vocab : {1000, 1001, 4099, 151936}) {
    SCOPED_TRACE(vocab);
    const int rows = 9;
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 3.0);
    const auto at = [&](int r, int i) -> float& { return x[static_cast<size_t>(r) * vocab + i]; };
    at(1, vocab - 1) = 50.0f;  // a tie: the earlier index must win
    at(1, 3) = 50.0f;
    at(2, 0) = NAN;  // NaN first and a max behind it
    at(2, vocab / 2) = 40.0f;
    for (int i = 0; i < vocab; ++i) at(3, i) = i % 3 == 0 ? NAN : -inf;  // -> 0
    at(4, 777) = inf;  // +inf twice: the lower wins
    at(4, 999) = inf;
    for (int i = 0; i < vocab; ++i) at(5, i) = i % 2 == 0 ? -0.0f : -1.0f;  // zeros tie
    at(5, 0) = -2.0f;
    for (int i = 0; i < vocab; ++i) at(6, i) = -1.0f;  // all equal -> 0
    for (int i = 0; i < vocab; ++i) at(7, i) = NAN;    // all NaN -> 0
    at(8, 1) = 30.0f;  // and, where the row is long enough, 1024 apart: one thread's two
    if (vocab > 1025) at(8, 1025) = 30.0f;  // elements on the scalar path
    float* dx = to_device(x);
    int32_t* dout = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, rows * 4), cudaSuccess);
    ASSERT_TRUE(argmax_rows(dx, rows, vocab, dout, nullptr).ok());
    const std::vector<int32_t> got = to_host(dout, rows);
    for (int r = 0; r < rows; ++r) {
      const std::span<const float> row(x.data() + static_cast<size_t>(r) * vocab, vocab);
      EXPECT_EQ(got[static_cast<size_t>(r)], argmax_lowest(row)) << "row " << r;
    }
    EXPECT_EQ(got[1], 3);
    EXPECT_EQ(got[3], 0);
    EXPECT_EQ(got[4], 777);
    EXPECT_EQ(got[5], 2);
    EXPECT_EQ(got[8], 1);
    cudaFree(dx);
    cudaFree(dout);
  }
  EXPECT_EQ(argmax_rows(nullptr, 1, 0, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

// sample_rows equals sample_draw (common/sample_draw.h) token for token, and its logprob to a
// float ulp or two: per row a mode (temperature only, greedy, top-k, top-p, both, min-p) at
// several temperatures, logprobs on every other row, uniforms across [0, 1) (0 and just below
// 1 included); vocabularies below, at and across the 1024-weight blocks and Qwen3's; rows with
// NaN and -inf, a peaked row; near-flat rows and rows of many equal logits whose top-k / top-p
// sets exceed kMaxSampleCandidates on the larger vocabularies (the radix descent, down to the
// token-id bytes for the ties). The rows it must leave to the host (out = -1): an infinite
// maximum (+inf entries, every entry -inf or NaN).
TEST(ModelCudaOps, SampleRowsEqualsTheHostDraw) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(31);
  const float inf = INFINITY;
  for (int vocab : {5, 1000, 1024, 1025, 4099, 20000, 151669}) {
    SCOPED_TRACE(vocab);
    const int rows = 48;
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 4.0);
    const auto at = [&](int r, int i) -> float& { return x[static_cast<size_t>(r) * vocab + i]; };
    for (int i = 0; i < vocab; i += 3) at(1, i) = NAN;
    at(2, vocab / 2) = inf;  // +inf entries: left to the host
    at(2, vocab - 1) = inf;
    for (int i = 0; i < vocab; ++i) at(3, i) = i % 2 == 0 ? NAN : -inf;  // max -inf: the host
    for (int i = 0; i < vocab; ++i) at(4, i) = NAN;                      // every entry NaN
    at(5, vocab / 3) = 60.0f;                                            // one dominant
    for (int i = 0; i < vocab; i += 7) at(6, i) = -inf;
    std::vector<SampleDraw> draws(rows);
    for (int r = 0; r < rows; ++r) {
      SampleDraw& d = draws[r];
      const double temperatures[] = {0.3, 0.7, 1.0, 1.6, 4.0};
      d.inv_temperature = static_cast<float>(1.0 / temperatures[r % 5]);
      d.u = r == 7 ? 0.0 : r == 8 ? 1.0 - 0x1.0p-53 : rng.uniform();
      d.logprob = r % 2;
      switch (r % 6) {
        case 0:
          break;  // temperature only
        case 1:
          d.greedy = 1;
          break;
        case 2:
          d.top_k = 1 + static_cast<int32_t>(rng.uniform() * (r % 4 == 0 ? 64 : 30000));
          break;
        case 3:
          d.top_p = 0.5 + 0.49 * rng.uniform();
          break;
        case 4:
          d.top_k = 1 + static_cast<int32_t>(rng.uniform() * (r % 4 == 0 ? 100 : 30000));
          d.top_p = 0.8 + 0.2 * rng.uniform();
          break;
        case 5:
          d.min_p = static_cast<float>(rng.uniform(0.0, 0.5));
          d.top_p = r % 4 == 1 ? 0.9 : 1.0;
          break;
      }
    }
    // Near-flat rows (top-p or top-k sets of most of the vocabulary) and rows of logits on a
    // coarse grid (thousands of exact ties), drawn by top-p, a large top-k, and both.
    const int special[] = {9, 10, 11, 12, 13, 14};
    for (int k = 0; k < 6; ++k) {
      const int r = special[k];
      for (int i = 0; i < vocab; ++i) {
        at(r, i) = k < 3 ? static_cast<float>(rng.uniform() * 0.01)
                         : std::round(static_cast<float>(rng.uniform(-2.0, 2.0)) * 4.0f) / 4.0f;
      }
      draws[r] = SampleDraw{};
      draws[r].u = rng.uniform();
      draws[r].logprob = 1;
      draws[r].top_p = k % 3 == 1 ? 1.0 : 0.95;
      draws[r].top_k = k % 3 == 0 ? 0 : vocab / 2 + 1;
    }
    float* dx = to_device(x);
    SampleDraw* dd = nullptr;
    int32_t* dout = nullptr;
    float* dlp = nullptr;
    ASSERT_EQ(cudaMalloc(&dd, rows * sizeof(SampleDraw)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dd, draws.data(), rows * sizeof(SampleDraw), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dlp, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0x7f, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(dlp, 0x7f, rows * 4), cudaSuccess);
    ASSERT_TRUE(sample_rows(dx, rows, vocab, dd, {}, dout, dlp, nullptr, nullptr).ok());
    const std::vector<int32_t> got = to_host(dout, rows);
    const std::vector<float> got_lp = to_host(dlp, rows);
    const std::vector<float> after = to_host(dx, x.size());  // only read (NaN included)
    EXPECT_EQ(std::memcmp(after.data(), x.data(), x.size() * sizeof(float)), 0);
    TemperatureScratch scratch;
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      const std::span<const float> row(x.data() + static_cast<size_t>(r) * vocab, vocab);
      const SampleResult want = sample_draw(row, draws[r], scratch);
      if (r == 2 || r == 3 || r == 4) {
        EXPECT_EQ(got[static_cast<size_t>(r)], -1);
        continue;
      }
      EXPECT_EQ(got[static_cast<size_t>(r)], want.token_id);
      const float lp = got_lp[static_cast<size_t>(r)];
      if (!draws[r].logprob) {
        EXPECT_EQ(lp, 0.0f);
      } else if (std::isinf(want.logprob)) {
        EXPECT_EQ(lp, want.logprob);
      } else {
        EXPECT_NEAR(lp, want.logprob, 3e-7 * std::max(1.0f, std::fabs(want.logprob)));
      }
    }
    if (vocab > 5)
      EXPECT_EQ(sample_draw({&at(5, 0), size_t(vocab)}, draws[5], scratch).token_id, vocab / 3);
    cudaFree(dx);
    cudaFree(dd);
    cudaFree(dout);
    cudaFree(dlp);
  }
  EXPECT_EQ(sample_rows(nullptr, 1, (1 << 20) + 1, nullptr, {}, nullptr, nullptr, nullptr, nullptr)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(sample_rows(nullptr, 1, 0, nullptr, {}, nullptr, nullptr, nullptr, nullptr).code(),
            StatusCode::kInvalidArgument);
}

// With a logit bias and penalties, sample_rows equals sample_draw_adjusted (the draw from the
// adjusted row, the raw row's logprob): rows with and without adjustments side by side, every
// stage alone and together, tokens at the row's ends, a bias that makes a token the greedy
// choice, and in every mode. The adjusted rows hold the host's adjusted logits afterwards; a
// row left to the host (an adjustment overflowing to +inf, a raw +inf) gets its raw logits
// back, and the host's sample_draw_adjusted of them is what the backend then runs.
TEST(ModelCudaOps, SampleRowsWithAdjustmentsEqualsTheHostDraw) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(37);
  for (int vocab : {1000, 151669}) {
    SCOPED_TRACE(vocab);
    const int rows = 24;
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 3.0);
    const auto at = [&](int r, int i) -> float& { return x[static_cast<size_t>(r) * vocab + i]; };
    std::vector<SampleDraw> draws(rows);
    std::vector<int32_t> indptr = {0};
    std::vector<LogitAdjust> adjusts;
    for (int r = 0; r < rows; ++r) {
      SampleDraw& d = draws[r];
      d.inv_temperature = static_cast<float>(1.0 / (0.5 + r % 3 * 0.5));
      d.u = rng.uniform();
      d.logprob = r % 4 != 3;
      switch (r % 5) {
        case 0:
          break;
        case 1:
          d.greedy = 1;
          break;
        case 2:
          d.top_k = 40;
          break;
        case 3:
          d.top_p = 0.9;
          break;
        case 4:
          d.top_k = 200;
          d.min_p = 0.02f;
          d.top_p = 0.95;
          break;
      }
      if (r % 6 != 5) {  // every sixth row without adjustments
        std::vector<int32_t> tokens = {0, vocab - 1};
        const int extra = r % 2 == 0 ? 5 : 300;
        for (int i = 0; i < extra; ++i) {
          tokens.push_back(static_cast<int32_t>(rng.uniform() * (vocab - 1)));
        }
        std::sort(tokens.begin(), tokens.end());
        tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
        for (int32_t token : tokens) {
          LogitAdjust a;
          a.token = token;
          a.stages = 1 + static_cast<uint32_t>(rng.uniform() * 15);  // 1..15: every combination
          a.bias = rng.uniform(-5.0, 5.0);
          a.repetition = rng.uniform(0.5, 2.0);
          a.frequency = 2.0 * static_cast<int>(rng.uniform() * 4);
          a.presence = rng.uniform(-2.0, 2.0);
          adjusts.push_back(a);
        }
      }
      if (r == 1) adjusts.back() = LogitAdjust{vocab - 1, kAdjustBias, 100.0};  // greedy's draw
      indptr.push_back(static_cast<int32_t>(adjusts.size()));
    }
    // Row 2: an adjustment overflows to +inf (1e30 / 1e-10); row 4: a raw +inf. Both go to the
    // host with their raw logits.
    at(2, 0) = 1e30f;
    adjusts[static_cast<size_t>(indptr[2])] = LogitAdjust{0, kAdjustRepetition, 0.0, 1e-10};
    at(4, vocab / 2) = INFINITY;
    float* dx = to_device(x);
    SampleDraw* dd = to_device(draws);
    LogitAdjust* dadj = to_device(adjusts);
    int32_t* dind = to_device(indptr);
    float* draw_raw = to_device(std::vector<float>(adjusts.size(), NAN));  // poisoned
    int32_t* dout = nullptr;
    float* dlp = nullptr;
    ASSERT_EQ(cudaMalloc(&dout, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dlp, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(dout, 0x7f, rows * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(dlp, 0x7f, rows * 4), cudaSuccess);
    ASSERT_TRUE(
        sample_rows(dx, rows, vocab, dd, {dind, dadj, draw_raw}, dout, dlp, nullptr, nullptr).ok());
    const std::vector<int32_t> got = to_host(dout, rows);
    const std::vector<float> got_lp = to_host(dlp, rows);
    const std::vector<float> after = to_host(dx, x.size());
    TemperatureScratch scratch;
    std::vector<float> adjusted;
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      const std::span<const float> row(x.data() + static_cast<size_t>(r) * vocab, vocab);
      const std::span<const LogitAdjust> a(adjusts.data() + indptr[r],
                                           static_cast<size_t>(indptr[r + 1] - indptr[r]));
      const SampleResult want = sample_draw_adjusted(row, a, draws[r], adjusted, scratch);
      const std::span<const float> row_after(after.data() + static_cast<size_t>(r) * vocab, vocab);
      if (r == 2 || r == 4) {
        EXPECT_EQ(got[static_cast<size_t>(r)], -1);
        EXPECT_EQ(std::memcmp(row_after.data(), row.data(), row.size_bytes()), 0);
        continue;
      }
      if (a.empty()) adjusted.assign(row.begin(), row.end());
      EXPECT_EQ(std::memcmp(row_after.data(), adjusted.data(), row.size_bytes()), 0);
      EXPECT_EQ(got[static_cast<size_t>(r)], want.token_id);
      const float lp = got_lp[static_cast<size_t>(r)];
      if (!draws[r].logprob) {
        EXPECT_EQ(lp, 0.0f);
      } else {
        EXPECT_NEAR(lp, want.logprob, 3e-7 * std::max(1.0f, std::fabs(want.logprob)));
      }
    }
    EXPECT_EQ(got[1], vocab - 1);
    cudaFree(dx);
    cudaFree(dd);
    cudaFree(dadj);
    cudaFree(dind);
    cudaFree(draw_raw);
    cudaFree(dout);
    cudaFree(dlp);
  }
}

// A device logprob against the host's: equal when infinite, else within a float ulp or two.
void expect_logprob(float got, float want) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want);
  } else {
    EXPECT_NEAR(got, want, 3e-7 * std::max(1.0f, std::fabs(want)));
  }
}

// A row's kMaxTopLogprobs alternatives from the device (`got`) against the host's `want`:
// the same ids, expect_logprob's logprobs, and the slots past them still `poison`.
void expect_top(const TopLogprob* got, std::span<const TopLogprob> want, TopLogprob poison) {
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].token_id, want[i].token_id) << i;
    expect_logprob(got[i].logprob, want[i].logprob);
  }
  for (size_t i = want.size(); i < size_t{kMaxTopLogprobs}; ++i) {
    EXPECT_TRUE(got[i].token_id == poison.token_id && got[i].logprob == poison.logprob) << i;
  }
}

// sample_rows' top_logprobs equal the host's top_logprobs of the raw row: the same ids in the
// same order (logit descending, NaN as -inf, -0 as +0, ties to the lower id) and the logprobs
// to a float ulp or two. Rows of random logits; of exact ties on a coarse grid (many rows per
// radix bin: the descent goes down to the id bytes); of zeros of both signs; with NaN and
// -inf, and with fewer finite logits than k (the -inf ones follow by id); with adjustments
// (the alternatives are the raw row's, the draw the adjusted row's); greedy and sampled; k 1,
// 5 and 20; a vocabulary smaller than k. Slots past k, rows without top_logprobs and the row
// left to the host (+inf) are not written.
TEST(ModelCudaOps, SampleRowsTopLogprobsEqualTheHost) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(41);
  for (int vocab : {3, 1000, 151669}) {
    SCOPED_TRACE(vocab);
    const int rows = 12;
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 4.0);
    const auto at = [&](int r, int i) -> float& { return x[static_cast<size_t>(r) * vocab + i]; };
    for (int i = 0; i < vocab; ++i) {
      at(2, i) = std::round(static_cast<float>(rng.uniform(-2.0, 2.0)) * 2.0f) / 2.0f;
      at(3, i) = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : -1.0f;
      if (i % 5 == 0) at(4, i) = NAN;
      if (i % 7 == 0) at(4, i) = -INFINITY;
      at(0, i) = i % 2 == 0 ? NAN : -INFINITY;  // k = 20 beyond its 3 finite logits
    }
    for (int i = 0; i < std::min(vocab, 3); ++i) at(0, i * 11 % vocab) = static_cast<float>(i);
    at(9, vocab / 2) = INFINITY;  // left to the host
    std::vector<SampleDraw> draws(rows);
    std::vector<int32_t> indptr = {0};
    std::vector<LogitAdjust> adjusts;
    for (int r = 0; r < rows; ++r) {
      SampleDraw& d = draws[r];
      d.logprob = 1;
      d.top_logprobs = static_cast<uint8_t>(r == 8 ? 0 : r % 3 == 0 ? 20 : r % 3 == 1 ? 5 : 1);
      d.greedy = r % 2;
      d.u = rng.uniform();
      d.top_k = r % 4 == 2 ? 50 : 0;
      if (r == 6 || r == 7) {  // the draw's row is adjusted, the alternatives' is not
        adjusts.push_back(LogitAdjust{vocab - 1, kAdjustBias, 100.0});
      }
      indptr.push_back(static_cast<int32_t>(adjusts.size()));
    }
    float* dx = to_device(x);
    SampleDraw* dd = to_device(draws);
    LogitAdjust* dadj = to_device(adjusts.empty() ? std::vector<LogitAdjust>(1) : adjusts);
    int32_t* dind = to_device(indptr);
    float* draw_raw = to_device(std::vector<float>(adjusts.size() + 1, NAN));
    const TopLogprob poison{-7, 7.0f};
    TopLogprob* dtop =
        to_device(std::vector<TopLogprob>(static_cast<size_t>(rows) * kMaxTopLogprobs, poison));
    int32_t* dout = to_device(std::vector<int32_t>(rows, -9));
    float* dlp = to_device(std::vector<float>(rows, NAN));
    ASSERT_TRUE(
        sample_rows(dx, rows, vocab, dd, {dind, dadj, draw_raw}, dout, dlp, dtop, nullptr).ok());
    const std::vector<int32_t> got = to_host(dout, rows);
    const std::vector<TopLogprob> top = to_host(dtop, static_cast<size_t>(rows) * kMaxTopLogprobs);
    std::vector<float> adjusted;
    TemperatureScratch scratch;
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      const std::span<const float> row(x.data() + static_cast<size_t>(r) * vocab, vocab);
      const std::span<const LogitAdjust> a(adjusts.data() + indptr[r],
                                           static_cast<size_t>(indptr[r + 1] - indptr[r]));
      std::vector<TopLogprob> want = top_logprobs(row, draws[r].top_logprobs);
      if (r == 9) {
        EXPECT_EQ(got[r], -1);
        want.clear();  // nothing written
      } else {
        EXPECT_EQ(got[r], sample_draw_adjusted(row, a, draws[r], adjusted, scratch).token_id);
        if (r == 6 || r == 7) EXPECT_EQ(got[r], vocab - 1);
      }
      expect_top(&top[static_cast<size_t>(r) * kMaxTopLogprobs], want, poison);
    }
    if (vocab == 3) EXPECT_EQ(top_logprobs({&at(0, 0), 3}, 20).size(), 3u);
    if (vocab > 3) {  // the row of few finite logits: 22, 11, 0, then the others by id
      EXPECT_EQ(top[1].token_id, 11);
      EXPECT_EQ(top[3].token_id, 1);
      EXPECT_EQ(top[3].logprob, -INFINITY);
    }
    if (vocab > 3) {  // the row of zeros: -0 and +0 tie, so ids 0, 1, 3, 4, ... lead
      EXPECT_EQ(top[3 * kMaxTopLogprobs + 1].token_id, 1);
      EXPECT_EQ(top[3 * kMaxTopLogprobs + 2].token_id, 3);
    }
    for (void* p : std::initializer_list<void*>{dx, dd, dadj, dind, draw_raw, dtop, dout, dlp}) {
      cudaFree(p);
    }
  }
}

// score_rows equals score_row on the host: the target's logprob and the top k (ids equal,
// logprobs within a float ulp or two) for k 0, 1, 5, 20 and a vocabulary smaller than k, with
// rows of NaN and -inf, of ties, all -inf, and +inf at two tokens (uniform over them: -log 2);
// targets at the maximum, at NaN, anywhere. Slots past k are not written.
TEST(ModelCudaOps, ScoreRowsEqualTheHost) {
  SKIP_WITHOUT_DEVICE();
  Rng rng(43);
  for (int vocab : {3, 1000, 151669}) {
    SCOPED_TRACE(vocab);
    const int rows = 10;
    std::vector<float> x = random_f32(static_cast<size_t>(rows) * vocab, rng, 0.0, 4.0);
    const auto at = [&](int r, int i) -> float& { return x[static_cast<size_t>(r) * vocab + i]; };
    for (int i = 0; i < vocab; ++i) {
      at(2, i) = std::round(static_cast<float>(rng.uniform(-2.0, 2.0)) * 2.0f) / 2.0f;
      if (i % 5 == 0) at(4, i) = NAN;
      if (i % 7 == 0) at(4, i) = -INFINITY;
      at(5, i) = i % 2 == 0 ? NAN : -INFINITY;  // all -inf
    }
    at(6, vocab - 1) = INFINITY;
    at(6, 0) = INFINITY;
    std::vector<int32_t> targets(rows), tops(rows);
    for (int r = 0; r < rows; ++r) {
      targets[r] = static_cast<int32_t>(rng.uniform() * vocab) % vocab;
      tops[r] = r % 4 == 0 ? 20 : r % 4 == 1 ? 5 : r % 4 == 2 ? 1 : 0;
    }
    targets[4] = 0;          // NaN
    targets[6] = vocab - 1;  // +inf
    targets[7] = static_cast<int32_t>(std::max_element(&at(7, 0), &at(7, 0) + vocab) - &at(7, 0));
    float* dx = to_device(x);
    int32_t* dtargets = to_device(targets);
    int32_t* dtops = to_device(tops);
    const TopLogprob poison{-7, 7.0f};
    TopLogprob* dtop =
        to_device(std::vector<TopLogprob>(static_cast<size_t>(rows) * kMaxTopLogprobs, poison));
    float* dlp = to_device(std::vector<float>(rows, NAN));
    ASSERT_TRUE(score_rows(dx, rows, vocab, dtargets, dtops, dlp, dtop, nullptr).ok());
    const std::vector<float> lp = to_host(dlp, rows);
    const std::vector<TopLogprob> top = to_host(dtop, static_cast<size_t>(rows) * kMaxTopLogprobs);
    for (int r = 0; r < rows; ++r) {
      SCOPED_TRACE("row " + std::to_string(r));
      const std::span<const float> row(x.data() + static_cast<size_t>(r) * vocab, vocab);
      const RowScore want = score_row(row, targets[r], tops[r]);
      expect_logprob(lp[r], want.logprob);
      expect_top(&top[static_cast<size_t>(r) * kMaxTopLogprobs], want.top, poison);
    }
    EXPECT_FLOAT_EQ(lp[6], static_cast<float>(-std::log(2.0)));
    EXPECT_EQ(lp[4], -INFINITY);
    for (void* p : std::initializer_list<void*>{dx, dtargets, dtops, dtop, dlp}) cudaFree(p);
  }
  EXPECT_FALSE(
      score_rows(nullptr, 1, (1 << 20) + 1, nullptr, nullptr, nullptr, nullptr, nullptr).ok());
}

TEST(ModelCudaOps, FillRandomHasTheAskedMoments) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 1 << 20;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
  ASSERT_TRUE(fill_random(d, n, DType::kF32, 42, 1.0f, 0.1f, nullptr).ok());
  auto v = to_host(d, n);
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double(x) * x;
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 1.0, 1e-3);
  EXPECT_NEAR(std::sqrt(var), 0.1, 2e-3);
  cudaFree(d);
}

}  // namespace
}  // namespace packserve::model::cuda
