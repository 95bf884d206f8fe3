// DeepSeek-V4.1 balanced context parallelism (spec §6.4) on the KV contract "all-gathered rows": every
// CP rank is given the same batch and the same sequences (its own copy of each state), splits each
// sequence's tokens by the layout (parallel::ContextParallel: zigzag or round-robin) and computes
// only its rows through every layer: queries, attention, the indexer's scores and top-k (the O(S²)
// part), mHC, MoE, Engram. What crosses rows is all-gathered per layer: the window KV of every row
// (SWA reads the 127 earlier positions, wherever they were computed), and a KV source's compressor
// inputs (ratio > 1: the raw kv / gate rows, so a group that straddles a rank boundary is pooled
// whole; ratio 1: the normalized latents). Every rank then pools, writes the compressed rows, index
// keys, carries and rings of the whole step into its own state, so after the forward each rank
// holds the whole sequence and any of them can decode. At the end only the rows asked for (the last
// token's) are gathered for the head. Every op is row-independent on the CPU backend, so the logits
// are the bits of one rank.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/deepseek_v41/v41_step.h"
#include "parallel/context_parallel.h"

namespace deepinfer::model {

V41Model::Step V41Model::local_step(Step& w, std::vector<int32_t>& mine) const {
  const parallel::ContextParallel& cp = *o_.context_parallel;
  Step s;
  s.st = w.st;
  s.end_pos = w.end_pos;
  s.sel_k = w.sel_k;
  s.all = &w;
  w.owner.assign(w.rows(), 0);
  mine.clear();
  for (int64_t q = 0; q < w.num(); ++q) {
    s.begin.push_back(s.rows());
    const int64_t b = w.begin[q], n = w.begin[q + 1] - b;
    for (int64_t i = b; i < b + n; ++i) {
      w.owner[i] = cp.owner(i - b, n);
      if (w.owner[i] != cp.rank()) continue;
      mine.push_back(static_cast<int32_t>(i));
      s.pos.push_back(w.pos[i]);
      s.image.push_back(w.image[i]);
    }
  }
  s.begin.push_back(s.rows());
  return s;
}

V41Model::Step V41Model::take_my_rows(Step& w, std::vector<int64_t>& ids, std::vector<int64_t>& hash,
                                     int64_t hash_width, std::vector<int32_t>& embed_tokens,
                                     std::vector<float>& embed_rows, const std::vector<int64_t>& cut,
                                     std::vector<int64_t>& cut_mine) const {
  const int64_t T = w.rows(), D = c_.dim, HW = hash_width;
  check(embed_rows.size() == embed_tokens.size() * D, "forward: embed_rows holds ", embed_rows.size(), " values for ",
        embed_tokens.size(), " tokens of dim ", D);
  for (int32_t r : embed_tokens) check(r >= 0 && r < T, "forward: embed_tokens entry ", r, " outside the batch");
  std::vector<int32_t> mine;
  Step s = local_step(w, mine);
  const int64_t n = static_cast<int64_t>(mine.size());
  std::vector<int64_t> ids_mine(n), hash_mine(n * HW), local(T, -1);
  for (int64_t k = 0; k < n; ++k) {
    ids_mine[k] = ids[mine[k]];
    std::copy_n(hash.begin() + mine[k] * HW, HW, hash_mine.begin() + k * HW);
    local[mine[k]] = k;
  }
  ids.swap(ids_mine);
  hash.swap(hash_mine);
  std::vector<int32_t> tokens;
  std::vector<float> rows;
  for (size_t i = 0; i < embed_tokens.size(); ++i)
    if (const int64_t k = local[embed_tokens[i]]; k >= 0) {
      tokens.push_back(static_cast<int32_t>(k));
      rows.insert(rows.end(), embed_rows.begin() + i * D, embed_rows.begin() + (i + 1) * D);
    }
  embed_tokens.swap(tokens);
  embed_rows.swap(rows);
  for (int64_t q = 0; q < s.num(); ++q) {  // the replay cut keeps each sequence's tail: my rows before it
    cut_mine[q] = 0;
    for (int64_t i = s.begin[q]; i < s.begin[q + 1]; ++i) cut_mine[q] += s.pos[i] < w.first(q) + cut[q];
  }
  return s;
}

void V41Model::gather_rows(const Step& s, const std::vector<int32_t>& want, const float* mine, int64_t width,
                           float* out) {
  parallel::ContextParallel& cp = *o_.context_parallel;
  const Step& w = *s.all;
  const int n = cp.size();
  std::vector<int64_t> count(n, 0), at(n + 1, 0);
  for (int32_t r : want) ++count[w.owner[r]];
  for (int r = 0; r < n; ++r) at[r + 1] = at[r] + count[r];
  std::vector<int32_t> dst(want.size());  // the gathered rows come in rank order: where each goes
  for (size_t i = 0; i < want.size(); ++i) dst[at[w.owner[want[i]]]++] = static_cast<int32_t>(i);
  const std::vector<float> send = host(mine, count[cp.rank()] * width);
  std::vector<float> recv(want.size() * width);
  cp.all_gather_rows(send.data(), count, width * sizeof(float), recv.data());
  Workspace::Scope scope(ws_);
  Tensor r = ws_.upload(recv, DType::F32), d = ws_.upload(dst, DType::I32);
  be_.copy_rows(r.f32(), nullptr, static_cast<int64_t>(want.size()), width, out, d.i32());
}

Tensor V41Model::everyone(const Step& s, const Tensor& mine, int64_t width) {
  if (!s.all) return mine;
  std::vector<int32_t> rows(s.all->rows());
  std::iota(rows.begin(), rows.end(), 0);
  Tensor out = ws_.f32({s.all->rows(), width});
  gather_rows(s, rows, mine.f32(), width, out.f32());
  return out;
}

Tensor V41Model::window_rows(const Step& s, const Tensor& mine, int64_t width, int64_t window) {
  if (!s.all) return mine;
  parallel::ContextParallel& cp = *o_.context_parallel;
  const Step& w = *s.all;
  std::vector<int64_t> tail(w.num(), 0);  // the rows write_rings keeps: every rank writes whole rings
  for (int64_t q = 0; q < w.num(); ++q)
    for (int64_t i = w.begin[q]; i < w.begin[q + 1]; ++i) tail[q] += w.pos[i] >= w.end_pos[q] - w.st[q]->ring_size();
  const parallel::RowExchange x = parallel::window_exchange(w.owner, w.begin, tail, window, cp.rank(), cp.size());
  const std::vector<float> send = host(mine.f32(), s.rows() * width);
  std::vector<float> rows(x.rows_received() * width);
  cp.exchange_rows(x, send.data(), width * sizeof(float), rows.data());
  std::vector<int32_t> to;  // the whole-step row of each received row, then of each of mine
  for (const auto& r : x.recv) to.insert(to.end(), r.begin(), r.end());
  for (int64_t i = 0; i < w.rows(); ++i)
    if (w.owner[i] == cp.rank()) to.push_back(static_cast<int32_t>(i));
  rows.insert(rows.end(), send.begin(), send.end());
  Tensor out = ws_.f32({w.rows(), width});
  be_.fill(out.f32(), w.rows() * width, 0.0f);  // rows nobody here reads
  Workspace::Scope scope(ws_);
  Tensor r = ws_.upload(rows, DType::F32), d = ws_.upload(to, DType::I32);
  be_.copy_rows(r.f32(), nullptr, static_cast<int64_t>(to.size()), width, out.f32(), d.i32());
  return out;
}

// The head's input rows `pick` (rows of the whole step) from the ranks that computed them.
void V41Model::cp_logits_rows(const Step& s, const std::vector<int32_t>& pick, const float* yn, Tensor& normed) {
  const int64_t D = c_.dim, R = static_cast<int64_t>(pick.size());
  Workspace::Scope scope(ws_);
  if (!s.all) {
    Tensor p = ws_.upload(pick, DType::I32);
    be_.copy_rows(yn, p.i32(), R, D, normed.f32(), nullptr);
    return;
  }
  const Step& w = *s.all;
  const int rank = o_.context_parallel->rank();
  std::vector<int32_t> local(w.rows(), -1), mine;  // a whole-step row's index among this rank's rows
  for (int64_t i = 0, k = 0; i < w.rows(); ++i)
    if (w.owner[i] == rank) local[i] = static_cast<int32_t>(k++);
  for (int32_t r : pick)
    if (w.owner[r] == rank) mine.push_back(local[r]);
  Tensor m = ws_.upload(mine, DType::I32), rows = ws_.f32({static_cast<int64_t>(mine.size()), D});
  be_.copy_rows(yn, m.i32(), static_cast<int64_t>(mine.size()), D, rows.f32(), nullptr);
  gather_rows(s, pick, rows.f32(), D, normed.f32());
}

}  // namespace deepinfer::model
