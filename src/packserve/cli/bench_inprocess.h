// bench_inprocess.h: the in-process side of `packserve bench --in-process`: an Engine on the
// --backend (cpu, cuda or auto; backend_flags.h) over a model directory, wrapped as a
// benchclient::RequestSender (prompts are encoded with the model's tokenizer, as the server
// would; times are taken when updates reach the client, as over HTTP; the running batch is the
// engine's num_running).
// Thread-safety: send() is called from many threads (Engine::submit is thread-safe).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "packserve/benchclient/replay.h"
#include "packserve/cli/backend_flags.h"
#include "packserve/common/status.h"

namespace packserve::cli {

struct InProcessOptions {
  int32_t num_pages = 0;     // KV pool pages; 0: 4096 on cpu, sized from GPU memory on cuda
  int32_t page_size = 16;    // tokens per page
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_running_requests = 256;
  int threads = 1;  // attention executor threads
  bool no_prefix_caching = false;
  std::string attention_policy = "balanced";
  BackendFlags backend;
};

void add_inprocess_options(CLI::App& cmd, InProcessOptions& options);

Result<std::unique_ptr<benchclient::RequestSender>> make_inprocess_sender(
    const std::string& model_dir, const InProcessOptions& options, bool ignore_eos);

}  // namespace packserve::cli
