// progress.h: the benchmark's progress display on stderr: a redrawn bar ("\r") when stderr is
// a terminal, otherwise one status line every `line_interval_s` (logs stay readable in CI).
// Thread-safety: update() is called from one thread (the replay sampler).
#pragma once

#include <cstdio>
#include <string>

#include "packserve/benchclient/replay.h"

namespace packserve::benchclient {

// "[#########...........]  45/300 done, 2 failed, 12 in flight, 3.1k tok, 12.3 s"
std::string progress_line(const ReplayProgress& p, int bar_width);

class ProgressDisplay {
 public:
  // `tty` = isatty(stderr) normally; explicit for tests.
  ProgressDisplay(std::FILE* out, bool tty, double line_interval_s = 10.0)
      : out_(out), tty_(tty), line_interval_s_(line_interval_s) {}
  void update(const ReplayProgress& p);
  void finish();  // ends the bar's line

 private:
  std::FILE* out_;
  bool tty_;
  double line_interval_s_;
  double next_line_s_ = 0.0;
  bool drew_ = false;
};

}  // namespace packserve::benchclient
