// fp8_weights.h: float8 (e4m3) linear weights of a checkpoint, dequantized on the host when
// it is loaded (checkpoint.h), so that every backend sees the checkpoint's dtype.
//
// Formats (the scale tensor sits beside "<prefix>.weight", stored F32, BF16 or F16):
//   "<prefix>.weight_scale"      [] or [1]: one scale per tensor; [out] or [out, 1]: one per
//                                 output row (compressed-tensors / llm-compressor "FP8",
//                                 Hugging Face's "fp8")
//   "<prefix>.weight_scale_inv"  [ceil(out / B0), ceil(in / B1)]: one per B0 x B1 block of
//                                 the weight (DeepSeek-V3 and Qwen3's "-FP8" checkpoints; B0, B1
//                                 follow from the shapes, 128 x 128 in practice)
// and w[o, i] = e4m3(byte[o, i]) * scale of (o, i), that f32 product rounded once to `out`.
// e4m3 is the OCP "FN" variant (bias 7, subnormals, no infinities, S.1111.111 = NaN); a NaN
// byte is an error naming the tensor and the element (a checkpoint never holds one).
// The dequantized copy lives in host memory (twice the float8 bytes for bf16), not in the
// memory map. With --quantization fp8 the CUDA backend quantizes these weights again, one
// scale per fused matrix. For per-tensor scales and one scale across q/k/v (gate/up) the
// bytes should come back unchanged: the new scale is bf16(448 s) / 448, within 2^-8 of s,
// far inside half an e4m3 step (reasoned, not measured on a GPU). Per-row, block or differing
// scales lose precision there, as in vLLM: the finer-scaled parts round to the fused
// matrix's one scale (a `make-dummy-model --float8` checkpoint, whose q, k and v each have
// their own scale, ran on the H200 with 1 of 256 greedy tokens equal to its dequantized bf16
// run: benchmarks.md "Programmatic launches in the decode step").
// Thread-safety: free functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "packserve/common/dtype.h"
#include "packserve/common/status.h"
#include "packserve/model/weights.h"

namespace packserve::model {

// (e4m3_value and e4m3_from_float, the byte conversions, are in common/dtype.h.)

enum class Fp8ScaleKind {
  kPerTensorOrRow,  // "<prefix>.weight_scale"
  kBlock,           // "<prefix>.weight_scale_inv"
};

// The [out, in] weight `name` from its e4m3 bytes and its scale tensor, as an owned tensor of
// dtype `dtype` (BF16, F16 or F32). kInvalidArgument naming the tensor for a weight that is not
// 2-D or whose byte count disagrees with its shape, a scale whose shape fits none of the
// formats above (naming both shapes), or a NaN byte.
Result<HostTensor> dequantize_fp8_weight(const std::string& name, std::span<const std::byte> bytes,
                                         const std::vector<int64_t>& shape, const HostTensor& scale,
                                         Fp8ScaleKind kind, DType dtype);

}  // namespace packserve::model
