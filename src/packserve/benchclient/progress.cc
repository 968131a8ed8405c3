// progress.cc: see progress.h.
#include "packserve/benchclient/progress.h"

#include <algorithm>

namespace packserve::benchclient {

std::string progress_line(const ReplayProgress& p, int bar_width) {
  const double frac =
      p.num_total > 0 ? static_cast<double>(p.num_done) / static_cast<double>(p.num_total) : 1.0;
  const int filled = std::clamp(static_cast<int>(frac * bar_width), 0, bar_width);
  std::string bar = "[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(bar_width - filled), '.') + "]";
  char buf[200];
  std::snprintf(buf, sizeof(buf), " %lld/%lld done, %lld failed, %lld in flight, %lld tok, %.1f s",
                static_cast<long long>(p.num_done), static_cast<long long>(p.num_total),
                static_cast<long long>(p.num_failed), static_cast<long long>(p.num_in_flight),
                static_cast<long long>(p.output_tokens), p.elapsed_s);
  return bar + buf;
}

void ProgressDisplay::update(const ReplayProgress& p) {
  if (tty_) {
    std::fprintf(out_, "\r%s\x1b[K", progress_line(p, 30).c_str());
    std::fflush(out_);
    drew_ = true;
    return;
  }
  const bool last = p.num_done == p.num_total;
  if (p.elapsed_s >= next_line_s_ || last) {
    if (last && drew_ && p.elapsed_s < next_line_s_ - line_interval_s_ + 1e-9) return;
    std::fprintf(out_, "bench: %s\n", progress_line(p, 20).c_str());
    std::fflush(out_);
    next_line_s_ = p.elapsed_s + line_interval_s_;
    drew_ = true;
  }
}

void ProgressDisplay::finish() {
  if (tty_ && drew_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
  }
}

}  // namespace packserve::benchclient
