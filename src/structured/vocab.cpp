#include "structured/vocab.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace deepinfer::structured {

TokenVocab::TokenVocab(std::vector<std::string> tokens, std::vector<int32_t> stop_ids) {
  auto d = std::make_shared<Data>();
  d->tokens = std::move(tokens);
  d->stop_ids = std::move(stop_ids);
  for (int32_t s : d->stop_ids)
    check(s >= 0 && s < static_cast<int32_t>(d->tokens.size()), "TokenVocab: stop id ", s,
          " outside the vocabulary of ", d->tokens.size());
  for (int32_t i = 0; i < static_cast<int32_t>(d->tokens.size()); ++i) {
    check(d->tokens[i].size() < 65536, "TokenVocab: token ", i, " is longer than 65535 bytes");
    if (!d->tokens[i].empty()) d->sorted_ids.push_back(i);
  }
  std::sort(d->sorted_ids.begin(), d->sorted_ids.end(),
            [&](int32_t a, int32_t b) { return d->tokens[a] < d->tokens[b]; });
  size_t n = d->sorted_ids.size();
  d->sorted_offset.reserve(n + 1);
  for (int32_t id : d->sorted_ids) {
    d->sorted_offset.push_back(static_cast<uint32_t>(d->sorted_blob.size()));
    d->sorted_blob += d->tokens[id];
  }
  d->sorted_offset.push_back(static_cast<uint32_t>(d->sorted_blob.size()));
  d->lcp_prev.assign(n, 0);
  d->subtree_end.assign(n, 0);
  for (size_t i = 1; i < n; ++i) {
    const std::string& a = d->tokens[d->sorted_ids[i - 1]];
    const std::string& b = d->tokens[d->sorted_ids[i]];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    d->lcp_prev[i] = static_cast<uint16_t>(k);
  }
  // Token i's subtree ends at the first later token that does not extend it (stack of open prefixes).
  std::vector<size_t> open;
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = d->tokens[d->sorted_ids[i]];
    while (!open.empty()) {
      const std::string& p = d->tokens[d->sorted_ids[open.back()]];
      if (t.size() >= p.size() && t.compare(0, p.size(), p) == 0) break;
      d->subtree_end[open.back()] = static_cast<int32_t>(i);
      open.pop_back();
    }
    open.push_back(i);
  }
  for (size_t i : open) d->subtree_end[i] = static_cast<int32_t>(n);
  size_t pos = 0;
  for (int b = 0; b < 256; ++b) {
    while (pos < n && static_cast<uint8_t>(d->tokens[d->sorted_ids[pos]][0]) < b) ++pos;
    d->first_byte_begin[b] = static_cast<int32_t>(pos);
  }
  d->first_byte_begin[256] = static_cast<int32_t>(n);
  d->shared = make_shared_classes();
  d_ = std::move(d);
}

bool TokenVocab::is_stop(int32_t id) const {
  return std::find(d_->stop_ids.begin(), d_->stop_ids.end(), id) != d_->stop_ids.end();
}

}  // namespace deepinfer::structured
