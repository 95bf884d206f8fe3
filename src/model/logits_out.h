// How a forward's logit rows reach the host: all of them as logits, or some drawn on the model's
// device first (ForwardBatch::draws), so that only their token and log-probability cross.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/causal_lm.h"
#include "ops/ops.h"

namespace deepinfer::model {

// logits_d: the head's output [R, vocab] on the backend. Rows of `draws` (may be null) are drawn with
// draw_tokens into draws->token / draws->logprob; the others' logits go to `logits`, in row order.
void return_logits(ops::Backend& be, Workspace& ws, const float* logits_d, int64_t R, int64_t vocab, RowDraws* draws,
                   std::vector<float>& logits);

}  // namespace deepinfer::model
