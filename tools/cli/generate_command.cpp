// `deepinfer generate`: offline generation from the command line.
//   deepinfer generate --model DIR_OR_ID (--prompt TEXT | --prompt-ids 1,2,3)... [--chat]
//                      [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--seed S] [--json]
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "deepinfer/llm.h"
#include "engine/engine.h"
#include "vision/image_decode.h"

namespace deepinfer::cli {
namespace {

const char* kUsage =
    "usage: deepinfer generate --model DIR_OR_ID (--prompt TEXT | --prompt-ids 1,2,3) [--chat]\n"
    "                          [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
    "                          [--device cpu|cuda|cuda:N] [--load-format auto|dummy] [--image FILE ...]\n"
    "  --image: an image for the last --prompt, one per image placeholder token in it (V4.1 with a\n"
    "  vision tower: PNG, JPEG or WebP).\n"
    "                          [--thinking] [--ignore-eos] [--max-model-len N] [--json]\n"
    "                          [--json-schema FILE | --regex R | --grammar FILE]\n"
    "                          [--speculative [K]] [--speculative-schedule confidence|fixed]\n"
    "                          [--no-prefix-caching] [--no-async] [--no-device-sampling] [--stats]\n"
    "  --no-async: one step at a time (DEEPINFER_ASYNC_SCHEDULING=0); --no-device-sampling: every row's\n"
    "  logits come back and the host samples (DEEPINFER_DEVICE_SAMPLING=0); --stats: one JSON line on\n"
    "  stderr after the run (wall time, tokens/s, steps, rows drawn on the device, device idle per forward).\n"
    "                          [--dp N] [--ep] [--cp N] [--cp-layout zigzag|round_robin]\n"
    "  --dp N: N attention-DP engine ranks (CPU threads) in lock-step, requests spread by load;\n"
    "  --ep: the routed experts split over the ranks (MoE expert parallelism; EPLB with\n"
    "  DEEPINFER_EPLB_INTERVAL / DEEPINFER_EPLB_REDUNDANT_EXPERTS).\n"
    "  --cp N: balanced context parallelism, each forward's tokens split over N ranks (CPU threads);\n"
    "  with --dp M, M groups of N ranks; with --ep the experts split over all M x N ranks.\n"
    "  --speculative: DSpark drafting (V4.1), up to K draft tokens verified per step (default\n"
    "  DEEPINFER_USE_NEXTN_DECODE); --speculative-schedule: per-request lengths from the draft confidences\n"
    "  (default with DEEPINFER_ENABLE_MTP_VARLEN=1) or a fixed K.\n"
    "  --json-schema / --regex / --grammar (EBNF) constrain the output (structured output).\n"
    "  --prompt / --prompt-ids may repeat: one output per prompt, in order.\n"
    "  --chat renders each --prompt as a user message (DeepSeek chat format); --thinking: thinking mode.\n"
    "  --temperature 0 is greedy. --json prints one object per prompt:\n"
    "  {\"token_ids\": [...], \"text\": \"...\", \"finish_reason\": \"...\", \"metrics\": {\"speculative\": {...}}}\n";

// --stats: what the run cost, as one JSON line on stderr.
void print_stats(LLM& llm, const std::vector<RequestOutput>& outs, double seconds) {
  const engine::EngineStats s = llm.engine().stats();
  int64_t tokens = 0;
  for (const auto& o : outs)
    for (const auto& c : o.outputs) tokens += static_cast<int64_t>(c.token_ids.size());
  const nlohmann::json j = {
      {"wall_seconds", seconds},
      {"generated_tokens", tokens},
      {"tokens_per_second", seconds > 0 ? tokens / seconds : 0.0},
      {"steps", s.steps},
      {"forward_tokens", s.forward_tokens},
      {"device_drawn_rows", s.device_drawn_rows},
      {"device_idle_ms_per_forward", s.device_idle_forwards ? s.device_idle_ms / s.device_idle_forwards : -1.0},
      {"device_idle_ms", s.device_idle_ms}};
  std::cerr << j.dump() << "\n";
}

std::string read_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  check(in.good(), flag, ": cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --json-schema FILE, --regex R, --grammar FILE: one output constraint, passed on as so_args.
void set_constraint(SamplingParams& params, const std::string& flag, const std::string& value) {
  check(params.so_args.empty(), "only one of --json-schema, --regex and --grammar may be given");
  nlohmann::json so;
  if (flag == "--regex") {
    so = {{"schema_type", "regex"}, {"schema", value}};
  } else if (flag == "--grammar") {
    so = {{"schema_type", "ebnf"}, {"schema", read_file(flag, value)}};
  } else {
    nlohmann::json schema;
    try {
      schema = nlohmann::json::parse(read_file(flag, value));
    } catch (const nlohmann::json::exception& e) {
      fail(flag, ": '", value, "' is not valid JSON (", e.what(), ")");
    }
    so = {{"schema_type", "json"}, {"schema", schema}};
  }
  params.so_args = so.dump();
}

int run_generate(const std::vector<std::string>& args) {
  EngineConfig config;
  SamplingParams params;
  std::vector<Prompt> prompts;
  bool chat = false, json = false, stats = false;
  ChatOptions chat_options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (a == "--chat") { chat = true; continue; }
    if (a == "--json") { json = true; continue; }
    if (a == "--thinking") { chat_options.thinking = true; continue; }
    if (a == "--ignore-eos") { params.ignore_eos = true; continue; }
    if (a == "--no-prefix-caching") { config.enable_prefix_caching = false; continue; }
    if (a == "--no-async") { config.async_scheduling = false; continue; }
    if (a == "--no-device-sampling") { config.device_sampling = false; continue; }
    if (a == "--stats") { stats = true; continue; }
    if (a == "--ep") { config.enable_expert_parallel = true; continue; }
    if (a == "--speculative") {  // an optional count follows
      config.speculative.enabled = true;
      if (i + 1 < args.size() && !args[i + 1].empty() && std::isdigit(static_cast<unsigned char>(args[i + 1][0])))
        config.speculative.num_draft_tokens = static_cast<int>(parse_positive(a, args[++i]));
      continue;
    }
    check(i + 1 < args.size(), "option ", a, " needs a value (see deepinfer generate --help)");
    const std::string& v = args[++i];
    auto number = [&](auto parse) {
      try {
        return parse(v);
      } catch (...) {
        fail("option ", a, ": '", v, "' is not a number");
      }
    };
    if (a == "--model") config.model = v;
    else if (a == "--prompt") prompts.push_back(Prompt::from_text(v));
    else if (a == "--prompt-ids") prompts.push_back(Prompt::from_ids(parse_token_ids(a, v)));
    else if (a == "--max-tokens") params.max_tokens = number([](auto& s) { return std::stoi(s); });
    else if (a == "--temperature") params.temperature = number([](auto& s) { return std::stof(s); });
    else if (a == "--top-p") params.top_p = number([](auto& s) { return std::stof(s); });
    else if (a == "--top-k") params.top_k = number([](auto& s) { return std::stoi(s); });
    else if (a == "--seed") params.seed = number([](auto& s) { return std::stoull(s); });
    else if (a == "--json-schema" || a == "--regex" || a == "--grammar") set_constraint(params, a, v);
    else if (a == "--device") config.device = v;
    else if (a == "--load-format") config.load_format = v;
    else if (a == "--dp") config.data_parallel_size = static_cast<int>(parse_positive(a, v));
    else if (a == "--cp") config.context_parallel_size = static_cast<int>(parse_positive(a, v));
    else if (a == "--cp-layout") config.context_parallel_layout = v;
    else if (a == "--image") {  // the next image of the last prompt (one per image placeholder, in order)
      check(!prompts.empty(), "--image ", v, ": give the --prompt it belongs to first");
      prompts.back().images.push_back(vision::read_image_bytes(v));
    }
    else if (a == "--speculative-schedule") {
      check(v == "confidence" || v == "fixed", "--speculative-schedule: '", v, "' is not confidence or fixed");
      config.speculative.enabled = true;
      config.speculative.confidence_scheduling = v == "confidence";
    }
    else if (a == "--max-model-len") config.max_model_len = number([](auto& s) { return std::stoll(s); });
    else fail("unknown option ", a, " (see deepinfer generate --help)");
  }
  check(!config.model.empty(), "--model is required (see deepinfer generate --help)");
  check(!prompts.empty(), "give a prompt with --prompt TEXT or --prompt-ids 1,2,3");
  LLM llm(config);
  std::vector<RequestOutput> outs;
  const auto t0 = std::chrono::steady_clock::now();
  if (chat) {
    std::vector<std::vector<ChatMessage>> convs;
    for (auto& p : prompts) {
      check(!p.text.empty(), "--chat takes --prompt TEXT (the user message)");
      convs.push_back({{"user", p.text}});
    }
    outs = llm.chat(convs, {params}, chat_options);
  } else {
    outs = llm.generate(prompts, {params});
  }
  if (stats) print_stats(llm, outs, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  for (auto& o : outs) {
    const CompletionOutput& c = o.outputs.at(0);
    if (json) {
      nlohmann::json j = {{"token_ids", c.token_ids}, {"text", c.text}, {"finish_reason", c.finish_reason}};
      if (!o.error.empty()) j["error"] = o.error;
      const SpeculativeMetrics& m = o.metrics.speculative;
      j["metrics"]["speculative"] = {{"drafted", m.drafted},
                                     {"verified", m.verified},
                                     {"accepted", m.accepted},
                                     {"decode_steps", m.decode_steps},
                                     {"mean_accepted_length", m.mean_accepted_length()},
                                     {"acceptance_by_position", m.acceptance_by_position()}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (!c.text.empty()) {
      std::cout << c.text << "\n";
    } else {
      for (size_t i = 0; i < c.token_ids.size(); ++i) std::cout << (i ? "," : "") << c.token_ids[i];
      std::cout << "\n";
    }
    if (!o.error.empty()) std::cerr << "deepinfer generate: request " << o.request_id << " failed: " << o.error << "\n";
  }
  return 0;
}

const CommandRegistration registration({"generate", "generate text or token ids from prompts", run_generate});

}  // namespace
}  // namespace deepinfer::cli
