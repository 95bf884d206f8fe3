// Opens a V4.1 golden model (tests/data/goldens/v41/<case>) the way its reference ran: Engram's token
// map from the case's synthetic tokenizer (goldens.json), SWA bounded replay off.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/json_file.h"
#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::testing {

inline const std::string kV41GoldenRoot = "tests/data/goldens/v41/";

inline std::unique_ptr<model::V41Model> load_v41_golden(const std::string& case_name) {
  auto m = model::V41Model::load(kV41GoldenRoot + case_name);
  auto strings = read_json_file(kV41GoldenRoot + case_name + "/goldens.json")
                     .at("engram").at("token_strings").get<std::vector<std::string>>();
  m->set_engram_tokens(strings, strings);  // the synthetic tokenizer: decode == id_to_token
  m->replay_compact = false;
  return m;
}

}  // namespace deepinfer::testing
