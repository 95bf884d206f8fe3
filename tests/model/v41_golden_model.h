// Opens a V4.1 golden model (tests/data/goldens/v41/<case>) the way its reference ran: Engram's token
// map from the case's synthetic tokenizer (goldens.json), SWA bounded replay off.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/block_pool.h"
#include "core/json_file.h"
#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::testing {

// Changes some of a model's run options (the rest stay).
inline void with_options(model::V41Model& m, const std::function<void(model::V41Options&)>& change) {
  model::V41Options o = m.options();
  change(o);
  m.set_options(o);
}

inline const std::string kV41GoldenRoot = "tests/data/goldens/v41/";

// change: further load options (e.g. expert parallelism).
inline std::unique_ptr<model::V41Model> load_v41_golden(const std::string& case_name,
                                                        const std::function<void(model::V41Options&)>& change = {}) {
  model::V41Options options = model::V41Options::from_env();
  options.replay_compact = false;
  if (change) change(options);
  auto m = model::V41Model::load(kV41GoldenRoot + case_name, options);
  auto strings = read_json_file(kV41GoldenRoot + case_name + "/goldens.json")
                     .at("engram").at("token_strings").get<std::vector<std::string>>();
  m->set_engram_tokens(strings, strings);  // the synthetic tokenizer: decode == id_to_token
  return m;
}

// The model on the finest state blocks it accepts: its packed rows (890 B a token on tiny-b) fill its default
// 16 KiB blocks slowly, so a budget test that must fall between two sequences' states needs finer ones.
inline std::unique_ptr<model::V41Model> with_finest_state_blocks(std::unique_ptr<model::V41Model> m) {
  m->set_state_pool(std::make_shared<BlockPool>(m->finest_block_bytes(), 0, m->state_memory()));
  return m;
}

}  // namespace deepinfer::testing
