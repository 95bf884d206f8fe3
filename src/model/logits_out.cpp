#include "model/logits_out.h"

#include "core/error.h"

namespace deepinfer::model {

void return_logits(ops::Backend& be, Workspace& ws, const float* logits_d, int64_t R, int64_t vocab, RowDraws* draws,
                   std::vector<float>& logits) {
  const int64_t n = draws ? static_cast<int64_t>(draws->rows.size()) : 0;
  if (n == 0) {
    logits.resize(R * vocab);
    be.download(logits.data(), logits_d, logits.size() * sizeof(float));
    if (draws) draws->token.clear(), draws->logprob.clear();
    return;
  }
  check(static_cast<int64_t>(draws->temperature.size()) == n && static_cast<int64_t>(draws->key.size()) == n,
        "forward: draws need one temperature and one key per row");
  std::vector<char> drawn(R, 0);
  for (int32_t r : draws->rows) {
    check(r >= 0 && r < R && !drawn[r], "forward: drawn rows must be distinct logit rows below ", R, ", got ", r);
    drawn[r] = 1;
  }
  std::vector<int32_t> full;  // the rows that come back as logits
  for (int32_t r = 0; r < R; ++r)
    if (!drawn[r]) full.push_back(r);
  Workspace::Scope scope(ws);
  Tensor rows = ws.upload(draws->rows, DType::I32), temp = ws.upload(draws->temperature, DType::F32);
  Tensor key = ws.upload(draws->key, DType::I64), token = ws.i32({n}), lp = ws.f32({n});
  be.draw_tokens(logits_d, vocab, rows.i32(), n, temp.f32(), reinterpret_cast<const uint64_t*>(key.data), token.i32(),
                 lp.f32());
  const int64_t F = static_cast<int64_t>(full.size());
  logits.resize(F * vocab);
  if (F) {
    Tensor idx = ws.upload(full, DType::I32), kept = ws.f32({F, vocab});
    be.copy_rows(logits_d, idx.i32(), F, vocab, kept.f32(), nullptr);
    be.download(logits.data(), kept.data, logits.size() * sizeof(float));
  }
  draws->token.resize(n);
  draws->logprob.resize(n);
  be.download(draws->token.data(), token.data, n * sizeof(int32_t));
  be.download(draws->logprob.data(), lp.data, n * sizeof(float));
}

}  // namespace deepinfer::model
