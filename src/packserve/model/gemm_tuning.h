// gemm_tuning.h: how the CUDA backend chooses the cuBLASLt algorithm of each decode-sized GEMM
// shape (model/cuda/gemm.h has the rules and the numbers), a plain enum so that the backend
// options and the command line name it without a CUDA header.
#pragma once

namespace packserve::model {

enum class GemmTuning {
  kHeuristic,  // cuBLASLt's first pick: no timing, bit-reproducible across processes
  kPerShape,   // every row count timed at its first use
  kPerBucket,  // one row count per bucket of them timed, the others take its algorithm
};

}  // namespace packserve::model
