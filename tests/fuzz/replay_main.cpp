// The fuzz targets without libFuzzer (any compiler, CI): runs every corpus file, then mutations of
// them (byte flips, insertions, deletions, splices; a fixed seed) for a time budget. Crashes abort
// the process like under libFuzzer; the count of runs is printed.
//   fuzz_X [--seconds S] CORPUS_DIR_OR_FILE...
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
const std::string* current = nullptr;  // the input being run, saved when it takes the process down

void save_crash() {
  std::fprintf(stderr, "fuzz: an exception other than deepinfer::Error escaped\n");
  std::abort();
}

// A target that aborts (a failed property, an escaped exception, a sanitizer report with
// abort_on_error): save the input, then die of the same signal.
extern "C" void on_signal(int sig) {
  std::signal(sig, SIG_DFL);
  if (current) {
    std::ofstream("fuzz-crash.bin", std::ios::binary) << *current;
    std::fprintf(stderr, "fuzz: signal %d; the input is in fuzz-crash.bin (%zu bytes)\n", sig, current->size());
  }
  std::raise(sig);
}

void run(const std::string& s) {
  current = &s;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  current = nullptr;
}
}  // namespace

int main(int argc, char** argv) {
  double seconds = 0;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) seconds = std::atof(argv[++i]);
    else if (std::filesystem::is_directory(a))
      for (auto& e : std::filesystem::directory_iterator(a)) inputs.push_back(e.path().string());
    else inputs.push_back(a);
  }
  std::vector<std::string> corpus;
  for (auto& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (corpus.empty()) corpus.push_back("");
  std::set_terminate(save_crash);  // an exception other than deepinfer::Error escaped
  std::signal(SIGABRT, on_signal);  // faults stay with the sanitizers' handlers, which end in abort
  long runs = 0;
  for (auto& c : corpus) run(c), ++runs;
  std::mt19937_64 rng(17);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::string s = corpus[rng() % corpus.size()];
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) {
      const size_t at = s.empty() ? 0 : rng() % s.size();
      switch (rng() % 5) {
        case 0: if (!s.empty()) s[at] = static_cast<char>(rng()); break;
        case 1: s.insert(at, 1, "{}[]\":,0-9e.\\u"[rng() % 15]); break;
        case 2: if (!s.empty()) s.erase(at, 1 + rng() % 8); break;
        case 3: { const std::string& o = corpus[rng() % corpus.size()];
                  if (!o.empty()) s.insert(at, o.substr(rng() % o.size(), 1 + rng() % 32)); } break;
        default: if (!s.empty()) s[at] ^= static_cast<char>(1u << (rng() % 8)); break;
      }
    }
    run(s);
    ++runs;
  }
  std::printf("%s: %ld runs (%zu corpus files), no crash\n", argv[0], runs, corpus.size());
  return 0;
}
