// The CUDA backend: every op of ops::Backend on DEVICE pointers (all inputs and outputs live in
// device memory; sizes and RopeFreqs travel by value). Ops are enqueued on the backend's stream and
// return before the work finishes; synchronize() waits and reports any asynchronous failure.
// Every CUDA/cuBLAS status and every launch is checked; failures throw deepinfer::Error.
// This header needs no CUDA headers, so plain C++ code can hold a CudaBackend.
#pragma once
#include <memory>

#include "ops/ops.h"

namespace deepinfer::cuda {

// True when the CUDA runtime sees at least one device; the number it sees (0 on error). Never throw.
bool device_available();
int device_count();

class CudaBackend final : public ops::Backend {
 public:
  // Runs on GPU `device` (-1: the current device); creates a blocking stream and a cuBLAS handle bound
  // to it. Every op and memory call makes that GPU current for the calling thread first.
  explicit CudaBackend(int device = -1);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }

  // Device memory (memory.cu): cudaMalloc/cudaFree; copies are cudaMemcpyAsync on the backend's stream
  // (upload may read pageable host memory, which CUDA stages before it returns); download waits for
  // the stream.
  Device device() const override;
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override;
  void random_fill(void* dst, size_t bytes, uint64_t stream, uint8_t and_mask, uint8_t or_mask) override;
  bool memory_info(size_t* free_bytes, size_t* total_bytes) const override;  // cudaMemGetInfo

  // fp32 GEMM in the CPU reference's summation order for every m (linear_f32.cu): bitwise equal to
  // the CPU backend and batch invariant. set_linear_gemv(false) takes cuBLAS instead (benchmarks).
  void linear(const float* x, int64_t m, int64_t k, const float* w, int64_t n, float* y) override;
  void rms_norm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps, float* y,
                bool bf16_out) override;
  // freqs.inv_freq and positions are device pointers.
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
  // Exact order of the CPU (sequential FMA chain per K block, blocks added in order); a simple tiled
  // kernel, not yet fast.
  void linear_kblocked(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t block,
                       float* y) override;
  void round_bf16(float* x, int64_t n) override;
  // Weights stay stored (FP8 / MXFP4); the call dequantizes into scratch (quant_linear.cu).
  void linear_quant(const float* x, int64_t m, const ops::QWeight& w, int64_t act_block, float* y) override;
  void linear_plain(const float* x, int64_t m, const ops::QWeight& w, float* y) override;
  void linear_block_diag(const float* x, int64_t m, const ops::QWeight& w, int64_t groups, bool bf16_out,
                         float* y) override;
  void linear_quant_grouped(const float* x, int64_t m, const ops::QWeight& w, const int32_t* offsets, int64_t max_rows,
                            int64_t act_block, float* y) override;
  void set_batch_invariant(bool on) override;
  void sparse_attention_online(const float* q, int64_t tokens, int64_t heads, int64_t dim, const uint8_t* pool,
                               int64_t pool_block_bytes, const uint8_t* fresh, const int32_t* idx, int64_t k,
                               int64_t window, const float* sink, float scale, int64_t block, float* out) override;

  // Data movement (memory.cu) and the DeepSeek ops (deepseek_ops.cu, indexer_ops.cu): the CPU's
  // fp32 operation order; selections (top-k) identical to the CPU's torch_topk, ties included.
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
  // table/scale are host memory: ids are downloaded (a stream synchronization), the rows dequantized on
  // the host as the CPU does, and uploaded.
  void embedding_fp8(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                     float* out) override;
  void embedding_fp8_on_device(const uint8_t* table, const uint8_t* scale, int64_t dim, const int64_t* ids, int64_t n,
                               float* out) override;
  void engram_gate(float* x, const float* kv, const float* qk, const uint8_t* image, int64_t n, int64_t hc,
                   int64_t dim, float eps) override;
  // Vision tower (vision_ops.cu)
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
  // bf16 GEMM (the fast path for later): x, w bf16 (uint16 bits), y fp32, fp32 accumulation; m <= 4
  // (k % 8 == 0, aligned) takes the GEMV of gemv.h, larger m cuBLAS.
  static constexpr int64_t kLinearBf16GemvMaxM = 4;
  void linear_bf16(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y);

  // sparse_attention kernel choice, for benchmarks. kAttnAuto (default): the tiled kernel (gathered rows
  // staged in shared memory, cp.async-pipelined; 4 heads per warp, 8 warps when heads % 32 == 0, else
  // 4) when dim is 128..512 in steps of 128, heads % 16 == 0 and k > 0, else the generic kernel.
  // kAttnTiled4x4: the tiled kernel with 4 warps also where auto takes 8.
  enum : int { kAttnAuto = 0, kAttnTiled4x4 = 1 };
  void set_attention_kernel(int kind);
  // false: linear/linear_bf16 always take cuBLAS (for benchmarks comparing with it); default true.
  void set_linear_gemv(bool on);

  void synchronize() override;
  void mark(int point) override;
  double marked_ms(int from, int to) override;  // waits for the stream; throws on any pending asynchronous error
  void* stream() const;         // the cudaStream_t ops run on
  void* cublas_handle() const;  // the cublasHandle_t bound to stream()

 private:
  void gemm_tensor_cores(const float* x, int64_t m, const ops::QWeight& w, const int32_t* offsets, int64_t max_rows,
                         float* y);  // quant_linear.cu
  struct Impl;  // cuda_internal.cuh
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::cuda
