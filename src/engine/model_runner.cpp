#include "engine/model_runner.h"

#include <algorithm>

#include "core/error.h"
#include "engine/sequence.h"

namespace deepinfer::engine {

void ModelRunner::layout(const std::vector<ScheduledChunk>& chunks, model::ForwardBatch& b) {
  b.seq_start.assign(1, 0);
  for (const ScheduledChunk& ch : chunks) b.seq_start.push_back(b.seq_start.back() + ch.width());
}

void ModelRunner::fill(const std::vector<ScheduledChunk>& chunks, model::ForwardBatch& b) const {
  b.token_ids.clear();
  b.positions.clear();
  b.states.clear();
  b.embed_tokens.clear();
  b.embed_rows.clear();
  for (const ScheduledChunk& ch : chunks) {
    check(ch.start + ch.count <= static_cast<int64_t>(ch.seq->tokens.size()), "internal: token not resolved");
    // image-span rows of the chunk's positions (any chunking: the rows stay with the request)
    const std::vector<int64_t>& ep = ch.seq->request->embed_positions;
    if (!ep.empty()) {
      const int64_t dim = static_cast<int64_t>(ch.seq->request->embed_rows.size() / ep.size());
      for (auto it = std::lower_bound(ep.begin(), ep.end(), ch.start); it != ep.end() && *it < ch.start + ch.count; ++it) {
        b.embed_tokens.push_back(static_cast<int32_t>(b.token_ids.size() + (*it - ch.start)));
        const auto row = ch.seq->request->embed_rows.begin() + (it - ep.begin()) * dim;
        b.embed_rows.insert(b.embed_rows.end(), row, row + dim);
      }
    }
    b.token_ids.insert(b.token_ids.end(), ch.seq->tokens.begin() + ch.start, ch.seq->tokens.begin() + ch.start + ch.count);
    b.token_ids.insert(b.token_ids.end(), ch.drafts.begin(), ch.drafts.end());  // verified after the chunk
    for (int64_t p = ch.start; p < ch.start + ch.width(); ++p) b.positions.push_back(p);
    model::SequenceState* st = states_.state(ch.seq->id);
    check(st->length() == ch.start, "internal: state of sequence ", ch.seq->id, " is at ", st->length(),
          ", chunk starts at ", ch.start);
    b.states.push_back(st);
  }
}

}  // namespace deepinfer::engine
