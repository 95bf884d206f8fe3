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
  const size_t base = cos.size();
  cos.resize(base + n_h * n_w * rd);
  sin.resize(cos.size());
  for (int64_t i = 0; i < n_h; ++i)
    for (int64_t j = 0; j < n_w; ++j)
      for (int64_t k = 0; k < rd; ++k) {
        const float a = static_cast<float>(k < q ? i : j) * inv[k % q];
        cos[base + (i * n_w + j) * rd + k] = std::cos(a);
        sin[base + (i * n_w + j) * rd + k] = std::sin(a);
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
    Linear q, k, v, o, gate, up, down;
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
  // The fused projections split by output rows: [q; k; v] and [gate; up] (same dot products).
  auto split = [&](const std::string& n, int64_t parts, int64_t out, int64_t in, bool bias) {
    const std::vector<float> w = ck.read_f32(n + ".weight", {parts * out, in});
    const std::vector<float> b = bias ? ck.read_f32(n + ".bias", {parts * out}) : std::vector<float>();
    std::vector<Weights::Linear> ls;
    for (int64_t p = 0; p < parts; ++p)
      ls.push_back({PlainWeight(be, rows_of(w, in, p * out, out), out, in),
                    bias ? Array(be, rows_of(b, 1, p * out, out)) : Array(), out, in});
    return ls;
  };
  w_->patch = linear("vision.patch_embed.proj", d, pix, true);
  for (int64_t b = 0; b < c.n_layers; ++b) {
    const std::string p = "vision.blocks." + std::to_string(b) + ".";
    Weights::Block blk;
    blk.norm1 = vec(p + "norm1.weight", d);
    blk.norm2 = vec(p + "norm2.weight", d);
    auto qkv = split(p + "attn.wqkv", 3, d, d, true);
    blk.q = std::move(qkv[0]);
    blk.k = std::move(qkv[1]);
    blk.v = std::move(qkv[2]);
    blk.o = linear(p + "attn.wo", d, d, true);
    auto gu = split(p + "mlp.w1", 2, I, d, false);
    blk.gate = std::move(gu[0]);
    blk.up = std::move(gu[1]);
    blk.down = linear(p + "mlp.w2", d, I, false);
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
  std::vector<float> pixels, cos, sin;
  std::vector<int32_t> gather;  // aligner input rows: 3x3 cells of each image, -1 = zero padding
  std::vector<int64_t> cells;
  int64_t max_len = 0;
  for (const ProcessedImage* im : images) {
    const int64_t nh = im->n_vit_h, nw = im->n_vit_w, n = nh * nw, b = seq_begin.back();
    check(static_cast<int64_t>(im->pixels.size()) == n * pix, "vision: image pixels do not match its ", nh, "x", nw,
          " patch grid");
    pixels.insert(pixels.end(), im->pixels.begin(), im->pixels.end());
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
  // y = bf16(x W^T + b), then act.
  auto linear = [&](const Array& x, int64_t m, const Weights::Linear& l, Array& y,
                    Activation act = Activation::kNone) {
    be.linear_plain(x.get(), m, l.w.q, y.get());
    be.bias_act(y.get(), m, l.out, l.b.size() ? l.b.get() : nullptr, act, true);
  };
  auto norm = [&](const Array& x, const Array& w, Array& y) {
    be.rms_norm(x.get(), w.get(), N, d, kNormEps, y.get());
    be.round_bf16(y.get(), N * d);
  };
  auto residual = [&](Array& x, const Array& y) {
    be.add(x.get(), y.get(), N * d);
    be.round_bf16(x.get(), N * d);
  };
  const Array px(be, pixels), cs(be, cos), sn(be, sin);
  const DeviceArray<int32_t> seqs(be, seq_begin);
  Array x(be, N * d), h(be, N * d), q(be, N * d), k(be, N * d), v(be, N * d), o(be, N * d), a(be, N * d);
  Array g(be, N * c_.inter_dim), u(be, N * c_.inter_dim);
  linear(px, N, w_->patch, x);
  if (trace) {
    *trace = VisionTrace{};
    trace->patch_embed = x.download();
  }
  for (const Weights::Block& blk : w_->blocks) {
    norm(x, blk.norm1, h);
    linear(h, N, blk.q, q);
    linear(h, N, blk.k, k);
    linear(h, N, blk.v, v);
    be.rope_halves(q.get(), N, H, hd, cs.get(), sn.get(), true);
    be.rope_halves(k.get(), N, H, hd, cs.get(), sn.get(), true);
    be.attention_full(q.get(), k.get(), v.get(), N, H, hd, seqs.get(), static_cast<int64_t>(images.size()),
                      max_len, 1.0f / std::sqrt(static_cast<float>(hd)), o.get());
    be.round_bf16(o.get(), N * d);
    linear(o, N, blk.o, a);
    if (trace) trace->attn_out.push_back(a.download());
    residual(x, a);
    norm(x, blk.norm2, h);
    linear(h, N, blk.gate, g);
    linear(h, N, blk.up, u);
    be.swiglu(g.get(), u.get(), N, c_.inter_dim, 0.0f, nullptr, g.get());
    be.round_bf16(g.get(), N * c_.inter_dim);
    linear(g, N, blk.down, a);
    residual(x, a);
    if (trace) trace->block_out.push_back(x.download());
  }
  norm(x, w_->norm, h);
  // Aligner: each 3x3 cell's ViT rows side by side (zero rows past the grid), then w2(gelu(w1 .)).
  const DeviceArray<int32_t> rows(be, gather);
  Array ain(be, L * r * r * d), y1(be, L * D), y2(be, L * D);
  be.fill(ain.get(), L * r * r * d, 0.0f);
  be.copy_rows(h.get(), rows.get(), L * r * r, d, ain.get(), nullptr);
  linear(ain, L, w_->align1, y1, Activation::kGeluErf);
  linear(y1, L, w_->align2, y2);
  if (trace) {
    trace->vit_out = h.download();
    trace->aligner_in = ain.download();
  }
  const std::vector<float> all = y2.download();
  std::vector<std::vector<float>> out;
  int64_t at = 0;
  for (int64_t n : cells) {
    out.emplace_back(all.begin() + at * D, all.begin() + (at + n) * D);
    at += n;
  }
  return out;
}

}  // namespace deepinfer::vision
