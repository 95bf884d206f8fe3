// Runs the op-test table (op_table.h): every case on every backend of this build and machine (the CPU
// itself, which checks determinism and that every output element is written, and each CUDA device),
// against a reference run on the CPU with the same seed. Also checks that the table covers every op
// declared in src/ops/ops.h.
#include "op_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace deepinfer::optest {

OpRun::~OpRun() {
  for (void* p : owned_) b_.release(p);
}

void* OpRun::alloc(size_t bytes) {
  void* p = b_.allocate(bytes);
  owned_.push_back(p);
  return p;
}

std::vector<float> OpRun::uniform(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = d(rng_); while (x == 0.0f);
  }
  return v;
}

std::vector<float> OpRun::levels(size_t n, int distinct, float step) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(static_cast<int>(rng_() % distinct) - distinct / 2) * step;
  return v;  // small multiples of a power of two: exact in bf16
}

std::vector<uint16_t> OpRun::bf16_bits(const std::vector<float>& h) {
  std::vector<uint16_t> b(h.size());
  for (size_t i = 0; i < h.size(); ++i) b[i] = float_to_bf16(h[i]);
  return b;
}

std::vector<OpRun::Output> OpRun::collect() {
  std::vector<Output> outs;
  for (const Pending& p : pending_) {
    Output o{p.name, p.is_float, p.elem_bytes, std::vector<uint8_t>(p.bytes), p.is_bf16};
    b_.download(o.bytes.data(), p.p, p.bytes);
    outs.push_back(std::move(o));
  }
  return outs;
}

namespace {

std::vector<OpCase> all_cases() {
  std::vector<OpCase> cases = core_op_cases();
  for (auto* more : {deepseek_op_cases, vision_op_cases})
    for (auto& c : more()) cases.push_back(std::move(c));
  return cases;
}

// The backends tested against the CPU reference: the CPU itself, then every CUDA device.
std::vector<Device> tested_devices() {
  std::vector<Device> d{Device{}};
#ifdef DEEPINFER_HAVE_CUDA
  for (int i = 0; i < cuda::device_count(); ++i) d.push_back(Device{DeviceKind::kCuda, i});
#endif
  return d;
}

// Element i of a float output: fp32, or bf16 bits widened.
float as_float(const OpRun::Output& o, size_t i) {
  if (o.is_bf16) {
    uint16_t h;
    std::memcpy(&h, o.bytes.data() + i * 2, 2);
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  float f;
  std::memcpy(&f, o.bytes.data() + i * 4, 4);
  return f;
}

// Compares one output; prints one line either way.
void compare(const OpRun::Output& got, const OpRun::Output& ref, double tol, const std::string& what) {
  ASSERT_EQ(got.bytes.size(), ref.bytes.size()) << what;
  const size_t n = ref.bytes.size() / ref.elem_bytes;
  if ((!ref.is_float && !ref.is_bf16) || tol == 0) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::memcmp(&got.bytes[i * ref.elem_bytes], &ref.bytes[i * ref.elem_bytes], ref.elem_bytes) != 0 &&
          bad++ == 0)
        first = i;
    std::printf("[ %-44s ] %zu of %zu elements differ in bits\n", what.c_str(), bad, n);
    EXPECT_EQ(bad, 0u) << what << ": first at element " << first;
    return;
  }
  ASSERT_EQ(ref.elem_bytes, ref.is_bf16 ? 2u : 4u) << what << ": float outputs are fp32 or bf16";
  double num = 0, den = 0, max_abs = 0;
  size_t nonfinite = 0;
  for (size_t i = 0; i < n; ++i) {
    const float g = as_float(got, i), r = as_float(ref, i);
    if (!std::isfinite(r) || !std::isfinite(g)) {
      nonfinite += std::isnan(r) ? !std::isnan(g) : !(g == r);
      continue;
    }
    const double d = static_cast<double>(g) - r;
    num += d * d;
    den += static_cast<double>(r) * r;
    max_abs = std::max(max_abs, std::fabs(d));
  }
  const double e = den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
  std::printf("[ %-44s ] rel err %.3e  max |diff| %.3e  (tolerance %.0e)\n", what.c_str(), e, max_abs, tol);
  EXPECT_EQ(nonfinite, 0u) << what << ": non-finite elements differ";
  EXPECT_LE(e, tol) << what;
}

class OpTable : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTable, MatchesCpu) {
  const OpCase& c = GetParam();
  const uint32_t seed = std::random_device{}();
  RecordProperty("seed", std::to_string(seed));
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<OpRun::Output> ref;
  {
    OpRun run(ops::cpu_backend(), seed, 0xff);
    c.run(run);
    ref = run.collect();
  }
  ASSERT_FALSE(ref.empty()) << c.name << " compares nothing";
  for (const Device& d : tested_devices()) {
    OpRun run(ops::backend_for(d), seed, 0xfe);  // another poison: an unwritten element differs
    c.run(run);
    const auto got = run.collect();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i)
      compare(got[i], ref[i], c.tolerance, c.name + " " + ref[i].name + " @" + d.str());
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpTable, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) {
                           std::string s = info.param.name;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// Every pure virtual op of ops::Backend (and DeviceMemory's) has at least one case.
TEST(OpTableCoverage, EveryOpHasACase) {
  std::set<std::string> covered;
  for (const OpCase& c : all_cases()) {
    std::stringstream ops(c.op);
    for (std::string op; std::getline(ops, op, ',');) covered.insert(op);
  }
  int declared = 0;
  for (const char* header : {"src/ops/ops.h", "src/core/device.h"}) {
    std::ifstream f(header);
    ASSERT_TRUE(f) << header << " (tests run from the repository root)";
    std::stringstream text;
    text << f.rdbuf();
    const std::string s = text.str();
    static const std::regex pure(R"(virtual\s+[^;{]*?\b(\w+)\s*\([^;{]*=\s*0\s*;)");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), pure); it != std::sregex_iterator(); ++it) {
      const std::string name = (*it)[1];
      if (name == "name" || name == "device") continue;  // accessors, not ops
      ++declared;
      EXPECT_TRUE(covered.count(name)) << name << " (" << header << ") has no case in the op table";
    }
  }
  EXPECT_GT(declared, 35);
}

// An allocation no backend can satisfy throws deepinfer::Error and leaves the backend usable.
TEST(OpTableMemory, FailedAllocationThrows) {
  for (const Device& d : tested_devices()) {
    ops::Backend& b = ops::backend_for(d);
    EXPECT_THROW(b.allocate(size_t{1} << 52), Error) << d.str();
    EXPECT_THROW(b.allocate(SIZE_MAX - 10), Error) << d.str();  // rounding up must not wrap to a small block
    void* p = b.allocate(16);
    const float one[4] = {1, 2, 3, 4};
    float back[4] = {};
    b.upload(p, one, sizeof one);
    b.download(back, p, sizeof back);
    EXPECT_EQ(std::memcmp(one, back, sizeof one), 0) << d.str();
    b.release(p);
  }
}

}  // namespace
}  // namespace deepinfer::optest
