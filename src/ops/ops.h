// The op interface the model graphs are written against. Each backend (CPU: readable reference,
// CUDA: fast) implements every op; kernels see raw pointers and sizes only, never engine types.
// Row-major layouts throughout; all pointers live in the backend's memory.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/row_format.h"
#include "ops/token_draw.h"

namespace deepinfer::ops {

// Frequencies of one interleaved RoPE table: pair i of the rotated tail turns by pos * inv_freq[i];
// cos/sin are multiplied by attention_factor (transformers' YaRN mscale; 1 for the release).
struct RopeFreqs {
  const float* inv_freq;  // [rope_dim / 2]
  int64_t rope_dim;
  float attention_factor;
};

// The activation of bias_act's epilogue (kGeluErf: x/2 (1 + erf(x / sqrt 2))).
enum class Activation : int32_t { kNone = 0, kGeluErf = 1 };

// A weight in its stored format, in a backend's memory (spec §3.1, §5.1). kF32: float [n, k]; kBf16: bf16
// bits [n, k] (a float weight the release stores as BF16, on a backend that keeps it so);
// kFp8Block: e4m3 [n, k] with a scale per block x block ([ceil(n/block), ceil(k/block)]); kMxfp4: e2m1
// pairs [n, k/2] (low nibble = even k) with a scale per 1 x 32 ([n, k/32]). Scales are fp32 (the
// checkpoints' UE8M0 bytes widened, or fp32 where a checkpoint stores them so). scale_ue8m0, when set,
// holds the same scales as UE8M0 bytes in the tensor-core GEMM's layout (gemm_scale_bytes), which a
// backend uses for its fast path; it is null when a scale is not a power of two.
// Stacked weights (the routed experts of a layer): `groups` matrices [n, k] one after another along n,
// their scales stacked the same way (MXFP4's UE8M0 bytes K-block-major over groups * n). group(g) is
// matrix g alone, a view whose UE8M0 rows keep the stack's stride (scale_ld; 0 = dense).
enum class WeightType : int32_t { kF32 = 0, kFp8Block = 1, kMxfp4 = 2, kBf16 = 3 };
struct QWeight {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  const float* scale = nullptr;
  int64_t n = 0, k = 0, block = 0;
  const uint8_t* scale_ue8m0 = nullptr;
  int64_t groups = 1;
  int64_t scale_ld = 0;
  QWeight group(int64_t g) const;
};

// w's scales as UE8M0 bytes in the layout of the tensor-core GEMM (backends/cuda/kernels/fp8_gemm.h):
// FP8 blocks [ceil(n / block), k / block] row-major; MXFP4 K-block-major [k / 32, n]. Empty when w has no
// scales or a scale is not a power of two 2^-127 .. 2^127 (w.scale is host memory here).
std::vector<uint8_t> gemm_scale_bytes(const QWeight& w);
// The UE8M0 bytes of a stack (QWeight::groups) from each matrix's gemm_scale_bytes (`each`, [n, k] of
// `type` each): FP8 blocks concatenated, MXFP4 interleaved to [k / 32, groups * n]. Empty if any is.
std::vector<uint8_t> stack_gemm_scale_bytes(const std::vector<std::vector<uint8_t>>& each, WeightType type, int64_t n,
                                            int64_t k);

// Grouped rows (the routed experts' stacks): reads the offsets [groups + 1] back from `mem` (they must
// run from 0 to m, not decreasing) and calls fn(g, first row, rows) for each group with rows.
void for_each_group(DeviceMemory& mem, const int32_t* offsets, int64_t groups, int64_t m,
                    const std::function<void(int64_t group, int64_t row, int64_t rows)>& fn);

// The index of row i of the `fresh` rows in sparse_attention_online's index lists, and back.
constexpr int32_t fresh_row(int64_t i) { return static_cast<int32_t>(-2 - i); }
constexpr int64_t fresh_row_index(int32_t r) { return -2 - static_cast<int64_t>(r); }

// A backend: the ops, and (DeviceMemory) the memory they read and write.
class Backend : public DeviceMemory {
 public:
  virtual std::string_view name() const = 0;

  // y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation in a fixed order (batch invariant).
  virtual void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) = 0;

  // y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * (weight ? weight : 1), then bf16 when bf16_out; x may equal y.
  virtual void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
                        bool bf16_out) = 0;

  // Rotates the last rope_dim channels of each of the `heads` vectors (width dim) of every row, in
  // interleaved pairs (2i, 2i+1), by positions[row]; inverse = rotate by the conjugate. bf16_out: the
  // rotated channels rounded to bf16 (the others are left as they are: bf16 already where the models ask).
  virtual void rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
                    const RopeFreqs& freqs, bool inverse, bool bf16_out) = 0;

  // Gather attention with a per-head sink (spec §2.5). For token t, head h:
  //   s_j = scale <q[t,h], pool[idx[t,j]]> over idx >= 0;  o = sum_j softmax_j(s, sink[h]) pool[idx[t,j]]
  // The sink enlarges the denominator only; a row with no valid index gives 0.
  virtual void sparse_attention(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                                const int32_t* idx, int64_t k, const float* sink, float scale, float* out) = 0;

  // Manifold-constrained hyper-connection weights (spec §3.2) from streams x [rows, hc*dim]:
  // pre [rows, hc], post [rows, hc] (null to skip), comb [rows, hc, hc] (null to skip).
  // fn is [(2+hc)*hc, hc*dim] (or [hc, hc*dim] for the head, post/comb null), base and scale alike.
  virtual void hc_weights(const float* x, int64_t rows, int64_t hc, int64_t dim, const float* fn,
                          const float* base, const float* scale, float rms_eps, float hc_eps, int64_t sinkhorn_iters,
                          float* pre, float* post, float* comb) = 0;

  // mHC collapse: y[r, d] = sum_k mix[r, k] x[r, k, d] (k in order, fp32), then bf16 when bf16_out.
  virtual void hc_collapse(const float* x, const float* mix, int64_t rows, int64_t hc, int64_t dim, bool bf16_out,
                           float* y) = 0;
  // mHC expand: out[r, k, d] = post[r, k] sub[r, d] + (sum_j comb[r, j, k] x[r, j, d]) (j in order),
  // then bf16 when bf16_out. out may be x (in place: the streams updated without a copy).
  virtual void hc_expand(const float* x, const float* sub, const float* post, const float* comb, int64_t rows,
                         int64_t hc, int64_t dim, bool bf16_out, float* out) = 0;

  // Softmax pooling over slots per channel (the compressors): z[w, c] = sum_s softmax_s(gate[w,s,c]) kv[w,s,c].
  // A slot with gate -inf has weight 0.
  virtual void softmax_pool(const float* kv, const float* gate, int64_t windows, int64_t slots, int64_t channels,
                            float* z) = 0;

  // SwiGLU with the clamp: h = silu(min(g, limit)) * clamp(u, -limit, limit) * row_scale[r] (limit 0 = none),
  // then bf16 when bf16_out.
  virtual void swiglu(const float* g, const float* u, int64_t rows, int64_t dim, float limit,
                      const float* row_scale, float* h, bool bf16_out) = 0;

  // In-place FP8 e4m3 fake quantization with UE8M0 scales per `block` channels of each row (act_quant).
  virtual void fake_quant_fp8(float* x, int64_t rows, int64_t dim, int64_t block) = 0;
  // In-place FP4 e2m1 fake quantization with UE8M0 scales per `block` channels (fp4_act_quant).
  virtual void fake_quant_fp4(float* x, int64_t rows, int64_t dim, int64_t block) = 0;
  // In-place FP4 e2m1 fake quantization with E4M3 (non power of two) scales per `block` channels:
  // s = e4m3(max(amax, 6*2^-9) / 6) (V4.1's compressed KV, block 16).
  virtual void fake_quant_fp4_e4m3(float* x, int64_t rows, int64_t dim, int64_t block) = 0;
  // y[m, n] = sum over K blocks b (in order) of (sum_{k in b} x[m,k] w[n,k], summed sequentially in k):
  // the accumulation order of DeepSeek's block-scaled FP8/FP4 GEMM (fp32 partial per K block, added in
  // K order); each product is rounded to fp32 before it is added (no fused multiply-add). x and w are the dequantized values (power-of-two scales commute with the sums).
  virtual void linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                               float* y) = 0;
  // In-place round to bf16 (RNE), to mimic a reference that computes in bf16.
  virtual void round_bf16(float* x, int64_t n) = 0;
  // sparse_attention as DeepSeek's V4.1 kernel computes it: an online softmax over blocks of `block`
  // indices, the running max starting at -1e30 and excluding the sink, probabilities rounded to bf16
  // (relative to the running max) before the P.V product, exp(sink - max) added to the denominator.
  // Rows (of `dim` values) come from two places: r >= 0 is row r of the state arena `pool` (read in
  // place, paged in blocks of pool_block_bytes: core/row_format.h's paged_row_offset), r <= -2 is row
  // fresh_row_index(r) of `fresh` (this step's window rows, back to back), r == -1 is no row. The first
  // `window` columns of a token's k indices are window rows (RowFormat::kFp8E8m0x32), the others
  // compressed rows (kFp4E4m3x16, arena rows only): both are decoded to their exact values (bf16 holds
  // them) on load. q holds bf16 values in the model; a backend may read it as bf16 and sum in its own
  // order (CUDA's tensor-core kernel at 64 heads x 512, block 64; DEEPINFER_ATTENTION=exact keeps fp32
  // arithmetic).
  virtual void sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim,
                                       const uint8_t* pool, int64_t pool_block_bytes, const uint8_t* fresh,
                                       const int32_t* idx, int64_t k, int64_t window, const float* sink, float scale,
                                       int64_t block, float* out) = 0;

  // The reference's quantized linear (act_quant + block-scaled GEMM): x FP8-quantized as
  // fake_quant_fp8(x, act_block), times the dequantized weight, summed per K block of 32 and the
  // blocks in order: y [m, n], rounded to bf16 (the reference GEMM's output dtype). The CPU sums a block
  // in linear_kblocked's order; tensor cores sum it their own way (a few fp32 ulps), the rest is the
  // same. x is not changed.
  virtual void linear_quant(const float* x, int64_t m, const QWeight& w, int64_t act_block, float* y) = 0;
  // Grouped linear_quant over stacked weights (the routed experts): rows [offsets[g], offsets[g + 1]) of
  // x [m, k] (offsets [w.groups + 1], backend memory, offsets[groups] = m) times w.group(g), into the
  // same rows of y [m, n]; every group has at most max_rows rows (a host-side bound). Each group's rows
  // get what linear_quant gives them. This default reads the offsets back and runs the groups one by one.
  virtual void linear_quant_grouped(const float* x, int64_t m, const QWeight& w, const int32_t* offsets,
                                    int64_t max_rows, int64_t act_block, float* y);
  // y[m, n] = x[m, k] w[n, k]^T, fp32 out, for a float weight (kF32, kBf16) run without activation
  // quantization: linear()'s bits for kF32; kBf16 sums x (bf16 values here, as in the reference) times
  // the bf16 weight in fp32 in the backend's own order (the CPU: linear() on the widened weight).
  virtual void linear_plain(const float* x, int64_t m, const QWeight& w, float* y);
  // Block-diagonal linear_plain (the DeepSeek attention's grouped wo_a): w stacks `groups` matrices
  // [R, k] (w.n = groups * R, w.k = k); row i of x holds groups * k channels, group g's k channels times
  // matrix g give columns [g * R, (g + 1) * R) of y [m, groups * R], each as linear_plain gives them,
  // rounded to bf16 when bf16_out.
  virtual void linear_block_diag(const float* x, int64_t m, const QWeight& w, int64_t groups, bool bf16_out,
                                 float* y) = 0;
  // The format this backend keeps a weight stored as `stored` in (the CPU dequantizes at load).
  virtual WeightType weight_format(WeightType stored) const { return stored; }
  // On: every op gives a row the same bits whatever the batch size (kernels whose reduction order
  // depends on m take a fixed one). The CPU reference always is.
  virtual void set_batch_invariant(bool on) { (void)on; }

  // --- data movement (indices are backend memory like the data) ---
  // Row gather/scatter: dst row (dst_idx ? dst_idx[i] : i) = src row (src_idx ? src_idx[i] : i) for
  // i < n, rows of `width` floats; an index < 0 skips row i. Destination rows must be distinct.
  virtual void copy_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                         const int32_t* dst_idx) = 0;
  // copy_rows from bf16 rows (bits), widened exactly: the gather of tables kept in their stored BF16
  // (the token embedding).
  virtual void copy_rows_from_bf16(const uint16_t* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                                   const int32_t* dst_idx) = 0;
  // Rows into a stored format (the writes of the state arena's quantized row kinds): dst row j =
  // quantize_row(src row i) (core/row_format.h, bit for bit) with i = src_idx ? src_idx[r] : r and
  // j = dst_idx ? dst_idx[r] : r for r < n (an index < 0 skips r); dst rows paged in blocks of
  // dst_block_bytes (0: back to back). format: kFp8E8m0x32, kFp4E4m3x16 or kFp4E8m0x32.
  virtual void quantize_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, RowFormat format,
                             uint8_t* dst, int64_t dst_block_bytes, const int32_t* dst_idx) = 0;
  // Strided block copy: dst[r * dst_ld + c] = src[r * src_ld + c] for r < rows, c < width.
  virtual void copy_2d(const float* src, int64_t src_ld, int64_t rows, int64_t width, float* dst, int64_t dst_ld) = 0;
  virtual void fill(float* x, int64_t n, float value) = 0;
  virtual void scale(float* x, int64_t n, float s) = 0;      // x *= s
  virtual void add(float* x, const float* y, int64_t n) = 0;  // x += y
  // out[r] = index of the first maximum of row r of x [rows, n].
  virtual void argmax(const float* x, int64_t rows, int64_t n, int32_t* out) = 0;
  // Draws a token from each of n rows of logits (row rows[i] of x [*, vocab]) as the host sampler does
  // (ops/token_draw.h's draw_row): row i's sampling is param[i], its bias / penalty entries
  // adjust[param[i].adjust_begin, adjust_end), its allowed-token bitmask row mask + param[i].mask * words
  // (words = (vocab + 31) / 32) when param[i].mask >= 0. logprob[i] = the token's log-softmax in the raw
  // row (the normalizer summed in double). A row with a NaN gives kDrawNaN, one where nothing can be
  // drawn kDrawNone. work: n * vocab floats of scratch. On the CPU the bits are the sampler's; elsewhere
  // the same noise and truncation sets, with the normalizer, exp and the double logs in the device's
  // order and rounding (ties within an ulp).
  virtual void draw_tokens(const float* x, int64_t vocab, const int32_t* rows, int64_t n, const DrawRow* param,
                           const DrawAdjust* adjust, const uint32_t* mask, float* work, int32_t* token,
                           float* logprob) = 0;

  // --- model pieces (DeepSeek V4 / V4.1) ---
  // Mean of the hc streams: out[r * out_ld + d] = bf16((sum_k x[r, k, d] in k order) / hc).
  virtual void hc_mean(const float* x, int64_t rows, int64_t hc, int64_t dim, float* out, int64_t out_ld) = 0;
  // V4.1 compressor pooling: z[w, c] = sum_s kv[w,s,c] * (e_s / den) (s in order, fp32), with
  // e_s = exp(score[w,s,c] - max_s score), den = sum_s e_s summed first; then bf16.
  virtual void softmax_pool_v41(const float* kv, const float* score, int64_t windows, int64_t slots,
                                int64_t channels, float* z) = 0;

  // MoE router (spec §3.5, §5.5) for rows of logits [n, experts]: v = logit / temperature;
  // score = softmax_e(v) (kSoftmax), sigmoid(v), or sqrt(softplus(v)) (softplus threshold 20, torch's);
  // selection = top-k of score + (image && image[r] ? bias_vl : bias) (torch.topk's tie order, see
  // backends/cpu/torch_topk.h); weight_j = score of expert j, divided by (sum + 1e-20) when
  // normalize and k > 1, times route_scale. sel/weight [n, k] in selection order; scores [n, E] (null
  // to skip) = the unbiased scores. bias may be null (0).
  enum class ScoreFunc : int32_t { kSoftmax = 0, kSigmoid = 1, kSqrtSoftplus = 2 };
  struct RouteParams {
    ScoreFunc score_func;
    float temperature;
    int64_t k;
    bool normalize;
    float route_scale;
  };
  virtual void moe_route(const float* logits, int64_t n, int64_t experts, const float* bias, const float* bias_vl,
                         const uint8_t* image, const RouteParams& p, int32_t* sel, float* weight, float* scores) = 0;
  // MoE combine: out[t] = bf16(acc + shared[t]) with acc = 0 + y[slot[t*k + 0]] + y[slot[t*k + 1]] + ...
  // (j in order; slot < 0 skipped); rows of `dim` floats. shared may be null (0).
  virtual void moe_combine(const float* y, const int32_t* slot, int64_t n, int64_t k, int64_t dim,
                           const float* shared, float* out) = 0;
  // MoE grouping of the n * k choices sel [n, k] (experts < `experts`, distinct per token) by expert,
  // tokens ascending within an expert: expert e's rows are [offsets[e], offsets[e + 1]) (offsets
  // [experts + 1]); row r is token perm[r]'s choice with weight row_weight[r] (weight [n, k]);
  // slot[t*k + j] = the row of token t's j-th expert by ascending id (the order moe_combine adds them in,
  // the reference's).
  virtual void moe_group(const int32_t* sel, const float* weight, int64_t n, int64_t k, int64_t experts,
                         int32_t* perm, float* row_weight, int32_t* slot, int32_t* offsets) = 0;

  // V4.1 indexer scores of each token over its sequence's keys. Token t's key w (w < width[t]) is row
  // key_rows[key_begin[t] + w] of `keys` (the state arena's index keys: RowFormat::kFp4E8m0x32 rows of
  // `dim`, paged in blocks of key_block_bytes, decoded exactly on load). For w < visible[t]:
  //   s = bf16(sum_h bf16(max(bf16(dot(q[t,h], key_w)), 0) * weight[t,h])), h in order, fp32,
  // dot as cpu::dot orders it on the CPU; w >= visible[t] (and w in [width[t], ld)) -> -inf.
  // scores [tokens, ld].
  virtual void index_scores(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                            const uint8_t* keys, int64_t key_block_bytes, const int32_t* key_rows,
                            const int32_t* key_begin, const int32_t* width, const int32_t* visible, int64_t ld,
                            float* scores) = 0;
  // V4 indexer scores in fp32 (the transformers reference), addressed as index_scores: for w < visible[t]
  // (and w < width[t]) s = sum_h (max(dot(q[t,h], key_w), 0) * scale) * weight[t,h], h in order, the dot
  // summed in channel order; other columns (up to ld) -inf. scores [tokens, ld].
  virtual void index_scores_fp32(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                                 const float* keys, const int32_t* key_rows, const int32_t* key_begin,
                                 const int32_t* width, const int32_t* visible, int64_t ld, float scale,
                                 float* scores) = 0;
  // V4.1 candidate blocks (the candidate source layer): for token t, blocks of `block` columns of its
  // first width[t] columns; the block maximum of scores, except block (clen[t]-1)/block (if clen[t] >= 1),
  // which counts +inf; the top min(topk_blocks, ranked[t]) of the first ranked[t] blocks (torch.topk's
  // tie order, sorted); every column (< width[t]) of a chosen block whose maximum is > -inf gets
  // mask 1, all others 0. mask [tokens, ld].
  virtual void candidate_mask(const float* scores, int64_t tokens, int64_t ld, const int32_t* width,
                              const int32_t* clen, const int32_t* ranked, int64_t block, int64_t topk_blocks,
                              uint8_t* mask) = 0;
  // Index top-k: for token t, columns with mask == 0 (mask may be null) count -inf; the top
  // m = min(topk[t], ranked[t]) of the first ranked[t] columns (torch.topk's tie order), sorted by
  // column; sel[t, j] = column if column < visible[t] else -1 for j < m, then -1 up to K. sel [tokens, K].
  virtual void index_select(const float* scores, const uint8_t* mask, int64_t tokens, int64_t ld,
                            const int32_t* ranked, const int32_t* visible, const int32_t* topk, int64_t K,
                            int32_t* sel) = 0;
  // index_select with exact ties going to the lower column (V4's indexer, as transformers' reference
  // ranks): the top m = min(topk[t], ranked[t]) of the first ranked[t] columns of scores [tokens, ld] by
  // (score descending, column ascending), sorted by column; sel[t, j] = column if < visible[t] else -1,
  // then -1 up to K. sel [tokens, K].
  virtual void index_select_stable(const float* scores, int64_t tokens, int64_t ld, const int32_t* ranked,
                                   const int32_t* visible, const int32_t* topk, int64_t K, int32_t* sel) = 0;
  // Row-number translation: out[t * out_ld + j] = in[t*k + j] < 0 ? -1 : table[begin[t] + in[t*k + j]]
  // for j < k (a token's selected compressed rows -> arena rows).
  virtual void lookup_rows(const int32_t* in, int64_t tokens, int64_t k, const int32_t* table, const int32_t* begin,
                           int32_t* out, int64_t out_ld) = 0;

  // Rows of an FP8 e4m3 table with one UE8M0 scale per 32 values, dequantized to fp32:
  // out[i, d] = e4m3(table[ids[i], d]) * e8m0(scale[ids[i], d / 32]). table and scale are HOST memory
  // (memory-mapped Engram tables, too large for a device), and so are ids (already range-checked: the
  // model hashes them on the host); out is backend memory.
  virtual void embedding_fp8(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                             float* out) = 0;
  // embedding_fp8 with table, scale and ids in backend memory (Engram tables placed on the device).
  virtual void embedding_fp8_on_device(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids,
                                       int64_t n, float* out) = 0;
  // V4.1 Engram gate (spec §5.3) on the streams x [n, hc, dim] with kv [n, hc + 1, dim] (keys, value)
  // and qk [hc, dim] (q_weight * k_weight): for each token not marked in image and stream k,
  //   dot = <x_k * qk_k, key_k> * rsqrt(mean(x_k^2) + eps) * rsqrt(mean(key_k^2) + eps) / sqrt(dim)
  //   (the three sums in one pass, d in order), g = sigmoid(sign(dot) sqrt(max(|dot|, 1e-6))),
  //   x_k = bf16(x_k + g * value).
  virtual void engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                           int64_t dim, float eps) = 0;

  // --- vision tower (DeepSeek V4.1 ViT and aligner; spec: goldens/v41/VISION.md) ---
  // The ViT keeps its activations as bf16 bits (uint16_t): every value the reference rounds to bf16.
  // x[r, c] = x[r, c] + bias[c] (bias may be null), bf16 when bf16_out, then act (GELU with erf), bf16
  // again when bf16_out: a biased linear layer's epilogue as a bf16 reference computes it (the aligner).
  virtual void bias_act(float* x, int64_t rows, int64_t dim, const float* bias, Activation act, bool bf16_out) = 0;
  // linear_plain with bf16 activations: x W^T for x bf16 bits [m, k], into y [m, n] (fp32) or, for a
  // linear without bias, into y_bf16 (bf16(x W^T), bits): exactly one of the two is non-null.
  virtual void linear_plain_bf16(const uint16_t* x, int64_t m, const QWeight& w, float* y, uint16_t* y_bf16) = 0;
  // The fused q/k/v projection's epilogue with the ViT's 2-D RoPE: y [rows, 3, heads, dim] (x wqkv^T, fp32)
  // plus bias [3 heads dim], rounded to bf16; then q and k (parts 0 and 1) rotate-half turned: each head's
  // halves [x1, x2] become [x1 cos - x2 sin, x2 cos + x1 sin] (each product rounded to fp32, then bf16) with
  // cos/sin rows r of [rows, dim / 2] (fp32). qkv: bf16 bits in y's layout.
  virtual void qkv_rope_bf16(const float* y, const float* bias, int64_t rows, int64_t heads, int64_t dim,
                             const float* cos, const float* sin, uint16_t* qkv) = 0;
  // A residual add and the next pre-norm in one pass: a = bf16(y + bias) (bias may be null), x = bf16(x + a)
  // (accumulate; else x = a), h = bf16(rms_norm(x, eps) * weight). y fp32 [rows, dim]; x, h bf16 bits.
  virtual void residual_rms_norm_bf16(const float* y, const float* bias, bool accumulate, uint16_t* x,
                                      const float* weight, int64_t rows, int64_t dim, float eps, uint16_t* h) = 0;
  // SwiGLU of the fused w1's output gu [rows, 2 dim] (bf16 bits; gate then up) as a bf16 reference rounds
  // it: g = gu[r, :dim], u = gu[r, dim:], h = bf16(bf16(silu(g)) * u), silu(g) = g / (1 + exp(-g)).
  virtual void swiglu_bf16(const uint16_t* gu, int64_t rows, int64_t dim, uint16_t* h) = 0;
  // Bidirectional attention within each of `seqs` sequences (rows seq_begin[s] .. seq_begin[s+1], at
  // most max_len long), bf16 bits in and out: out[t, h] = bf16(sum_j softmax_j(scale <q[t,h], k[j,h]>)
  // v[j,h]); row t of q, k and v at t * ld (heads x dim values: the fused projection's [tokens, 3, heads,
  // dim] is q = qkv, k = qkv + heads dim, v = qkv + 2 heads dim, ld = 3 heads dim); out [tokens, heads,
  // dim]; rows in no sequence give 0. A backend may sum in its own order with bf16 probabilities in P.V
  // (CUDA's tensor-core kernel at head dim 64; DEEPINFER_ATTENTION=exact keeps the CPU's fp32 arithmetic).
  virtual void attention_full(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                              int64_t heads, int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len,
                              float scale, uint16_t* out) = 0;
  // y[i] = x[i] widened (bf16 bits -> fp32).
  virtual void widen_bf16(const uint16_t* x, int64_t n, float* y) = 0;
};

Backend& cpu_backend();
// The backend of a device (the CPU's, or one CUDA backend per GPU, created on first use); throws
// deepinfer::Error for a device this build or machine does not have.
Backend& backend_for(const Device& device);

}  // namespace deepinfer::ops
