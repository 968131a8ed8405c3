// replay.cc: see replay.h.
#include "packserve/benchclient/replay.h"

#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace packserve::benchclient {

std::vector<double> poisson_arrivals_ms(size_t n, double rate_per_s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate_per_s);
  std::vector<double> out;
  out.reserve(n);
  double t_s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    t_s += gap(rng);
    out.push_back(t_s * 1000.0);
  }
  return out;
}

ReplayResult replay(const std::vector<ReplayRequest>& requests, RequestSender& sender,
                    const ReplayOptions& options) {
  using Clock = std::chrono::steady_clock;
  ReplayResult result;
  result.records.resize(requests.size());
  const Clock::time_point origin = Clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(Clock::now() - origin).count(); };

  std::mutex mutex;
  std::condition_variable cv;
  int64_t in_flight = 0, done = 0, failed = 0, output_tokens = 0;
  bool finished = false;

  std::thread sampler([&] {
    double next_sample = 0.0, next_progress = 0.0;
    bool use_server = true;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        if (finished) break;
      }
      const double now = elapsed_s();
      if (now >= next_sample) {
        std::optional<double> v = use_server ? sender.running_batch_size() : std::nullopt;
        if (!v) use_server = false;  // fall back for the whole run, so one source per plot
        std::lock_guard lock(mutex);
        result.running_batch.push_back({now, v.value_or(static_cast<double>(in_flight))});
        next_sample = now + options.sample_interval_s;
      }
      if (options.on_progress && now >= next_progress) {
        ReplayProgress p;
        {
          std::lock_guard lock(mutex);
          p = {static_cast<int64_t>(requests.size()), done, failed, in_flight, output_tokens, now};
        }
        options.on_progress(p);
        next_progress = now + options.progress_interval_s;
      }
      std::unique_lock lock(mutex);
      cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return finished; });
    }
    result.running_batch_source =
        use_server ? sender.running_batch_source() : "client in-flight count";
  });

  // Finished workers are joined as the dispatch goes on, so a long trace holds threads only
  // for the requests in flight.
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::deque<Worker> workers;
  auto join_finished = [&] {
    for (auto it = workers.begin(); it != workers.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    const ReplayRequest& req = requests[i];
    join_finished();
    std::this_thread::sleep_until(
        origin + std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double, std::milli>(std::max(0.0, req.arrival_ms))));
    {
      std::unique_lock lock(mutex);
      if (options.max_concurrency > 0) {
        cv.wait(lock, [&] { return in_flight < options.max_concurrency; });
      }
      ++in_flight;
    }
    auto done_flag = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([&, i, done_flag] {
      RequestRecord& record = result.records[i];
      record.index = requests[i].index;
      record.scheduled_ms = requests[i].arrival_ms;
      record.prompt_tokens = requests[i].prompt_tokens;
      record.expected_output_tokens = requests[i].max_tokens;
      sender.send(requests[i], origin, record);
      std::lock_guard lock(mutex);
      --in_flight;
      ++done;
      if (!record.success) ++failed;
      output_tokens += record.output_tokens;
      done_flag->store(true);
      cv.notify_all();
    });
    workers.push_back(Worker{std::move(thread), done_flag});
  }
  for (Worker& w : workers) w.thread.join();
  {
    std::lock_guard lock(mutex);
    finished = true;
    cv.notify_all();
  }
  sampler.join();
  if (options.on_progress) {
    options.on_progress(
        {static_cast<int64_t>(requests.size()), done, failed, 0, output_tokens, elapsed_s()});
  }
  return result;
}

}  // namespace packserve::benchclient
