// random_weights.h: in-memory random ModelWeights for a ModelConfig (tests, benchmarks and
// dummy models; the convention vLLM calls `--load-format dummy`).
//
// Every tensor gets owned storage (HostTensor::owner) in config.dtype (f32, f16 or bf16,
// rounded to nearest even) and the Hugging Face name it has in a checkpoint
// ("model.layers.3.self_attn.q_proj.weight"), so the result passes validate_weights().
// Values: matrices and biases ~ N(0, matrix_std) (HF's initializer_range is 0.02), norm weights
// ~ 1 + N(0, norm_std). Tied configs share one tensor for embed_tokens and lm_head.
// Determinism: the values depend only on (config, options); the tensors are drawn in a fixed
// order from one Rng (common/rng.h), identical on every platform.
// Thread-safety: a pure function; the result is immutable and shareable.
#pragma once

#include <cstdint>

#include "packserve/common/status.h"
#include "packserve/model/config.h"
#include "packserve/model/weights.h"

namespace packserve::model {

struct RandomWeightsOptions {
  uint64_t seed = 0;
  double matrix_std = 0.02;  // standard deviation of projection, embedding and bias entries
  double norm_std = 0.1;     // norm weights are 1 + N(0, norm_std)
};

// kInvalidArgument naming the field when a count of `config` is not positive, head_dim is odd,
// num_qo_heads % num_kv_heads != 0, or a std is negative or not finite.
Result<ModelWeights> make_random_weights(const ModelConfig& config,
                                         const RandomWeightsOptions& options);

}  // namespace packserve::model
