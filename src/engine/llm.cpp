// The public LLM: resolves and loads the model and tokenizer, then drives the engine.
#include "deepinfer/llm.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/env.h"
#include "core/error.h"
#include "engine/data_parallel.h"
#include "engine/engine.h"
#include "engine/hub.h"
#include "ops/ops.h"

#ifdef DEEPINFER_HAVE_MODEL_LOADER
#include "model/load.h"
#endif
#ifdef DEEPINFER_HAVE_TOKENIZER
#include "tokenizer/tokenizer.h"
#if __has_include("tokenizer/chat_encoding.h")
#include "engine/chat_messages.h"
#include "tokenizer/chat_encoding.h"
#define DEEPINFER_HAVE_CHAT_ENCODING 1
#endif
#endif

namespace fs = std::filesystem;

namespace deepinfer {
namespace {

#ifdef DEEPINFER_HAVE_TOKENIZER
class TokenizerCodec : public engine::TextCodec {
 public:
  explicit TokenizerCodec(tokenizer::Tokenizer tok) : tok_(std::move(tok)) {}
  std::vector<int32_t> encode(const std::string& text) const override { return tok_.encode(text, true); }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override { return tok_.decode(ids, skip_special); }
  std::vector<std::string> token_bytes() const override {
    std::vector<std::string> out(tok_.vocab_size());
    for (int32_t i = 0; i < static_cast<int32_t>(out.size()); ++i)
      if (!tok_.is_special(i)) out[i] = tok_.token_bytes(i);
    return out;
  }
#ifdef DEEPINFER_HAVE_CHAT_ENCODING
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages, const ChatOptions& o) const override {
    std::vector<tokenizer::Message> msgs = engine::encoding_messages(messages, o.tools, format_);
    tokenizer::ChatOptions opts;
    opts.thinking = o.thinking;
    opts.reasoning_effort = o.reasoning_effort;
    opts.add_generation_prompt = o.add_generation_prompt;
    opts.special_tokens_in_content = o.special_tokens_in_content;
    opts.image_token_id = image_token_id_;
    return tokenizer::encode_chat(tok_, format_, msgs, opts);  // the rendered text carries BOS and the role tokens
  }
  tokenizer::ChatFormat format_ = tokenizer::ChatFormat::kV4;
  std::optional<int32_t> image_token_id_;  // config.json's, for image parts
#endif

 private:
  tokenizer::Tokenizer tok_;
};
#endif

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return nlohmann::json::object();
  auto j = nlohmann::json::parse(f, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

// The checkpoint's EOS ids, read where the model's config loader reads (and checks) them: a V4.1
// folder's text_config when it has them, else the root. Never converted silently: a value that is
// not a token id (2.5, "1", 2^32 + 1) is an error naming the file.
std::vector<int32_t> eos_ids_of(const nlohmann::json& cfg) {
  const nlohmann::json* j = &cfg;
  auto text = cfg.find("text_config");
  if (text != cfg.end() && text->is_object() && text->contains("eos_token_id")) j = &*text;
  std::vector<int32_t> out;
  auto e = j->find("eos_token_id");
  if (e == j->end() || e->is_null()) return out;
  auto one = [&](const nlohmann::json& v) {
    const double d = v.is_number() ? v.get<double>() : -1.0;
    check(d >= 0 && d <= std::numeric_limits<int32_t>::max() && d == std::floor(d),
          "config.json: eos_token_id must be a token id or a list of token ids, got ", v.dump());
    out.push_back(static_cast<int32_t>(d));
  };
  if (e->is_array()) {
    for (auto& v : *e) one(v);
  } else {
    one(*e);
  }
  return out;
}

// context_length: the checkpoint's max_position_embeddings (0: unknown, e.g. a model built in memory).
// lockstep: a rank of expert parallelism (a forward every step, one step at a time).
std::unique_ptr<engine::Engine> make_engine(std::unique_ptr<model::CausalLM> model,
                                            std::unique_ptr<engine::TextCodec> codec, EngineConfig config,
                                            const nlohmann::json& model_config, int64_t context_length,
                                            bool lockstep = false) {
  engine::EngineOptions o = engine::resolve_options(config);
  if (lockstep) {
    // Speculation keeps one forward per step (verification rides in it; the DSpark layers hold all
    // their experts, so drafting needs no other rank); its start-up profile runs on all ranks at once.
    // Async scheduling stays as configured: each rank then keeps one forward in flight (engine.cpp).
    o.lockstep = true;
  }
  if (config.max_model_len <= 0) {
    o.max_model_len = context_length > 0 ? context_length : 4096;
  } else if (context_length > 0) {
    check(config.max_model_len <= context_length || config.allow_long_max_model_len, "max_model_len = ",
          config.max_model_len, " is above the model's max_position_embeddings = ", context_length,
          " (config.json); positions past it were never trained. Pass allow_long_max_model_len=True to run anyway");
  }
  if (o.eos_token_ids.empty()) o.eos_token_ids = eos_ids_of(model_config);
  for (int32_t e : o.eos_token_ids)
    check(e >= 0 && e < model->vocab_size(), "eos_token_ids: ", e, " is outside the vocabulary [0, ", model->vocab_size(), ")");
  if (o.num_state_blocks <= 0) {
    int64_t bytes = config.state_memory_bytes >= 0 ? config.state_memory_bytes
                                                   : env_int("DEEPINFER_STATE_MEMORY_MB") << 20;
    if (bytes > 0) o.num_state_blocks = cache::blocks_for_budget(bytes, model->state_block_bytes());
  }
  return std::make_unique<engine::Engine>(std::move(model), std::move(codec), o);
}

}  // namespace

LLM::LLM(EngineConfig config) {
  check(!config.model.empty(), "LLM: no model given");
  model_dir_ = engine::resolve_model(config.model);
  nlohmann::json cfg = read_json(fs::path(model_dir_) / "config.json");
  if (!cfg.is_object()) cfg = nlohmann::json::object();
  // Attention DP / MoE EP: one model per rank (docs/parallelism.md).
  const int dp = config.data_parallel_size > 0 ? config.data_parallel_size
                                               : static_cast<int>(env_int("DEEPINFER_DATA_PARALLEL_SIZE"));
  const bool ep = config.enable_expert_parallel.value_or(env_bool("DEEPINFER_ENABLE_EXPERT_PARALLEL"));
  check(config.data_parallel_size >= 0, "data_parallel_size must be >= 1, got ", config.data_parallel_size);
  const bool parallel = dp != 1 || ep;
  const int cp = engine::context_parallel_size(config);
  std::vector<std::unique_ptr<model::CausalLM>> models;
  engine::DataParallelModels ranks;
#ifdef DEEPINFER_HAVE_MODEL_LOADER
  if (parallel) {
    ranks = engine::load_data_parallel_models(model_dir_, config);
    models = std::move(ranks.models);
  } else if (cp > 1) {
    models.push_back(engine::load_context_parallel_model(model_dir_, config, cp));
  } else {
    models.push_back(model::load_causal_lm(model_dir_, config.device, config.load_format));
  }
  model::check_servable(model_dir_);
  const int64_t context_length = model::checkpoint_context_length(model_dir_);
#else
  fail("this build has no model loader (src/model/load.h)");
  const int64_t context_length = 0;
#endif
  auto make_codec = [&]() -> std::unique_ptr<engine::TextCodec> {
#ifdef DEEPINFER_HAVE_TOKENIZER
    fs::path tok_dir = config.tokenizer.empty() ? fs::path(model_dir_) : fs::path(config.tokenizer);
    if (fs::exists(tok_dir / "tokenizer.json") || fs::is_regular_file(tok_dir)) {
      auto tok = tokenizer::Tokenizer::load(tok_dir.string());
      if (config.eos_token_ids.empty() && eos_ids_of(cfg).empty() && tok.eos_id()) config.eos_token_ids = {*tok.eos_id()};
      auto c = std::make_unique<TokenizerCodec>(std::move(tok));
#ifdef DEEPINFER_HAVE_CHAT_ENCODING
      if (cfg.value("model_type", std::string()) == "deepseek_v41") c->format_ = tokenizer::ChatFormat::kV41;
      if (cfg.contains("image_token_id") && cfg["image_token_id"].is_number_integer())
        c->image_token_id_ = cfg["image_token_id"].get<int32_t>();
#endif
      return c;
    }
#endif
    return nullptr;
  };
  auto make_rank = [&](std::unique_ptr<model::CausalLM> m) {
    auto e = make_engine(std::move(m), make_codec(), config, cfg, context_length, ep);
    // The vision stage runs on the model's device.
    e->set_vision(vision::VisionStage::load(model_dir_, ops::backend_for(Device::resolve(config.device))));
    return e;
  };
  if (!parallel) {
    engine_ = make_rank(std::move(models.at(0)));
    return;
  }
  std::vector<std::unique_ptr<engine::Engine>> others = engine::make_rank_engines(std::move(models), ranks.group.get(), make_rank);
  engine_ = std::move(others.front());
  others.erase(others.begin());
  engine_->set_data_parallel(std::make_unique<engine::DataParallelGroup>(*engine_, std::move(others), std::move(ranks)));
}

LLM::LLM(std::unique_ptr<model::CausalLM> model, EngineConfig config) {
  engine_ = make_engine(std::move(model), nullptr, config, nlohmann::json::object(), 0);
}

LLM::LLM(std::unique_ptr<model::CausalLM> model, std::unique_ptr<engine::TextCodec> codec, EngineConfig config) {
  engine_ = make_engine(std::move(model), std::move(codec), config, nlohmann::json::object(), 0);
}

LLM::~LLM() = default;

engine::Engine& LLM::engine() { return *engine_; }
std::string LLM::model_dir() const { return model_dir_; }

std::vector<RequestOutput> LLM::generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                                         const StreamCallback& on_update) {
  check(params.size() == 1 || params.size() == prompts.size(), "generate: got ", params.size(),
        " SamplingParams for ", prompts.size(), " prompts (give one, or one per prompt)");
  std::lock_guard<std::mutex> lock(*generate_mu_);  // step() outputs belong to this call's requests
  // Validate everything before anything runs, so bad input never half-runs a batch.
  for (auto& p : params) p.validate();
  engine_->claim_driver();  // step() from another thread is refused until this call returns
  struct Release {
    engine::Engine& e;
    ~Release() { e.release_driver(); }
  } release{*engine_};
  std::vector<std::string> ids;
  try {
    for (size_t i = 0; i < prompts.size(); ++i)
      ids.push_back(engine_->add_request(prompts[i], params[params.size() == 1 ? 0 : i]));
  } catch (const Error& e) {
    for (auto& id : ids) engine_->abort(id);
    while (engine_->has_unfinished()) engine_->step();
    fail("prompt ", ids.size(), ": ", e.what());
  }
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::vector<RequestOutput> results(ids.size());
  std::vector<RequestOutput> foreign;  // requests added by someone else: theirs, handed back
  size_t done = 0;
  while (done < ids.size() && engine_->has_unfinished()) {
    for (auto& out : engine_->step(static_cast<bool>(on_update))) {
      auto it = index.find(out.request_id);
      if (it == index.end()) {
        if (out.finished) foreign.push_back(std::move(out));
        continue;
      }
      if (on_update) on_update(out);
      if (out.finished) results[it->second] = std::move(out), ++done;
    }
  }
  engine_->return_outputs(std::move(foreign));
  return results;
}

std::vector<RequestOutput> LLM::chat(const std::vector<std::vector<ChatMessage>>& conversations,
                                     const std::vector<SamplingParams>& params, const ChatOptions& options,
                                     const StreamCallback& on_update) {
  check(engine_->codec() != nullptr, "chat needs a tokenizer, and this model has none");
  std::vector<Prompt> prompts;
  for (auto& conv : conversations) {
    prompts.push_back(Prompt::from_ids(engine_->codec()->encode_chat(conv, options)));
    prompts.back().images = chat_images(conv);
  }
  return generate(prompts, params, on_update);
}

}  // namespace deepinfer
