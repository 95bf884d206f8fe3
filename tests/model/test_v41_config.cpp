// V4.1 config validation: every value a hostile or broken config.json can hold is either accepted
// with its meaning or refused with an error naming the field, the value and what is allowed. The
// cases issue 17 saw crash the process or pass silently are each here.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v41/v41_config.h"

namespace deepinfer::model {
namespace {

using nlohmann::json;

json golden() { return json::parse(std::ifstream("tests/data/goldens/v41/tiny-a/config.json")); }

// The config with text_config[key] (or the root's key when it starts with '/') set to value.
json with(const std::string& key, const json& value) {
  json j = golden();
  if (key.starts_with("/")) j[json::json_pointer(key)] = value;
  else j["text_config"][key] = value;
  return j;
}

// Refused, and the message names the field and the value.
void expect_refused(const json& j, const std::string& field, const std::string& value) {
  try {
    V41Config::from_json(j);
    ADD_FAILURE() << field << " = " << value << " was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(field), std::string::npos) << m;
    EXPECT_NE(m.find(value), std::string::npos) << m;
  }
}

TEST(V41ConfigValidation, GoldenLoads) {
  V41Config c = V41Config::from_json(golden());
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.fp8_block, 32);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
}

// Values that crashed the process (SIGSEGV, SIGFPE, bad_alloc then abort) before validation.
TEST(V41ConfigValidation, CrashingValuesAreRefused) {
  expect_refused(with("num_experts_per_tok", 99), "text_config.num_experts_per_tok", "99");
  expect_refused(with("sliding_window", 0), "text_config.sliding_window", "0");
  expect_refused(with("sliding_window", 1e9), "text_config.sliding_window", "1000000000");
  expect_refused(with("dspark_block_size", 0), "text_config.dspark_block_size", "0");
  expect_refused(with("o_groups", 0), "text_config.o_groups", "0");
  expect_refused(with("/quantization_config/weight_block_size", {0, 0}), "quantization_config.weight_block_size", "0");
  // Absent with a candidate source layer: the default 0 divided the positions (SIGFPE; scripts/config_probe.py).
  expect_refused(with("candidate_block_size", json()), "text_config.candidate_block_size", "absent");
  expect_refused(with("candidate_topk_blocks", json()), "text_config.candidate_topk_blocks", "absent");
  // No DSpark head but its target layers listed: the forward wrote their hidden states to no buffer.
  EXPECT_TRUE(V41Config::from_json(with("num_nextn_predict_layers", 0)).dspark_target_layer_ids.empty());
}

// Values that were accepted without effect or check, or loaded and then failed every request.
TEST(V41ConfigValidation, SilentValuesAreRefused) {
  expect_refused(with("/quantization_config/quant_method", "gptq"), "quantization_config.quant_method", "gptq");
  expect_refused(with("scoring_func", "relu"), "text_config.scoring_func", "relu");
  expect_refused(with("hidden_act", "gelu"), "text_config.hidden_act", "gelu");
  expect_refused(with("hidden_size", 128.5), "text_config.hidden_size", "128.5");
  expect_refused(with("hidden_size", true), "text_config.hidden_size", "true");
  expect_refused(with("hidden_size", "128"), "text_config.hidden_size", "\"128\"");
  expect_refused(with("num_experts_per_tok", 0), "text_config.num_experts_per_tok", "0");
  expect_refused(with("index_topk", 0), "text_config.index_topk", "0");
  expect_refused(with("index_topk", -4), "text_config.index_topk", "-4");
  expect_refused(with("hc_sinkhorn_iters", -1), "text_config.hc_sinkhorn_iters", "-1");
  expect_refused(with("rope_theta", 0), "text_config.rope_theta", "0");
  expect_refused(with("/text_config/rope_scaling/factor", -4), "text_config.rope_scaling.factor", "-4");
  expect_refused(with("eos_token_id", 512), "text_config.eos_token_id", "512");
  expect_refused(with("engram_layer_ids", {1, 20}), "text_config.engram_layer_ids[1]", "20");
  expect_refused(with("kv_source_layer_ids", {4, 2}), "text_config.kv_source_layer_ids", "[4,2]");
  expect_refused(with("rms_norm_eps", -1), "text_config.rms_norm_eps", "-1");
  expect_refused(with("n_shared_experts", 2), "text_config.n_shared_experts", "2");
  expect_refused(with("tie_word_embeddings", true), "text_config.tie_word_embeddings", "true");
  expect_refused(with("max_position_embeddings", 0), "text_config.max_position_embeddings", "0");
  expect_refused(with("/image_token_id", 100000), "image_token_id", "100000");
  expect_refused(with("/text_config/rope_scaling/rope_type", "linear"), "text_config.rope_scaling.rope_type", "linear");
}

TEST(V41ConfigValidation, LayoutErrorsNameTheProblem) {
  expect_refused(json::array({1, 2}), "the file must be a JSON object", "[1,2]");
  expect_refused(with("/text_config", 5), "text_config", "5");
  expect_refused(with("compress_ratios", "0,0"), "text_config.compress_ratios", "\"0,0\"");
}

TEST(V41ConfigValidation, UnknownFieldsAreIgnoredAndContextComesFromTextConfig) {
  json j = with("some_future_field", {{"x", 1}});
  j["text_config"]["max_position_embeddings"] = 1048576;  // where the released V4.1 config keeps it
  j["another_unknown"] = "ok";
  V41Config c = V41Config::from_json(j);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  j["text_config"].erase("max_position_embeddings");
  j["max_position_embeddings"] = 8192;  // the root, when text_config has none
  EXPECT_EQ(V41Config::from_json(j).max_position_embeddings, 8192);
}

TEST(V41ConfigValidation, FileErrorsNameTheFile) {
  const std::string path = ::testing::TempDir() + "/v41_bad_config.json";
  std::ofstream(path) << with("num_experts_per_tok", 99).dump();
  try {
    V41Config::from_file(path);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must be in [1, 8]"), std::string::npos) << e.what();
  }
}

// Every field of the golden config set to values of every wrong kind: never a crash, never a
// non-deepinfer exception (the loader turns those into clear errors too).
TEST(V41ConfigValidation, EveryFieldWithHostileValuesNeverCrashes) {
  const json base = golden();
  const std::vector<json> hostile = {json(), 0, -1, 1e300, -1e300, 0.5, true, "x", json::array(), json::object(),
                                     json::array({0}), json::array({-1, 1 << 30}), int64_t{1} << 62};
  int refused = 0, accepted = 0;
  for (auto& [key, value] : base["text_config"].items()) {
    for (const json& h : hostile) {
      json j = base;
      j["text_config"][key] = h;
      try {
        V41Config::from_json(j);
        ++accepted;
      } catch (const Error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // null (absent) and harmless values keep their defaults
}

}  // namespace
}  // namespace deepinfer::model
