#include "tokenizer/tokenizer.h"

#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

using nlohmann::json;

struct TokenizerData {
  uint64_t uid;  // identifies this table set in the per-thread BPE caches
  std::string origin;
  std::vector<std::string> strings, bytes;  // per id: as written in the file, and raw bytes
  std::vector<uint8_t> flags;               // per id: kHas | kAdded | kSpecial
  std::unordered_map<std::string, int32_t> by_string;
  std::unique_ptr<BpeModel> bpe;
  PreTokenizer pre;
  std::unique_ptr<AddedTokenMatcher> raw_tokens, normalized_tokens;  // HF matches them in two passes
  std::vector<int32_t> prefix, suffix;  // post-processor template around the text's ids
  std::optional<int32_t> bos, eos;
  bool add_bos = false, add_eos = false;
};

enum : uint8_t { kHas = 1, kAdded = 2, kSpecial = 4 };

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  check(bool(f), "cannot open ", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Only an empty normalizer is supported: DeepSeek's files have `Sequence []`.
void check_normalizer(const json& n) {
  if (n.is_null()) return;
  std::string type = n.value("type", "");
  check(type == "Sequence", "normalizer type '", type, "' is not supported (only none / empty Sequence)");
  for (auto& sub : n.at("normalizers")) check_normalizer(sub);
}

void check_decoder(const json& d) {
  check(!d.is_null(), "decoder: missing (a byte-level tokenizer needs the ByteLevel decoder)");
  std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (auto& sub : d.at("decoders")) check_decoder(sub);
    return;
  }
  check(type == "ByteLevel", "decoder type '", type, "' is not supported (only ByteLevel)");
}

// Template ids of the post-processor around the single sequence $A.
void read_post_processor(const json& p, std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (p.is_null()) return;
  std::string type = p.value("type", "");
  if (type == "ByteLevel") return;  // only touches offsets
  if (type == "Sequence") {
    for (auto& sub : p.at("processors")) read_post_processor(sub, prefix, suffix);
    return;
  }
  check(type == "TemplateProcessing", "post_processor type '", type, "' is not supported");
  bool after = false;
  for (auto& item : p.at("single")) {
    if (item.contains("Sequence")) {
      after = true;
    } else {
      std::string name = item.at("SpecialToken").at("id");
      for (int32_t id : p.at("special_tokens").at(name).at("ids")) (after ? suffix : prefix).push_back(id);
    }
  }
}

std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  if (cfg[key].is_string()) return cfg[key].get<std::string>();
  return cfg[key].value("content", std::string());
}

std::atomic<uint64_t> next_uid{1};

// Per-thread cache of BPE results per pre-token: where the speed on natural text comes from.
struct WordCache {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, Hash, std::equal_to<>> map;
  std::vector<int32_t> ids;  // the cached results, back to back
};

WordCache& cache_for(uint64_t uid) {
  thread_local std::array<WordCache, 4> caches;
  thread_local size_t victim = 0;
  for (auto& c : caches)
    if (c.owner == uid) return c;
  WordCache& c = caches[victim++ % caches.size()];
  c.owner = uid;
  c.map.clear();
  c.ids.clear();
  return c;
}

constexpr size_t kMaxCachedWord = 64;       // longer pieces are rare and would bloat the cache
constexpr size_t kMaxCacheEntries = 1 << 16;  // ~5 MB per thread at most

size_t first_invalid_utf8(std::string_view s) {
  auto p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, n = s.size();
  while (i < n) {
    while (i + 8 <= n) {  // skip ASCII eight bytes at a time
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    Utf8Step st = utf8_step(p + i, n - i);
    if (st.kind != Utf8Step::kChar) return i;
    i += st.len;
  }
  return std::string::npos;
}

}  // namespace

const TokenizerData& Tokenizer::data() const {
  check(d_ != nullptr, "tokenizer: used before Tokenizer::load");
  return *d_;
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  check(fs::exists(p), "tokenizer: '", path, "' does not exist");
  fs::path file = fs::is_directory(p) ? p / "tokenizer.json" : p;
  check(fs::exists(file), "tokenizer: no tokenizer.json in folder '", path, "'");
  fs::path cfg = file.parent_path() / "tokenizer_config.json";
  std::string cfg_text = fs::exists(cfg) ? read_file(cfg) : std::string();
  return from_json(read_file(file), cfg_text, file.string());
}

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view config_text, const std::string& origin) {
  auto d = std::make_shared<TokenizerData>();
  d->uid = next_uid++;
  d->origin = origin;
  json j, cfg;
  try {
    j = json::parse(text);
    if (!config_text.empty()) cfg = json::parse(config_text);
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON: ", e.what());
  }
  try {
    check(j.is_object() && j.contains("model"), "no 'model' section (is this a tokenizer.json?)");
    const json& model = j["model"];
    check(model.value("type", "BPE") == "BPE", "model type '", model.value("type", ""), "' is not supported (only BPE)");
    check(!model.value("byte_fallback", false), "BPE byte_fallback is not supported");
    check(model.value("continuing_subword_prefix", json()).is_null() && model.value("end_of_word_suffix", json()).is_null(),
          "BPE continuing_subword_prefix / end_of_word_suffix are not supported");
    check(model.value("dropout", json()).is_null(), "BPE dropout is not supported");
    check_normalizer(j.value("normalizer", json()));
    check_decoder(j.value("decoder", json()));
    d->pre = PreTokenizer::from_json(j.value("pre_tokenizer", json()));
    check(d->pre.byte_level(), "pre_tokenizer has no ByteLevel step: only byte-level BPE is supported");
    read_post_processor(j.value("post_processor", json()), d->prefix, d->suffix);

    // Ids: the model vocab, then added tokens (which may repeat vocab ids).
    int32_t max_id = -1;
    // An id must be an integer below 2^24: a float or a huge id would be UB or allocate the machine away.
    auto token_id = [](const json& v, const std::string& tok) {
      check(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t{1} << 24), "token '", tok,
            "' has id ", v.dump(), ": ids must be integers in [0, 16777216)");
      return static_cast<int32_t>(v.get<int64_t>());
    };
    for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it)
      max_id = std::max(max_id, token_id(it.value(), it.key()));
    std::vector<AddedToken> added;
    for (auto& a : j.value("added_tokens", json::array())) {
      AddedToken t;
      t.content = a.at("content");
      t.id = token_id(a.at("id"), t.content);
      t.special = a.value("special", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      t.single_word = a.value("single_word", false);
      check(t.id >= 0, "added token '", t.content, "' has a negative id");
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }
    size_t n = size_t(max_id + 1);
    d->strings.resize(n);
    d->bytes.resize(n);
    d->flags.assign(n, 0);
    std::unordered_map<std::string, int32_t> bpe_vocab;  // raw bytes -> id
    for (auto& [tok, idj] : model.at("vocab").items()) {
      int32_t id = idj;
      check(id >= 0, "vocab token has negative id ", id);
      d->strings[id] = tok;
      d->flags[id] |= kHas;
      std::string raw;
      if (byte_level_decode(tok, raw)) bpe_vocab.emplace(raw, id), d->bytes[id] = raw;
      else d->bytes[id] = tok;  // not a byte-level string: the decoder passes it through as is
      d->by_string.emplace(tok, id);
    }
    std::vector<AddedToken> raw_set, norm_set;
    for (auto& t : added) {
      d->strings[t.id] = t.content;
      d->flags[t.id] |= kHas | kAdded | (t.special ? kSpecial : 0);
      std::string raw;
      d->bytes[t.id] = byte_level_decode(t.content, raw) ? raw : t.content;
      d->by_string[t.content] = t.id;  // added tokens win over the vocab, as in HF
      (t.normalized ? norm_set : raw_set).push_back(t);
    }
    d->raw_tokens = std::make_unique<AddedTokenMatcher>(raw_set);
    d->normalized_tokens = std::make_unique<AddedTokenMatcher>(norm_set);

    std::vector<std::pair<std::string, std::string>> merges;
    const json& mj = model.value("merges", json::array());
    merges.reserve(mj.size());
    for (size_t r = 0; r < mj.size(); ++r) {
      std::string a, b;
      if (mj[r].is_string()) {  // "a b" (older files) or ["a", "b"] (newer)
        const std::string& s = mj[r].get_ref<const std::string&>();
        size_t sp = s.find(' ');
        check(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, "merge #", r, " '", s, "' is not 'a b'");
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else {
        check(mj[r].is_array() && mj[r].size() == 2, "merge #", r, " is not a pair");
        a = mj[r][0], b = mj[r][1];
      }
      std::string ra, rb;
      check(byte_level_decode(a, ra) && byte_level_decode(b, rb), "merge #", r, " is not byte-level text");
      merges.emplace_back(std::move(ra), std::move(rb));
    }
    d->bpe = std::make_unique<BpeModel>(std::move(bpe_vocab), merges, model.value("ignore_merges", false));

    auto id_of = [&](const std::optional<std::string>& s) -> std::optional<int32_t> {
      if (!s) return std::nullopt;
      auto it = d->by_string.find(*s);
      check(it != d->by_string.end(), "tokenizer_config.json names token '", *s, "' that is not in the vocab");
      return it->second;
    };
    if (cfg.is_object()) {
      d->bos = id_of(config_token(cfg, "bos_token"));
      d->eos = id_of(config_token(cfg, "eos_token"));
      d->add_bos = cfg.value("add_bos_token", false) && d->bos;
      d->add_eos = cfg.value("add_eos_token", false) && d->eos;
    }
  } catch (const json::exception& e) {
    fail(origin, ": unexpected tokenizer.json layout: ", e.what());
  } catch (const Error& e) {
    fail(origin, ": ", e.what());
  }
  Tokenizer t;
  t.d_ = std::move(d);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_into(text, add_special_tokens, out);
  return out;
}

void Tokenizer::encode_into(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  encode_impl(text, add_special_tokens, true, out);
}

std::vector<int32_t> Tokenizer::encode_plain(std::string_view text) const {
  std::vector<int32_t> out;
  encode_impl(text, false, false, out);
  return out;
}

void Tokenizer::encode_impl(std::string_view text, bool add_special_tokens, bool match_added,
                            std::vector<int32_t>& out) const {
  const TokenizerData& d = data();
  check(text.size() < (size_t(1) << 32), "encode: text longer than 4 GiB");
  size_t bad = first_invalid_utf8(text);
  check(bad == std::string::npos, "encode: text is not valid UTF-8 (byte offset ", bad, ")");
  size_t start = out.size();
  if (add_special_tokens) out.insert(out.end(), d.prefix.begin(), d.prefix.end());
  thread_local std::vector<Segment> raw_segs, segs;
  thread_local std::vector<Piece> pieces, scratch;
  raw_segs.clear();
  if (match_added) d.raw_tokens->split(text, 0, uint32_t(text.size()), raw_segs);
  else raw_segs.push_back({0, uint32_t(text.size()), -1});
  WordCache& cache = cache_for(d.uid);
  for (const Segment& rs : raw_segs) {
    if (rs.id >= 0) {
      out.push_back(rs.id);
      continue;
    }
    segs.clear();
    if (match_added) d.normalized_tokens->split(text, rs.begin, rs.end, segs);
    else segs.push_back(rs);
    for (const Segment& s : segs) {
      if (s.id >= 0) {
        out.push_back(s.id);
        continue;
      }
      std::string_view seg = text.substr(s.begin, s.end - s.begin);
      d.pre.split(seg, pieces, scratch);
      for (const Piece& p : pieces) {
        std::string_view w = seg.substr(p.begin, p.end - p.begin);
        if (w.size() > kMaxCachedWord) {
          d.bpe->encode_word(w, out);
          continue;
        }
        auto it = cache.map.find(w);
        if (it != cache.map.end()) {
          out.insert(out.end(), cache.ids.begin() + it->second.first,
                     cache.ids.begin() + it->second.first + it->second.second);
          continue;
        }
        size_t before = out.size();
        d.bpe->encode_word(w, out);
        if (cache.map.size() >= kMaxCacheEntries) cache.map.clear(), cache.ids.clear();
        cache.map.emplace(std::string(w), std::make_pair(uint32_t(cache.ids.size()), uint32_t(out.size() - before)));
        cache.ids.insert(cache.ids.end(), out.begin() + before, out.end());
      }
    }
  }
  if (add_special_tokens) {
    out.insert(out.end(), d.suffix.begin(), d.suffix.end());
    // tokenizer_config.json's add_bos_token / add_eos_token (transformers' Llama tokenizers).
    if (d.add_bos && (out.size() == start || out[start] != *d.bos)) out.insert(out.begin() + start, *d.bos);
    if (d.add_eos && (out.size() == start || out.back() != *d.eos)) out.push_back(*d.eos);
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerData& d = data();
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= d.flags.size() || !(d.flags[id] & kHas)) continue;  // HF skips unknown ids
    if (skip_special_tokens && (d.flags[id] & kSpecial)) continue;
    raw += d.bytes[id];
  }
  return utf8_lossy(raw);
}

int64_t Tokenizer::vocab_size() const { return int64_t(data().flags.size()); }

const std::string& Tokenizer::token_bytes(int32_t id) const {
  check(id >= 0 && size_t(id) < data().bytes.size(), "token id ", id, " out of range [0, ", data().bytes.size(), ")");
  return data().bytes[id];
}

const std::string& Tokenizer::token_string(int32_t id) const {
  check(id >= 0 && size_t(id) < data().strings.size(), "token id ", id, " out of range [0, ", data().strings.size(), ")");
  return data().strings[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < data().flags.size() && (data().flags[id] & kSpecial);
}

bool Tokenizer::is_added(int32_t id) const {
  return id >= 0 && size_t(id) < data().flags.size() && (data().flags[id] & kAdded);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = data().by_string.find(std::string(token));
  if (it == data().by_string.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Tokenizer::bos_id() const { return data().bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return data().eos; }
bool Tokenizer::add_bos_token() const { return data().add_bos; }

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tok, bool skip_special_tokens)
    : tok_(std::move(tok)), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (id < 0 || id >= tok_.vocab_size()) return {};
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  // Emit every complete character (and every sequence that can never become valid, as U+FFFD);
  // keep a trailing incomplete sequence for the next token.
  std::string out;
  auto p = reinterpret_cast<const unsigned char*>(pending_.data());
  size_t i = 0, n = pending_.size();
  while (i < n) {
    Utf8Step s = utf8_step(p + i, n - i);
    if (s.kind == Utf8Step::kIncomplete) break;
    if (s.kind == Utf8Step::kChar) out.append(pending_, i, s.len);
    else out += "\xEF\xBF\xBD";
    i += s.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace deepinfer::tokenizer
