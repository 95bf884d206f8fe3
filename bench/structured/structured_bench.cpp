// Grammar compile time and per-token mask time of deepinfer::structured on the V3 vocabulary.
// Usage: structured_bench [cases.json] [repeats]  (run from the repo root). Prints one JSON line
// per case: compile_ms (median of repeats; token classification runs on the CPU thread pool,
// DEEPINFER_CPU_THREADS), mask_us median / p99 / max along the case's real token sequence
// (tokenized by deepinfer_tokenizer), tokens, threads.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "structured/structured.h"
#include "test_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer::structured;
using Clock = std::chrono::steady_clock;

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : "bench/structured/cases.json";
  int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  auto cases = nlohmann::ordered_json::parse(std::ifstream(path));
  TokenVocab vocab = load_vocab();
  auto tok = deepinfer::tokenizer::Tokenizer::load(kV3TokenizerPath);
  std::vector<uint32_t> words((vocab.size() + 31) / 32);
  for (auto& c : cases) {
    SchemaArgs args{c["schema_type"].get<std::string>(),
                    c["schema"].is_string() ? c["schema"].get<std::string>() : c["schema"].dump()};
    std::vector<double> compile_ms;
    std::shared_ptr<const CompiledGrammar> g;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = Clock::now();
      g = compile(args, vocab);
      compile_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    auto ids = tok.encode(c["text"].get<std::string>(), false);
    std::vector<double> mask_us;
    for (int r = 0; r < repeats; ++r) {
      Matcher m(g);
      for (int32_t id : ids) {
        auto t0 = Clock::now();
        m.fill_next_token_bitmask(words.data());
        mask_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (!((words[id >> 5] >> (id & 31)) & 1) || !m.accept_token(id)) {
          std::cerr << c["name"] << ": token " << id << " rejected\n";
          return 1;
        }
      }
      m.fill_next_token_bitmask(words.data());
      if (!m.can_end()) { std::cerr << c["name"] << ": cannot end\n"; return 1; }
    }
    nlohmann::ordered_json out = {{"name", c["name"]}, {"engine", "deepinfer"}, {"compile_ms", pct(compile_ms, 0.5)},
                                  {"mask_us_median", pct(mask_us, 0.5)}, {"mask_us_p99", pct(mask_us, 0.99)},
                                  {"mask_us_max", pct(mask_us, 1.0)}, {"tokens", ids.size()},
                                  {"masks", g->num_masks()}, {"mask_mib", g->memory_bytes() / 1048576.0},
                                  {"threads", deepinfer::cpu_thread_count()}};
    std::cout << out.dump() << std::endl;
  }
}
