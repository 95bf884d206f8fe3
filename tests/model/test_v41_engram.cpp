// Engram's hash multipliers, computed by the C++ PCG64 (model/deepseek_v41/numpy_rng.h), against numpy's
// draws in tests/data/engram/multipliers.txt (tools/gen/gen_engram_multipliers.py): the release's and the
// goldens' compressed vocabularies for every layer, and other sizes, seeds and numpy code paths.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/deepseek_v41/v41_engram.h"

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
