// Encode throughput of the tokenizer on a corpus (one JSON string per line), single thread and
// all threads. Prints one JSON object; bench_tokenizer.py runs it next to HF tokenizers.
//   bench_tokenizer --tokenizer PATH --corpus FILE [--rounds N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

using deepinfer::tokenizer::Tokenizer;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best time of `rounds` passes over the documents with `threads` workers; tokens counted once.
double time_encode(const Tokenizer& tok, const std::vector<std::string>& docs, int threads, int rounds,
                   int64_t& tokens) {
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    std::atomic<int64_t> count{0};
    double t0 = now();
    if (threads == 1) {
      std::vector<int32_t> ids;
      for (auto& d : docs) {
        ids.clear();
        tok.encode_into(d, false, ids);
        count += int64_t(ids.size());
      }
    } else {
      deepinfer::parallel_for(int64_t(docs.size()), [&](int64_t b, int64_t e) {
        std::vector<int32_t> ids;
        int64_t n = 0;
        for (int64_t i = b; i < e; ++i) {
          ids.clear();
          tok.encode_into(docs[i], false, ids);
          n += int64_t(ids.size());
        }
        count += n;
      });
    }
    best = std::min(best, now() - t0);
    tokens = count;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tok_path, corpus;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--tokenizer") tok_path = argv[i + 1];
    else if (a == "--corpus") corpus = argv[i + 1];
    else if (a == "--rounds") rounds = std::stoi(argv[i + 1]);
  }
  if (tok_path.empty() || corpus.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizer --tokenizer PATH --corpus FILE.jsonl [--rounds N]\n");
    return 2;
  }
  try {
    double t0 = now();
    Tokenizer tok = Tokenizer::load(tok_path);
    double load_s = now() - t0;
    std::vector<std::string> docs;
    std::ifstream f(corpus);
    deepinfer::check(bool(f), "cannot open ", corpus);
    std::string line;
    int64_t bytes = 0;
    while (std::getline(f, line)) {
      docs.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += int64_t(docs.back().size());
    }
    int64_t tokens = 0;
    time_encode(tok, docs, 1, 1, tokens);  // warm the per-thread caches, like HF's after a pass
    double single = time_encode(tok, docs, 1, rounds, tokens);
    int threads = deepinfer::cpu_thread_count();
    double multi = time_encode(tok, docs, threads, rounds, tokens);
    nlohmann::json out = {
        {"load_s", load_s}, {"bytes", bytes}, {"tokens", tokens}, {"docs", docs.size()},
        {"single", {{"seconds", single}, {"mb_s", bytes / single / 1e6}, {"tok_s", tokens / single}}},
        {"threads", {{"n", threads}, {"seconds", multi}, {"mb_s", bytes / multi / 1e6}, {"tok_s", tokens / multi}}}};
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
