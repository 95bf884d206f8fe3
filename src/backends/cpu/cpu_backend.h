// The CPU backend: the readable reference implementation of every op, multi-threaded over rows.
#pragma once
#include "ops/ops.h"

namespace deepinfer::cpu {

class CpuBackend final : public ops::Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) override;
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
                bool bf16_out) override;
  void rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
            const ops::RopeFreqs& freqs, bool inverse, bool bf16_out) override;
  void sparse_attention(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                        const int32_t* idx, int64_t k, const float* sink, float scale, float* out) override;
  void hc_weights(const float* x, int64_t rows, int64_t hc, int64_t dim, const float* fn, const float* base,
                  const float* scale, float rms_eps, float hc_eps, int64_t sinkhorn_iters, float* pre, float* post,
                  float* comb) override;
  void hc_collapse(const float* x, const float* mix, int64_t rows, int64_t hc, int64_t dim, bool bf16_out,
                   float* y) override;
  void hc_expand(const float* x, const float* sub, const float* post, const float* comb, int64_t rows, int64_t hc,
                 int64_t dim, bool bf16_out, float* out) override;
  void softmax_pool(const float* kv, const float* gate, int64_t windows, int64_t slots, int64_t channels,
                    float* z) override;
  void swiglu(const float* g, const float* u, int64_t rows, int64_t dim, float limit, const float* row_scale,
              float* h, bool bf16_out) override;
  void fake_quant_fp8(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void fake_quant_fp4(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void fake_quant_fp4_e4m3(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void round_bf16(float* x, int64_t n) override;
  void linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                       float* y) override;
  void sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim, const uint8_t* pool,
                               int64_t pool_block_bytes, const uint8_t* fresh, const int32_t* idx, int64_t k,
                               int64_t window, const float* sink, float scale, int64_t block, float* out) override;

  // quantized weights (cpu_quant_ops.cpp): kept dequantized
  void linear_quant(const float* x, int64_t m, const ops::QWeight& w, int64_t act_block, float* y) override;
  void linear_plain(const float* x, int64_t m, const ops::QWeight& w, float* y) override;
  void linear_block_diag(const float* x, int64_t m, const ops::QWeight& w, int64_t groups, bool bf16_out,
                         float* y) override;
  ops::WeightType weight_format(ops::WeightType) const override { return ops::WeightType::kF32; }

  // memory (host memory: the CPU backend's device is the host)
  Device device() const override { return {}; }
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;

  // data movement (cpu_data_ops.cpp)
  void copy_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                 const int32_t* dst_idx) override;
  void copy_rows_from_bf16(const uint16_t* src, const int32_t* src_idx, int64_t n, int64_t width, float* dst,
                           const int32_t* dst_idx) override;
  void quantize_rows(const float* src, const int32_t* src_idx, int64_t n, int64_t width, RowFormat format,
                     uint8_t* dst, int64_t dst_block_bytes, const int32_t* dst_idx) override;
  void copy_2d(const float* src, int64_t src_ld, int64_t rows, int64_t width, float* dst, int64_t dst_ld) override;
  void fill(float* x, int64_t n, float value) override;
  void scale(float* x, int64_t n, float s) override;
  void add(float* x, const float* y, int64_t n) override;
  void argmax(const float* x, int64_t rows, int64_t n, int32_t* out) override;
  void draw_tokens(const float* x, int64_t vocab, const int32_t* rows, int64_t n, const ops::DrawRow* param,
                   const ops::DrawAdjust* adjust, const uint32_t* mask, float* work, int32_t* token,
                   float* logprob) override;

  // DeepSeek pieces (cpu_deepseek_ops.cpp)
  void hc_mean(const float* x, int64_t rows, int64_t hc, int64_t dim, float* out, int64_t out_ld) override;
  void softmax_pool_v41(const float* kv, const float* score, int64_t windows, int64_t slots, int64_t channels,
                        float* z) override;
  void moe_route(const float* logits, int64_t n, int64_t experts, const float* bias, const float* bias_vl,
                 const uint8_t* image, const RouteParams& p, int32_t* sel, float* weight, float* scores) override;
  void moe_combine(const float* y, const int32_t* slot, int64_t n, int64_t k, int64_t dim, const float* shared,
                   float* out) override;
  void moe_group(const int32_t* sel, const float* weight, int64_t n, int64_t k, int64_t experts, int32_t* perm,
                 float* row_weight, int32_t* slot, int32_t* offsets) override;
  void index_scores(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim, const uint8_t* keys,
                    int64_t key_block_bytes, const int32_t* key_rows, const int32_t* key_begin, const int32_t* width,
                    const int32_t* visible, int64_t ld, float* scores) override;
  void index_scores_fp32(const float* q, const float* weight, int64_t tokens, int64_t heads, int64_t dim,
                         const float* keys, const int32_t* key_rows, const int32_t* key_begin, const int32_t* width,
                         const int32_t* visible, int64_t ld, float scale, float* scores) override;
  void candidate_mask(const float* scores, int64_t tokens, int64_t ld, const int32_t* width, const int32_t* clen,
                      const int32_t* ranked, int64_t block, int64_t topk_blocks, uint8_t* mask) override;
  void index_select(const float* scores, const uint8_t* mask, int64_t tokens, int64_t ld, const int32_t* ranked,
                    const int32_t* visible, const int32_t* topk, int64_t K, int32_t* sel) override;
  void index_select_stable(const float* scores, int64_t tokens, int64_t ld, const int32_t* ranked,
                           const int32_t* visible, const int32_t* topk, int64_t K, int32_t* sel) override;
  void lookup_rows(const int32_t* in, int64_t tokens, int64_t k, const int32_t* table, const int32_t* begin,
                   int32_t* out, int64_t out_ld) override;
  void embedding_fp8(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                     float* out) override;
  void embedding_fp8_on_device(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                               float* out) override;
  void engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                   int64_t dim, float eps) override;

  // Vision tower (cpu_vision_ops.cpp)
  void bias_act(float* x, int64_t rows, int64_t dim, const float* bias, ops::Activation act, bool bf16_out) override;
  void linear_plain_bf16(const uint16_t* x, int64_t m, const ops::QWeight& w, float* y, uint16_t* y_bf16) override;
  void qkv_rope_bf16(const float* y, const float* bias, int64_t rows, int64_t heads, int64_t dim, const float* cos,
                     const float* sin, uint16_t* qkv) override;
  void residual_rms_norm_bf16(const float* y, const float* bias, bool accumulate, uint16_t* x, const float* weight,
                              int64_t rows, int64_t dim, float eps, uint16_t* h) override;
  void swiglu_bf16(const uint16_t* gu, int64_t rows, int64_t dim, uint16_t* h) override;
  void attention_full(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t ld, int64_t tokens,
                      int64_t heads, int64_t dim, const int32_t* seq_begin, int64_t seqs, int64_t max_len, float scale,
                      uint16_t* out) override;
  void widen_bf16(const uint16_t* x, int64_t n, float* y) override;
};

// A stored-format weight as fp32 [n, k] (exact: every stored value times a power-of-two or fp32 scale).
void dequantize(const ops::QWeight& w, float* out);

// Dot product in a fixed order (8 interleaved partial sums, then a fixed tree), vectorizable.
float dot(const float* a, const float* b, int64_t n);

}  // namespace deepinfer::cpu
