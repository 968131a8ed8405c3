// mask_cache.cc: see mask_cache.h.
#include "packserve/grammar/mask_cache.h"

#include <algorithm>

namespace packserve::grammar {

std::optional<int64_t> MaskCache::lookup(const MaskKey& key, std::span<uint32_t> mask) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  const Entry& e = *it->second;
  std::copy(e.mask.begin(), e.mask.end(), mask.begin());
  return e.num_allowed;
}

void MaskCache::insert(const MaskKey& key, std::span<const uint32_t> mask, int64_t num_allowed) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index_.count(key) != 0) return;
  lru_.push_front(Entry{key, std::vector<uint32_t>(mask.begin(), mask.end()), num_allowed});
  index_.emplace(key, lru_.begin());
  size_bytes_ += static_cast<int64_t>(mask.size_bytes());
  while (size_bytes_ > capacity_bytes_ && lru_.size() > 1) {
    const Entry& victim = lru_.back();
    size_bytes_ -= static_cast<int64_t>(victim.mask.size() * sizeof(uint32_t));
    index_.erase(victim.key);
    lru_.pop_back();
  }
}

int64_t MaskCache::num_entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(lru_.size());
}

int64_t MaskCache::size_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_bytes_;
}

}  // namespace packserve::grammar
