// backend_cli_test.cc: --backend cpu|cuda|auto of `packserve generate`, `serve` and
// `bench --in-process` as a user runs them (label cpu): cpu and auto (on a machine without a
// GPU) give the same greedy tokens, cuda without a CUDA build or device exits 2 naming the
// cause and the way out, a bad name exits 2 naming the choices, --kv-cache-dtype fp8 runs on
// the cpu with its e4m3 pool.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "packserve/model/factory/backend_factory.h"

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

CliRun run_packserve(const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const auto out = dir / ("packserve_backend_cli_out_" + tag);
  const auto err = dir / ("packserve_backend_cli_err_" + tag);
  const std::string cmd = std::string(PACKSERVE_BIN) + " " + args + " >" + out.string() + " 2>" +
                          err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_file(out);
  run.err = read_file(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return run;
}

std::string prompts_file() {
  const auto path = std::filesystem::temp_directory_path() /
                    ("packserve_backend_cli_prompts_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << "{\"prompt\": \"hello world\"}\n{\"prompt_ids\": [5, 6, 7, 8]}\n";
  return path.string();
}

const std::string kGenerate = "generate --dummy-model tiny --max-tokens 6 --temperature 0 ";

TEST(BackendCli, CpuAndAutoWithoutDeviceGenerateTheSameTokens) {
  if (packserve::model::cuda_device_available()) GTEST_SKIP() << "auto picks cuda here";
  const std::string prompts = prompts_file();
  const CliRun cpu = run_packserve(kGenerate + "--prompts " + prompts + " --backend cpu");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const CliRun dflt = run_packserve(kGenerate + "--prompts " + prompts);  // default: cpu
  ASSERT_EQ(dflt.exit_code, 0) << dflt.err;
  const CliRun autod = run_packserve(kGenerate + "--prompts " + prompts + " --backend auto");
  ASSERT_EQ(autod.exit_code, 0) << autod.err;
  EXPECT_NE(cpu.out.find("\"token_ids\""), std::string::npos) << cpu.out;
  // Greedy decoding on the same backend: identical token ids (the timings differ).
  auto ids = [](const std::string& out) {
    std::string all;
    for (size_t at = out.find("\"token_ids\":"); at != std::string::npos;
         at = out.find("\"token_ids\":", at + 1)) {
      all += out.substr(at, out.find(']', at) - at) + ";";
    }
    return all;
  };
  EXPECT_EQ(ids(cpu.out), ids(dflt.out));
  EXPECT_EQ(ids(cpu.out), ids(autod.out));
  EXPECT_EQ(ids(cpu.out).size() > 20, true) << cpu.out;
}

// What --backend cuda says on this machine (no CUDA build, or no device).
void expect_cuda_error(const CliRun& run) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  if (packserve::model::cuda_backend_compiled()) {
    EXPECT_NE(run.err.find("no CUDA device is visible"), std::string::npos) << run.err;
  } else {
    EXPECT_NE(run.err.find("built without CUDA"), std::string::npos) << run.err;
  }
  EXPECT_NE(run.err.find("--backend cpu"), std::string::npos) << run.err;
}

TEST(BackendCli, CudaWithoutDeviceExitsTwoNamingTheCause) {
  if (packserve::model::cuda_device_available()) GTEST_SKIP() << "a CUDA device is visible";
  const std::string prompts = prompts_file();
  const CliRun gen = run_packserve(kGenerate + "--prompts " + prompts + " --backend cuda");
  expect_cuda_error(gen);
  EXPECT_TRUE(gen.out.empty()) << gen.out;  // nothing on stdout on bad input
  // serve binds its port, then fails to load: exit 2 with the reason.
  expect_cuda_error(run_packserve("serve --dummy-model tiny --port 0 --backend cuda"));
  expect_cuda_error(run_packserve(
      "bench --trace " + std::string(PACKSERVE_SOURCE_DIR) +
      "/data/traces/azure_conv_slice.csv --in-process --dummy-model tiny --max-requests 2 "
      "--backend cuda"));
}

TEST(BackendCli, UnknownBackendNamesTheChoices) {
  const CliRun run = run_packserve(kGenerate + "--prompts " + prompts_file() + " --backend gpu");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--backend: backend 'gpu': expected cpu, cuda or auto"), std::string::npos)
      << run.err;
}

TEST(BackendCli, UnknownGemmTuningNamesTheChoices) {
  const CliRun run =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --gemm-tuning fast");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--gemm-tuning: gemm tuning 'fast': expected bucket, shape or heuristic"),
            std::string::npos)
      << run.err;
}

TEST(BackendCli, NegativeMaxGraphRowsIsRejected) {
  const CliRun run =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --max-graph-rows -1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--max-graph-rows: expected >= 0 (0: no CUDA graphs), got -1"),
            std::string::npos)
      << run.err;
}

TEST(BackendCli, TensorParallelOnTheCpuIsRejected) {
  const CliRun run =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --tensor-parallel-size 2");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--tensor-parallel-size = 2: needs --backend cuda"), std::string::npos)
      << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
}

TEST(BackendCli, QuantizationIsCheckedAndRefusedOnTheCpu) {
  const CliRun bad =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --quantization int4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--quantization: quantization 'int4': expected none or fp8"),
            std::string::npos)
      << bad.err;
  const CliRun cpu =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --quantization fp8");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("--quantization fp8: needs --backend cuda"), std::string::npos) << cpu.err;
  EXPECT_TRUE(cpu.out.empty()) << cpu.out;
}

// --kv-cache-dtype fp8 (= fp8_e4m3) runs on the cpu backend: the log names the e4m3 pool, its
// page count is the cpu rule's (--num-pages 0: 2048, the flag does not change it) and its bytes
// are one per element: the tiny dummy model (2 layers, 2 KV heads x 64) has 2 x 2 x 16 x 128
// = 8192 elements per 16-token page, so 2048 pages hold 16 MiB (64 MiB in f32) and 64 pages
// 0.5 MiB. The run finishes with tokens (which may differ from the f32 run's).
TEST(BackendCli, KvCacheDtypeIsCheckedAndRunsOnTheCpu) {
  const std::string kInfo = "--log-level info ";  // the backend's summary line is at info
  const CliRun bad =
      run_packserve(kGenerate + "--prompts " + prompts_file() + " --kv-cache-dtype int4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--kv-cache-dtype: kv_cache_dtype 'int4': expected auto, fp8 or fp8_e4m3"),
            std::string::npos)
      << bad.err;
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  for (const std::string name : {"fp8", "fp8_e4m3"}) {
    const CliRun cpu = run_packserve(kInfo + kGenerate + "--prompts " + prompts_file() +
                                     " --backend cpu --kv-cache-dtype " + name);
    ASSERT_EQ(cpu.exit_code, 0) << name << ": " << cpu.err;
    EXPECT_NE(cpu.err.find("backend cpu: 2048 KV pages x 16 tokens (fp8_e4m3, 16.00 MiB)"),
              std::string::npos)
        << cpu.err;
    EXPECT_NE(cpu.out.find("\"token_ids\""), std::string::npos) << cpu.out;
    const CliRun pages = run_packserve(kInfo + kGenerate + "--prompts " + prompts_file() +
                                       " --kv-cache-dtype " + name + " --num-pages 64");
    ASSERT_EQ(pages.exit_code, 0) << pages.err;
    EXPECT_NE(pages.err.find("backend cpu: 64 KV pages x 16 tokens (fp8_e4m3, 0.50 MiB)"),
              std::string::npos)
        << pages.err;
  }
  // The default, and auto by name: the f32 pool.
  const CliRun dflt =
      run_packserve(kInfo + kGenerate + "--prompts " + prompts_file() + " --kv-cache-dtype auto");
  EXPECT_EQ(dflt.exit_code, 0) << dflt.err;
  EXPECT_NE(dflt.err.find("backend cpu: 2048 KV pages x 16 tokens (f32, 64.00 MiB)"),
            std::string::npos)
      << dflt.err;
}

}  // namespace
