// V4 config parsing: the released schema and transformers' schema describe the same model; unknown or
// inconsistent values are errors that name the key.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v4/v4_config.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

json golden_config(const std::string& name) {
  return json::parse(std::ifstream("tests/data/goldens/v4/" + name + "/config.json"));
}

// The same model in the released spelling: per-layer compress_ratios, num_hash_layers, qk_rope_head_dim,
// rope_theta / compress_rope_theta / rope_scaling.
json released_tiny_b() {
  json t = golden_config("tiny-b");
  json r = t;
  for (const char* k : {"layer_types", "compress_rates", "mlp_layer_types", "rope_parameters", "partial_rotary_factor"})
    r.erase(k);
  r["compress_ratios"] = {32, 4, 0, 4, 32, 0};  // one trailing MTP entry, as in the release
  r["rope_scaling"] = {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 64},
                       {"beta_fast", 32}, {"beta_slow", 1}};
  return r;
}

TEST(V4Config, TransformersSchema) {
  V4Config c = V4Config::from_json(golden_config("tiny-a"));
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.compress_ratio, (std::vector<int64_t>{0, 0, 4, 16, 4, 16}));
  EXPECT_EQ(c.attention[2], AttentionKind::kCSA);
  EXPECT_EQ(c.attention[3], AttentionKind::kHCA);
  EXPECT_EQ(c.hash_routed, (std::vector<bool>{true, true, false, false, false, false}));
  EXPECT_FALSE(c.rope_compress.yarn);
  EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
  EXPECT_FALSE(c.quant.has_value());
}

TEST(V4Config, ReleasedSchemaDescribesTheSameModel) {
  V4Config hf = V4Config::from_json(golden_config("tiny-b"));
  json rj = released_tiny_b();
  rj.erase("hc_eps");  // defaults apply where the release omits a key
  V4Config rel = V4Config::from_json(rj);
  EXPECT_EQ(rel.compress_ratio, hf.compress_ratio);
  EXPECT_EQ(rel.attention, hf.attention);
  EXPECT_EQ(rel.rope_dim, hf.rope_dim);
  EXPECT_EQ(rel.hash_routed, (std::vector<bool>{false, false, false, false, false}));  // num_hash_layers absent
  EXPECT_TRUE(rel.rope_compress.yarn);
  EXPECT_DOUBLE_EQ(rel.rope_compress.factor, hf.rope_compress.factor);
  EXPECT_EQ(rel.rope_compress.original_max_position, hf.rope_compress.original_max_position);
  EXPECT_DOUBLE_EQ(rel.rope_compress.attention_factor, 1.0);  // the release has no YaRN mscale
  EXPECT_FALSE(rel.rope_main.yarn);
  EXPECT_DOUBLE_EQ(rel.hc_eps, 1e-6);
}

TEST(V4Config, QuantizationConfig) {
  json j = released_tiny_b();
  j["quantization_config"] = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  j["expert_dtype"] = "fp4";
  j["index_head_dim"] = 32;  // the quantized indexer's Hadamard rotation needs a power of two
  V4Config c = V4Config::from_json(j);
  ASSERT_TRUE(c.quant.has_value());
  EXPECT_EQ(c.quant->block_n, 128);
  EXPECT_TRUE(c.quant->experts_fp4);
}

void expect_error(const json& j, const std::string& needle) {
  try {
    V4Config::from_json(j);
    ADD_FAILURE() << "expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(V4Config, BadValuesAreNamed) {
  json j = golden_config("tiny-a");
  j.erase("hidden_size");
  expect_error(j, "hidden_size");

  j = golden_config("tiny-a");
  j["layer_types"][2] = "full_attention";
  expect_error(j, "full_attention");

  j = golden_config("tiny-a");
  j["layer_types"].erase(0);
  expect_error(j, "layer_types");

  j = golden_config("tiny-a");
  j["num_experts_per_tok"] = 99;
  expect_error(j, "num_experts_per_tok");

  j = golden_config("tiny-a");
  j["rope_parameters"]["compress"]["rope_type"] = "llama3";
  expect_error(j, "llama3");

  j = golden_config("tiny-a");
  j["model_type"] = "llama";
  expect_error(j, "model_type");

  j = golden_config("tiny-a");
  j["num_attention_heads"] = "four";
  expect_error(j, "num_attention_heads");

  json r = released_tiny_b();
  r["compress_ratios"] = {32, 4};
  expect_error(r, "compress_ratios");

  r = released_tiny_b();
  r["quantization_config"] = {{"quant_method", "awq"}};
  expect_error(r, "quant_method");

  r = released_tiny_b();  // index_head_dim 24
  r["quantization_config"] = {{"quant_method", "fp8"}};
  expect_error(r, "index_head_dim");
}

// Issue 17: values nlohmann would convert silently, or that allocate before any tensor is checked.
TEST(V4Config, HostileValuesAreRefusedWithFieldValueAndRange) {
  const std::vector<std::tuple<std::string, json, std::string>> cases = {
      {"hidden_size", 128.5, "hidden_size = 128.5: must be an integer"},
      {"hidden_size", true, "hidden_size = true"},
      {"sliding_window", 1e9, "sliding_window = 1000000000"},
      {"num_hidden_layers", 1e12, "num_hidden_layers"},
      {"num_experts_per_tok", 0, "num_experts_per_tok = 0"},
      {"hc_sinkhorn_iters", -1, "hc_sinkhorn_iters = -1"},
      {"hidden_act", "gelu", "hidden_act = \"gelu\": not supported"},
      {"scoring_func", "relu", "scoring_func"},
      {"eos_token_id", 100000, "eos_token_id = 100000"},
      {"max_position_embeddings", -5, "max_position_embeddings = -5"},
      {"rms_norm_eps", 0, "rms_norm_eps = 0"},
  };
  for (auto& [key, value, needle] : cases) {
    json j = golden_config("tiny-a");
    j[key] = value;
    expect_error(j, needle);
  }
  json j = golden_config("tiny-a");
  j["rope_parameters"]["main"]["rope_theta"] = 0;
  expect_error(j, "rope_theta");
  expect_error(json::array({1}), "must be a JSON object");
  j = golden_config("tiny-a");
  j["some_unknown_field"] = {1, 2, 3};  // harmless: ignored
  EXPECT_EQ(V4Config::from_json(j).max_position_embeddings, 1048576);
}

}  // namespace
}  // namespace deepinfer::model

namespace deepinfer::model {
namespace {

TEST(V4Config, FileErrorsNameTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string bad_json = dir + "/bad_config.json", bad_value = dir + "/bad_value.json";
  std::ofstream(bad_json) << "{\"vocab_size\": ";
  nlohmann::json j = golden_config("tiny-a");
  j.erase("hidden_size");
  std::ofstream(bad_value) << j.dump();
  for (const auto& [path, needle] : {std::pair{bad_json, std::string("not valid JSON")},
                                     std::pair{bad_value, std::string("hidden_size")},
                                     std::pair{dir + "/missing.json", std::string("cannot open")}}) {
    try {
      V4Config::from_file(path);
      ADD_FAILURE() << path;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace deepinfer::model
