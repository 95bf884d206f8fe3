// The op interface the model graphs are written against. Each backend (CPU: readable reference,
// CUDA: fast) implements every op; kernels see raw pointers and sizes only, never engine types.
// Row-major layouts throughout; all pointers live in the backend's memory.
#pragma once
#include <cstdint>
#include <string_view>

namespace deepinfer::ops {

// Frequencies of one interleaved RoPE table: pair i of the rotated tail turns by pos * inv_freq[i];
// cos/sin are multiplied by attention_factor (transformers' YaRN mscale; 1 for the release).
struct RopeFreqs {
  const float* inv_freq;  // [rope_dim / 2]
  int64_t rope_dim;
  float attention_factor;
};

// The index of row i of the `fresh` rows in sparse_attention_online's index lists, and back.
constexpr int32_t fresh_row(int64_t i) { return static_cast<int32_t>(-2 - i); }
constexpr int64_t fresh_row_index(int32_t r) { return -2 - static_cast<int64_t>(r); }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation in a fixed order (batch invariant).
  virtual void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) = 0;

  // y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) * (weight ? weight : 1); x may equal y.
  virtual void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) = 0;

  // Rotates the last rope_dim channels of each of the `heads` vectors (width dim) of every row, in
  // interleaved pairs (2i, 2i+1), by positions[row]; inverse = rotate by the conjugate.
  virtual void rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
                    const RopeFreqs& freqs, bool inverse) = 0;

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
  // then bf16 when bf16_out. out must not alias x.
  virtual void hc_expand(const float* x, const float* sub, const float* post, const float* comb, int64_t rows,
                         int64_t hc, int64_t dim, bool bf16_out, float* out) = 0;

  // Softmax pooling over slots per channel (the compressors): z[w, c] = sum_s softmax_s(gate[w,s,c]) kv[w,s,c].
  // A slot with gate -inf has weight 0.
  virtual void softmax_pool(const float* kv, const float* gate, int64_t windows, int64_t slots, int64_t channels,
                            float* z) = 0;

  // SwiGLU with the clamp: h = silu(min(g, limit)) * clamp(u, -limit, limit) * row_scale[r] (limit 0 = none).
  virtual void swiglu(const float* g, const float* u, int64_t rows, int64_t dim, float limit,
                      const float* row_scale, float* h) = 0;

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
  // Rows come from two places: r >= 0 is row r of `pool` (the state arena, read in place), r <= -2 is
  // row fresh_row_index(r) of `fresh` (this step's rows, not yet in the arena), r == -1 is no row.
  virtual void sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                                       const float* fresh, const int32_t* idx, int64_t k, const float* sink,
                                       float scale, int64_t block, float* out) = 0;
};

Backend& cpu_backend();

}  // namespace deepinfer::ops
