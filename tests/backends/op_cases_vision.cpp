// Op-table cases (op_table.h) for the vision tower's ops (ViT and aligner): the biased linear layers'
// epilogue, the GEMM on bf16 activations, the qkv epilogue with rotate-half RoPE, residual + RMSNorm,
// SwiGLU, bidirectional attention within each image's rows.
#include <cmath>
#include <tuple>

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
  // bf16 activations: x as bits, the weight bf16 or fp32; linear_plain's sums (a few fp32 ulps apart),
  // fp32 out or rounded to bf16 (where a few ulps can flip one rounding).
  for (bool bf16_out : {false, true})
    c.push_back({"linear_plain_bf16", bf16_out ? "linear_plain_bf16_out" : "linear_plain_bf16", bf16_out ? 4e-3 : 1e-5,
                 [bf16_out](OpRun& r) {
                   for (auto [m, k, n] : {std::tuple{2L, 256L, 129L}, std::tuple{37L, 512L, 200L}}) {
                     const std::vector<uint16_t> x = r.bf16_bits(r.uniform(m * k));
                     const std::vector<uint16_t> w = r.bf16_bits(r.uniform(n * k));
                     std::vector<float> wf(w.size());
                     for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_float(w[i]);
                     const std::string sh = label("m", m) + label(" k", k) + label(" n", n);
                     const uint16_t* xd = r.in(x);
                     for (bool bf16_weight : {true, false}) {
                       const ops::QWeight q = bf16_weight ? ops::QWeight{ops::WeightType::kBf16, r.in(w), nullptr, n, k, 0}
                                                          : ops::QWeight{ops::WeightType::kF32, r.in(wf), nullptr, n, k, 0};
                       const std::string name = (bf16_weight ? "bf16 " : "f32 ") + sh;
                       if (bf16_out) r.backend().linear_plain_bf16(xd, m, q, nullptr, r.out_bf16(name, m * n));
                       else r.backend().linear_plain_bf16(xd, m, q, r.out<float>(name, m * n), nullptr);
                     }
                   }
                 }});
  // Each product rounded on both sides (CUDA's __fmul_rn, the CPU without contraction): bit for bit.
  c.push_back({"qkv_rope_bf16", "qkv_rope_bf16", 0, [](OpRun& r) {
                 const int64_t rows = 11, heads = 4, dim = 64, width = 3 * heads * dim;
                 const float* cs = r.in(r.uniform(rows * dim / 2));
                 const float* sn = r.in(r.uniform(rows * dim / 2));
                 const float* y = r.in(r.uniform(rows * width, -3, 3));
                 for (bool biased : {true, false})
                   r.backend().qkv_rope_bf16(y, biased ? r.in(r.uniform(width)) : nullptr, rows, heads, dim, cs, sn,
                                             r.out_bf16(biased ? "bias" : "no bias", rows * width));
               }});
  // The sum of squares in another order can flip a bf16 rounding of h.
  c.push_back({"residual_rms_norm_bf16", "residual_rms_norm_bf16", 4e-3, [](OpRun& r) {
                 const int64_t rows = 13, dim = 1024;
                 const float* w = r.in(r.uniform(dim, 0.5f, 1.5f));
                 for (bool accumulate : {true, false})
                   for (bool biased : {true, false}) {
                     const std::string name = std::string(accumulate ? "acc" : "set") + (biased ? " bias" : "");
                     uint16_t* x = r.inout_bf16("x " + name, r.bf16_bits(r.uniform(rows * dim, -3, 3)));
                     r.backend().residual_rms_norm_bf16(r.in(r.uniform(rows * dim, -3, 3)),
                                                        biased ? r.in(r.uniform(dim)) : nullptr, accumulate, x, w,
                                                        rows, dim, 1e-6f, r.out_bf16("h " + name, rows * dim));
                   }
               }});
  // CUDA's exp and glibc's may differ in the last bit and flip one bf16 rounding.
  c.push_back({"swiglu_bf16", "swiglu_bf16", 4e-3, [](OpRun& r) {
                 const int64_t rows = 7, dim = 300;
                 r.backend().swiglu_bf16(r.in(r.bf16_bits(r.uniform(rows * 2 * dim, -6, 6))), rows, dim,
                                         r.out_bf16("h", rows * dim));
               }});
  c.push_back({"widen_bf16", "widen_bf16", 0, [](OpRun& r) {
                 const std::vector<uint16_t> x = r.bf16_bits(r.uniform(1000, -100, 100));
                 r.backend().widen_bf16(r.in(x), 1000, r.out<float>("y", 1000));
               }});
  // Head dim 64 takes CUDA's tensor-core kernel: the probabilities enter P.V as bf16 (~1e-3 here,
  // measured in numpy) and the output is bf16; head dim 32 the fp32 kernel (bf16 output: rare flips).
  // q, k, v inside one fused [tokens, 3, heads, dim] buffer, as the tower has them.
  for (int64_t dim : {64, 32}) {
    c.push_back({"attention_full", dim == 64 ? "attention_full" : "attention_full_d32", dim == 64 ? 4e-3 : 2e-3,
                 [dim](OpRun& r) {
                   // An empty and a one-token sequence, one of several query and key tiles with partial
                   // last ones; the last two rows are in no sequence: 0.
                   const int64_t heads = 3, tokens = 1003, width = heads * dim;
                   const std::vector<int32_t> begin = {0, 5, 5, 300, 301, 1001};
                   std::vector<float> qkv = r.uniform(tokens * 3 * width, -2, 2);
                   for (int64_t t = 0; t < tokens; ++t)  // v in [-1, 1)
                     for (int64_t i = 2 * width; i < 3 * width; ++i) qkv[t * 3 * width + i] *= 0.5f;
                   const uint16_t* q = r.in(r.bf16_bits(qkv));
                   r.backend().attention_full(q, q + width, q + 2 * width, 3 * width, tokens, heads, dim,
                                              r.in(begin), 5, 700, 1.0f / std::sqrt(static_cast<float>(dim)),
                                              r.out_bf16("out", tokens * width));
                 }});
  }
  return c;
}

}  // namespace deepinfer::optest
