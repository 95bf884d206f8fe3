// `deepinfer make-demo-model DIR`: writes a small random-weight DeepSeek-V4 checkpoint with the
// real DeepSeek tokenizer, so the examples run where the real model cannot be had. Its text is
// random. The weights follow the tiny V4 golden model (tests/data/goldens/v4/tiny-a) with the
// vocabulary widened to the tokenizer's; widened rows repeat template rows under a random map.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

namespace deepinfer::cli {
namespace {

// The repository's data folder, found from the executable (build/tools/deepinfer) upwards.
fs::path find_repo_data(const std::string& rel) {
  fs::path p = fs::canonical("/proc/self/exe").parent_path();
  for (int i = 0; i < 5 && !p.empty(); ++i, p = p.parent_path())
    if (fs::exists(p / rel)) return p / rel;
  return fs::path(rel);
}

int run_make_demo_model(const std::vector<std::string>& args) {
  fs::path out, tmpl = find_repo_data("tests/data/goldens/v4/tiny-a"),
                tok_dir = find_repo_data("tests/data/tokenizer/deepseek-v3");
  uint64_t seed = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf("usage: deepinfer make-demo-model DIR [--template MODEL_DIR] [--tokenizer DIR] [--seed S]\n"
                  "  Writes a small random-weight DeepSeek-V4 model with the DeepSeek tokenizer (random text).\n");
      return 0;
    }
    if (args[i] == "--template" && i + 1 < args.size()) tmpl = args[++i];
    else if (args[i] == "--tokenizer" && i + 1 < args.size()) tok_dir = args[++i];
    else if (args[i] == "--seed" && i + 1 < args.size()) seed = std::stoull(args[++i]);
    else if (!args[i].empty() && args[i][0] != '-' && out.empty()) out = args[i];
    else fail("unexpected argument ", args[i], " (see deepinfer make-demo-model --help)");
  }
  check(!out.empty(), "give the folder to write: deepinfer make-demo-model DIR");
  check(fs::exists(tmpl / "config.json"), "template model ", tmpl.string(), " not found (use --template)");
  check(fs::exists(tok_dir / "tokenizer.json"), "tokenizer ", tok_dir.string(), " not found (use --tokenizer)");

  auto tok = tokenizer::Tokenizer::load(tok_dir.string());
  const int64_t vocab = tok.vocab_size();
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tmpl / "config.json"));
  const int64_t old_vocab = config.at("vocab_size").get<int64_t>();
  config["vocab_size"] = vocab;
  if (tok.bos_id()) config["bos_token_id"] = *tok.bos_id();
  if (tok.eos_id()) config["eos_token_id"] = *tok.eos_id();

  auto src = io::SafetensorsFile::open((tmpl / "model.safetensors").string());
  std::mt19937_64 rng(seed);
  std::vector<int64_t> row_map(vocab);  // widened row -> template row
  for (auto& r : row_map) r = static_cast<int64_t>(rng() % old_vocab);
  std::vector<std::vector<uint8_t>> storage;
  std::vector<io::TensorToWrite> tensors;
  for (auto& [name, t] : src->tensors()) {
    io::TensorToWrite w{name, t.dtype, t.shape, {}};
    if (!t.shape.empty() && t.shape[0] == old_vocab) {
      size_t row_bytes = t.nbytes / old_vocab;
      w.shape[0] = vocab;
      std::vector<uint8_t> bytes(row_bytes * vocab);
      for (int64_t r = 0; r < vocab; ++r) std::copy_n(t.data + row_map[r] * row_bytes, row_bytes, bytes.data() + r * row_bytes);
      storage.push_back(std::move(bytes));
      w.bytes = storage.back();
    } else {
      w.bytes = std::span<const uint8_t>(t.data, t.nbytes);
    }
    tensors.push_back(w);
  }
  fs::create_directories(out);
  io::write_safetensors((out / "model.safetensors").string(), tensors, {{"format", "pt"}});
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(tok_dir / f)) fs::copy_file(tok_dir / f, out / f, fs::copy_options::overwrite_existing);
  std::ofstream(out / "README.md") << "# DeepInfer demo model\n\nRandom weights (DeepSeek-V4 architecture, "
                                   << "tiny) with the DeepSeek tokenizer: its text is random.\n"
                                   << "Written by `deepinfer make-demo-model`.\n";
  std::printf("wrote a random-weight demo model (vocab %lld) to %s\n", static_cast<long long>(vocab), out.c_str());
  return 0;
}

const CommandRegistration registration({"make-demo-model", "write a small random-weight demo model (random text)",
                                        run_make_demo_model});

}  // namespace
}  // namespace deepinfer::cli
