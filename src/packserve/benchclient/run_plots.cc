// run_plots.cc: see run_plots.h.
#include "packserve/benchclient/run_plots.h"

#include "packserve/benchclient/png_plot.h"

namespace packserve::benchclient {
namespace {

Series time_series(const std::vector<TimePoint>& points, const std::string& name, Rgb color) {
  Series s{name, color, {}, false};
  for (const TimePoint& p : points) s.points.emplace_back(p.t_s, p.value);
  return s;
}

}  // namespace

const std::vector<std::string>& run_plot_files() {
  static const std::vector<std::string> kFiles = {
      "ttft_cdf.png", "tpot_cdf.png", "throughput_over_time.png", "running_batch_over_time.png"};
  return kFiles;
}

Status write_run_plots(const std::string& dir, const std::vector<RequestRecord>& records,
                       const RunSummary& summary, const std::vector<TimePoint>& running_batch,
                       const std::string& running_batch_source) {
  std::vector<double> ttft, tpot;
  for (const RequestRecord& r : records) {
    if (!r.success) continue;
    ttft.push_back(request_ttft_ms(r));
    if (auto p = request_tpot_ms(r)) tpot.push_back(*p);
  }
  const auto& files = run_plot_files();
  LineChart c1;
  c1.title = "TTFT CDF (" + std::to_string(ttft.size()) + " requests)";
  c1.x_label = "time to first token (ms)";
  c1.y_label = "fraction of requests";
  c1.series.push_back(cdf_series(ttft, "", palette(0)));
  PS_RETURN_IF_ERROR(write_chart_png(c1, dir + "/" + files[0]));
  LineChart c2;
  c2.title = "TPOT CDF (" + std::to_string(tpot.size()) + " requests with >= 2 tokens)";
  c2.x_label = "time per output token (ms)";
  c2.y_label = "fraction of requests";
  c2.series.push_back(cdf_series(tpot, "", palette(1)));
  PS_RETURN_IF_ERROR(write_chart_png(c2, dir + "/" + files[1]));
  LineChart c3;
  c3.title = "output throughput over time";
  c3.x_label = "time since start (s)";
  c3.y_label = "output tokens/s";
  c3.series.push_back(time_series(summary.output_tokens_per_s, "", palette(2)));
  PS_RETURN_IF_ERROR(write_chart_png(c3, dir + "/" + files[2]));
  LineChart c4;
  c4.title = "running batch size (" + running_batch_source + ")";
  c4.x_label = "time since start (s)";
  c4.y_label = "running requests";
  c4.series.push_back(time_series(running_batch, "", palette(3)));
  PS_RETURN_IF_ERROR(write_chart_png(c4, dir + "/" + files[3]));
  return ok_status();
}

}  // namespace packserve::benchclient
