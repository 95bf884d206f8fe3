// The parts of the op interface that are plain host code over the ops: stacked-weight views, the
// group-by-group linear_quant_grouped and the kF32 linear_plain every backend can fall back to.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"

namespace deepinfer::ops {

QWeight QWeight::group(int64_t g) const {
  check(g >= 0 && g < groups, "QWeight::group: group ", g, " of ", groups);
  QWeight v = *this;
  v.groups = 1;
  if (g == 0 && groups == 1) return v;
  const auto* bytes = static_cast<const uint8_t*>(data);
  switch (type) {
    case WeightType::kF32:
      v.data = static_cast<const float*>(data) + g * n * k;
      break;
    case WeightType::kBf16:
      v.data = static_cast<const uint16_t*>(data) + g * n * k;
      break;
    case WeightType::kFp8Block: {  // scale blocks [ceil(n / block), ceil(k / block)] per matrix
      check(n % block == 0, "QWeight::group: stacked FP8 matrices need n % block == 0");
      const int64_t blocks = (n / block) * ((k + block - 1) / block);
      v.data = bytes + g * n * k;
      v.scale = scale ? scale + g * blocks : nullptr;
      v.scale_ue8m0 = scale_ue8m0 ? scale_ue8m0 + g * blocks : nullptr;
      break;
    }
    case WeightType::kMxfp4:  // fp32 scales [n, k / 32] per matrix; UE8M0 [k / 32, groups * n]
      v.data = bytes + g * n * k / 2;
      v.scale = scale ? scale + g * n * (k / 32) : nullptr;
      v.scale_ue8m0 = scale_ue8m0 ? scale_ue8m0 + g * n : nullptr;
      v.scale_ld = scale_ld ? scale_ld : groups * n;
      break;
  }
  return v;
}

std::vector<uint8_t> stack_gemm_scale_bytes(const std::vector<std::vector<uint8_t>>& each, WeightType type, int64_t n,
                                            int64_t k) {
  const int64_t G = static_cast<int64_t>(each.size());
  std::vector<uint8_t> out;
  for (const auto& one : each)
    if (one.empty()) return {};
  if (type != WeightType::kMxfp4) {
    for (const auto& one : each) out.insert(out.end(), one.begin(), one.end());
    return out;
  }
  out.resize((k / 32) * G * n);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t b = 0; b < k / 32; ++b) std::copy_n(each[g].data() + b * n, n, out.data() + (b * G + g) * n);
  return out;
}

void for_each_group(DeviceMemory& mem, const int32_t* offsets, int64_t groups, int64_t m,
                    const std::function<void(int64_t group, int64_t row, int64_t rows)>& fn) {
  std::vector<int32_t> off(groups + 1);
  mem.download(off.data(), offsets, off.size() * sizeof(int32_t));
  check(off[0] == 0 && off[groups] == m, "grouped rows: offsets must run from 0 to m = ", m);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t rows = off[g + 1] - off[g];
    check(rows >= 0, "grouped rows: offsets must not decrease");
    if (rows) fn(g, off[g], rows);
  }
}

void Backend::linear_quant_grouped(const float* x, int64_t m, const QWeight& w, const int32_t* offsets,
                                   int64_t max_rows, int64_t act_block, float* y) {
  (void)max_rows;
  for_each_group(*this, offsets, w.groups, m, [&](int64_t g, int64_t row, int64_t rows) {
    linear_quant(x + row * w.k, rows, w.group(g), act_block, y + row * w.n);
  });
}

void Backend::linear_plain(const float* x, int64_t m, const QWeight& w, float* y) {
  check(w.type == WeightType::kF32, "linear_plain: backend '", name(), "' takes float weights as kF32 only");
  linear(x, m, w.k, static_cast<const float*>(w.data), w.n, y);
}

}  // namespace deepinfer::ops
