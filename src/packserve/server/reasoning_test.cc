// reasoning_test.cc: ReasoningSplitter against hand-written reasoning and content; every case
// also fed byte by byte and split in two at every position, which must give the same parts.
#include "packserve/server/reasoning.h"

#include <gtest/gtest.h>

#include <string>

namespace packserve::server {
namespace {

void expect_split(const std::string& text, const std::string& reasoning,
                  const std::string& content) {
  SCOPED_TRACE(text);
  const ReasoningPiece whole = split_reasoning(text);
  EXPECT_EQ(whole.reasoning, reasoning);
  EXPECT_EQ(whole.content, content);
  const auto check_pieces = [&](const std::vector<std::string_view>& pieces) {
    ReasoningSplitter s;
    std::string r, c;
    for (std::string_view p : pieces) {
      ReasoningPiece out = s.feed(p);
      r += out.reasoning;
      c += out.content;
    }
    ReasoningPiece last = s.finish();
    EXPECT_EQ(r + last.reasoning, reasoning);
    EXPECT_EQ(c + last.content, content);
  };
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < text.size(); ++i)
    bytes.push_back(std::string_view(text).substr(i, 1));
  check_pieces(bytes);
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    check_pieces({std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)});
  }
}

TEST(ReasoningSplitter, ThinkThenAnswer) {
  expect_split("<think>\nThe user asks.\n</think>\n\nParis.", "The user asks.\n", "Paris.");
  expect_split("  <think>x</think>y", "x", "y");
  // Thinking off (Qwen3's empty block in the prompt): the output is all content.
  expect_split("Paris.", "", "Paris.");
  expect_split("\n\nParis.", "", "\n\nParis.");
  expect_split("", "", "");
}

TEST(ReasoningSplitter, UnclosedThinkIsReasoningAndPartialTagsResolve) {
  expect_split("<think>\nstill thinking", "still thinking", "");
  expect_split("<think>a</thi", "a</thi", "");
  expect_split("<thin", "", "<thin");
  expect_split("<thinking>", "", "<thinking>");
  expect_split("<think>a</think>b</think>c", "a", "b</think>c");
  expect_split("x<think>a</think>", "", "x<think>a</think>");
}

TEST(ReasoningSplitter, ReasoningStreamsBeforeTheCloseTag) {
  ReasoningSplitter s;
  EXPECT_EQ(s.feed("<thi").reasoning, "");
  EXPECT_EQ(s.feed("nk>\nab").reasoning, "ab");
  ReasoningPiece p = s.feed("c</th");
  EXPECT_EQ(p.reasoning, "c");  // "</th" may be the close tag: held
  p = s.feed("ink>\nok");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "ok");
  EXPECT_EQ(s.feed(" more").content, " more");
  p = s.finish();
  EXPECT_TRUE(p.reasoning.empty() && p.content.empty());
}

}  // namespace
}  // namespace packserve::server
