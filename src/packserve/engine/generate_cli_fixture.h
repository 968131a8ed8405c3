// generate_cli_fixture.h: the fixture of the `packserve generate` tests (generate_cli_test.cc
// on the CPU backend, generate_cli_gpu_test.cc on CUDA): a temporary directory with a tiny
// random dummy checkpoint made by `packserve make-dummy-model`, a runner of the executable, and
// the copy-model check both backends run.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace packserve::testing {

using nlohmann::json;
namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class GenerateCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("packserve_generate_test_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const CliRun made = run("make-dummy-model --arch tiny --dtype f32 --threads 1 --out " +
                            (*dir_ / "model").string());
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static CliRun run(const std::string& args) {
    static int counter = 0;
    const fs::path out = *dir_ / ("out" + std::to_string(counter));
    const fs::path err = *dir_ / ("err" + std::to_string(counter++));
    const std::string cmd = bin() + " " + args + " >" + out.string() + " 2>" + err.string();
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  static fs::path write(const std::string& name, const std::string& text) {
    const fs::path p = *dir_ / name;
    std::ofstream(p) << text;
    return p;
  }

  static std::vector<json> lines_of(const std::string& out) {
    std::vector<json> lines;
    size_t pos = 0;
    while (pos < out.size()) {
      const size_t end = out.find('\n', pos);
      lines.push_back(json::parse(out.substr(pos, end - pos)));
      pos = end + 1;
    }
    return lines;
  }

  static std::string model() { return "--model " + (*dir_ / "model").string(); }

  // The packserve executable: $PACKSERVE_BIN (a copy carried to a GPU machine), else the one
  // this test was built beside.
  static std::string bin() {
    const char* env = std::getenv("PACKSERVE_BIN");
    return env != nullptr && *env != '\0' ? env : PACKSERVE_BIN;
  }

  static void expect_copy_models_decode_periodically(const std::string& backend);
  static void expect_structured_outputs_hold(const std::string& backend);

  static inline fs::path* dir_ = nullptr;
};

// `make-dummy-model --init copy`: layer 0 copies the token --copy-distance D back, so greedy
// decoding continues every prompt with period D + 1 (dummy_model.h). Through pages of 4 tokens,
// prefill chunked at 16 tokens beside decode rows, two prompts sharing a cached prefix, and
// decode steps that read the KV earlier decode steps wrote. The random model of the fixture
// does not have the property, so the check is not vacuous. With --num-speculative-tokens the
// tokens are the same (seeded draws too), most of them drafts the forward verified.
inline void GenerateCliTest::expect_copy_models_decode_periodically(const std::string& backend) {
  uint64_t state = 12345;
  auto next_id = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % 240) + 10;
  };
  std::vector<std::vector<int>> prompts;
  for (int len : {8, 9, 13, 31, 60, 24}) {
    std::vector<int> p;
    for (int i = 0; i < len; ++i) p.push_back(next_id());
    prompts.push_back(p);
  }
  prompts.push_back(prompts[4]);  // the first 56 tokens come from the prefix cache
  prompts.back().resize(58);
  std::string text;
  for (const auto& p : prompts) text += json{{"prompt_ids", p}}.dump() + "\n";
  const fs::path file = write("copy.jsonl", text);
  const int kTokens = 40;
  const std::string flags = " --prompts " + file.string() + " --max-tokens " +
                            std::to_string(kTokens) +
                            " --temperature 0 --ignore-eos --page-size 4 --num-pages 1024"
                            " --max-num-batched-tokens 16 --backend " +
                            backend;
  // How many output tokens equal the token D + 1 before them.
  auto periodic = [&](const std::vector<json>& lines, int distance) {
    int count = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int> seq = prompts[i];
      const auto out = lines[i]["token_ids"].get<std::vector<int>>();
      EXPECT_EQ(out.size(), static_cast<size_t>(kTokens));
      seq.insert(seq.end(), out.begin(), out.end());
      for (size_t k = 0; k < out.size(); ++k) {
        count += out[k] == seq[prompts[i].size() + k - 1 - static_cast<size_t>(distance)];
      }
    }
    return count;
  };
  const int all = kTokens * static_cast<int>(prompts.size());
  struct Case {
    const char* arch;
    const char* dtype;
    int distance;
  };
  for (const Case c :
       {Case{"tiny", "bf16", 7}, Case{"tiny-llama", "bf16", 7}, Case{"tiny-qwen2", "f32", 3}}) {
    SCOPED_TRACE(c.arch);
    const fs::path dir = *dir_ / (std::string("copy-") + c.arch);
    const CliRun made = run("make-dummy-model --arch " + std::string(c.arch) + " --dtype " +
                            c.dtype + " --init copy --copy-distance " + std::to_string(c.distance) +
                            " --threads 1 --out " + dir.string());
    ASSERT_EQ(made.exit_code, 0) << made.err;
    EXPECT_EQ(json::parse(made.out)["init"], "copy");
    const CliRun r = run("generate --model " + dir.string() + flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), prompts.size());
    EXPECT_EQ(periodic(lines, c.distance), all);
    // Prompt-lookup drafts (the period repeats the context): the same tokens, most of them
    // accepted drafts.
    const CliRun spec =
        run("generate --model " + dir.string() + flags + " --num-speculative-tokens 4");
    ASSERT_EQ(spec.exit_code, 0) << spec.err;
    const auto spec_lines = lines_of(spec.out);
    ASSERT_EQ(spec_lines.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(spec_lines[i]["token_ids"], lines[i]["token_ids"]) << "prompt " << i;
    }
    std::smatch m;
    ASSERT_TRUE(std::regex_search(spec.err, m, std::regex("accepted_draft_tokens=([0-9]+)")))
        << spec.err;
    EXPECT_GT(std::stoi(m[1].str()), all / 2) << spec.err;
    // With --logprobs the drafts' rows are draw rows: the same tokens and logprobs (up to the
    // rounding of rows computed in a multi-row pass), again mostly accepted drafts.
    const CliRun lp = run("generate --model " + dir.string() + flags + " --logprobs");
    const CliRun lp_spec =
        run("generate --model " + dir.string() + flags + " --logprobs --num-speculative-tokens 4");
    ASSERT_EQ(lp.exit_code, 0) << lp.err;
    ASSERT_EQ(lp_spec.exit_code, 0) << lp_spec.err;
    const auto lp_lines = lines_of(lp.out);
    const auto lp_spec_lines = lines_of(lp_spec.out);
    ASSERT_EQ(lp_lines.size(), prompts.size());
    ASSERT_EQ(lp_spec_lines.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(lp_spec_lines[i]["token_ids"], lines[i]["token_ids"]) << "prompt " << i;
      const auto a = lp_spec_lines[i]["logprobs"].get<std::vector<double>>();
      const auto b = lp_lines[i]["logprobs"].get<std::vector<double>>();
      ASSERT_EQ(a.size(), static_cast<size_t>(kTokens)) << "prompt " << i;
      ASSERT_EQ(b.size(), a.size());
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_NEAR(a[k], b[k], 1e-2 + 1e-2 * std::abs(b[k])) << "prompt " << i << " token " << k;
      }
    }
    ASSERT_TRUE(std::regex_search(lp_spec.err, m, std::regex("accepted_draft_tokens=([0-9]+)")))
        << lp_spec.err;
    EXPECT_GT(std::stoi(m[1].str()), all / 2) << lp_spec.err;
    // Seeded draws (rejection sampling of the drafts, each row with its token's own uniform):
    // the same tokens with and without drafts, again mostly accepted drafts. At a low
    // temperature: the tiny copy model's logits are not peaked enough for its period to
    // survive 0.3.
    std::string sampled = flags;
    sampled.replace(sampled.find("--temperature 0"), 15, "--temperature 0.05 --seed 3");
    const CliRun t = run("generate --model " + dir.string() + sampled);
    const CliRun t_spec =
        run("generate --model " + dir.string() + sampled + " --num-speculative-tokens 4");
    ASSERT_EQ(t.exit_code, 0) << t.err;
    ASSERT_EQ(t_spec.exit_code, 0) << t_spec.err;
    const auto t_lines = lines_of(t.out);
    const auto t_spec_lines = lines_of(t_spec.out);
    ASSERT_EQ(t_lines.size(), prompts.size());
    ASSERT_EQ(t_spec_lines.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(t_spec_lines[i]["token_ids"], t_lines[i]["token_ids"]) << "prompt " << i;
    }
    ASSERT_TRUE(std::regex_search(t_spec.err, m, std::regex("accepted_draft_tokens=([0-9]+)")))
        << t_spec.err;
    EXPECT_GT(std::stoi(m[1].str()), all / 2) << t_spec.err;
  }
  const CliRun r = run("generate " + model() + flags);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(periodic(lines_of(r.out), 7), all / 4);
  const CliRun bad = run("make-dummy-model --arch tiny --init copy --copy-distance 65 --out " +
                         (*dir_ / "bad").string());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--copy-distance: expected 1..64, got 65"), std::string::npos) << bad.err;
}

// Structured outputs on the fixture's random model (docs/engine.md "Structured outputs"): every
// text of a --regex run matches it, every --choice text is one of the choices, and the
// --json-schema outputs that end before max_tokens parse with the schema's keys and types.
inline void GenerateCliTest::expect_structured_outputs_hold(const std::string& backend) {
  const fs::path prompts = write("structured.jsonl",
                                 "{\"prompt\": \"Hello, world\"}\n{\"prompt_ids\": [5, 17, 42]}\n"
                                 "{\"prompt\": \"The quick brown fox\"}\n{\"prompt\": \"a\"}\n");
  const std::string base = "generate " + model() + " --prompts " + prompts.string() +
                           " --temperature 1 --seed 3 --backend " + backend;
  const std::string pattern = "[a-z]{2,6}( [a-z]{2,6}){2}";
  CliRun r = run(base + " --max-tokens 40 --regex '" + pattern + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const json& line : lines_of(r.out)) {
    EXPECT_TRUE(std::regex_match(line["text"].get<std::string>(), std::regex(pattern)))
        << line.dump();
    EXPECT_EQ(line["finish_reason"], "stop") << line.dump();
  }
  r = run(base + " --max-tokens 8 --choice yes --choice no --choice maybe");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const json& line : lines_of(r.out)) {
    const std::string text = line["text"];
    EXPECT_TRUE(text == "yes" || text == "no" || text == "maybe") << line.dump();
  }
  const fs::path schema = write(
      "schema.json", R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},)"
                     R"("age":{"type":"integer","minimum":0,"maximum":120},)"
                     R"("tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},)"
                     R"("required":["name","age"]})");
  r = run(base + " --max-tokens 200 --json-schema " + schema.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int parsed = 0;
  for (const json& line : lines_of(r.out)) {
    if (line["finish_reason"] != "stop") continue;
    const json doc = json::parse(line["text"].get<std::string>());
    ASSERT_TRUE(doc.at("name").is_string()) << line.dump();
    const std::string name = doc.at("name");  // maxLength counts code points
    EXPECT_LE(std::count_if(name.begin(), name.end(), [](char c) { return (c & 0xC0) != 0x80; }), 6)
        << line.dump();
    EXPECT_TRUE(doc.at("age").is_number_integer() && doc.at("age") >= 0 && doc.at("age") <= 120);
    if (doc.contains("tags")) {
      EXPECT_LE(doc.at("tags").size(), 2u);
    }
    ++parsed;
  }
  EXPECT_GT(parsed, 0) << r.out;
  // A GBNF grammar: a list of 1-3 "key=value" items, values numbers or lowercase words.
  const fs::path grammar = write("list.gbnf",
                                 "root ::= item (\",\" item){0,2}\n"
                                 "item ::= key \"=\" (num | word)  # one pair\n"
                                 "key ::= [a-z]{1,4}\nnum ::= [0-9]{1,3}\nword ::= [a-z]{1,5}\n");
  r = run(base + " --max-tokens 60 --grammar " + grammar.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex list(
      "[a-z]{1,4}=(?:[0-9]{1,3}|[a-z]{1,5})(?:,[a-z]{1,4}=(?:[0-9]{1,3}|[a-z]{1,5})){0,2}");
  for (const json& line : lines_of(r.out)) {
    EXPECT_TRUE(std::regex_match(line["text"].get<std::string>(), list)) << line.dump();
    EXPECT_EQ(line["finish_reason"], "stop") << line.dump();
  }
  const fs::path bad_grammar = write("bad.gbnf", "root ::= \"a\" item\n");
  r = run(base + " --grammar " + bad_grammar.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--grammar " + bad_grammar.string() +
                       ": grammar: line 1 column 14: rule \"item\" is not defined"),
            std::string::npos)
      << r.err;
  // A structural tag: free text, and after "<n>" a number then "</n>" (then free text); an
  // output cut by max_tokens may end inside a structure.
  const fs::path tag =
      write("tag.json", R"({"structures":[{"begin":"<n>","schema":{"type":"integer"},)"
                        R"("end":"</n>"}],"triggers":["<n>"]})");
  r = run(base + " --max-tokens 40 --structural-tag " + tag.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string free_text = "(?:(?!<n>)[\\s\\S])*";
  const std::regex tagged(free_text + "(?:<n>-?(?:0|[1-9][0-9]*)</n>" + free_text + ")*");
  const std::regex cut(free_text + "(?:<n>-?(?:0|[1-9][0-9]*)</n>" + free_text +
                       ")*(?:<n>-?[0-9]*(?:<|</|</n)?)?");
  for (const json& line : lines_of(r.out)) {
    const std::string text = line["text"];
    EXPECT_TRUE(std::regex_match(text, line["finish_reason"] == "length" ? cut : tagged))
        << line.dump();
  }
  const fs::path bad_tag = write("bad_tag.json", R"({"structures":[],"triggers":["<"]})");
  r = run(base + " --structural-tag " + bad_tag.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--structural-tag " + bad_tag.string() + ": structural_tag: structures:"),
            std::string::npos)
      << r.err;
  r = run(base + " --regex '(ab'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--regex: regex: position"), std::string::npos) << r.err;
  r = run(base + " --regex a --json-object");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("give at most one of --regex"), std::string::npos) << r.err;
}

}  // namespace packserve::testing
