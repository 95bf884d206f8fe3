// load_format="dummy": random V4.1 weights in the released formats from config.json alone. The bytes
// are valid codes (no e4m3 NaN), deterministic in (seed, name); a model built from them runs and gives
// finite logits, the same bits on every load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/device.h"
#include "core/error.h"
#include "core/json_file.h"
#include "model/causal_lm.h"
#include "model/deepseek_v41/v41_model.h"
#include "model/dummy_weights.h"
#include "model/load.h"
#include "model/weight_loader.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

TEST(DummyWeights, ReleasedFormatsDeterministic) {
  const StoredMatrix a = dummy_matrix(7, "layers.0.attn.wq_a", 96, 256, 32);
  EXPECT_EQ(a.type, ops::WeightType::kFp8Block);
  ASSERT_EQ(a.byte_count(), 96u * 256);
  EXPECT_EQ(a.scale.size(), 3u * 8);
  for (size_t i = 0; i < a.byte_count(); ++i) ASSERT_NE(a.bytes[i] & 0x7f, 0x7f) << "NaN code at " << i;
  EXPECT_FALSE(ops::gemm_scale_bytes(a.view()).empty());  // power-of-two scales: the tensor-core path takes them
  const StoredMatrix b = dummy_matrix(7, "layers.0.attn.wq_a", 96, 256, 32);
  const StoredMatrix c = dummy_matrix(7, "layers.0.attn.wq_b", 96, 256, 32);
  const StoredMatrix d = dummy_matrix(8, "layers.0.attn.wq_a", 96, 256, 32);
  EXPECT_EQ(a.owned, b.owned);
  EXPECT_NE(a.owned, c.owned);
  EXPECT_NE(a.owned, d.owned);
  const StoredMatrix e = dummy_matrix(7, "layers.0.ffn.experts.3.w1", 128, 256, 0);
  EXPECT_EQ(e.type, ops::WeightType::kMxfp4);
  EXPECT_EQ(e.byte_count(), 128u * 128);
  EXPECT_EQ(e.scale.size(), 128u * 8);
  const auto norm = dummy_floats(7, "layers.0.attn_norm.weight", {256});
  EXPECT_EQ(norm, std::vector<float>(256, 1.0f));
  const auto bias = dummy_floats(7, "layers.0.ffn.gate.bias", {4, 64});
  for (float v : bias) ASSERT_TRUE(std::fabs(v) <= 0.125f) << v;
  EXPECT_NE(bias[0], bias[1]);
}

// A backend that keeps FP8 / MXFP4 stored generates the bytes where they live (stored_spec, then
// DeviceMemory::random_fill / fill_bytes): the same bytes and scales as the host's dummy_matrix.
TEST(DummyWeights, GeneratedInPlaceEqualsHostBytes) {
  const WeightLoader loader(DummyWeights{7}, 32);
  for (const char* base : {"layers.0.attn.wq_a", "layers.0.ffn.experts.3.w1"}) {
    const StoredMatrix spec = loader.stored_spec(base, 96, 256);
    ASSERT_TRUE(spec.generated_later) << base;
    EXPECT_EQ(spec.bytes, nullptr);
    EXPECT_TRUE(spec.scale.empty());
    const StoredMatrix host = loader.stored(base, 96, 256);
    ASSERT_FALSE(host.generated_later);
    EXPECT_EQ(host.type, spec.type);
    EXPECT_EQ(host.scale, std::vector<float>(spec.scale_count(), spec.scale_value)) << base;
    std::vector<uint8_t> bytes(spec.byte_count(), 0x55);
    host_memory().random_fill(bytes.data(), bytes.size(), spec.random_stream, spec.and_mask, spec.or_mask);
    EXPECT_EQ(bytes, host.owned) << base;
  }
  EXPECT_FALSE(loader.stored_spec("layers.0.attn.compressor.wkv", 8, 256).generated_later);  // BF16 floats: values
}

std::vector<float> dummy_logits(const std::string& dir, const std::string& device = "cpu") {
  auto lm = load_causal_lm(dir, device, "dummy");
  auto* v41 = dynamic_cast<V41Model*>(lm.get());
  EXPECT_NE(v41, nullptr);
  auto strings = read_json_file("tests/data/goldens/v41/tiny-b/goldens.json")
                     .at("engram").at("token_strings").get<std::vector<std::string>>();
  v41->set_engram_tokens(strings, strings);
  const std::vector<int32_t> ids = {3, 17, 40, 2, 99, 5, 5, 8, 120, 7};
  return logits_in_steps(*lm, ids, {0, 6, 7, 8, 10});
}

TEST(DummyWeights, ModelFromConfigAloneRuns) {
  const fs::path dir = fs::temp_directory_path() / ("deepinfer-dummy-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file("tests/data/goldens/v41/tiny-b/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const std::vector<float> a = dummy_logits(dir.string()), b = dummy_logits(dir.string());
  ASSERT_FALSE(a.empty());
  double sq = 0;
  for (float v : a) {
    ASSERT_TRUE(std::isfinite(v));
    sq += static_cast<double>(v) * v;
  }
  EXPECT_GT(sq, 0.0);  // not all zero: the weights reach the logits
  EXPECT_EQ(a, b);
  // Without load_format=dummy the folder has no checkpoint: a clear error, not a crash.
  EXPECT_THROW(load_causal_lm(dir.string(), "cpu", "auto"), Error);
  EXPECT_THROW(load_causal_lm(dir.string(), "cpu", "random"), Error);
  fs::remove_all(dir);
}

// DEEPINFER_ENGRAM_DEVICE: on a GPU (DEEPINFER_DEVICE=cuda) the tables copied to the device give the
// bits of the host-gathered rows; on the CPU both are host memory. A value other than auto / host /
// device is an error naming the variable.
TEST(DummyWeights, EngramTablesOnTheDeviceGiveTheHostsLogits) {
  const fs::path dir = fs::temp_directory_path() / ("deepinfer-engram-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file("tests/data/goldens/v41/tiny-b/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  const std::string device = Device::resolve("").str();
  ::setenv("DEEPINFER_ENGRAM_DEVICE", "host", 1);
  const std::vector<float> host = dummy_logits(dir.string(), device);
  ::setenv("DEEPINFER_ENGRAM_DEVICE", "device", 1);
  const std::vector<float> on_device = dummy_logits(dir.string(), device);
  ::setenv("DEEPINFER_ENGRAM_DEVICE", "gpu", 1);
  try {
    load_causal_lm(dir.string(), device, "dummy");
    ADD_FAILURE() << "DEEPINFER_ENGRAM_DEVICE=gpu was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DEEPINFER_ENGRAM_DEVICE"), std::string::npos) << e.what();
  }
  ::unsetenv("DEEPINFER_ENGRAM_DEVICE");
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(host, on_device);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::model
