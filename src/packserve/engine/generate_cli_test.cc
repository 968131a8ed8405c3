// generate_cli_test.cc: `packserve generate` as a user runs it, on a tiny dummy checkpoint made
// with `packserve make-dummy-model`: one JSON line per prompt in input order, greedy output
// deterministic and independent of the other prompts, --logits-out whose row argmax is the
// first greedy token, stop strings, copy models decoding periodically, and errors naming the
// file and line (exit 2).
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "packserve/engine/generate_cli_fixture.h"

namespace packserve::testing {
namespace {

const char* kPrompts =
    "{\"prompt\": \"Hello, world\"}\n"
    "{\"prompt_ids\": [5, 17, 42, 42, 9]}\n"
    "\n"
    "{\"prompt\": \"The quick brown fox jumps over the lazy dog\"}\n";

TEST_F(GenerateCliTest, GreedyLinesInOrderDeterministicAndIndependentOfTheBatch) {
  const fs::path prompts = write("p.jsonl", kPrompts);
  const std::string args = "generate " + model() + " --prompts " + prompts.string() +
                           " --max-tokens 12 --temperature 0 --ignore-eos --page-size 4"
                           " --max-num-batched-tokens 16";
  const CliRun a = run(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto lines = lines_of(a.out);
  ASSERT_EQ(lines.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["index"], i);
    EXPECT_EQ(lines[i]["finish_reason"], "length");
    EXPECT_EQ(lines[i]["token_ids"].size(), 12u);
    EXPECT_EQ(lines[i]["num_output_tokens"], 12);
    EXPECT_TRUE(lines[i]["ttft_ms"].is_number());
    EXPECT_GE(lines[i]["e2e_ms"].get<double>(), lines[i]["ttft_ms"].get<double>());
  }
  EXPECT_EQ(lines[1]["num_prompt_tokens"], 5);
  // Deterministic.
  const CliRun b = run(args);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const auto again = lines_of(b.out);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again[i]["token_ids"], lines[i]["token_ids"]);
  // The third prompt alone gives the same tokens as in the batch.
  const fs::path single =
      write("single.jsonl", "{\"prompt\": \"The quick brown fox jumps over the lazy dog\"}\n");
  const CliRun c = run("generate " + model() + " --prompts " + single.string() +
                       " --max-tokens 12 --temperature 0 --ignore-eos");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(lines_of(c.out)[0]["token_ids"], lines[2]["token_ids"]);
}

TEST_F(GenerateCliTest, LogitsOutRowsArgmaxIsTheFirstGreedyToken) {
  const fs::path prompts = write("p2.jsonl", kPrompts);
  const fs::path npy = *dir_ / "logits.npy";
  const CliRun r = run("generate " + model() + " --prompts " + prompts.string() +
                       " --max-tokens 2 --temperature 0 --ignore-eos --logits-out " + npy.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  const std::string bytes = slurp(npy);
  ASSERT_GE(bytes.size(), 10u);
  ASSERT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  const size_t shape_at = header.find("'shape': (3, ");
  ASSERT_NE(shape_at, std::string::npos) << header;
  const int64_t vocab = std::stoll(header.substr(shape_at + 13));
  ASSERT_GT(vocab, 0);
  ASSERT_EQ(bytes.size(), 10 + header_len + 3 * static_cast<size_t>(vocab) * 4);
  for (size_t i = 0; i < 3; ++i) {
    std::vector<float> row(static_cast<size_t>(vocab));
    std::memcpy(row.data(), bytes.data() + 10 + header_len + i * row.size() * 4, row.size() * 4);
    size_t best = 0;
    for (size_t v = 1; v < row.size(); ++v) {
      if (row[v] > row[best]) best = v;
    }
    EXPECT_EQ(lines[i]["token_ids"][0], best) << "prompt " << i;
  }
}

TEST_F(GenerateCliTest, StopStringCutsTheText) {
  const fs::path prompts = write("p3.jsonl", kPrompts);
  const std::string base = "generate " + model() + " --prompts " + prompts.string() +
                           " --max-tokens 24 --temperature 0 --ignore-eos";
  const CliRun full = run(base);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const auto lines = lines_of(full.out);
  // A two-character ASCII (not quote/backslash/space) piece of prompt 0's text as the stop.
  const std::string text = lines[0]["text"];
  std::string stop;
  for (size_t k = 1; k + 2 <= text.size() && stop.empty(); ++k) {
    const unsigned char a = static_cast<unsigned char>(text[k]);
    const unsigned char b = static_cast<unsigned char>(text[k + 1]);
    auto plain = [](unsigned char ch) { return std::isalnum(ch) != 0; };
    if (plain(a) && plain(b)) stop = text.substr(k, 2);
  }
  if (stop.empty()) GTEST_SKIP() << "no alphanumeric pair in the greedy text: " << text;
  const CliRun cut = run(base + " --stop " + stop);
  ASSERT_EQ(cut.exit_code, 0) << cut.err;
  const auto cut_lines = lines_of(cut.out);
  EXPECT_EQ(cut_lines[0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut_lines[0]["finish_reason"], "stop");
}

// --presence-penalty / --frequency-penalty: the first tokens are plain greedy's (nothing
// generated yet), the rest repeat fewer tokens; the engine tests check the arithmetic.
TEST_F(GenerateCliTest, PenaltiesRepeatFewerTokens) {
  const fs::path prompts = write("p4.jsonl", kPrompts);
  const std::string base = "generate " + model() + " --prompts " + prompts.string() +
                           " --max-tokens 24 --temperature 0 --ignore-eos";
  const CliRun plain = run(base);
  const CliRun penalized = run(base + " --presence-penalty 2 --frequency-penalty 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(penalized.exit_code, 0) << penalized.err;
  const auto a = lines_of(plain.out), b = lines_of(penalized.out);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  auto repeats = [](const auto& line) {
    std::vector<int64_t> ids = line["token_ids"];
    std::sort(ids.begin(), ids.end());
    return ids.size() - static_cast<size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
  };
  size_t plain_repeats = 0, penalized_repeats = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b[i]["token_ids"][0], a[i]["token_ids"][0]) << i;
    plain_repeats += repeats(a[i]);
    penalized_repeats += repeats(b[i]);
  }
  EXPECT_LT(penalized_repeats, plain_repeats);
}

// --logit-bias ID:BIAS: +100 makes every greedy token that id; a malformed value or an id
// outside the vocabulary is exit 2 naming it, with nothing generated.
TEST_F(GenerateCliTest, LogitBiasForcesAToken) {
  const fs::path prompts = write("p5.jsonl", kPrompts);
  const std::string base = "generate " + model() + " --prompts " + prompts.string() +
                           " --max-tokens 6 --temperature 0 --ignore-eos";
  const CliRun forced = run(base + " --logit-bias 65:100 --logit-bias 66:-1.5");
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  const auto lines = lines_of(forced.out);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& line : lines) {
    EXPECT_EQ(line["token_ids"], std::vector<int64_t>(6, 65)) << line.dump();
  }
  for (const char* bad : {"65", "x:1", "65:", ":3", "65:1e"}) {
    const CliRun r = run(base + " --logit-bias " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find(std::string("--logit-bias ") + bad + ": expected ID:BIAS"),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty());
  }
  const CliRun outside = run(base + " --logit-bias 99999999:1");
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_NE(outside.err.find("logit_bias"), std::string::npos) << outside.err;
  EXPECT_TRUE(outside.out.empty());
}

// Copy models decode periodically on the CPU backend (generate_cli_fixture.h).
TEST_F(GenerateCliTest, CopyModelContinuesEachPromptPeriodically) {
  expect_copy_models_decode_periodically("cpu");
}

TEST_F(GenerateCliTest, StructuredOutputsHold) { expect_structured_outputs_hold("cpu"); }

TEST_F(GenerateCliTest, BadInputIsExit2NamingFileAndLine) {
  const fs::path bad = write("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": 3}\n");
  CliRun r = run("generate " + model() + " --prompts " + bad.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(bad.string() + ":2: \"prompt\": expected a string"), std::string::npos)
      << r.err;
  EXPECT_TRUE(r.out.empty());
  const fs::path junk = write("junk.jsonl", "{\"prompt\": \"ok\"}\n\n{not json\n");
  r = run("generate " + model() + " --prompts " + junk.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(junk.string() + ":3: not valid JSON"), std::string::npos) << r.err;
  const fs::path big = write("big.jsonl", "{\"prompt_ids\": [1, 99999999]}\n");
  r = run("generate " + model() + " --prompts " + big.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("prompt_token_ids[1]"), std::string::npos) << r.err;
  const fs::path good = write("good.jsonl", "{\"prompt\": \"ok\"}\n");
  r = run("generate " + model() + " --prompts " + good.string() + " --top-p 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("top_p"), std::string::npos) << r.err;
  r = run("generate " + model() + " --prompts " + good.string() + " --repetition-penalty 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("repetition_penalty: expected a finite number > 0"), std::string::npos)
      << r.err;
  r = run("generate " + model() + " --prompts " + good.string() + " --min-tokens 17");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("min_tokens: expected an integer in [0, max_tokens = 16], got 17"),
            std::string::npos)
      << r.err;
  r = run("generate " + model() + " --prompts " + good.string() + " --num-speculative-tokens 17");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--num-speculative-tokens: expected an integer in [0, 16], got 17"),
            std::string::npos)
      << r.err;
  r = run("generate " + model() + " --prompts " + good.string() +
          " --num-speculative-tokens 2 --prompt-lookup-min 3 --prompt-lookup-max 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--prompt-lookup-min, --prompt-lookup-max: expected 1 <= "),
            std::string::npos)
      << r.err;
  r = run("generate --prompts " + bad.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace packserve::testing
