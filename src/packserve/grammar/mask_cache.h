// mask_cache.h: a Grammar's cache of token masks, keyed by matcher state, shared by all the
// grammar's matchers. Requests under one constraint keep revisiting a few states (inside a
// JSON string, between object members), so most masks after the first few tokens are hits.
// Eviction: least recently used, once the masks held exceed capacity_bytes.
// Thread-safety: every method locks; a hit copies the mask under the lock.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace packserve::grammar {

// The full state of a matcher that a mask depends on, as 128 bits (a DFA state id, or a
// JSON recognizer state copied bit for bit).
struct MaskKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const MaskKey&) const = default;
};

inline constexpr int64_t kDefaultMaskCacheBytes = int64_t{64} << 20;

class MaskCache {
 public:
  explicit MaskCache(int64_t capacity_bytes = kDefaultMaskCacheBytes)
      : capacity_bytes_(capacity_bytes) {}

  // On a hit copies the mask into `mask` (same length as inserted) and returns its number of
  // allowed tokens; nullopt on a miss.
  std::optional<int64_t> lookup(const MaskKey& key, std::span<uint32_t> mask);
  // Stores a copy (no-op when the key is present), evicting the least recently used masks
  // beyond capacity_bytes (the newest one always stays).
  void insert(const MaskKey& key, std::span<const uint32_t> mask, int64_t num_allowed);

  int64_t num_entries() const;
  int64_t size_bytes() const;

 private:
  struct KeyHash {
    std::size_t operator()(const MaskKey& k) const {
      return static_cast<std::size_t>((k.hi * 0x9E3779B97F4A7C15ull) ^ k.lo ^ (k.lo >> 29));
    }
  };
  struct Entry {
    MaskKey key;
    std::vector<uint32_t> mask;
    int64_t num_allowed = 0;
  };

  const int64_t capacity_bytes_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<MaskKey, std::list<Entry>::iterator, KeyHash> index_;
  int64_t size_bytes_ = 0;
};

}  // namespace packserve::grammar
