// run_plots.h: the four PNG plots of a benchmark run (`packserve bench --out DIR`):
//   ttft_cdf.png, tpot_cdf.png: empirical CDFs of the completed requests' TTFT and TPOT (ms);
//   throughput_over_time.png: output tokens/s in 1 s bins;
//   running_batch_over_time.png: the running batch size samples; the title names the source
//   ("server /metrics" or "client in-flight count").
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "packserve/benchclient/bench_metrics.h"
#include "packserve/common/status.h"

namespace packserve::benchclient {

// The file names written, in the order above.
const std::vector<std::string>& run_plot_files();

Status write_run_plots(const std::string& dir, const std::vector<RequestRecord>& records,
                       const RunSummary& summary, const std::vector<TimePoint>& running_batch,
                       const std::string& running_batch_source);

}  // namespace packserve::benchclient
