// tensor_parallel_test.cc: shard_config's checks, and shard_weights' tensors: views of the
// right rows, copies of the right columns, and the layer algebra the CUDA backend relies on
// (the ranks' column-parallel outputs concatenate to the whole projection, their row-parallel
// partial products sum to it).
#include "packserve/model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "packserve/common/rng.h"
#include "packserve/model/forward_test_util.h"

namespace packserve::model {
namespace {

using testing_util::make_weights;

ModelConfig config_8_4() {  // 8 query heads, 4 KV heads, intermediate 384: tp 1, 2, 4
  ModelConfig c = testing_util::llama_config();
  c.num_qo_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.hidden_size = 96;
  c.intermediate_size = 384;
  return c;
}

TEST(ShardConfig, DividesHeadsAndIntermediate) {
  const ModelConfig c = config_8_4();
  for (int tp : {1, 2, 4}) {
    Result<ModelConfig> s = shard_config(c, tp);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->num_qo_heads, 8 / tp);
    EXPECT_EQ(s->num_kv_heads, 4 / tp);
    EXPECT_EQ(s->intermediate_size, 384 / tp);
    EXPECT_EQ(s->hidden_size, c.hidden_size);
    EXPECT_EQ(s->head_dim, c.head_dim);
    EXPECT_EQ(s->vocab_size, c.vocab_size);
  }
}

TEST(ShardConfig, ErrorsNameTheField) {
  const ModelConfig c = config_8_4();
  auto message = [&](const ModelConfig& cfg, int tp) {
    Result<ModelConfig> s = shard_config(cfg, tp);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    return s.status().message();
  };
  EXPECT_EQ(message(c, 0), "tensor_parallel = 0: expected in [1, 8]");
  EXPECT_EQ(message(c, 9), "tensor_parallel = 9: expected in [1, 8]");
  EXPECT_EQ(message(c, 3), "num_qo_heads = 8 is not a multiple of tensor_parallel = 3");
  ModelConfig six = c;  // 6 KV heads over 4 ranks: neither divides the other
  six.num_qo_heads = 12;
  six.num_kv_heads = 6;
  EXPECT_EQ(message(six, 4),
            "num_kv_heads = 6 and tensor_parallel = 4: one must be a multiple "
            "of the other");
  ModelConfig odd = c;
  odd.intermediate_size = 386;
  EXPECT_EQ(message(odd, 4), "intermediate_size = 386 is not a multiple of tensor_parallel = 4");
}

// More ranks than KV heads: each rank holds the one KV head of its query heads.
TEST(ShardConfig, FewerKvHeadsThanRanksReplicatesThem) {
  Result<ModelConfig> s = shard_config(config_8_4(), 8);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->num_qo_heads, 1);
  EXPECT_EQ(s->num_kv_heads, 1);
  EXPECT_EQ(s->intermediate_size, 48);
}

TEST(ShardWeights, RankOutOfRangeIsAnError) {
  const ModelWeights w = make_weights(config_8_4());
  for (int rank : {-1, 2}) {
    Result<ModelWeights> s = shard_weights(w, rank, 2);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message(), "rank = " + std::to_string(rank) + ": expected in [0, 2)");
  }
}

// y[r][o] = sum_i x[r][i] t[o][i] in double (t is [out, in]).
std::vector<double> linear(const std::vector<double>& x, int rows, const HostTensor& t) {
  const int64_t out = t.shape[0], in = t.shape[1];
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[static_cast<size_t>(r * in + i)] * t.at(o * in + i);
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  }
  return y;
}

std::vector<double> random_rows(int rows, int64_t width, Rng& rng) {
  std::vector<double> x(static_cast<size_t>(rows * width));
  for (double& v : x) v = rng.normal();
  return x;
}

// Columns [begin, begin + count) of x [rows, width].
std::vector<double> columns(const std::vector<double>& x, int rows, int64_t width, int64_t begin,
                            int64_t count) {
  std::vector<double> c;
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < count; ++j) c.push_back(x[static_cast<size_t>(r * width + begin + j)]);
  }
  return c;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-9 * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// Every architecture's tensors: Llama (GQA), Qwen2 (qkv biases), Qwen3 (q/k norms, tied
// embeddings, bf16).
TEST(ShardWeights, ShardsComposeToTheWholeLayer) {
  ModelConfig qwen2 = testing_util::qwen2_config();  // 4 query = 4 KV heads
  ModelConfig qwen3 = testing_util::qwen3_config();
  qwen3.num_kv_heads = 2;
  for (const ModelConfig& c : {config_8_4(), qwen2, qwen3}) {
    const ModelWeights w = make_weights(c);
    for (int tp : {1, 2, 4, 8}) {
      if (!shard_config(c, tp).ok()) continue;
      SCOPED_TRACE("arch " + std::to_string(static_cast<int>(c.arch)) + " tp " +
                   std::to_string(tp));
      std::vector<ModelWeights> shards;
      for (int r = 0; r < tp; ++r) {
        Result<ModelWeights> s = shard_weights(w, r, tp);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        ASSERT_TRUE(validate_weights(*s).ok()) << validate_weights(*s).to_string();
        shards.push_back(std::move(s).value());
      }
      const ModelConfig& local = shards[0].config;
      const int64_t H = c.hidden_size, q = local.q_size(), kv = local.kv_size(),
                    inner = local.intermediate_size;
      Rng rng(11);
      constexpr int kRows = 3;
      for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& whole = w.layers[l];
        const std::vector<double> x = random_rows(kRows, H, rng);
        const std::vector<double> attn = random_rows(kRows, c.q_size(), rng);
        const std::vector<double> act = random_rows(kRows, c.intermediate_size, rng);
        const std::vector<double> q_all = linear(x, kRows, whole.q_proj),
                                  k_all = linear(x, kRows, whole.k_proj),
                                  gate_all = linear(x, kRows, whole.gate_proj),
                                  o_all = linear(attn, kRows, whole.o_proj),
                                  down_all = linear(act, kRows, whole.down_proj);
        std::vector<double> o_sum(o_all.size()), down_sum(down_all.size());
        for (int r = 0; r < tp; ++r) {
          const LayerWeights& s = shards[static_cast<size_t>(r)].layers[l];
          // Row ranges are views of the whole tensor's storage.
          EXPECT_EQ(s.q_proj.data, static_cast<const std::byte*>(whole.q_proj.data) +
                                       r * q * H * dtype_size_bytes(c.dtype));
          EXPECT_EQ(s.up_proj.shape, (std::vector<int64_t>{inner, H}));
          EXPECT_EQ(s.input_norm.data, whole.input_norm.data);
          // Column-parallel: each rank's outputs are its columns of the whole projection.
          expect_near_all(linear(x, kRows, s.q_proj), columns(q_all, kRows, c.q_size(), r * q, q));
          // The rank's KV heads: its share, or the one its query heads attend to.
          const int64_t kv0 = c.num_kv_heads >= tp ? r * kv : r / (tp / c.num_kv_heads) * kv;
          expect_near_all(linear(x, kRows, s.k_proj), columns(k_all, kRows, c.kv_size(), kv0, kv));
          const int64_t first_q_head = r * q / c.head_dim, group = c.num_qo_heads / c.num_kv_heads;
          EXPECT_EQ(first_q_head / group, kv0 / c.head_dim);
          expect_near_all(linear(x, kRows, s.gate_proj),
                          columns(gate_all, kRows, c.intermediate_size, r * inner, inner));
          if (c.qkv_bias) {
            for (int64_t i = 0; i < kv; ++i) EXPECT_EQ(s.v_bias.at(i), whole.v_bias.at(kv0 + i));
          }
          if (c.qk_norm) {
            EXPECT_EQ(s.k_norm.data, whole.k_norm.data);
          }
          // Row-parallel: each rank's product of its own columns is a partial sum.
          const std::vector<double> o_part =
              linear(columns(attn, kRows, c.q_size(), r * q, q), kRows, s.o_proj);
          const std::vector<double> down_part = linear(
              columns(act, kRows, c.intermediate_size, r * inner, inner), kRows, s.down_proj);
          for (size_t i = 0; i < o_sum.size(); ++i) o_sum[i] += o_part[i];
          for (size_t i = 0; i < down_sum.size(); ++i) down_sum[i] += down_part[i];
        }
        expect_near_all(o_sum, o_all);
        expect_near_all(down_sum, down_all);
      }
      EXPECT_EQ(shards.back().lm_head.data, w.lm_head.data);
      EXPECT_EQ(shards.back().embed_tokens.data, w.embed_tokens.data);
    }
  }
}

}  // namespace
}  // namespace packserve::model
