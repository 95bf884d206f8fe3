// Engram's hash multipliers, computed by the C++ PCG64 (model/deepseek_v41/numpy_rng.h), against numpy's
// draws in tests/data/engram/multipliers.txt (tools/gen/gen_engram_multipliers.py): the release's and the
// goldens' compressed vocabularies for every layer, and other sizes, seeds and numpy code paths. And a
// corrupt table row (NaN code, NaN scale, a scale that overflows): the model loads (tables are not
// scanned at load), a forward that gathers the row fails naming it, others keep their bits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_file.h"
#include "model/deepseek_v41/v41_engram.h"
#include "v41_golden_model.h"

using namespace deepinfer;

namespace {

struct Row {
  int64_t vocab, layer;
  std::vector<int64_t> mult;
};

std::vector<Row> numpy_rows() {
  std::ifstream f("tests/data/engram/multipliers.txt");
  EXPECT_TRUE(f.good()) << "tests/data/engram/multipliers.txt";
  std::vector<Row> rows;
  for (std::string line; std::getline(f, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    Row r{};
    in >> r.vocab >> r.layer;
    for (int64_t v; in >> v;) r.mult.push_back(v);
    rows.push_back(r);
  }
  return rows;
}

}  // namespace

TEST(EngramMultipliers, EqualNumpy) {
  const std::vector<Row> rows = numpy_rows();
  int64_t release = 0, goldens = 0;
  for (const Row& r : rows) {
    EXPECT_EQ(model::engram_multipliers(r.layer, r.vocab, 4), r.mult) << "vocab " << r.vocab << " layer " << r.layer;
    // fewer n-gram sizes draw a prefix of the same stream
    EXPECT_EQ(model::engram_multipliers(r.layer, r.vocab, 2), std::vector<int64_t>(r.mult.begin(), r.mult.begin() + 2));
    release += r.vocab == 99092;
    goldens += r.vocab == 270;
  }
  EXPECT_EQ(release, 65);  // layers 0-63 and a two-word seed
  EXPECT_EQ(goldens, 64);
  EXPECT_EQ(rows.size(), 138u);
}

TEST(EngramMultipliers, ClearErrors) {
  EXPECT_THROW(model::engram_multipliers(1, 0, 4), Error);
  EXPECT_THROW(model::engram_multipliers(-1, 270, 4), Error);
}

namespace {

namespace fs = std::filesystem;

std::unique_ptr<model::V41Model> load_from(const std::string& dir) {
  model::V41Options o = model::V41Options::from_env();
  o.replay_compact = false;
  auto m = model::V41Model::load(dir, o);
  auto strings = read_json_file(dir + "/goldens.json").at("engram").at("token_strings").get<std::vector<std::string>>();
  m->set_engram_tokens(strings, strings);
  return m;
}

// Byte offset in a safetensors file of tensor `name`'s data.
int64_t tensor_offset(const std::string& file, const std::string& name) {
  std::ifstream f(file, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  return 8 + static_cast<int64_t>(n) + nlohmann::json::parse(header).at(name).at("data_offsets")[0].get<int64_t>();
}

void poke(const std::string& file, int64_t at, uint8_t byte) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(at);
  f.put(static_cast<char>(byte));
}

std::vector<int32_t> tokens(int seed, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((i * 37 + seed * 101 + 5) % 200 + 3));
  return v;
}

// The table rows a sequence gathers in the first Engram layer (index 0).
std::vector<int64_t> rows_of(model::V41Model& m, const std::vector<int32_t>& ids) {
  const int64_t NL = static_cast<int64_t>(m.config().engram_layer_ids.size());
  std::vector<int64_t> h, rows;
  model::ForwardTaps taps;
  taps.on_hash_ids = [&](int64_t, const std::vector<int64_t>& got) { h = got; };
  model::logits_in_steps(m, ids, {0, static_cast<int64_t>(ids.size())}, nullptr, &taps);
  const int64_t C = static_cast<int64_t>(h.size()) / (static_cast<int64_t>(ids.size()) * NL);
  for (size_t t = 0; t < ids.size(); ++t)
    for (int64_t c = 0; c < C; ++c) rows.push_back(h[(t * NL + 0) * C + c]);
  return rows;
}

TEST(EngramTables, ACorruptRowFailsOnlyTheForwardsThatGatherIt) {
  const std::string golden = deepinfer::testing::kV41GoldenRoot + "tiny-a";
  auto clean = load_from(golden);
  const int64_t layer = clean->config().engram_layer_ids.at(0), ehd = clean->config().engram_head_dim;
  const std::vector<int32_t> hit = tokens(1, 12);
  const std::vector<int64_t> hit_rows = rows_of(*clean, hit);
  // A row the last token gathers and the 11 before it do not (so that decoding up to it runs clean).
  const size_t C = hit_rows.size() / hit.size();
  const std::vector<int64_t> before(hit_rows.begin(), hit_rows.end() - static_cast<std::ptrdiff_t>(C));
  int64_t row = -1;
  for (size_t c = hit_rows.size() - C; c < hit_rows.size() && row < 0; ++c)
    if (std::find(before.begin(), before.end(), hit_rows[c]) == before.end()) row = hit_rows[c];
  ASSERT_GE(row, 0) << "the last token gathers only rows the earlier tokens gather";
  std::vector<int32_t> miss;
  for (int seed = 2; miss.empty() && seed < 200; ++seed) {
    std::vector<int32_t> t = tokens(seed, 12);
    std::vector<int64_t> r = rows_of(*clean, t);
    if (std::find(r.begin(), r.end(), row) == r.end()) miss = t;
  }
  ASSERT_FALSE(miss.empty()) << "no sequence avoids row " << row;
  const std::vector<float> miss_logits = model::logits_in_steps(*clean, miss, {0, 12});

  const std::string table = "layers." + std::to_string(layer) + ".engram.embed.";
  struct Corruption {
    const char* what;
    int64_t element;  // -1: none
    uint8_t code, scale;  // scale 0: unchanged
  };
  for (const Corruption& k : {Corruption{"a NaN code", 5, 0x7f, 0}, Corruption{"a NaN scale", -1, 0, 0xff},
                              Corruption{"a scale that overflows 448", 7, 0x7e, 0xf7}}) {
    const fs::path dir = fs::temp_directory_path() / ("deepinfer_engram_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(golden, dir);
    const std::string file = (dir / "model.safetensors").string();
    if (k.element >= 0) poke(file, tensor_offset(file, table + "weight") + row * ehd + k.element, k.code);
    if (k.scale) poke(file, tensor_offset(file, table + "scale") + row * (ehd / 32), k.scale);
    auto bad = load_from(dir.string());  // loads: the table is not read until a row is gathered
    try {
      model::logits_in_steps(*bad, hit, {0, 12});
      ADD_FAILURE() << k.what << ": a forward gathering row " << row << " did not fail";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("engram: layer " + std::to_string(layer)), std::string::npos) << msg;
      EXPECT_NE(msg.find("non-finite value at row " + std::to_string(row)), std::string::npos) << msg;
    }
    // In decode too: the 11 tokens before run clean, the token that gathers the row fails.
    auto st = bad->new_sequence();
    model::logits_in_steps(*bad, std::vector<int32_t>(hit.begin(), hit.end() - 1), {0, 11}, st.get());
    model::ForwardBatch last{{hit.back()}, {0, 1}, {st.get()}, {0}};
    std::vector<float> out;
    EXPECT_THROW(bad->forward(last, out), Error) << k.what;
    EXPECT_TRUE(model::logits_in_steps(*bad, miss, {0, 12}) == miss_logits) << k.what << ": a sequence not reaching the row";
    bad.reset();
    fs::remove_all(dir);
  }
}

}  // namespace
