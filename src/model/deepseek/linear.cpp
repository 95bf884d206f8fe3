#include "model/deepseek/linear.h"

#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"

namespace deepinfer::model {

Param to_param(DeviceMemory& mem, const std::vector<float>& v) {
  return {upload_buffer(mem, v.data(), v.size() * sizeof(float)), static_cast<int64_t>(v.size())};
}

namespace {

// The bf16 bits of f32 when every value is a bf16 (NaNs count as one), else false (bits partly filled).
bool bf16_bits_if_exact(const std::vector<float>& f32, std::vector<uint16_t>& bits) {
  bits.resize(f32.size());
  for (size_t i = 0; i < bits.size(); ++i)
    if (bf16_to_float(bits[i] = float_to_bf16(f32[i])) != f32[i] && !std::isnan(f32[i])) return false;
  return true;
}

}  // namespace

RowTable row_table(ops::Backend& be, const std::vector<float>& f32, int64_t rows, int64_t width) {
  check(static_cast<int64_t>(f32.size()) == rows * width, "row table: ", f32.size(), " values for ", rows, " x ", width);
  RowTable t{{}, rows, width, false};
  std::vector<uint16_t> bits;
  t.bf16 = bf16_bits_if_exact(f32, bits);
  t.buf = t.bf16 ? upload_buffer(be, bits.data(), bits.size() * sizeof(uint16_t))
                 : upload_buffer(be, f32.data(), f32.size() * sizeof(float));
  return t;
}

void RowTable::gather(ops::Backend& be, const int32_t* idx, int64_t n, float* dst) const {
  if (bf16) be.copy_rows_from_bf16(static_cast<const uint16_t*>(buf.data()), idx, n, width, dst, nullptr);
  else be.copy_rows(static_cast<const float*>(buf.data()), idx, n, width, dst, nullptr);
}

QLinear plain_linear(ops::Backend& be, std::vector<float> f32, int64_t n, int64_t k) {
  QLinear L;
  L.n = n;
  L.k = k;
  if (be.weight_format(ops::WeightType::kBf16) == ops::WeightType::kBf16) {
    // A float weight of bf16 values (the release's BF16 projections and head) stays bf16 where the
    // backend keeps it so: half the bytes, and its tensor cores.
    std::vector<uint16_t> bits;
    if (bf16_bits_if_exact(f32, bits)) {
      L.w = {upload_buffer(be, bits.data(), bits.size() * sizeof(uint16_t)), 0};
      L.q = {ops::WeightType::kBf16, L.w.buf.data(), nullptr, n, k, 0};
      return L;
    }
  }
  L.w = to_param(be, f32);
  L.q = {ops::WeightType::kF32, L.w.data(), nullptr, n, k, 0};
  return L;
}

namespace {

// m's bytes at dst: uploaded, or generated where they live (dummy weights).
void put_bytes(ops::Backend& be, const StoredMatrix& m, void* dst) {
  if (m.generated_later) be.random_fill(dst, m.byte_count(), m.random_stream, m.and_mask, m.or_mask);
  else be.upload(dst, m.bytes, m.byte_count());
}

// The UE8M0 byte of a power-of-two scale (a generated_later matrix's scale_value is one).
uint8_t ue8m0_of(float s) {
  int e = 0;
  check(s > 0 && std::frexp(s, &e) == 0.5f && e - 1 >= -127 && e - 1 <= 127, "dummy scale ", s, " is not UE8M0");
  return static_cast<uint8_t>(e - 1 + 127);
}

}  // namespace

QLinear load_linear(ops::Backend& be, const WeightLoader& w, const std::string& base, int64_t n, int64_t k,
                    bool plain) {
  QLinear L;
  L.n = n;
  L.k = k;
  StoredMatrix m = w.stored_spec(base, n, k);
  L.quant = m.type != ops::WeightType::kF32 && !plain;
  if (L.quant && be.weight_format(m.type) == m.type) {  // kept as stored
    L.w = {Buffer(be, m.byte_count()), 0};
    put_bytes(be, m, L.w.buf.data());
    if (m.generated_later) {
      L.scale_ue8m0 = Buffer(be, m.scale_count());
      be.fill_bytes(L.scale_ue8m0.data(), m.scale_count(), ue8m0_of(m.scale_value));
    } else {
      const std::vector<uint8_t> s8 = ops::gemm_scale_bytes(m.view());
      if (!s8.empty()) L.scale_ue8m0 = upload_buffer(be, s8.data(), s8.size());
      else L.scale = to_param(be, m.scale);  // UE8M0 bytes are the whole scale: no fp32 copy beside them
    }
    L.q = {m.type, L.w.buf.data(), L.scale.data(), n, k, m.block, static_cast<const uint8_t*>(L.scale_ue8m0.data())};
    return L;
  }
  if (m.generated_later) m = w.stored(base, n, k);
  if (m.type != ops::WeightType::kF32) {
    m.f32.resize(n * k);
    cpu::dequantize(m.view(), m.f32.data());
  }
  if (!L.quant) return plain_linear(be, std::move(m.f32), n, k);
  L.w = to_param(be, m.f32);  // run quantized from fp32 values (a backend that dequantizes at load)
  L.q = {ops::WeightType::kF32, L.w.data(), nullptr, n, k, 0};
  return L;
}

QLinear load_stacked(ops::Backend& be, const WeightLoader& w, const std::vector<std::string>& bases, int64_t n, int64_t k,
                     bool plain) {
  const int64_t E = static_cast<int64_t>(bases.size());
  QLinear L;
  L.n = n;
  L.k = k;
  std::vector<float> scales;
  std::vector<std::vector<uint8_t>> s8;
  size_t offset = 0, generated_scales = 0;
  int generated_byte = -1;  // dummy stacks: every expert's scales are one UE8M0 byte
  ops::WeightType first = ops::WeightType::kF32;
  for (int64_t e = 0; e < E; ++e) {
    StoredMatrix m = w.stored_spec(bases[e], n, k);
    if (e == 0) first = m.type, L.quant = m.type != ops::WeightType::kF32 && !plain;
    check(m.type == first, "the routed experts of one layer must share one stored format (", bases[e], ")");
    const bool stored = L.quant && be.weight_format(m.type) == m.type;
    if (!stored && m.generated_later) m = w.stored(bases[e], n, k);
    if (!stored && m.type != ops::WeightType::kF32) {
      m.f32.resize(n * k);
      cpu::dequantize(m.view(), m.f32.data());
    }
    const size_t count = stored ? m.byte_count() : m.f32.size() * sizeof(float);
    if (e == 0) {
      L.w = {Buffer(be, count * E), 0};
      L.q = {stored ? m.type : ops::WeightType::kF32, L.w.buf.data(), nullptr, n, k, stored ? m.block : 0};
      L.q.groups = E;
    }
    void* dst = static_cast<uint8_t*>(L.w.buf.data()) + offset;
    if (stored) put_bytes(be, m, dst);
    else be.upload(dst, m.f32.data(), count);
    offset += count;
    if (!stored) continue;
    if (m.generated_later) {
      const int b = ue8m0_of(m.scale_value);
      check(generated_byte < 0 || generated_byte == b, "the dummy experts of one stack differ in scale");
      generated_byte = b;
      generated_scales += m.scale_count();
      continue;
    }
    scales.insert(scales.end(), m.scale.begin(), m.scale.end());
    s8.push_back(ops::gemm_scale_bytes(m.view()));
  }
  if (L.q.type != ops::WeightType::kF32) {
    if (generated_byte >= 0) {
      L.scale_ue8m0 = Buffer(be, generated_scales);
      be.fill_bytes(L.scale_ue8m0.data(), generated_scales, static_cast<uint8_t>(generated_byte));
    } else {
      const std::vector<uint8_t> stacked = ops::stack_gemm_scale_bytes(s8, L.q.type, n, k);
      if (!stacked.empty()) L.scale_ue8m0 = upload_buffer(be, stacked.data(), stacked.size());
      else L.scale = to_param(be, scales);  // fp32 scales only where they are not UE8M0
    }
    L.q.scale = L.scale.empty() ? nullptr : L.scale.data();
    L.q.scale_ue8m0 = static_cast<const uint8_t*>(L.scale_ue8m0.data());
  }
  return L;
}

}  // namespace deepinfer::model
