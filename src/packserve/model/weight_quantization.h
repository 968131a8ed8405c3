// weight_quantization.h: how the CUDA backend stores the layers' weight matrices, a plain enum
// so that the backend options and the command line name it without a CUDA header
// (docs/forward-cuda.md "Float8 weights").
#pragma once

namespace packserve::model {

enum class WeightQuantization {
  kNone,  // bf16, as the checkpoint's values round
  // float8 e4m3 with one f32 scale per matrix, and each GEMM input quantized at run time with
  // one scale for the step's whole input (vLLM's online --quantization fp8: per-tensor weight
  // and dynamic per-tensor activation scales). The embedding and the LM head stay bf16.
  kFp8,
};

}  // namespace packserve::model
