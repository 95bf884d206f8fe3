#include "tokenizer/bpe.h"

#include <climits>
#include <queue>

#include "core/error.h"

namespace deepinfer::tokenizer {

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  byte_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string(1, char(b)));
    if (it != vocab_.end()) byte_id_[b] = it->second;
  }
  size_t cap = 16;
  while (cap < merges.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  shift_ = 64 - __builtin_ctzll(cap);
  for (size_t r = 0; r < merges.size(); ++r) {
    auto& [a, b] = merges[r];
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    check(ia != vocab_.end() && ib != vocab_.end(), "BPE merge #", r, ": a part is not in the vocab");
    check(im != vocab_.end(), "BPE merge #", r, ": the merged token is not in the vocab");
    insert(ia->second, ib->second, int32_t(r), im->second);
  }
}

void BpeModel::insert(int32_t a, int32_t b, int32_t rank, int32_t id) {
  uint64_t k = key(a, b);
  size_t i = (k * 0x9E3779B97F4A7C15ull) >> shift_;
  while (slots_[i].key != kEmpty) {
    if (slots_[i].key == k) return;  // a duplicate merge keeps its first (lowest) rank, like HF
    i = (i + 1) & (slots_.size() - 1);
  }
  slots_[i] = Slot{k, rank, id};
  ++merge_count_;
}

void BpeModel::encode_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(bytes));
    if (it != vocab_.end()) return out.push_back(it->second);
  }
  size_t first = out.size();
  for (unsigned char c : bytes)
    if (byte_id_[c] >= 0) out.push_back(byte_id_[c]);
  // Short words: a quadratic scan beats a heap; long ones (runs of spaces, letters) need the heap.
  if (out.size() - first <= 64) merge_small(out, first);
  else merge_large(out, first);
}

// Repeatedly merges the lowest-ranked adjacent pair, leftmost first, in place in out[first..].
void BpeModel::merge_small(std::vector<int32_t>& out, size_t first) const {
  int32_t* s = out.data() + first;
  size_t n = out.size() - first;
  if (n < 2) return;
  int32_t rank[64], merged[64];
  for (size_t k = 0; k + 1 < n; ++k)
    if (!lookup(s[k], s[k + 1], rank[k], merged[k])) rank[k] = INT_MAX;
  while (n > 1) {
    size_t best = 0;
    for (size_t k = 1; k + 1 < n; ++k)
      if (rank[k] < rank[best]) best = k;
    if (rank[best] == INT_MAX) break;
    s[best] = merged[best];
    for (size_t k = best + 1; k + 1 < n; ++k) s[k] = s[k + 1], rank[k] = rank[k + 1], merged[k] = merged[k + 1];
    --n;
    if (best > 0 && !lookup(s[best - 1], s[best], rank[best - 1], merged[best - 1])) rank[best - 1] = INT_MAX;
    if (best + 1 < n && !lookup(s[best], s[best + 1], rank[best], merged[best])) rank[best] = INT_MAX;
  }
  out.resize(first + n);
}

// HF's algorithm: a min-heap of (rank, position) over a linked list of symbols; stale entries
// are skipped when popped.
void BpeModel::merge_large(std::vector<int32_t>& out, size_t first) const {
  size_t n = out.size() - first;
  std::vector<int32_t> id(out.begin() + first, out.end());
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) prev[i] = int32_t(i) - 1, next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  struct Entry {
    int32_t rank, pos, new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int32_t pos) {
    int32_t nx = next[pos], r, m;
    if (nx >= 0 && lookup(id[pos], id[nx], r, m)) heap.push({r, pos, m});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int32_t(i));
  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    int32_t nx = next[e.pos];
    if (!alive[e.pos] || nx < 0) continue;
    int32_t r, m;
    if (!lookup(id[e.pos], id[nx], r, m) || m != e.new_id) continue;  // stale entry
    id[e.pos] = m;
    alive[nx] = 0;
    next[e.pos] = next[nx];
    if (next[nx] >= 0) prev[next[nx]] = e.pos;
    if (prev[e.pos] >= 0) push(prev[e.pos]);
    push(e.pos);
  }
  out.resize(first);
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

}  // namespace deepinfer::tokenizer
