// The CPU backend: the readable reference implementation of every op, multi-threaded over rows.
#pragma once
#include "ops/ops.h"

namespace deepinfer::cpu {

class CpuBackend final : public ops::Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) override;
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y) override;
  void rope(float* x, int64_t rows, int64_t heads, int64_t dim, const int64_t* positions,
            const ops::RopeFreqs& freqs, bool inverse) override;
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
              float* h) override;
  void fake_quant_fp8(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void fake_quant_fp4(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void fake_quant_fp4_e4m3(float* x, int64_t rows, int64_t dim, int64_t block) override;
  void round_bf16(float* x, int64_t n) override;
  void linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                       float* y) override;
  void sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim, const float* pool,
                               const float* fresh, const int32_t* idx, int64_t k, const float* sink, float scale, int64_t block,
                               float* out) override;
};

// Dot product in a fixed order (8 interleaved partial sums, then a fixed tree), vectorizable.
float dot(const float* a, const float* b, int64_t n);

}  // namespace deepinfer::cpu
