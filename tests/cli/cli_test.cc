// cli_test.cc: the packserve executable as a user runs it (issue 2 "Command line", issue 3
// `simulate`): exit codes (0 ok, 2 bad input), one JSON line/object on stdout with the
// documented keys, errors on stderr naming the field. Runs the built binary on the bundled
// batch files and trace slice (data/).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

using nlohmann::json;

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `packserve <args>` through the shell with stdout and stderr captured in files.
CliRun run_packserve(const std::string& args) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path();
  const auto out =
      dir / ("packserve_cli_out_" + std::to_string(::getpid()) + "_" + std::to_string(counter));
  const auto err =
      dir / ("packserve_cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string cmd =
      std::string(PACKSERVE_BIN) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_file(out);
  run.err = read_file(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return run;
}

std::string data(const std::string& name) {
  return std::string(PACKSERVE_SOURCE_DIR) + "/data/" + name;
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("packserve_cli_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(path) << text;
  return path;
}

TEST(AttentionVerifyCli, EveryPolicyVerifiesTheBundledBatchesWithOneJsonLine) {
  for (const char* batch :
       {"batches/default.json", "batches/decode_shared_prefix.json",
        "batches/decode_shared_prefix_fp8kv.json", "batches/prefill_f32_page1.json"}) {
    for (const char* policy : {"naive", "balanced", "prefix"}) {
      for (const char* det : {"", " --deterministic"}) {
        SCOPED_TRACE(std::string(batch) + " " + policy + det);
        const CliRun r = run_packserve("attention verify --batch " + data(batch) + " --policy " +
                                       policy + det + " --ctas 16");
        ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
        ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
        const json line = json::parse(r.out);
        EXPECT_TRUE(line.at("ok").get<bool>());
        EXPECT_EQ(line.at("policy"), policy);
        EXPECT_LE(line.at("max_abs_err").get<double>(), 1e-3);
        EXPECT_GE(line.at("max_rel_err").get<double>(), 0.0);
        EXPECT_GT(line.at("work_items").get<int64_t>(), 0);
        EXPECT_GE(line.at("kv_bytes_read").get<int64_t>(),
                  line.at("kv_bytes_unique").get<int64_t>());
        EXPECT_GE(line.at("imbalance").get<double>(), 1.0);
      }
    }
  }
}

TEST(AttentionVerifyCli, PrefixPolicyReadsSharedPagesOnceWhereBalancedDoesNot) {
  auto stats = [](const char* policy) {
    const CliRun r =
        run_packserve("attention plan --batch " + data("batches/decode_shared_prefix.json") +
                      " --policy " + policy + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const json prefix = stats("prefix");
  const json balanced = stats("balanced");
  const json& p = prefix.at("stats");
  const json& b = balanced.at("stats");
  EXPECT_EQ(p.at("kv_bytes_read"), p.at("kv_bytes_unique")) << "prefix reads each page once";
  EXPECT_LT(p.at("kv_bytes_read").get<int64_t>(), b.at("kv_bytes_read").get<int64_t>());
  EXPECT_EQ(p.at("kv_bytes_unique"), b.at("kv_bytes_unique"));
  // Items are head-implicit: the grid runs each once per KV head.
  EXPECT_EQ(prefix.at("items").size() * prefix.at("kv_heads").get<size_t>(),
            p.at("work_items").get<size_t>());
}

// Without --ctas a plan is made for 132 CTAs off the GPU (with --device cuda: the GPU's grid,
// checked by scripts/gpu-check.sh's cli step); --ctas sets it, and 0 is rejected.
TEST(AttentionVerifyCli, PlanCtasDefaultAndOverride) {
  auto plan = [](const std::string& extra) {
    return run_packserve("attention plan --batch " + data("batches/decode_shared_prefix.json") +
                         " --policy balanced --json" + extra);
  };
  const CliRun def = plan("");
  ASSERT_EQ(def.exit_code, 0) << def.err;
  const json d = json::parse(def.out);
  EXPECT_EQ(d.at("ctas").get<int>(), 132);
  EXPECT_EQ(d.at("cta_queues").get<int>(), 132 / d.at("kv_heads").get<int>());
  const CliRun set = plan(" --ctas 16");
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_EQ(json::parse(set.out).at("ctas").get<int>(), 16);
  const CliRun zero = plan(" --ctas 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.err.find("--ctas"), std::string::npos) << zero.err;
}

TEST(AttentionVerifyCli, BadSpecExitsTwoNamingTheField) {
  const auto spec =
      write_temp("bad_q_len.json",
                 R"({"num_qo_heads":4,"num_kv_heads":2,"head_dim":64,"page_size":16,"dtype":"f32",)"
                 R"("seed":1,"requests":[{"q_len":1,"kv_len":40},{"q_len":50,"kv_len":20}]})");
  const CliRun r = run_packserve("attention verify --batch " + spec.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("requests[1]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("q_len"), std::string::npos) << r.err;
  std::filesystem::remove(spec);

  const CliRun missing = run_packserve("attention verify --batch /nonexistent/batch.json");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent/batch.json"), std::string::npos) << missing.err;

  const CliRun policy = run_packserve("attention verify --batch " + data("batches/default.json") +
                                      " --policy fastest");
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.err.find("--policy"), std::string::npos) << policy.err;
}

TEST(SimulateCli, JsonReportOnTheBundledSliceHasEveryKeyAndNoLeak) {
  for (const char* trace : {"traces/mooncake_slice.jsonl", "traces/azure_conv_slice.csv"}) {
    SCOPED_TRACE(trace);
    const CliRun r = run_packserve("--log-level info simulate --trace " + data(trace) +
                                   " --max-requests 60 --policy aimd --packing dp --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json report = json::parse(r.out);  // stdout is the JSON object alone
    for (const char* key :
         {"requests", "completed", "output_tokens_per_s", "requests_per_s", "goodput_req_per_s",
          "preemptions", "prefix_hit_rate", "pages_leaked"}) {
      EXPECT_TRUE(report.contains(key)) << key;
    }
    for (const char* key : {"ttft_ms", "tpot_ms", "tbt_ms", "ttlt_ms"}) {
      for (const char* q : {"p50", "p90", "p99", "mean"}) {
        EXPECT_TRUE(report.at(key).contains(q)) << key << "." << q;
      }
      EXPECT_LE(report.at(key).at("p50").get<double>(), report.at(key).at("p99").get<double>());
    }
    EXPECT_EQ(report.at("requests"), 60);
    EXPECT_EQ(report.at("completed"), 60);
    EXPECT_EQ(report.at("pages_leaked"), 0);
    EXPECT_NE(r.err.find("[sched]"), std::string::npos) << "info log lines go to stderr";
  }
}

TEST(SimulateCli, MalformedTraceNamesFileLineAndField) {
  const auto trace = write_temp("bad.jsonl",
                                "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
                                "\"hash_ids\": [1]}\n"
                                "{\"timestamp\": 5, \"input_length\": \"many\", "
                                "\"output_length\": 5, \"hash_ids\": [2]}\n");
  const CliRun r =
      run_packserve("simulate --format mooncake --trace " + trace.string() + " --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find(trace.filename().string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("input_length"), std::string::npos) << r.err;
  std::filesystem::remove(trace);
}

// --kv-cache-dtype sets the cost model's KV element size: the pool from kv_capacity_bytes is
// floor(capacity / (kv bytes per token * 16)) pages, worked out in cost_model_test.cc (H100
// file: 26,226 bf16, 52,452 float8; H200 file: 55,313 and 110,626); auto keeps the file's own.
TEST(SimulateCli, KvCacheDtypeSetsTheKvElementSizeAndThePool) {
  auto simulate = [](const std::string& extra) {
    return run_packserve("simulate --trace " + data("traces/mooncake_slice.jsonl") +
                         " --max-requests 20 --json" + extra);
  };
  struct Case {
    std::string flags;
    const char* dtype;
    int64_t kv_dtype_bytes;
    int64_t pages;
  };
  const std::string h200 = " --cost-model " + data("cost_models/h200_llama31_8b.json");
  const Case cases[] = {{"", "auto", 2, 26226},
                        {" --kv-cache-dtype auto", "auto", 2, 26226},
                        {" --kv-cache-dtype fp8", "fp8_e4m3", 1, 52452},
                        {" --kv-cache-dtype fp8_e4m3", "fp8_e4m3", 1, 52452},
                        {h200, "auto", 2, 55313},
                        {h200 + " --kv-cache-dtype fp8", "fp8_e4m3", 1, 110626}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const CliRun r = simulate(c.flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json report = json::parse(r.out);
    EXPECT_EQ(report.at("kv_cache_dtype"), c.dtype);
    EXPECT_EQ(report.at("kv_dtype_bytes").get<int64_t>(), c.kv_dtype_bytes);
    EXPECT_EQ(report.at("pages_total").get<int64_t>(), c.pages);
    EXPECT_EQ(report.at("completed"), 20);
    EXPECT_EQ(report.at("pages_leaked"), 0);
  }
  // auto is the cost model's own model.kv_dtype_bytes.
  std::string text = read_file(data("cost_models/h100_llama31_8b.json"));
  text.replace(text.find("\"dtype_bytes\": 2"), 16, "\"dtype_bytes\": 2, \"kv_dtype_bytes\": 1");
  const auto fp8_file = write_temp("fp8_kv_cost_model.json", text);
  const CliRun own = simulate(" --cost-model " + fp8_file.string());
  ASSERT_EQ(own.exit_code, 0) << own.err;
  const json report = json::parse(own.out);
  EXPECT_EQ(report.at("kv_cache_dtype"), "auto");
  EXPECT_EQ(report.at("kv_dtype_bytes").get<int64_t>(), 1);
  EXPECT_EQ(report.at("pages_total").get<int64_t>(), 52452);
  std::filesystem::remove(fp8_file);
  // The text report names it too.
  const CliRun readable = run_packserve("simulate --trace " + data("traces/mooncake_slice.jsonl") +
                                        " --max-requests 20 --kv-cache-dtype fp8");
  ASSERT_EQ(readable.exit_code, 0) << readable.err;
  EXPECT_NE(
      readable.out.find("kv cache dtype fp8_e4m3 (kv_dtype_bytes 1, 65536 KV bytes per token)"),
      std::string::npos)
      << readable.out;
  EXPECT_NE(readable.out.find("pages total 52452"), std::string::npos) << readable.out;
}

TEST(SimulateCli, BadKvCacheDtypeExitsTwoNamingTheFlag) {
  const CliRun r = run_packserve("simulate --trace " + data("traces/mooncake_slice.jsonl") +
                                 " --kv-cache-dtype int4 --json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("--kv-cache-dtype: kv_cache_dtype 'int4': expected auto, fp8 or fp8_e4m3"),
            std::string::npos)
      << r.err;
}

TEST(EngineFlagsCli, BadPolicyNamesTheFlagInEveryEngineCommand) {
  const auto prompts = write_temp("prompts.jsonl", "{\"prompt_ids\": [1, 2, 3]}\n");
  const std::string trace = data("traces/mooncake_slice.jsonl");
  const std::string generate = "generate --dummy-model tiny --prompts " + prompts.string();
  const std::string bench =
      "bench --in-process --dummy-model tiny --max-requests 1 --trace " + trace;
  for (const std::string& cmd :
       {generate, bench, std::string("serve --dummy-model tiny --port 0")}) {
    for (const char* flag : {"--policy", "--attention-policy"}) {
      SCOPED_TRACE(cmd + " " + flag);
      const CliRun r = run_packserve(cmd + " " + flag + " fastest");
      EXPECT_NE(r.exit_code, 0);
      EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
    }
  }
  std::filesystem::remove(prompts);
}

// A bad --temperature is a usage error naming the flag, before any model is loaded; a good
// one reaches result.json.
TEST(BenchCli, TemperatureIsCheckedAndRecorded) {
  const std::string trace = data("traces/mooncake_slice.jsonl");
  const std::string bench =
      "bench --in-process --dummy-model tiny --max-requests 2 --max-input-tokens 64 "
      "--max-output-tokens 4 --trace " +
      trace;
  for (const char* bad : {"-0.5", "nan", "inf"}) {
    SCOPED_TRACE(bad);
    const CliRun r = run_packserve(bench + " --temperature " + bad);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("--temperature"), std::string::npos) << r.err;
  }
  const auto out = std::filesystem::temp_directory_path() / "packserve_bench_temperature";
  std::filesystem::remove_all(out);
  const CliRun r = run_packserve(bench + " --temperature 0 --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out / "result.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["completed"], 2);
  std::filesystem::remove_all(out);
}

TEST(GlobalCli, UnknownLogLevelAndMissingSubcommandAreUsageErrors) {
  EXPECT_EQ(run_packserve("--log-level loud simulate").exit_code, 2);
  EXPECT_EQ(run_packserve("").exit_code, 2);
  EXPECT_EQ(run_packserve("--help").exit_code, 0);
}

}  // namespace
