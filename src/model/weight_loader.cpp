#include "model/weight_loader.h"

#include <unistd.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/dummy_weights.h"

namespace deepinfer::model {
namespace {

// A NaN or infinity in a weight poisons every request that reaches it: refuse it at load.
std::vector<float> finite(std::vector<float> v, const io::Checkpoint& ck, const std::string& name) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(ck.path(), ": tensor '", name, "' holds a non-finite value (", v[i], " at element ", i, ")");
  return v;
}

}  // namespace

WeightLoader::WeightLoader(const io::Checkpoint& ckpt, int64_t fp8_block_n, int64_t fp8_block_k,
                           std::function<std::string(const std::string&)> translate)
    : ckpt_(&ckpt), block_n_(fp8_block_n), block_k_(fp8_block_k), translate_(std::move(translate)) {}

WeightLoader::WeightLoader(DummyWeights dummy, int64_t fp8_block)
    : dummy_(std::move(dummy)), block_n_(fp8_block), block_k_(fp8_block), translate_([](const std::string& n) { return n; }) {
  check(fp8_block > 0, "dummy weights: the FP8 block size must be positive");
}

const io::Checkpoint& WeightLoader::checkpoint() const {
  check(!dummy(), "dummy weights have no checkpoint (this model cannot load dummy weights)");
  return *ckpt_;
}

bool WeightLoader::has(const std::string& name) const { return dummy() || ckpt_->contains(translate_(name)); }

std::vector<float> WeightLoader::floats(const std::string& name, const std::vector<int64_t>& shape) const {
  if (dummy()) {
    std::vector<float> v = dummy_floats(dummy_.seed, name, shape);
    // The release stores float tensors as BF16 but the mHC parameters, attn_sink and the gate biases (F32).
    const bool f32 = name.find("hc_") != std::string::npos || name.find("attn_sink") != std::string::npos ||
                     name.find("gate.bias") != std::string::npos;
    if (!f32)
      for (float& x : v) x = round_to_bf16(x);
    return v;
  }
  return finite(ckpt_->read_f32(translate_(name), shape), *ckpt_, translate_(name));
}

const uint8_t* WeightLoader::raw(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                 std::vector<std::vector<uint8_t>>& keep) const {
  if (!dummy()) return ckpt_->get(translate_(name), dtype, shape).data;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const double gib = static_cast<double>(n) / (1024.0 * 1024 * 1024);
  check(gib <= 16, "dummy weights: tensor '", name, "' would take ", gib, " GiB of host memory; give the config a "
        "smaller table (e.g. engram_num_embeddings) for dummy runs");
  keep.push_back(dummy_bytes(dummy_.seed, name, static_cast<size_t>(n), dtype == DType::F8_E8M0 ? 0x00 : 0xbf,
                             dtype == DType::F8_E8M0 ? 118 : 0));
  return keep.back().data();
}

std::vector<int32_t> WeightLoader::ints(const std::string& name, const std::vector<int64_t>& shape) const {
  check(!dummy(), "dummy weights: integer tensor '", name, "' (e.g. a hash-routing table) cannot be made up");
  const io::TensorView& t = ckpt_->get(translate_(name));
  check(t.shape == shape, t.file, ": tensor '", t.name, "' has the wrong shape");
  std::vector<int32_t> out(t.numel());
  // memcpy per value: safetensors aligns a tensor's bytes to nothing (UBSan: misaligned int64 loads)
  const auto* bytes = static_cast<const std::byte*>(static_cast<const void*>(t.data));
  if (t.dtype == DType::I64) {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, bytes + i * sizeof v, sizeof v);
      out[i] = static_cast<int32_t>(v);
    }
  } else if (t.dtype == DType::I32) {
    if (!out.empty()) std::memcpy(out.data(), bytes, out.size() * sizeof(int32_t));
  } else {
    fail(t.file, ": tensor '", t.name, "' must be I32 or I64, found ", dtype_name(t.dtype));
  }
  return out;
}

StoredMatrix WeightLoader::stored(const std::string& base, int64_t n, int64_t k) const {
  if (dummy()) {
    StoredMatrix m = stored_spec(base, n, k);
    return m.generated_later ? dummy_matrix(dummy_.seed, base, n, k, m.type == ops::WeightType::kMxfp4 ? 0 : m.block) : m;
  }
  const io::Checkpoint& ck = *ckpt_;
  const std::string wname = translate_(base + ".weight");
  const io::TensorView& w = ck.get(wname);
  const std::string sname = translate_(base + ".scale");
  StoredMatrix m;
  m.n = n;
  m.k = k;
  if (w.dtype == DType::F8_E4M3) {  // FP8 with a [ceil(n/bn), ceil(k/bk)] UE8M0 (or fp32) scale grid
    check(w.shape == std::vector<int64_t>{n, k}, w.file, ": tensor '", wname, "' has the wrong shape (expected [",
          n, ", ", k, "])");
    check(block_n_ == block_k_, "FP8 weights need square scale blocks, got ", block_n_, " x ", block_k_);
    const int64_t gn = (n + block_n_ - 1) / block_n_, gk = (k + block_k_ - 1) / block_k_;
    check(ck.contains(sname), ck.path(), ": FP8 tensor '", wname, "' has no scale tensor '", sname, "'");
    m.type = ops::WeightType::kFp8Block;
    m.block = block_n_;
    m.scale = finite(ck.read_f32(sname, {gn, gk}), ck, sname);
    for (int64_t i = 0; i < n * k; ++i)
      if ((w.data[i] & 0x7f) == 0x7f) fail(ck.path(), ": tensor '", wname, "' holds a NaN (element ", i, ")");
  } else if (w.dtype == DType::I8 || w.dtype == DType::U8) {  // MXFP4: [n, k/2] bytes + [n, k/32] UE8M0 scales
    check(k % 32 == 0 && w.shape == std::vector<int64_t>{n, k / 2}, w.file, ": FP4 tensor '", wname,
          "' must have shape [", n, ", ", k / 2, "]");
    check(ck.contains(sname), ck.path(), ": FP4 tensor '", wname, "' has no scale tensor '", sname, "'");
    m.type = ops::WeightType::kMxfp4;
    m.block = 32;
    m.scale = finite(ck.read_f32(sname, {n, k / 32}), ck, sname);
  } else {
    m.f32 = finite(ck.read_f32(wname, {n, k}), ck, wname);
    return m;
  }
  m.bytes = w.data;
  return m;
}

StoredMatrix WeightLoader::stored_spec(const std::string& base, int64_t n, int64_t k) const {
  if (!dummy()) return stored(base, n, k);
  for (const std::string& f : dummy_.float_infixes)
    if (base.find(f) != std::string::npos) {
      StoredMatrix m;
      m.n = n, m.k = k, m.f32 = dummy_floats(dummy_.seed, base + ".weight", {n, k});
      for (float& v : m.f32) v = round_to_bf16(v);  // BF16 in the release
      return m;
    }
  const bool fp4 = !dummy_.fp4_infix.empty() && base.find(dummy_.fp4_infix) != std::string::npos && k % 32 == 0;
  return dummy_matrix_spec(dummy_.seed, base, n, k, fp4 ? 0 : block_n_);
}

std::vector<float> WeightLoader::matrix(const std::string& base, int64_t n, int64_t k) const {
  StoredMatrix m = stored(base, n, k);
  if (m.type == ops::WeightType::kF32) return std::move(m.f32);
  std::vector<float> out(n * k);
  cpu::dequantize(m.view(), out.data());
  return out;
}

namespace {

// Bytes the tensors outside `mapped` take once loaded, at bytes_per_element(dtype) each.
double loaded_bytes(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped,
                    double (*bytes_per_element)(DType)) {
  double need = 0;
  for (const std::string& name : ckpt.names()) {
    bool skip = false;
    for (const std::string& m : mapped) skip = skip || name.find(m) != std::string::npos;
    if (skip) continue;
    const io::TensorView& t = ckpt.get(name);
    need += static_cast<double>(t.numel()) * bytes_per_element(t.dtype);
  }
  return need;
}

}  // namespace

void check_fits_in_memory(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped,
                          int64_t available_bytes) {
  if (available_bytes <= 0) available_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const double need = loaded_bytes(ckpt, mapped, [](DType d) {  // fp32, FP4 bytes unpacked to two values
    return (d == DType::I8 || d == DType::U8 ? 2.0 : 1.0) * sizeof(float);
  });
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  check(need <= 0.9 * static_cast<double>(available_bytes), ckpt.path(), ": the CPU backend needs about ",
        static_cast<int64_t>(need / kGiB * 10) / 10.0, " GiB for these weights as fp32, more than this machine's ",
        static_cast<int64_t>(available_bytes / kGiB * 10) / 10.0, " GiB allow (the CUDA backend is for full-size models)");
}

void check_fits_on_device(const io::Checkpoint& ckpt, const std::vector<std::string>& mapped, const DeviceMemory& mem) {
  size_t free = 0, total = 0;
  if (!mem.memory_info(&free, &total)) return;
  const double need = loaded_bytes(ckpt, mapped, [](DType d) {  // stored bytes (UE8M0 scales stay bytes); floats fp32
    return d == DType::F8_E4M3 || d == DType::I8 || d == DType::U8 || d == DType::F8_E8M0 ? 1.0 : 4.0;  // floats: an upper bound (BF16 projections stay bf16)
  });
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  check(need <= static_cast<double>(free), ckpt.path(), ": the weights need about ", static_cast<int64_t>(need / kGiB * 10) / 10.0,
        " GiB on ", mem.device().str(), ", which has ", static_cast<int64_t>(free / kGiB * 10) / 10.0, " GiB free of ",
        static_cast<int64_t>(total / kGiB * 10) / 10.0, " GiB (a model this size needs expert parallelism over more GPUs)");
}

}  // namespace deepinfer::model
