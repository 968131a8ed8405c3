// bench_inprocess.h: the in-process side of `packserve bench --in-process`: an Engine on the
// --backend (cpu, cuda or auto; backend_flags.h) over a model directory, wrapped as a
// benchclient::RequestSender (prompts are encoded with the model's tokenizer, as the server
// would; times are taken when updates reach the client, as over HTTP; the running batch is the
// engine's num_running).
// Thread-safety: send() is called from many threads (Engine::submit is thread-safe).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "packserve/benchclient/http_client.h"
#include "packserve/benchclient/replay.h"
#include "packserve/cli/engine_flags.h"
#include "packserve/common/status.h"

namespace packserve::cli {

struct InProcessOptions {
  // The engine flags, each prefixed "--in-process: "; --num-pages 0 means 4096 pages on cpu.
  EngineFlags engine = [] {
    EngineFlags f;
    f.cpu_default_num_pages = 4096;
    return f;
  }();
};

void add_inprocess_options(CLI::App& cmd, InProcessOptions& options);

Result<std::unique_ptr<benchclient::RequestSender>> make_inprocess_sender(
    const std::string& model_dir, const InProcessOptions& options, bool ignore_eos,
    benchclient::RequestSampling sampling);

}  // namespace packserve::cli
