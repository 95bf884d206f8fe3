// Op-table cases (op_table.h) for device memory, data movement and the DeepSeek ops (MoE, indexer,
// Engram). Selections (top-k) must match the CPU's torch_topk bit for bit on inputs full of exact ties
// (bf16 levels), with -1 indices, -inf scores, k = n and empty widths.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/counter_rng.h"
#include "core/dtype.h"
#include "op_table.h"

namespace deepinfer::optest {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Row maps of a gather/scatter case: n source rows of `rows` (1 in 5 skipped with -1) and distinct
// destination rows (every 7th skipped).
std::pair<std::vector<int32_t>, std::vector<int32_t>> row_maps(OpRun& r, int64_t n, int64_t rows) {
  std::vector<int32_t> si(n), di(rows);
  for (auto& s : si) s = r.chance(5) ? -1 : r.below(rows);
  std::iota(di.begin(), di.end(), 0);
  std::shuffle(di.begin(), di.end(), r.rng());
  for (int64_t i = 0; i < n; i += 7) di[i] = -1;
  return {si, di};
}

}  // namespace

std::vector<OpCase> deepseek_op_cases() {
  std::vector<OpCase> c;
  c.push_back({"allocate,release,upload,download,copy,zero", "memory", 0, [](OpRun& r) {
                 std::vector<uint8_t> a(1000);
                 for (auto& x : a) x = static_cast<uint8_t>(r.rng()());
                 uint8_t* src = r.in(a);
                 uint8_t* dst = r.out<uint8_t>("copy + zero", 1000);
                 r.backend().copy(dst, src, 1000);
                 r.backend().zero(dst + 100, 50);
                 r.backend().copy(dst, src, 0);
                 r.backend().zero(dst, 0);
               }});
  c.push_back({"copy_rows", "copy_rows", 0, [](OpRun& r) {
                 for (int64_t width : {0, 1, 33, 300}) {
                   const int64_t n = 37, rows = 50;
                   const float* src = r.in(r.uniform(rows * width));
                   const auto [si, di] = row_maps(r, n, rows);
                   for (int mode = 0; mode < 4; ++mode) {
                     float* dst = r.inout(label("w", width) + label(" mode ", mode),
                                          r.uniform(rows * width));
                     r.backend().copy_rows(src, mode & 1 ? r.in(si) : nullptr, n, width, dst,
                                           mode & 2 ? r.in(di) : nullptr);
                   }
                 }
               }});
  // The state arena's quantized rows, bit for bit: the three formats at widths of one and several scale
  // blocks, through source / destination indices (a skipped row keeps its bytes) into blocks rows do not tile.
  c.push_back({"quantize_rows", "quantize_rows", 0, [](OpRun& r) {
                 for (RowFormat f : {RowFormat::kFp8E8m0x32, RowFormat::kFp4E4m3x16, RowFormat::kFp4E8m0x32})
                   for (int64_t width : {32, 128, 512}) {
                     const int64_t n = 37, rows = 50, bb = 2000, rb = row_bytes(f, width);
                     std::vector<float> h = r.uniform(rows * width, -4, 4);
                     for (int64_t i = 0; i < rows; i += 3)  // magnitudes far apart, a zero block
                       for (int64_t c = 0; c < width; ++c) h[i * width + c] *= i % 2 ? std::ldexp(1.0f, -30 + i) : 0.0f;
                     for (float& v : h) v = round_to_bf16(v);  // the model quantizes bf16 values
                     const float* src = r.in(h);
                     const auto [si, di] = row_maps(r, n, rows);
                     for (int mode = 0; mode < 4; ++mode) {
                       const int64_t bytes = mode & 2 ? paged_row_offset(rows, rb, bb) + bb : n * rb;
                       std::vector<uint8_t> init(bytes);
                       for (auto& b : init) b = static_cast<uint8_t>(r.below(256));
                       uint8_t* dst = r.inout(std::string(row_format_name(f)) + label(" w", width) + label(" mode ", mode), init);
                       r.backend().quantize_rows(src, mode & 1 ? r.in(si) : nullptr, n, width, f, dst, mode & 2 ? bb : 0,
                                                 mode & 2 ? r.in(di) : nullptr);
                     }
                   }
               }});
  // Widening: every bf16 bit pattern, NaNs and infinities included, as the CPU's bf16_to_float (bits compared).
  c.push_back({"copy_rows_from_bf16", "copy_rows_from_bf16", 0, [](OpRun& r) {
                 for (int64_t width : {0, 1, 33, 512}) {
                   const int64_t n = 37, rows = 50;
                   std::vector<uint16_t> h(rows * width);
                   for (auto& b : h) b = static_cast<uint16_t>(r.rng()());
                   const uint16_t* src = r.in(h);
                   const auto [si, di] = row_maps(r, n, rows);
                   for (int mode = 0; mode < 4; ++mode) {
                     float* dst = r.inout(label("w", width) + label(" mode ", mode), r.uniform(rows * width));
                     r.backend().copy_rows_from_bf16(src, mode & 1 ? r.in(si) : nullptr, n, width, dst,
                                                     mode & 2 ? r.in(di) : nullptr);
                   }
                 }
               }});
  c.push_back({"copy_2d,fill,scale,add", "copy_fill_scale_add", 0, [](OpRun& r) {
                 const int64_t rows = 9, width = 13, sld = 20, dld = 17;
                 const float* src = r.in(r.uniform(rows * sld));
                 r.backend().copy_2d(src, sld, rows, width, r.inout("copy_2d", r.uniform(rows * dld)), dld);
                 for (int64_t n : {0, 1, 1000, 70001}) {
                   float* x = r.inout(label("scale + add ", n), r.uniform(n));
                   r.backend().scale(x, n, 0.37f);
                   r.backend().add(x, r.in(r.uniform(n)), n);
                   r.backend().fill(r.out<float>(label("fill ", n), n), n, -2.5f);
                 }
               }});
  // Dummy weights generated in place: the same bytes as core random_bytes on the host, at sizes with and
  // without a partial last word and across a 1 MiB sub-stream boundary, at an odd address too.
  c.push_back({"random_fill,fill_bytes", "random_fill_fill_bytes", 0, [](OpRun& r) {
                 for (size_t n : {size_t{1}, size_t{13}, size_t{4096}, (size_t{1} << 20) + 77}) {
                   uint8_t* dst = r.out<uint8_t>(label("random ", static_cast<int64_t>(n)), n + 1);
                   r.backend().random_fill(dst + 1, n, 0x1234567 + n, n % 2 ? 0xbf : 0xff, n % 3 ? 0 : 0x40);
                   r.backend().random_fill(dst, 1, 99, 0xff, 0);
                   r.backend().fill_bytes(r.out<uint8_t>(label("fill_bytes ", static_cast<int64_t>(n)), n), n, 0x7c);
                 }
               }});
  c.push_back({"argmax", "argmax", 0, [](OpRun& r) {
                 for (int64_t n : {1, 7, 300, 129280}) {
                   const int64_t rows = 6;
                   auto x = r.levels(rows * n, 5);  // ties: the first maximum wins
                   if (n > 1) {
                     x[1 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();  // never the answer
                     x[2 * n] = std::numeric_limits<float>::quiet_NaN();          // the answer (nothing is above it)
                     std::fill_n(x.begin() + 3 * n, n, -kInf);
                     x[4 * n + n - 1] = kInf;
                   }
                   r.backend().argmax(r.in(x), rows, n, r.out<int32_t>(label("n ", n), rows));
                 }
               }});
  // Tokens exact (the same counter noise and truncation sets; scores tie only within a double ulp, and an
  // exp in the device's rounding moves a top-p mass by one unit in 2^32); logprobs within 1e-6: the
  // normalizer's double sum in the device's order may move the float by an ulp. Rows of every kind:
  // greedy, temperature, top-k, top-p, min-p, penalties, bias, forbidden tokens, a grammar mask.
  c.push_back({"draw_tokens", "draw_tokens", 1e-6, [](OpRun& r) {
                 for (int64_t vocab : {1, 7, 300, 129280}) {
                   const int64_t rows = 12, words = (vocab + 31) / 32;
                   auto x = vocab > 300 ? r.uniform(rows * vocab, -8, 8) : r.levels(rows * vocab, 5, 0.5f);
                   if (vocab > 1) {
                     x[2 * vocab + vocab / 2] = std::numeric_limits<float>::quiet_NaN();  // a NaN row
                     std::fill_n(x.begin() + 3 * vocab, vocab, -kInf);                  // no finite logit
                     for (int64_t v = 0; v < vocab; v += 2) x[4 * vocab + v] = -kInf;    // holes
                   }
                   const std::vector<int32_t> pick = {8, 0, 4, 2, 3, 6, 1, 5, 9, 10, 11};  // not in order, 7 not drawn
                   std::vector<ops::DrawRow> param(pick.size());
                   std::vector<ops::DrawAdjust> adjust;
                   const std::vector<float> temp = {0.0f, 0.8f, 1.0f, 0.0f, 1.0f, 1e-40f, 1.3f, 0.0f, 0.7f, 1.0f, 0.9f};
                   for (size_t i = 0; i < pick.size(); ++i) {
                     param[i].temperature = temp[i];
                     param[i].key = draw_key(5 + vocab, 1, pick[i]);
                   }
                   param[1].top_k = static_cast<int32_t>(std::max<int64_t>(1, vocab / 3));
                   param[4].top_p = 0.9f;
                   param[6].top_k = 40, param[6].top_p = 0.5f, param[6].log_min_p = std::log(0.05f);
                   param[8].top_p = 0.3f;
                   param[9].log_min_p = std::log(0.2f);
                   param[10].repetition_penalty = 1.4f, param[10].presence_penalty = 0.5f, param[10].frequency_penalty = 0.3f;
                   param[10].top_k = 5;
                   param[10].adjust_begin = 0;
                   for (int32_t t = 0; t < std::min<int64_t>(vocab, 12); ++t) {
                     ops::DrawAdjust a;
                     a.token = t * 3 % static_cast<int32_t>(vocab);
                     if (std::any_of(adjust.begin(), adjust.end(), [&](const ops::DrawAdjust& e) { return e.token == a.token; })) continue;
                     using A = ops::DrawAdjust;
                     a.flags = (t % 2 ? uint32_t{A::kSeen} : 0u) | (t % 3 == 0 ? uint32_t{A::kBias} : 0u) |
                               (t == 5 ? uint32_t{A::kForbid} : 0u);
                     a.bias = t % 3 == 0 ? 1.5f : 0.0f;
                     a.count = t % 4;
                     adjust.push_back(a);
                   }
                   param[10].adjust_end = static_cast<int32_t>(adjust.size());
                   std::vector<uint32_t> mask(2 * words, 0);  // row 0: every third token; row 1: none
                   for (int64_t t = 0; t < vocab; t += 3) mask[t >> 5] |= 1u << (t & 31);
                   param[7].mask = 0, param[0].mask = 0, param[9].mask = 1;
                   const int64_t n = static_cast<int64_t>(pick.size());
                   r.backend().draw_tokens(r.in(x), vocab, r.in(pick), n, r.in(param), adjust.empty() ? nullptr : r.in(adjust),
                                           r.in(mask), r.in(std::vector<float>(n * vocab)),
                                           r.out<int32_t>(label("token ", vocab), n), r.out<float>(label("logprob ", vocab), n));
                 }
               }});
  c.push_back({"hc_mean", "hc_mean", 0, [](OpRun& r) {
                 const int64_t rows = 19, hc = 4, dim = 300, ld = 310;
                 r.backend().hc_mean(r.in(r.uniform(rows * hc * dim, -3, 3)), rows, hc, dim,
                                     r.inout("out", std::vector<float>(rows * ld, 0.5f)), ld);
               }});
  // bf16 outputs after exp: libm's and CUDA's expf may differ in the last bit and flip a rounding.
  c.push_back({"softmax_pool_v41", "softmax_pool_v41", 4e-3, [](OpRun& r) {
                 for (int64_t slots : {1, 8, 128}) {
                   const int64_t windows = 11, channels = 130;
                   auto score = r.uniform(windows * slots * channels, -4, 4);
                   for (size_t i = 0; i < score.size(); i += 3) score[i] = -kInf;  // weight 0 (all -inf: NaN)
                   r.backend().softmax_pool_v41(r.in(r.uniform(windows * slots * channels)), r.in(score), windows,
                                                slots, channels,
                                                r.out<float>(label("slots ", slots), windows * channels));
                 }
               }});
  // Logits and biases on a few levels: many experts tie exactly; both top-k paths (k * 64 <= E or not).
  c.push_back({"moe_route", "moe_route", 1e-6, [](OpRun& r) {
                 using SF = ops::Backend::ScoreFunc;
                 struct Case { int64_t E, k; SF f; bool normalize, bias, image, scores, distinct = false; };
                 for (Case s : {Case{256, 8, SF::kSqrtSoftplus, true, true, true, true},
                                Case{384, 6, SF::kSqrtSoftplus, true, true, true, false, true},  // no ties: ranks
                                Case{64, 8, SF::kSoftmax, true, false, false, true, true},
                                Case{384, 6, SF::kSigmoid, true, true, false, true},
                                Case{64, 64, SF::kSoftmax, false, false, false, true},
                                Case{16, 1, SF::kSoftmax, true, true, false, false},
                                Case{72, 6, SF::kSoftmax, true, false, true, false}}) {
                   const int64_t n = 200;
                   const float* logits = r.in(s.distinct ? r.uniform(n * s.E, -4, 4) : r.levels(n * s.E, 9, 0.5f));
                   const float* bias = s.bias ? r.in(r.levels(s.E, 3, 0.25f)) : nullptr;
                   const float* bias_vl = r.in(r.levels(s.E, 3, 0.25f));
                   std::vector<uint8_t> image(n);
                   for (auto& b : image) b = r.chance(3);
                   const std::string name = label("E", s.E) + label(" k", s.k) + (s.distinct ? " distinct" : "");
                   r.backend().moe_route(logits, n, s.E, bias, bias_vl, s.image ? r.in(image) : nullptr,
                                         {s.f, 1.5f, s.k, s.normalize, 2.5f}, r.out<int32_t>(name + " sel", n * s.k),
                                         r.out<float>(name + " weight", n * s.k),
                                         s.scores ? r.out<float>(name + " scores", n * s.E) : nullptr);
                 }
               }});
  c.push_back({"moe_combine", "moe_combine", 0, [](OpRun& r) {
                 for (bool shared : {true, false}) {
                   const int64_t n = 23, k = 7, dim = 257, slots = 40;
                   std::vector<int32_t> slot(n * k);
                   for (auto& s : slot) s = r.chance(4) ? -1 : r.below(slots);
                   r.backend().moe_combine(r.in(r.uniform(slots * dim)), r.in(slot), n, k, dim,
                                           shared ? r.in(r.uniform(n * dim)) : nullptr,
                                           r.out<float>(shared ? "shared" : "no shared", n * dim));
                 }
               }});
  // Bitwise: the rows and slots are a permutation fixed by the definition (tokens ascending per expert).
  // 300 x 8 choices span several rounds of the CUDA kernel's 256-choice steps; experts 0..255 include
  // ones no token picks.
  c.push_back({"moe_group", "moe_group", 0, [](OpRun& r) {
                 for (auto [n, k, E] : {std::tuple{1L, 6L, 256L}, std::tuple{37L, 6L, 64L}, std::tuple{300L, 8L, 256L}}) {
                   std::vector<int32_t> sel(n * k);
                   for (int64_t t = 0; t < n; ++t)
                     for (int64_t j = 0; j < k; ++j) {
                       bool fresh = false;
                       while (!fresh) {  // distinct experts per token
                         sel[t * k + j] = r.below(E / 2 + 1);
                         fresh = std::find(sel.begin() + t * k, sel.begin() + t * k + j, sel[t * k + j]) ==
                                 sel.begin() + t * k + j;
                       }
                     }
                   const std::string name = label("n ", n) + label(" k ", k) + label(" experts ", E);
                   r.backend().moe_group(r.in(sel), r.in(r.uniform(n * k)), n, k, E, r.out<int32_t>(name + " perm", n * k),
                                         r.out<float>(name + " weight", n * k), r.out<int32_t>(name + " slot", n * k),
                                         r.out<int32_t>(name + " offsets", E + 1));
                 }
               }});
  // bf16 roundings of fp32 dots: a fused multiply-add elsewhere can flip one. Keys are the state arena's
  // packed index keys (FP4 + UE8M0 per 32, paged rows). dim 128 is the CUDA backend's tiled kernel (V4.1's
  // indexer), dim 64 its generic one (the tiny models').
  c.push_back({"index_scores", "index_scores", 1e-2, [](OpRun& r) {
                 for (const int64_t dim : {int64_t{128}, int64_t{64}}) {
                   const int64_t tokens = 12, heads = dim == 128 ? 16 : 8, nkeys = 300, ld = 260;
                   std::vector<int32_t> key_rows(nkeys * 2), key_begin(tokens), width(tokens), visible(tokens);
                   for (auto& k : key_rows) k = r.below(nkeys);
                   for (int64_t t = 0; t < tokens; ++t) {  // runs of tokens over one sequence's keys; widths 0, ld, 77
                     const int64_t seq = t / 4;
                     key_begin[t] = static_cast<int32_t>(seq * 100);
                     width[t] = seq == 0 ? 0 : seq == 1 ? static_cast<int32_t>(ld) : 77;
                     visible[t] = std::max(0, width[t] - static_cast<int32_t>(t % 4) * 9);
                   }
                   const int64_t kb = row_bytes(RowFormat::kFp4E8m0x32, dim), bb = 4096;  // keys in 4 KiB blocks
                   std::vector<uint8_t> keys(paged_row_offset(nkeys, kb, bb) + bb);
                   const std::vector<float> kv = r.uniform(nkeys * dim, -3, 3);
                   for (int64_t i = 0; i < nkeys; ++i)
                     quantize_row(kv.data() + i * dim, dim, RowFormat::kFp4E8m0x32, keys.data() + paged_row_offset(i, kb, bb));
                   r.backend().index_scores(r.in(r.uniform(tokens * heads * dim)), r.in(r.uniform(tokens * heads)),
                                            tokens, heads, dim, r.in(keys), bb, r.in(key_rows), r.in(key_begin),
                                            r.in(width), r.in(visible), ld,
                                            r.out<float>(label("scores d", dim), tokens * ld));
                 }
               }});
  // V4's fp32 indexer scores (dim 24: tiny-b's index_head_dim): fp32 sums in another order.
  c.push_back({"index_scores_fp32", "index_scores_fp32", 1e-4, [](OpRun& r) {
                 const int64_t tokens = 12, heads = 3, dim = 24, nkeys = 300, ld = 120;
                 std::vector<int32_t> key_rows(nkeys), key_begin(tokens), width(tokens), visible(tokens);
                 for (auto& k : key_rows) k = r.below(nkeys);
                 for (int64_t t = 0; t < tokens; ++t) {
                   key_begin[t] = static_cast<int32_t>((t / 4) * 90);
                   width[t] = t / 4 == 0 ? 0 : t / 4 == 1 ? static_cast<int32_t>(ld) : 77;
                   visible[t] = std::max(0, width[t] - static_cast<int32_t>(t % 4) * 9);
                 }
                 r.backend().index_scores_fp32(r.in(r.uniform(tokens * heads * dim)), r.in(r.uniform(tokens * heads)),
                                               tokens, heads, dim, r.in(r.uniform(nkeys * dim)), r.in(key_rows),
                                               r.in(key_begin), r.in(width), r.in(visible), ld, 0.2f,
                                               r.out<float>("scores", tokens * ld));
               }});
  // V4's top-k: exact ties (a few levels) to the lower column; ranked / visible / topk per token.
  c.push_back({"index_select_stable", "index_select_stable", 0, [](OpRun& r) {
                 const int64_t tokens = 30, ld = 90, K = 12;
                 auto s = r.levels(tokens * ld, 5);
                 std::vector<int32_t> ranked(tokens), visible(tokens), topk(tokens);
                 for (int64_t t = 0; t < tokens; ++t) {
                   ranked[t] = t == 0 ? 0 : r.below(ld + 1);
                   visible[t] = r.below(ranked[t] + 1);
                   topk[t] = t % 2 ? static_cast<int32_t>(K) : r.below(K + 1);
                 }
                 r.backend().index_select_stable(r.in(s), tokens, ld, r.in(ranked), r.in(visible), r.in(topk), K,
                                                 r.out<int32_t>("sel", tokens * K));
               }});
  // Candidate blocks: top 5 (partial_sort's heap at nb >= 320, nth_element below), and at ld 20000 the top
  // 1000 of 2500 (nth_element, V4.1-Flash's regime: top 2048 blocks of 8); 6 levels, so ties straddle.
  c.push_back({"candidate_mask,index_select", "candidate_mask_index_select", 0, [](OpRun& r) {
                 for (int64_t ld : {70, 600, 4096, 20000}) {
                   const int64_t tokens = 40, block = 8, nb = (ld + block - 1) / block, K = 96;
                   const int64_t topk_blocks = ld == 20000 ? 1000 : 5;
                   auto s = r.levels(tokens * ld, 6);
                   for (auto& x : s)
                     if (r.chance(5)) x = -kInf;
                   std::vector<int32_t> width(tokens), clen(tokens), ranked(tokens), visible(tokens), topk(tokens);
                   for (int64_t t = 0; t < tokens; ++t) {
                     width[t] = t == 0 ? 0 : t == 1 ? static_cast<int32_t>(ld) : r.below(ld + 1);
                     clen[t] = t % 5 == 0 ? 0 : r.below(width[t] + 1);
                     ranked[t] = t % 3 == 0 ? static_cast<int32_t>(nb) : r.below(nb + 1);
                   }
                   const float* ds = r.in(s);
                   const std::string l = label("ld ", ld);
                   uint8_t* mask = r.out<uint8_t>(l + " mask", tokens * ld);
                   r.backend().candidate_mask(ds, tokens, ld, r.in(width), r.in(clen), r.in(ranked), block, topk_blocks,
                                              mask);
                   for (int64_t t = 0; t < tokens; ++t) {  // k = n (topk = ranked), ranked 0, visible < ranked
                     ranked[t] = t % 4 == 0 ? static_cast<int32_t>(ld) : r.below(ld + 1);
                     topk[t] = t % 7 == 0 ? ranked[t] : t % 7 == 1 ? static_cast<int32_t>(K)
                                                                  : r.below(std::min<int64_t>(K, ld) + 1);
                     topk[t] = std::min<int32_t>(topk[t], K);
                     visible[t] = t % 2 ? ranked[t] : r.below(ranked[t] + 1);
                   }
                   for (bool with_mask : {false, true})
                     r.backend().index_select(ds, with_mask ? mask : nullptr, tokens, ld, r.in(ranked), r.in(visible),
                                              r.in(topk), K,
                                              r.out<int32_t>(l + (with_mask ? " sel masked" : " sel"), tokens * K));
                 }
               }});
  c.push_back({"lookup_rows", "lookup_rows", 0, [](OpRun& r) {
                 const int64_t tokens = 9, k = 33, out_ld = 40, table_n = 500;
                 std::vector<int32_t> in(tokens * k), table(table_n), begin(tokens);
                 for (auto& t : table) t = r.below(1 << 20);
                 for (auto& b : begin) b = r.below(table_n - 100);
                 for (auto& x : in) x = r.chance(6) ? -1 : r.below(100);
                 r.backend().lookup_rows(r.in(in), tokens, k, r.in(table), r.in(begin),
                                         r.inout("out", std::vector<int32_t>(tokens * out_ld, 7)), out_ld);
               }});
  // Both placements of the table: host memory (the host gathers the rows) and backend memory (ids uploaded).
  c.push_back({"embedding_fp8,embedding_fp8_on_device", "embedding_fp8", 0, [](OpRun& r) {
                 const int64_t rows = 1000, dim = 96, n = 57;
                 std::vector<uint8_t> table(rows * dim), scale(rows * dim / 32);
                 for (auto& b : table) b = static_cast<uint8_t>(r.rng()());  // NaN bytes included
                 for (auto& b : scale) b = static_cast<uint8_t>(110 + r.below(30));
                 // the decoder's edges: 2^-127 (a subnormal), NaN, 2^127 (products overflow), 2^-126
                 scale[0] = 0, scale[1] = 0xff, scale[2] = 254, scale[3] = 1;
                 std::vector<int64_t> ids(n);
                 for (auto& i : ids) i = r.below(rows);
                 ids[0] = 0, ids[1] = 0;  // row 0 (whose scales are the edges), twice
                 r.backend().embedding_fp8(r.host(table), r.host(scale), dim, r.host(ids), n,
                                           r.out<float>("rows", n * dim));
                 r.backend().embedding_fp8_on_device(r.in(table), r.in(scale), dim, r.in(ids), n,
                                                     r.out<float>("rows on device", n * dim));
               }});
  // bf16 outputs (x + gate * value): a one-ulp difference in the gate can flip a rounding.
  // dim 5120 (V4.1-Flash): the staged rows need more than 48 KB of shared memory.
  c.push_back({"engram_gate", "engram_gate", 2e-3, [](OpRun& r) {
                 for (auto [n, hc, dim] : {std::tuple{13L, 4L, 512L}, std::tuple{3L, 4L, 5120L}}) {
                   const auto x = r.uniform(n * hc * dim, -2, 2);
                   const float* kv = r.in(r.uniform(n * (hc + 1) * dim));
                   const float* qk = r.in(r.uniform(hc * dim));
                   std::vector<uint8_t> image(n);
                   for (auto& b : image) b = r.chance(4);
                   for (bool with_image : {false, true})
                     r.backend().engram_gate(r.inout(label(with_image ? "x image d" : "x d", dim), x), kv, qk,
                                             with_image ? r.in(image) : nullptr, n, hc, dim, 1e-6f);
                 }
               }});
  return c;
}

}  // namespace deepinfer::optest
