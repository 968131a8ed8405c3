// fp8_weights.cc: dequantize_fp8_weight (fp8_weights.h).
#include "packserve/model/fp8_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <thread>

#include "packserve/common/worker_pool.h"

namespace packserve::model {
namespace {

// The block edge of a scale dimension: the smallest power of two b with ceil(dim / b) == n,
// or 0 when there is none.
int64_t block_edge(int64_t dim, int64_t n) {
  if (n < 1) return 0;
  int64_t b = 1;
  while (b < (dim + n - 1) / n) b *= 2;
  return (dim + b - 1) / b == n ? b : 0;
}

}  // namespace

Result<HostTensor> dequantize_fp8_weight(const std::string& name, std::span<const std::byte> bytes,
                                         const std::vector<int64_t>& shape, const HostTensor& scale,
                                         Fp8ScaleKind kind, DType dtype) {
  const auto bad = [&](const std::string& what) { return invalid_argument(name + ": " + what); };
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1) {
    return bad("float8 weight of shape " + shape_text(shape) + ", expected [out, in]");
  }
  const int64_t out = shape[0], in = shape[1];
  if (static_cast<int64_t>(bytes.size()) != out * in) {
    return bad(std::to_string(bytes.size()) + " bytes for shape " + shape_text(shape));
  }
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) {
    return bad(std::string("dequantized to ") + std::string(dtype_name(dtype)) +
               ", expected bf16, f16 or f32");
  }
  // The scale of (o, i) is scale[(o / row_block) * scale_cols + i / col_block].
  int64_t row_block = 1, col_block = in, scale_cols = 1;
  const int64_t scales = scale.num_elements();
  const std::string scale_shape = scale.name + " of shape " + shape_text(scale.shape);
  if (kind == Fp8ScaleKind::kPerTensorOrRow) {
    if (scales == 1 && scale.shape.size() <= 1) {
      row_block = out;
    } else if (scales != out ||
               !(scale.shape.size() == 1 || (scale.shape.size() == 2 && scale.shape[1] == 1))) {
      return bad(scale_shape + ": expected [], [1], [" + std::to_string(out) + "] or [" +
                 std::to_string(out) + ", 1] (per tensor or per output row)");
    }
  } else {
    row_block = scale.shape.size() == 2 ? block_edge(out, scale.shape[0]) : 0;
    col_block = scale.shape.size() == 2 ? block_edge(in, scale.shape[1]) : 0;
    if (row_block == 0 || col_block == 0) {
      return bad(scale_shape + ": expected [ceil(" + std::to_string(out) + " / B0), ceil(" +
                 std::to_string(in) + " / B1)] for power-of-two blocks B0 x B1");
    }
    scale_cols = scale.shape[1];
  }
  std::vector<float> scale_values(static_cast<size_t>(scales));
  for (int64_t k = 0; k < scales; ++k) {
    const float v = scale.at(k);
    if (!std::isfinite(v)) {
      return bad(scale.name + "[" + std::to_string(k) + "] = " + std::to_string(v) +
                 ", expected a finite scale");
    }
    scale_values[static_cast<size_t>(k)] = v;
  }
  const auto* in_bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t at = 0; at < out * in; ++at) {  // (the first NaN, before any work)
    if ((in_bytes[at] & 0x7F) == 0x7F) {
      return bad("element [" + std::to_string(at / in) + ", " + std::to_string(at % in) +
                 "] is a float8 NaN (byte 0x" + (in_bytes[at] == 0xFF ? "ff" : "7f") + ")");
    }
  }
  HostTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  auto storage = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(out * in) *
                                                          dtype_size_bytes(dtype));
  static const std::array<float, 256> kValues = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) v[static_cast<size_t>(b)] = e4m3_value(static_cast<uint8_t>(b));
    return v;
  }();
  // Rows in tasks of about 2^20 elements over the host's threads (an 8B model's layers are
  // 7e9 of them); each row walks its scale blocks.
  std::byte* dst = storage->data();
  const int64_t rows_per_task = std::max<int64_t>(1, (int64_t{1} << 20) / in);
  const int64_t tasks = (out + rows_per_task - 1) / rows_per_task;
  const auto task = [&](int64_t k) {
    for (int64_t o = k * rows_per_task; o < std::min(out, (k + 1) * rows_per_task); ++o) {
      const float* row_scales = scale_values.data() + (o / row_block) * scale_cols;
      for (int64_t c = 0; c < scale_cols; ++c) {
        const float sc = row_scales[c];
        const auto first = static_cast<size_t>(o * in + c * col_block);
        const auto last = static_cast<size_t>(o * in + std::min(in, (c + 1) * col_block));
        for (size_t at = first; at < last; ++at) {
          store_from_float(dst, at, dtype, kValues[in_bytes[at]] * sc);
        }
      }
    }
  };
  const int threads = static_cast<int>(std::min<int64_t>(
      tasks, std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 16)));
  if (threads <= 1) {
    for (int64_t k = 0; k < tasks; ++k) task(k);
  } else {
    WorkerPool(threads).run(tasks, task);
  }
  t.data = storage->data();
  t.owner = std::shared_ptr<const void>(storage, storage->data());
  return t;
}

}  // namespace packserve::model
