// Op-table cases (op_table.h) for the vision tower's ops (ViT and aligner): the biased linear layers'
// epilogue, rotate-half RoPE, bidirectional attention within each image's rows.
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
  c.push_back({"attention_full", "attention_full", 1e-5, [](OpRun& r) {
                 const int64_t heads = 3, dim = 64, tokens = 303;  // the last two rows are in no sequence: 0
                 const std::vector<int32_t> begin = {0, 5, 5, 300, 301};  // an empty and a one-token sequence
                 const size_t n = tokens * heads * dim;
                 r.backend().attention_full(r.in(r.uniform(n, -2, 2)), r.in(r.uniform(n, -2, 2)), r.in(r.uniform(n)),
                                            tokens, heads, dim, r.in(begin), 4, 295, 0.125f,
                                            r.out<float>("out", n));
               }});
  return c;
}

}  // namespace deepinfer::optest
