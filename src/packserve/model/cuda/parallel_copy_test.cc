// parallel_copy_test.cc [label cpu]: ParallelCopier against std::memcpy (the oracle) on sizes
// around the part boundaries (4 KiB alignment, odd sizes, fewer bytes than parts) and the
// single-thread threshold; a poisoned destination shows any unwritten or overwritten byte.
#include "packserve/model/cuda/parallel_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "packserve/common/rng.h"

namespace packserve::model::cuda {
namespace {

void check(ParallelCopier& copier, size_t bytes, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "bytes " << bytes << " threads " << copier.num_threads());
  Rng rng(seed);
  std::vector<unsigned char> src(bytes), dst(bytes + 64, 0xAB), want(bytes + 64, 0xAB);
  for (unsigned char& b : src) b = static_cast<unsigned char>(rng.uniform_int(0, 255));
  std::memcpy(want.data() + 32, src.data(), bytes);
  copier.copy(dst.data() + 32, src.data(), bytes);
  EXPECT_TRUE(dst == want);
}

TEST(ParallelCopier, EqualsMemcpyAtEverySize) {
  for (int threads : {1, 2, 3, 8}) {
    ParallelCopier copier(threads, /*min_parallel_bytes=*/1);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4095}, size_t{4096}, size_t{4097},
                         size_t{3 * 4096 + 5}, size_t{1} << 20, (size_t{5} << 20) + 123}) {
      check(copier, bytes, bytes + static_cast<uint64_t>(threads));
    }
  }
}

TEST(ParallelCopier, ManyJobsInARow) {
  ParallelCopier copier(4, /*min_parallel_bytes=*/1);
  for (int i = 0; i < 200; ++i) check(copier, 10000 + static_cast<size_t>(i) * 977, i);
}

TEST(ParallelCopier, SmallCopiesStayOnTheCaller) {
  ParallelCopier copier(4);  // default threshold 1 MiB
  check(copier, 1000, 1);
  check(copier, (size_t{1} << 20) - 1, 2);
  check(copier, size_t{3} << 20, 3);
  EXPECT_EQ(ParallelCopier(0).num_threads(), 1);
  EXPECT_EQ(ParallelCopier(100).num_threads(), 16);
}

}  // namespace
}  // namespace packserve::model::cuda
