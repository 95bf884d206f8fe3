#include "vision/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "vision/device_array.h"

namespace deepinfer::vision {
namespace {

constexpr float kNormEps = 1e-6f;  // the ViT's RMSNorm eps (not the LLM's norm_eps)

using Array = DeviceArray<float>;

// Rows [r0, r0 + n) of a host matrix [*, cols], optionally with its columns permuted: out[:, j] = m[:, perm[j]].
std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, int64_t r0, int64_t n,
                           const std::vector<int64_t>* perm = nullptr) {
  std::vector<float> out(n * cols);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < cols; ++j) out[r * cols + j] = m[(r0 + r) * cols + (perm ? (*perm)[j] : j)];
  return out;
}

// A linear layer's weight [out, in] in the backend's format for a BF16-stored float weight: bf16 bits
// where the backend keeps them (CUDA: linear_plain runs cuBLAS's bf16 tensor-core GEMM), else fp32.
struct PlainWeight {
  Array f32;
  DeviceArray<uint16_t> bf16;
  ops::QWeight q;

  PlainWeight() = default;
  PlainWeight(ops::Backend& be, const std::vector<float>& w, int64_t out, int64_t in) {
    if (be.weight_format(ops::WeightType::kBf16) == ops::WeightType::kBf16) {
      std::vector<uint16_t> bits(w.size());
      bool exact = true;  // the checkpoint stores these as BF16; a float32 one stays float32
      for (size_t i = 0; i < w.size() && exact; ++i) exact = bf16_to_float(bits[i] = float_to_bf16(w[i])) == w[i];
      if (exact) {
        bf16 = DeviceArray<uint16_t>(be, bits);
        q = {ops::WeightType::kBf16, bf16.get(), nullptr, out, in, 0};
        return;
      }
    }
    f32 = Array(be, w);
    q = {ops::WeightType::kF32, f32.get(), nullptr, out, in, 0};
  }
};

}  // namespace

void rope_tables(int64_t n_h, int64_t n_w, int64_t head_dim, double theta, std::vector<float>& cos,
                 std::vector<float>& sin) {
  const int64_t rd = head_dim / 2, q = rd / 2;
  std::vector<float> inv(q);
  for (int64_t k = 0; k < q; ++k)
    inv[k] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * k) / static_cast<float>(rd));
  // The first half of a row turns with the patch row, the second with its column: cos/sin of each
  // distinct (position, k) once, then copied into the [n_h * n_w, rd] table.
  auto trig = [&](int64_t n, std::vector<float>& c, std::vector<float>& s) {
    c.resize(n * q), s.resize(n * q);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t k = 0; k < q; ++k) {
        const float a = static_cast<float>(p) * inv[k];
        c[p * q + k] = std::cos(a);
        s[p * q + k] = std::sin(a);
      }
  };
  std::vector<float> rc, rs, cc, cs;
  trig(n_h, rc, rs);
  trig(n_w, cc, cs);
  const size_t base = cos.size();
  cos.resize(base + n_h * n_w * rd);
  sin.resize(cos.size());
  for (int64_t i = 0; i < n_h; ++i)
    for (int64_t j = 0; j < n_w; ++j) {
      float* c = cos.data() + base + (i * n_w + j) * rd;
      float* s = sin.data() + base + (i * n_w + j) * rd;
      std::copy_n(rc.data() + i * q, q, c), std::copy_n(cc.data() + j * q, q, c + q);
      std::copy_n(rs.data() + i * q, q, s), std::copy_n(cs.data() + j * q, q, s + q);
    }
}

struct VisionTower::Weights {
  struct Linear {
    PlainWeight w;
    Array b;  // empty: no bias
    int64_t out = 0, in = 0;
  };
  struct Block {
    Array norm1, norm2;
    Linear qkv, o, w1, w2;  // qkv: the fused [q; k; v] rows, w1: [gate; up]
  };
  Linear patch, align1, align2;
  std::vector<Block> blocks;
  Array norm;
};

VisionTower::VisionTower(const io::Checkpoint& ck, const VisionConfig& c, ops::Backend& be)
    : c_(c), be_(be), w_(std::make_unique<Weights>()) {
  const int64_t d = c.dim, I = c.inter_dim, r2 = c.downsample_ratio * c.downsample_ratio, D = c.text_dim;
  const int64_t pix = 3 * c.patch_size * c.patch_size;
  auto vec = [&](const std::string& n, int64_t len) { return Array(be, ck.read_f32(n, {len})); };
  auto linear = [&](const std::string& n, int64_t out, int64_t in, bool bias) {
    return Weights::Linear{PlainWeight(be, ck.read_f32(n + ".weight", {out, in}), out, in),
                           bias ? vec(n + ".bias", out) : Array(), out, in};
  };
  w_->patch = linear("vision.patch_embed.proj", d, pix, true);
  for (int64_t b = 0; b < c.n_layers; ++b) {
    const std::string p = "vision.blocks." + std::to_string(b) + ".";
    Weights::Block blk;
    blk.norm1 = vec(p + "norm1.weight", d);
    blk.norm2 = vec(p + "norm2.weight", d);
    blk.qkv = linear(p + "attn.wqkv", 3 * d, d, true);
    blk.o = linear(p + "attn.wo", d, d, true);
    blk.w1 = linear(p + "mlp.w1", 2 * I, d, false);
    blk.w2 = linear(p + "mlp.w2", d, I, false);
    w_->blocks.push_back(std::move(blk));
  }
  w_->norm = vec("vision.norm.weight", d);
  // The reference flattens a 3x3 cell channel-major (F.unfold: c * 9 + cell); the tower gathers it
  // spatial-major (cell * dim + c, whole ViT rows), so w1's columns are permuted to match.
  std::vector<int64_t> perm(r2 * d);
  for (int64_t cell = 0; cell < r2; ++cell)
    for (int64_t ch = 0; ch < d; ++ch) perm[cell * d + ch] = ch * r2 + cell;
  const std::vector<float> a1 = ck.read_f32("aligner.w1.weight", {D, r2 * d});
  w_->align1 = {PlainWeight(be, rows_of(a1, r2 * d, 0, D, &perm), D, r2 * d), vec("aligner.w1.bias", D), D, r2 * d};
  w_->align2 = linear("aligner.w2", D, D, true);
  start_ = ck.read_f32("image_start", {D});
  newline_ = ck.read_f32("image_newline", {D});
  end_ = ck.read_f32("image_end", {D});
}

VisionTower::~VisionTower() = default;

std::vector<std::vector<float>> VisionTower::encode(std::span<const ProcessedImage* const> images,
                                                    VisionTrace* trace) {
  using ops::Activation;
  const int64_t d = c_.dim, H = c_.n_heads, hd = c_.head_dim(), r = c_.downsample_ratio, D = c_.text_dim;
  const int64_t pix = 3 * c_.patch_size * c_.patch_size;
  // The batch: every image's patches in order, its rows [seq_begin[i], seq_begin[i+1]).
  std::vector<int32_t> seq_begin{0};
  std::vector<float> cos, sin;
  std::vector<int32_t> gather;  // aligner input rows: 3x3 cells of each image, -1 = zero padding
  std::vector<int64_t> cells;
  int64_t max_len = 0;
  for (const ProcessedImage* im : images) {
    const int64_t nh = im->n_vit_h, nw = im->n_vit_w, n = nh * nw, b = seq_begin.back();
    check(static_cast<int64_t>(im->pixels.size()) == n * pix, "vision: image pixels do not match its ", nh, "x", nw,
          " patch grid");
    seq_begin.push_back(static_cast<int32_t>(b + n));
    max_len = std::max(max_len, n);
    rope_tables(nh, nw, hd, c_.rope_theta, cos, sin);
    const int64_t ch = (nh + r - 1) / r, cw = (nw + r - 1) / r;
    cells.push_back(ch * cw);
    for (int64_t ci = 0; ci < ch; ++ci)
      for (int64_t cj = 0; cj < cw; ++cj)
        for (int64_t ki = 0; ki < r; ++ki)
          for (int64_t kj = 0; kj < r; ++kj) {
            const int64_t y = ci * r + ki, x = cj * r + kj;
            gather.push_back(y < nh && x < nw ? static_cast<int32_t>(b + y * nw + x) : -1);
          }
  }
  const int64_t N = seq_begin.back(), L = static_cast<int64_t>(gather.size()) / (r * r);
  if (N == 0) return std::vector<std::vector<float>>(images.size());
  ops::Backend& be = be_;
  // The ViT's activations are bf16 (x the residual stream, h the normed input of each linear); a linear's
  // fp32 output y goes to bf16 through the epilogue op after it (w1, without bias, is rounded by the GEMM).
  using Bf16 = DeviceArray<uint16_t>;
  auto widened = [&](const Bf16& a) {
    std::vector<float> f(a.size());
    const std::vector<uint16_t> bits = a.download();
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(bits[i]);
    return f;
  };
  Array px(be, N * pix);  // each image's pixels uploaded in place (no host copy of the batch)
  for (size_t i = 0; i < images.size(); ++i)
    if (const size_t n = images[i]->pixels.size())
      be.upload(px.get() + seq_begin[i] * pix, images[i]->pixels.data(), n * sizeof(float));
  const Array cs(be, cos), sn(be, sin);
  const DeviceArray<int32_t> seqs(be, seq_begin);
  Bf16 x(be, N * d), h(be, N * d), qkv(be, N * 3 * d), o(be, N * d), gu(be, N * 2 * c_.inter_dim),
      g(be, N * c_.inter_dim);
  Array y(be, N * 3 * d);
  const std::vector<Weights::Block>& blocks = w_->blocks;
  auto bias = [](const Weights::Linear& l) { return l.b.size() ? l.b.get() : nullptr; };
  auto norm1 = [&](size_t b) { return b < blocks.size() ? blocks[b].norm1.get() : w_->norm.get(); };
  be.linear_plain(px.get(), N, w_->patch.w.q, y.get());
  be.residual_rms_norm_bf16(y.get(), bias(w_->patch), false, x.get(), norm1(0), N, d, kNormEps, h.get());
  if (trace) {
    *trace = VisionTrace{};
    trace->patch_embed = widened(x);
  }
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const Weights::Block& blk = blocks[bi];
    be.linear_plain_bf16(h.get(), N, blk.qkv.w.q, y.get(), nullptr);
    be.qkv_rope_bf16(y.get(), bias(blk.qkv), N, H, hd, cs.get(), sn.get(), qkv.get());
    be.attention_full(qkv.get(), qkv.get() + d, qkv.get() + 2 * d, 3 * d, N, H, hd, seqs.get(),
                      static_cast<int64_t>(images.size()), max_len, 1.0f / std::sqrt(static_cast<float>(hd)), o.get());
    be.linear_plain_bf16(o.get(), N, blk.o.w.q, y.get(), nullptr);
    be.residual_rms_norm_bf16(y.get(), bias(blk.o), true, x.get(), blk.norm2.get(), N, d, kNormEps, h.get());
    if (trace) {  // the attention branch's output bf16(y + b), from y (still there)
      be.bias_act(y.get(), N, d, bias(blk.o), Activation::kNone, true);
      std::vector<float> a(N * d);
      be.download(a.data(), y.get(), a.size() * sizeof(float));
      trace->attn_out.push_back(std::move(a));
    }
    be.linear_plain_bf16(h.get(), N, blk.w1.w.q, nullptr, gu.get());  // no bias: bf16 straight from the GEMM
    be.swiglu_bf16(gu.get(), N, c_.inter_dim, g.get());
    be.linear_plain_bf16(g.get(), N, blk.w2.w.q, y.get(), nullptr);
    be.residual_rms_norm_bf16(y.get(), nullptr, true, x.get(), norm1(bi + 1), N, d, kNormEps, h.get());
    if (trace) trace->block_out.push_back(widened(x));
  }
  // Aligner (fp32, 1/9 of the rows): each 3x3 cell's ViT rows side by side (zero rows past the grid),
  // then w2(gelu(w1 .)).
  Array hf(be, N * d);
  be.widen_bf16(h.get(), N * d, hf.get());
  const DeviceArray<int32_t> rows(be, gather);
  Array ain(be, L * r * r * d), y1(be, L * D), y2(be, L * D);
  be.fill(ain.get(), L * r * r * d, 0.0f);
  be.copy_rows(hf.get(), rows.get(), L * r * r, d, ain.get(), nullptr);
  auto linear = [&](const Array& in, int64_t m, const Weights::Linear& l, Array& out, Activation act) {
    be.linear_plain(in.get(), m, l.w.q, out.get());
    be.bias_act(out.get(), m, l.out, bias(l), act, true);
  };
  linear(ain, L, w_->align1, y1, Activation::kGeluErf);
  linear(y1, L, w_->align2, y2, Activation::kNone);
  if (trace) {
    trace->vit_out = hf.download();
    trace->aligner_in = ain.download();
  }
  std::vector<std::vector<float>> out;  // each image's rows downloaded into its own vector
  int64_t at = 0;
  for (int64_t n : cells) {
    out.emplace_back(n * D);
    if (n) be.download(out.back().data(), y2.get() + at * D, n * D * sizeof(float));
    at += n;
  }
  return out;
}

}  // namespace deepinfer::vision
