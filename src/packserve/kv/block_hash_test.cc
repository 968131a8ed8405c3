// block_hash_test.cc: the chained page key (block_hash.h).
#include "packserve/kv/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <vector>

namespace packserve::kv {
namespace {

TEST(BlockHashTest, PageKeyIsXxh3OfTheTokenBytesSeededByTheParent) {
  const std::vector<TokenId> tokens = {1, 2, 3, 4};
  // The definition in block_hash.h, written out with the library call.
  const PageKey expected = XXH3_64bits_withSeed(tokens.data(), 4 * sizeof(TokenId), 77);
  EXPECT_EQ(page_key(77, tokens), expected);
}

TEST(BlockHashTest, KeyDependsOnParentAndContent) {
  const std::vector<TokenId> a = {1, 2, 3, 4};
  const std::vector<TokenId> b = {1, 2, 3, 5};
  EXPECT_NE(page_key(kRootPageKey, a), page_key(kRootPageKey, b));
  EXPECT_NE(page_key(kRootPageKey, a), page_key(page_key(kRootPageKey, b), a));
  EXPECT_EQ(page_key(kRootPageKey, a), page_key(kRootPageKey, a));
}

TEST(BlockHashTest, FullPageKeysChainAndIgnoreTheTrailingPartialPage) {
  std::vector<TokenId> tokens;
  for (TokenId t = 0; t < 11; ++t) tokens.push_back(t * 7 + 1);
  std::vector<PageKey> keys;
  full_page_keys(tokens, 4, &keys);
  ASSERT_EQ(keys.size(), 2u);  // 11 tokens = 2 full pages of 4 + 3
  const PageKey k0 = page_key(kRootPageKey, std::span<const TokenId>(tokens).subspan(0, 4));
  const PageKey k1 = page_key(k0, std::span<const TokenId>(tokens).subspan(4, 4));
  EXPECT_EQ(keys[0], k0);
  EXPECT_EQ(keys[1], k1);

  // The same page content after a different first page gets a different key.
  std::vector<TokenId> other = tokens;
  other[0] += 1;
  std::vector<PageKey> other_keys;
  full_page_keys(other, 4, &other_keys);
  EXPECT_NE(other_keys[0], keys[0]);
  EXPECT_NE(other_keys[1], keys[1]);
}

}  // namespace
}  // namespace packserve::kv
