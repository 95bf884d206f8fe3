#include "model/logits_out.h"

#include "core/error.h"

namespace deepinfer::model {
namespace {

// A host array of plain structs in the workspace (an empty one: no data).
template <class T>
Tensor upload_bytes(Workspace& ws, const std::vector<T>& v) {
  if (v.empty()) return {};
  Tensor t = ws.take(DType::U8, {static_cast<int64_t>(v.size() * sizeof(T))});
  ws.memory().upload(t.data, v.data(), t.bytes());
  return t;
}

}  // namespace

void return_logits(ops::Backend& be, Workspace& ws, const float* logits_d, int64_t R, int64_t vocab, RowDraws* draws,
                   std::vector<float>& logits) {
  const int64_t n = draws ? static_cast<int64_t>(draws->rows.size()) : 0;
  if (n == 0) {
    logits.resize(R * vocab);
    be.download(logits.data(), logits_d, logits.size() * sizeof(float));
    if (draws) draws->token.clear(), draws->logprob.clear();
    return;
  }
  const int64_t words = (vocab + 31) / 32, masks = static_cast<int64_t>(draws->masks.size()) / words;
  check(static_cast<int64_t>(draws->param.size()) == n && static_cast<int64_t>(draws->masks.size()) % words == 0,
        "forward: draws need one parameter row per drawn row and whole mask rows");
  for (const ops::DrawRow& p : draws->param)
    check(p.adjust_begin >= 0 && p.adjust_begin <= p.adjust_end &&
              p.adjust_end <= static_cast<int64_t>(draws->adjust.size()) && p.mask >= -1 && p.mask < masks,
          "forward: a drawn row names adjustments or a mask the draws do not hold");
  std::vector<char> drawn(R, 0);
  for (int32_t r : draws->rows) {
    check(r >= 0 && r < R && !drawn[r], "forward: drawn rows must be distinct logit rows below ", R, ", got ", r);
    drawn[r] = 1;
  }
  std::vector<int32_t> full;  // the rows that come back as logits
  for (int32_t r = 0; r < R; ++r)
    if (!drawn[r]) full.push_back(r);
  Workspace::Scope scope(ws);
  Tensor rows = ws.upload(draws->rows, DType::I32), token = ws.i32({n}), lp = ws.f32({n}), work = ws.f32({n, vocab});
  const Tensor param = upload_bytes(ws, draws->param), adjust = upload_bytes(ws, draws->adjust);
  const Tensor mask = upload_bytes(ws, draws->masks);
  be.draw_tokens(logits_d, vocab, rows.i32(), n, static_cast<const ops::DrawRow*>(param.data),
                 static_cast<const ops::DrawAdjust*>(adjust.data), static_cast<const uint32_t*>(mask.data), work.f32(),
                 token.i32(), lp.f32());
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
