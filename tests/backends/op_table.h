// The op-test table (test-backend-ops): one entry per op of ops::Backend (name, tolerance, input maker),
// run on the CPU reference and on every other backend with the same seeded inputs; the outputs must match
// bit for bit (tolerance 0, and always for integer outputs) or within a relative error.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/ops.h"

namespace deepinfer::optest {

// One run of a case on one backend. The maker draws host inputs from rng() (the same seed on every
// backend), places them with in()/inout(), allocates outputs with out() (filled with this run's poison
// byte, which differs between the reference and the tested run, so an element an op fails to write
// differs), calls the op, and names every output it wants compared.
class OpRun {
 public:
  OpRun(ops::Backend& backend, uint32_t seed, uint8_t poison) : b_(backend), rng_(seed), poison_(poison) {}
  ~OpRun();
  OpRun(const OpRun&) = delete;
  OpRun& operator=(const OpRun&) = delete;

  ops::Backend& backend() { return b_; }
  std::mt19937& rng() { return rng_; }

  // Host data: uniform in [lo, hi), never 0; or bf16 values on `distinct` levels of `step` (many exact ties).
  std::vector<float> uniform(size_t n, float lo = -1.0f, float hi = 1.0f);
  std::vector<float> levels(size_t n, int distinct, float step = 0.125f);
  // h rounded to bf16, as bits (the vision tower's activations).
  static std::vector<uint16_t> bf16_bits(const std::vector<float>& h);
  int32_t below(int64_t n) { return static_cast<int32_t>(rng_() % static_cast<uint64_t>(n > 0 ? n : 1)); }
  bool chance(int one_in) { return rng_() % static_cast<unsigned>(one_in) == 0; }

  // A backend copy of h (an input).
  template <typename T>
  T* in(const std::vector<T>& h) {
    T* p = static_cast<T*>(alloc(h.size() * sizeof(T)));
    b_.upload(p, h.data(), h.size() * sizeof(T));
    return p;
  }
  // An output of n elements, poisoned; compared under `name`.
  template <typename T>
  T* out(const std::string& name, size_t n) {
    T* p = static_cast<T*>(alloc(n * sizeof(T)));
    std::vector<uint8_t> poison(n * sizeof(T), poison_);
    b_.upload(p, poison.data(), poison.size());
    record<T>(name, p, n);
    return p;
  }
  // An input the op updates in place (or an output only partly written): starts as h; compared.
  template <typename T>
  T* inout(const std::string& name, const std::vector<T>& h) {
    T* p = in(h);
    record<T>(name, p, h.size());
    return p;
  }
  // bf16 bits (uint16_t) compared as the values they hold (within the case's tolerance; 0: bit for bit).
  uint16_t* out_bf16(const std::string& name, size_t n) {
    uint16_t* p = out<uint16_t>(name, n);
    pending_.back().is_bf16 = true;
    return p;
  }
  uint16_t* inout_bf16(const std::string& name, const std::vector<uint16_t>& h) {
    uint16_t* p = inout(name, h);
    pending_.back().is_bf16 = true;
    return p;
  }
  // Host memory an op reads directly (embedding_fp8's table); kept alive for the run.
  template <typename T>
  const T* host(std::vector<T> h) {
    auto keep = std::make_shared<std::vector<T>>(std::move(h));
    kept_.push_back(keep);
    return keep->data();
  }

  // The outputs after the op, downloaded.
  struct Output {
    std::string name;
    bool is_float;
    size_t elem_bytes;
    std::vector<uint8_t> bytes;
    bool is_bf16 = false;
  };
  std::vector<Output> collect();

 private:
  void* alloc(size_t bytes);
  template <typename T>
  void record(const std::string& name, const void* p, size_t n) {
    pending_.push_back({name, std::is_floating_point_v<T>, sizeof(T), p, n * sizeof(T)});
  }
  struct Pending {
    std::string name;
    bool is_float;
    size_t elem_bytes;
    const void* p;
    size_t bytes;
    bool is_bf16 = false;
  };
  ops::Backend& b_;
  std::mt19937 rng_;
  uint8_t poison_;
  std::vector<void*> owned_;
  std::vector<std::shared_ptr<void>> kept_;
  std::vector<Pending> pending_;
};

// `what` followed by n, for output names ("ld " + std::to_string on a literal trips GCC 12's -Wrestrict).
inline std::string label(const char* what, int64_t n) {
  std::string s(what);
  s += std::to_string(n);
  return s;
}

struct OpCase {
  std::string op;  // the ops::Backend method (one case may exercise a few, e.g. scale and add)
  std::string name;
  double tolerance;  // float outputs: 0 = bit for bit, else max ||got - ref|| / ||ref|| (same non-finite elements)
  std::function<void(OpRun&)> run;
};

// The table, by area.
std::vector<OpCase> core_op_cases();      // op_cases_core.cpp: GEMMs, norms, RoPE, attention, mHC, quant
std::vector<OpCase> deepseek_op_cases();  // op_cases_deepseek.cpp: memory, data movement, MoE, indexer, Engram
std::vector<OpCase> vision_op_cases();    // op_cases_vision.cpp: the vision tower's ops

}  // namespace deepinfer::optest
