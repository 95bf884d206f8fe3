// Op-table cases (op_table.h) for the dense ops: GEMMs, norms, RoPE, sparse attention, mHC, SwiGLU,
// fake quantization. Shapes cover each backend's kernel choices (attention dims and head counts that
// take CUDA's tiled and generic kernels).
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "core/dtype.h"
#include "core/env.h"
#include "op_table.h"

namespace deepinfer::optest {
namespace {

std::string shape(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) s += label(s.empty() ? "" : "x", d);
  return s;
}

// Values over many binades per block of 32 (scales, normals and e4m3/e2m1 subnormals all occur).
std::vector<float> quant_input(OpRun& r, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-30, 20), wide(-12, 0);
  std::vector<float> v(n);
  int e = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) e = ed(r.rng());
    float x;
    do x = nd(r.rng()); while (x == 0.0f);
    v[i] = std::ldexp(x, e + wide(r.rng()));
  }
  return v;
}

// v rounded to bf16 values (RNE), as the model's activations and KV rows are.
std::vector<float> bf16_values(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// Index lists over `pool_rows` rows (20% holes), 25% of them this step's fresh rows when fresh_rows > 0,
// the last token with no valid index at all.
std::vector<int32_t> attention_indices(OpRun& r, int64_t tokens, int64_t k, int64_t pool_rows, int64_t fresh_rows) {
  std::vector<int32_t> idx(tokens * k);
  for (auto& i : idx)
    i = r.chance(5) ? -1 : (fresh_rows && r.chance(4)) ? ops::fresh_row(r.below(fresh_rows)) : r.below(pool_rows);
  for (int64_t j = 0; j < k; ++j) idx[(tokens - 1) * k + j] = -1;
  return idx;
}

void linear_case(OpRun& r, std::initializer_list<std::array<int64_t, 3>> shapes) {
  for (auto [m, k, n] : shapes) {
    const float* x = r.in(r.uniform(m * k));
    const float* w = r.in(r.uniform(n * k));
    r.backend().linear(x, m, k, w, n, r.out<float>(shape({m, k, n}), m * n));
  }
}

}  // namespace

std::vector<OpCase> core_op_cases() {
  std::vector<OpCase> c;
  // fp32 GEMMs: bit for bit in the CPU's order under DEEPINFER_FP8_GEMM=exact, else the GEMV / cuBLAS's
  // order (1e-5). Every small m, k with and without a tail past a 32-channel tile, n not a multiple of a
  // 32-output tile, k % 4 != 0.
  const double linear_tol = env_string("DEEPINFER_FP8_GEMM") == "exact" ? 0 : 1e-5;
  c.push_back({"linear", "linear", linear_tol, [](OpRun& r) {
                 linear_case(r, {{1, 4096, 1024}, {7, 300, 129}, {64, 512, 640}, {130, 1024, 96}, {9, 33, 65}});
               }});
  c.push_back({"linear", "linear_decode", linear_tol, [](OpRun& r) {
                 linear_case(r, {{1, 4096, 1059}, {2, 2052, 1059}, {3, 4096, 1059}, {4, 2052, 531}, {5, 4096, 531},
                                 {6, 2052, 531}, {7, 4096, 531}, {8, 4096, 4096}, {3, 512, 263}, {5, 2048, 2111},
                                 {2, 4, 7}, {6, 302, 33}});
               }});
  c.push_back({"linear_kblocked", "linear_kblocked", 0, [](OpRun& r) {
                 for (auto [m, k, n, block] : {std::array<int64_t, 4>{1, 4096, 200, 128}, {19, 300, 129, 128},
                                               {40, 512, 64, 32}, {3, 100, 70, 7}}) {
                   const float* x = r.in(r.uniform(m * k));
                   const float* w = r.in(r.uniform(n * k));
                   r.backend().linear_kblocked(x, m, k, w, n, block, r.out<float>(shape({m, k, n, block}), m * n));
                 }
               }});
  // Weights as stored (FP8 blocks of 32 or 128, MXFP4, fp32), activations FP8-quantized: bit for bit.
  c.push_back({"linear_quant", "linear_quant", 0, [](OpRun& r) {
                 const int64_t m = 9, k = 256, n = 72;
                 const auto xh = r.uniform(m * k);
                 std::vector<uint8_t> fp8(n * k), fp4(n * k / 2);
                 for (auto& b : fp8) b = static_cast<uint8_t>(r.rng()() & 0xfe);  // no NaN codes
                 for (auto& b : fp4) b = static_cast<uint8_t>(r.rng()());
                 using WT = ops::WeightType;
                 for (auto [type, block] : {std::pair{WT::kFp8Block, 32L}, std::pair{WT::kFp8Block, 128L},
                                            std::pair{WT::kMxfp4, 32L}, std::pair{WT::kF32, 0L}}) {
                   std::vector<float> scale(type == WT::kFp8Block ? ((n + block - 1) / block) * (k / block)
                                            : type == WT::kMxfp4  ? n * k / 32
                                                                  : 0);
                   for (auto& v : scale) v = std::ldexp(1.0f, r.below(7) - 3);
                   const void* data = type == WT::kFp8Block ? static_cast<const void*>(r.in(fp8))
                                      : type == WT::kMxfp4  ? static_cast<const void*>(r.in(fp4))
                                                            : static_cast<const void*>(r.in(r.uniform(n * k)));
                   const std::string name = label("type ", static_cast<int>(type)) + label(" block ", block);
                   float* x = r.inout(name + " x unchanged", xh);
                   r.backend().linear_quant(x, m, {type, data, scale.empty() ? nullptr : r.in(scale), n, k, block}, 32,
                                            r.out<float>(name, m * n));
                 }
               }});
  // The same with the scales as UE8M0 bytes too (QWeight::scale_ue8m0): backends may take their tensor
  // cores, which sum a K block of 32 in their own order (a few fp32 ulps), so the bf16 output differs by
  // at most one bf16 ulp (2^-8 relative) where a sum lands across a rounding boundary. A wrong scale,
  // layout or tile gives errors of order 1.
  c.push_back({"linear_quant", "linear_quant_ue8m0", 4e-3, [](OpRun& r) {
                 using WT = ops::WeightType;
                 for (auto [type, block, m, k, n] : {std::tuple{WT::kFp8Block, 32L, 1L, 512L, 256L},
                                                     std::tuple{WT::kFp8Block, 32L, 70L, 256L, 96L},
                                                     std::tuple{WT::kFp8Block, 128L, 9L, 384L, 200L},
                                                     std::tuple{WT::kMxfp4, 32L, 5L, 256L, 256L},
                                                     std::tuple{WT::kMxfp4, 32L, 130L, 512L, 128L}}) {
                   const bool fp4 = type == WT::kMxfp4;
                   std::vector<uint8_t> bytes(fp4 ? n * k / 2 : n * k);
                   for (auto& b : bytes) b = static_cast<uint8_t>(r.rng()() & (fp4 ? 0xff : 0xfe));  // no NaN codes
                   std::vector<float> scale(fp4 ? n * k / 32 : ((n + block - 1) / block) * (k / block));
                   for (auto& v : scale) v = std::ldexp(1.0f, r.below(7) - 3);
                   ops::QWeight host{type, bytes.data(), scale.data(), n, k, block};
                   const std::vector<uint8_t> s8 = ops::gemm_scale_bytes(host);
                   ops::QWeight w{type, r.in(bytes), r.in(scale), n, k, block, r.in(s8)};
                   const std::string name = label("type ", static_cast<int>(type)) + label(" block ", block) +
                                            shape({m, k, n});
                   r.backend().linear_quant(r.in(r.uniform(m * k, -2, 2)), m, w, block, r.out<float>(name, m * n));
                 }
               }});
  // Stacked experts (QWeight::groups) with offsets on the device, some groups empty, at most max_rows
  // rows each: each group's rows as linear_quant gives them (the CPU runs the groups one by one; a
  // backend's grouped GEMM sums a K block its own way, as above).
  c.push_back({"linear_quant_grouped", "linear_quant_grouped", 4e-3, [](OpRun& r) {
                 using WT = ops::WeightType;
                 for (auto [type, G, n, k] : {std::tuple{WT::kMxfp4, 6L, 256L, 256L}, std::tuple{WT::kFp8Block, 5L, 96L, 256L}}) {
                   const bool fp4 = type == WT::kMxfp4;
                   std::vector<uint8_t> bytes;
                   std::vector<float> scale;
                   std::vector<std::vector<uint8_t>> s8(G);
                   for (int64_t g = 0; g < G; ++g) {
                     std::vector<uint8_t> b(fp4 ? n * k / 2 : n * k);
                     for (auto& v : b) v = static_cast<uint8_t>(r.rng()() & (fp4 ? 0xff : 0xfe));  // no NaN codes
                     std::vector<float> s(fp4 ? n * k / 32 : (n / 32) * (k / 32));
                     for (auto& v : s) v = std::ldexp(1.0f, r.below(7) - 3);
                     s8[g] = ops::gemm_scale_bytes({type, b.data(), s.data(), n, k, 32});
                     bytes.insert(bytes.end(), b.begin(), b.end());
                     scale.insert(scale.end(), s.begin(), s.end());
                   }
                   ops::QWeight w{type, r.in(bytes), r.in(scale), n, k, 32, r.in(ops::stack_gemm_scale_bytes(s8, type, n, k))};
                   w.groups = G;
                   std::vector<int32_t> offsets(G + 1, 0);
                   for (int64_t g = 0; g < G; ++g) offsets[g + 1] = offsets[g] + (g % 3 == 1 ? 0 : 1 + r.below(40));
                   const int64_t m = offsets[G];
                   const std::string name = label("type ", static_cast<int>(type)) + " " + shape({m, k, n});
                   r.backend().linear_quant_grouped(r.in(r.uniform(m * k, -2, 2)), m, w, r.in(offsets), 40, 32,
                                                    r.out<float>(name, m * n));
                 }
               }});
  // Float weights without activation quantization: kF32 is linear() (bitwise); bf16 weights with bf16
  // inputs sum in fp32 in the backend's order (cuBLAS, the GEMV up to m = 4): a few fp32 ulps of the sum.
  c.push_back({"linear_plain", "linear_plain", 1e-5, [](OpRun& r) {
                 for (auto [m, k, n] : {std::tuple{1L, 512L, 300L}, std::tuple{3L, 256L, 129L}, std::tuple{37L, 512L, 200L}}) {
                   auto xh = r.uniform(m * k), wh = r.uniform(n * k);
                   std::vector<uint16_t> bits(n * k);
                   for (auto& v : xh) v = round_to_bf16(v);
                   for (size_t i = 0; i < wh.size(); ++i) wh[i] = bf16_to_float(bits[i] = float_to_bf16(wh[i]));
                   const float* x = r.in(xh);
                   r.backend().linear_plain(x, m, {ops::WeightType::kF32, r.in(wh), nullptr, n, k, 0},
                                            r.out<float>("f32 " + shape({m, k, n}), m * n));
                   r.backend().linear_plain(x, m, {ops::WeightType::kBf16, r.in(bits), nullptr, n, k, 0},
                                            r.out<float>("bf16 " + shape({m, k, n}), m * n));
                 }
               }});
  // Block-diagonal (the attention's grouped wo_a): each group as linear_plain; the CPU's bits when exact
  // (the CPU order on strided rows); else a few fp32 ulps, one bf16 ulp where bf16_out rounds them apart.
  // Decode (the GEMV: 1 row a block, 2 and 4 rows a block), batch-invariant chunks and prefill (cuBLAS).
  for (bool bf16_out : {false, true})
    c.push_back({"linear_block_diag", bf16_out ? "linear_block_diag_bf16_out" : "linear_block_diag",
                 linear_tol == 0 ? 0 : (bf16_out ? 4e-3 : 1e-5), [bf16_out](OpRun& r) {
                   for (auto [m, G, R, k] : {std::tuple{1L, 8L, 64L, 256L}, std::tuple{2L, 4L, 300L, 128L},
                                             std::tuple{3L, 8L, 1024L, 64L}, std::tuple{11L, 3L, 96L, 512L},
                                             std::tuple{40L, 8L, 128L, 256L}}) {
                     auto xh = r.uniform(m * G * k), wh = r.uniform(G * R * k);
                     std::vector<uint16_t> bits(wh.size());
                     for (auto& v : xh) v = round_to_bf16(v);
                     for (size_t i = 0; i < wh.size(); ++i) wh[i] = bf16_to_float(bits[i] = float_to_bf16(wh[i]));
                     const float* x = r.in(xh);
                     const std::string s = shape({m, G, R, k});
                     r.backend().linear_block_diag(x, m, {ops::WeightType::kF32, r.in(wh), nullptr, G * R, k, 0}, G,
                                                   bf16_out, r.out<float>("f32 " + s, m * G * R));
                     r.backend().linear_block_diag(x, m, {ops::WeightType::kBf16, r.in(bits), nullptr, G * R, k, 0}, G,
                                                   bf16_out, r.out<float>("bf16 " + s, m * G * R));
                   }
                 }});
  // bit for bit (cpu::dot's order) under DEEPINFER_FP8_GEMM=exact; else a device may sum as a tree (and then
  // a bf16 output may round a few values the other way: one bf16 step each).
  for (bool bf16_out : {false, true})
    c.push_back({"rms_norm", bf16_out ? "rms_norm_bf16_out" : "rms_norm", linear_tol == 0 ? 0 : (bf16_out ? 4e-3 : 1e-6),
               [bf16_out](OpRun& r) {
                 for (auto [rows, dim, weighted, in_place] : {std::tuple{5L, 4096L, true, false},
                                                              std::tuple{9L, 100L, false, false},
                                                              std::tuple{3L, 7168L, true, true}}) {
                   auto xh = r.uniform(rows * dim, -3, 3);
                   const float* w = weighted ? r.in(r.uniform(dim, 0.5f, 1.5f)) : nullptr;
                   const std::string name = shape({rows, dim}) + (in_place ? " in place" : "");
                   float* x = in_place ? r.inout(name, xh) : r.in(xh);
                   r.backend().rms_norm(x, w, rows, dim, 1e-6f, in_place ? x : r.out<float>(name, rows * dim), bf16_out);
                 }
               }});
  for (bool bf16_out : {false, true})
    c.push_back({"rope", bf16_out ? "rope_bf16_out" : "rope", bf16_out ? 4e-3 : 1e-5, [bf16_out](OpRun& r) {
                 const int64_t rows = 6, heads = 3, dim = 192, rope_dim = 64;
                 std::vector<float> inv(rope_dim / 2);
                 for (int64_t i = 0; i < rope_dim / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rope_dim);
                 std::vector<int64_t> pos(rows);
                 for (auto& p : pos) p = r.below(60000);
                 const float* f = r.in(inv);
                 const int64_t* p = r.in(pos);
                 for (bool inverse : {false, true}) {
                   float* x = r.inout(inverse ? "inverse" : "forward", r.uniform(rows * heads * dim));
                   r.backend().rope(x, rows, heads, dim, p, {f, rope_dim, 1.25f}, inverse, bf16_out);
                 }
               }});
  // dims 128..512 take CUDA's tiled kernels (heads % 16 == 0) or the generic one, 72 the generic one.
  c.push_back({"sparse_attention", "sparse_attention", 1e-5, [](OpRun& r) {
                 for (auto [tokens, heads, dim, pool_rows, k] : {std::array<int64_t, 5>{8, 4, 512, 300, 37},
                                                                 {4, 64, 512, 2048, 640}, {5, 16, 256, 500, 45},
                                                                 {3, 32, 384, 200, 50}, {2, 8, 128, 64, 16},
                                                                 {6, 3, 72, 100, 21}, {3, 16, 128, 10, 0}}) {
                   const float* q = r.in(r.uniform(tokens * heads * dim));
                   const float* pool = r.in(r.uniform(pool_rows * dim));
                   const float* sink = r.in(r.uniform(heads));
                   const int32_t* idx = r.in(attention_indices(r, tokens, std::max<int64_t>(k, 1), pool_rows, 0));
                   const float scale = 4.0f / std::sqrt(static_cast<float>(dim));  // peaky softmax
                   r.backend().sparse_attention(q, tokens, heads, dim, pool, idx, k, sink, scale,
                                                r.out<float>(shape({heads, dim, k}), tokens * heads * dim));
                 }
               }});
  // bf16-rounded probabilities: scores one fp32 ulp apart (dot order, expf, tensor-core sums) flip a few
  // roundings. q holds bf16 values and the rows are the state arena's packed rows (the first `window` index
  // columns FP8 window rows, arena or fresh; the rest FP4 compressed rows), as in the model (CUDA's
  // tensor-core path for 64 heads x 512 at block 64 reads q as bf16); the second to fourth shapes take that
  // path (k 640, 2 head groups with k % 64 != 0, k < 16). 16 KiB blocks: 31 window rows (528 B) a block.
  // With few tokens CUDA splits the index list over CTAs, each split rounding its probabilities against its
  // own running max: independent roundings, 6e-4 .. 1e-3 measured (backends/cuda/kernels/sparse_attention.h;
  // the unsplit kernel's figures are in sparse_attention_test).
  c.push_back({"sparse_attention_online", "sparse_attention_online", 1.5e-3, [](OpRun& r) {
                 for (auto [tokens, heads, dim, pool_rows, k, block] : {std::array<int64_t, 6>{8, 4, 512, 300, 37, 16},
                                                                        {4, 64, 512, 2048, 640, 64},
                                                                        {3, 128, 512, 500, 100, 64},
                                                                        {2, 64, 512, 100, 7, 64},
                                                                        {6, 3, 96, 100, 21, 8}}) {
                   const int64_t fresh_rows = 17, window = k / 2, bb = dim == 512 ? 16384 : 1024;
                   const int64_t wb = row_bytes(RowFormat::kFp8E8m0x32, dim), cb = row_bytes(RowFormat::kFp4E4m3x16, dim);
                   const int64_t first_c = (pool_rows + bb / wb - 1) / (bb / wb) * (bb / cb);  // compressed row 0
                   std::vector<uint8_t> arena(paged_row_offset(first_c + pool_rows, cb, bb) + bb);
                   const std::vector<float> wv = r.uniform(pool_rows * dim), cv = r.uniform(pool_rows * dim, -3, 3);
                   for (int64_t i = 0; i < pool_rows; ++i) {
                     quantize_row(wv.data() + i * dim, dim, RowFormat::kFp8E8m0x32, arena.data() + paged_row_offset(i, wb, bb));
                     quantize_row(cv.data() + i * dim, dim, RowFormat::kFp4E4m3x16,
                                  arena.data() + paged_row_offset(first_c + i, cb, bb));
                   }
                   std::vector<uint8_t> fresh(fresh_rows * wb);
                   const std::vector<float> fv = r.uniform(fresh_rows * dim);
                   for (int64_t i = 0; i < fresh_rows; ++i)
                     quantize_row(fv.data() + i * dim, dim, RowFormat::kFp8E8m0x32, fresh.data() + i * wb);
                   std::vector<int32_t> idx = attention_indices(r, tokens, k, pool_rows, fresh_rows);
                   for (int64_t t = 0; t < tokens; ++t)
                     for (int64_t j = window; j < k; ++j) {
                       int32_t& ix = idx[t * k + j];
                       if (ix != -1) ix = static_cast<int32_t>(first_c + (ix >= 0 ? ix : -2 - ix));
                     }
                   const float* q = r.in(bf16_values(r.uniform(tokens * heads * dim)));
                   const float* sink = r.in(r.uniform(heads));
                   const float scale = 4.0f / std::sqrt(static_cast<float>(dim));
                   r.backend().sparse_attention_online(q, tokens, heads, dim, r.in(arena), bb, r.in(fresh), r.in(idx), k,
                                                       window, sink, scale, block,
                                                       r.out<float>(shape({heads, dim, k}), tokens * heads * dim));
                 }
               }});
  // rows 1 / 5 / 70: both of linear_cpu_order's kernels under the dots; hc 3: the tail's generic path.
  c.push_back({"hc_weights", "hc_weights", 1e-5, [](OpRun& r) {
                 for (auto [rows, hc, dim, head] : {std::tuple{5L, 4L, 256L, false}, std::tuple{5L, 4L, 256L, true},
                                                    std::tuple{1L, 4L, 1280L, false}, std::tuple{70L, 4L, 320L, false},
                                                    std::tuple{9L, 3L, 200L, false}, std::tuple{3L, 6L, 64L, false}}) {
                   const int64_t width = hc * dim;  // hc 6: CUDA's Sinkhorn through shared memory (> 32 elements)
                   const int64_t outs = head ? hc : (2 + hc) * hc;
                   const float* x = r.in(r.uniform(rows * width, -2, 2));
                   const float* fn = r.in(r.uniform(outs * width, -0.05f, 0.05f));
                   const float* base = r.in(r.uniform(outs));
                   const float* scale = r.in(r.uniform(3, 0.5f, 2.0f));
                   const std::string p = (head ? "head " : "") + std::to_string(rows) + "x" + std::to_string(hc) + " ";
                   r.backend().hc_weights(x, rows, hc, dim, fn, base, scale, 1e-6f, 1e-6f, 20,
                                          r.out<float>(p + "pre", rows * hc),
                                          head ? nullptr : r.out<float>(p + "post", rows * hc),
                                          head ? nullptr : r.out<float>(p + "comb", rows * hc * hc));
                 }
               }});
  // bf16 out: a fused multiply-add can move a value one fp32 ulp and flip one bf16 rounding (2^-8).
  for (bool bf16 : {false, true}) {
    c.push_back({"hc_collapse,hc_expand", bf16 ? "hc_collapse_expand_bf16" : "hc_collapse_expand",
                 bf16 ? 8e-3 : 1e-5, [bf16](OpRun& r) {
                   const int64_t rows = 9, hc = 4, dim = 333;
                   const std::vector<float> xh = r.uniform(rows * hc * dim, -3, 3);
                   const float* x = r.in(xh);
                   const float* mix = r.in(r.uniform(rows * hc));
                   const float* sub = r.in(r.uniform(rows * dim, -3, 3));
                   const float* post = r.in(r.uniform(rows * hc));
                   const float* comb = r.in(r.uniform(rows * hc * hc));
                   r.backend().hc_collapse(x, mix, rows, hc, dim, bf16, r.out<float>("collapse", rows * dim));
                   r.backend().hc_expand(x, sub, post, comb, rows, hc, dim, bf16,
                                         r.out<float>("expand", rows * hc * dim));
                   float* xi = r.inout("expand in place", xh);  // the models' use: out = x
                   r.backend().hc_expand(xi, sub, post, comb, rows, hc, dim, bf16, xi);
                 }});
  }
  c.push_back({"softmax_pool", "softmax_pool", 1e-5, [](OpRun& r) {
                 const int64_t windows = 6, slots = 5, channels = 300;
                 auto gate = r.uniform(windows * slots * channels, -4, 4);
                 for (size_t i = 0; i < gate.size(); ++i)  // slot 0 stays finite: no channel is all -inf
                   if (i % (slots * channels) >= static_cast<size_t>(channels) && r.chance(3))
                     gate[i] = -std::numeric_limits<float>::infinity();
                 const float* kv = r.in(r.uniform(windows * slots * channels));
                 r.backend().softmax_pool(kv, r.in(gate), windows, slots, channels,
                                          r.out<float>("z", windows * channels));
               }});
  for (bool bf16_out : {false, true})
    c.push_back({"swiglu", bf16_out ? "swiglu_bf16_out" : "swiglu", bf16_out ? 4e-3 : 1e-5, [bf16_out](OpRun& r) {
                 const int64_t rows = 7, dim = 1000;
                 for (float limit : {0.0f, 2.5f})
                   for (bool scaled : {false, true}) {
                     const float* g = r.in(r.uniform(rows * dim, -6, 6));
                     const float* u = r.in(r.uniform(rows * dim, -6, 6));
                     const float* rs = scaled ? r.in(r.uniform(rows, 0.1f, 2.0f)) : nullptr;
                     const std::string name = std::string(limit > 0 ? "limit" : "no limit") + (scaled ? " scaled" : "");
                     r.backend().swiglu(g, u, rows, dim, limit, rs, r.out<float>(name, rows * dim), bf16_out);
                   }
               }});
  struct Quant {
    const char* name;
    void (ops::Backend::*op)(float*, int64_t, int64_t, int64_t);
    int64_t block;
  };
  for (Quant q : {Quant{"fake_quant_fp8", &ops::Backend::fake_quant_fp8, 128},
                  Quant{"fake_quant_fp4", &ops::Backend::fake_quant_fp4, 32},
                  Quant{"fake_quant_fp4_e4m3", &ops::Backend::fake_quant_fp4_e4m3, 16}}) {
    c.push_back({q.name, q.name, 0, [q](OpRun& r) {
                   for (auto [rows, dim, block] : {std::array<int64_t, 3>{7, 1000, q.block}, {33, 4096, q.block},
                                                   {3, 50, q.block / 2}}) {
                     float* x = r.inout(shape({rows, dim, block}), quant_input(r, rows * dim));
                     (r.backend().*q.op)(x, rows, dim, block);
                   }
                 }});
  }
  c.push_back({"round_bf16", "round_bf16", 0, [](OpRun& r) {
                 auto x = quant_input(r, 100001);
                 x[5] = std::numeric_limits<float>::quiet_NaN();
                 x[6] = std::numeric_limits<float>::infinity();
                 x[7] = 3.3895313892515355e38f;  // rounds up to inf
                 r.backend().round_bf16(r.inout("x", x), static_cast<int64_t>(x.size()));
               }});
  return c;
}

}  // namespace deepinfer::optest
