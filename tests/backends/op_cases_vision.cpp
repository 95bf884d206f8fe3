// Op-table cases (op_table.h) for the vision tower's ops (ViT and aligner): the biased linear layers'
// epilogue, rotate-half RoPE, bidirectional attention within each image's rows.
#include <cmath>

#include "core/dtype.h"
#include "op_table.h"

namespace deepinfer::optest {

std::vector<OpCase> vision_op_cases() {
  std::vector<OpCase> c;
  // bf16 out: CUDA's erff and glibc's may differ in the last bit and flip one bf16 rounding.
  for (bool bf16 : {false, true}) {
    c.push_back({"bias_act", bf16 ? "bias_act_bf16" : "bias_act", bf16 ? 4e-3 : 1e-5, [bf16](OpRun& r) {
                   const int64_t rows = 9, dim = 300;
                   for (auto act : {ops::Activation::kNone, ops::Activation::kGeluErf})
                     for (bool biased : {true, false}) {
                       const float* b = biased ? r.in(r.uniform(dim)) : nullptr;
                       const std::string name = std::string(act == ops::Activation::kGeluErf ? "gelu" : "none") +
                                                (biased ? " bias" : "");
                       r.backend().bias_act(r.inout(name, r.uniform(rows * dim, -4, 4)), rows, dim, b, act, bf16);
                     }
                 }});
  }
  // bf16 out: a multiply-add fused on one side only can flip one bf16 rounding.
  for (bool bf16 : {false, true}) {
    c.push_back({"rope_halves", bf16 ? "rope_halves_bf16" : "rope_halves", bf16 ? 8e-3 : 1e-5, [bf16](OpRun& r) {
                   const int64_t rows = 11, heads = 4, dim = 64;
                   const float* cs = r.in(r.uniform(rows * dim / 2));
                   const float* sn = r.in(r.uniform(rows * dim / 2));
                   r.backend().rope_halves(r.inout("x", r.uniform(rows * heads * dim)), rows, heads, dim, cs, sn, bf16);
                 }});
  }
  // Head dim 64 takes CUDA's tensor-core kernel: q, k, v are bf16 values (as in the tower) and the
  // probabilities enter P.V as bf16 (~1e-3 here, measured in numpy); head dim 32 the fp32 kernel.
  for (int64_t dim : {64, 32}) {
    c.push_back({"attention_full", dim == 64 ? "attention_full" : "attention_full_d32", dim == 64 ? 4e-3 : 1e-5,
                 [dim](OpRun& r) {
                   // An empty and a one-token sequence, one of several query and key tiles with partial
                   // last ones; the last two rows are in no sequence: 0.
                   const int64_t heads = 3, tokens = 1003;
                   const std::vector<int32_t> begin = {0, 5, 5, 300, 301, 1001};
                   const size_t n = tokens * heads * dim;
                   auto bf16_values = [&](float lo, float hi) {
                     std::vector<float> x = r.uniform(n, lo, hi);
                     for (float& e : x) e = round_to_bf16(e);
                     return x;
                   };
                   const float* q = r.in(bf16_values(-2, 2));
                   const float* k = r.in(bf16_values(-2, 2));
                   const float* v = r.in(bf16_values(-1, 1));
                   r.backend().attention_full(q, k, v, tokens, heads, dim, r.in(begin), 5, 700,
                                              1.0f / std::sqrt(static_cast<float>(dim)), r.out<float>("out", n));
                 }});
  }
  return c;
}

}  // namespace deepinfer::optest
