// Test driver for pytest: reads one JSON request per line on stdin, answers one JSON line.
//   {"cmd":"check","schema_type":..,"schema":..,"inputs":[[ids..],..]}  -> {"error":..,"results":[bool..]}
//       ("matches_nothing": true beside the error where the schema matches no instance)
//       an input passes when every token is accepted and the grammar can end afterwards
//   {"cmd":"sample","schema_type":..,"schema":..,"seed":1,"runs":20,"max_tokens":200}
//       -> {"outputs":[{"text":..,"finished":bool}..]}: random tokens drawn from the mask
//   {"cmd":"ebnf", ...} -> {"ebnf": the compiled grammar}
//   {"cmd":"eval", ...,"inputs":[[ids..],..]} -> "check" plus {"compile_ms":.., "compile_cpu_ms":..,
//       "mask_us":[..]}: the compile's wall and thread CPU time (DEEPINFER_CPU_THREADS=1 compiles on
//       this thread; CPU time stays meaningful on a loaded host), and the wall and thread CPU time of
//       every mask filled along the accepted inputs (bench/structured/eval_schemas.py)
// Options: "whitespace":"flexible", "strict":true, "documents":{uri: schema} (remote $ref targets). The vocabulary is the V3 one (test_vocab.h).
#include <chrono>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "structured/structured.h"
#include "test_vocab.h"

using namespace deepinfer::structured;
using nlohmann::json;

namespace {

SchemaArgs args_of(const json& req) {
  SchemaArgs a;
  a.schema_type = req.at("schema_type").get<std::string>();
  const json& s = req.value("schema", json(""));
  a.schema = s.is_string() ? s.get<std::string>() : s.dump();
  if (req.value("whitespace", "compact") == "flexible") a.whitespace = Whitespace::kFlexible;
  a.strict_additional_properties = req.value("strict", false);
  if (req.contains("documents"))
    for (auto& [uri, doc] : req["documents"].items()) a.documents[uri] = doc.is_string() ? doc.get<std::string>() : doc.dump();
  return a;
}

bool bit(const std::vector<uint32_t>& w, int32_t id) { return (w[id >> 5] >> (id & 31)) & 1; }

// Draws from the mask: a quarter of the time any allowed token, otherwise a short one (or the stop token),
// which keeps random walks from growing forever.
json sample(const std::shared_ptr<const CompiledGrammar>& g, uint64_t seed, int runs, int max_tokens) {
  const TokenVocab& v = g->vocab();
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> words((v.size() + 31) / 32);
  json outs = json::array();
  for (int r = 0; r < runs; ++r) {
    Matcher m(g);
    std::string text;
    bool finished = false;
    for (int step = 0; step < max_tokens && !finished; ++step) {
      m.fill_next_token_bitmask(words.data());
      std::vector<int32_t> all, small;
      for (int32_t id = 0; id < v.size(); ++id) {
        if (!bit(words, id)) continue;
        all.push_back(id);
        if (v.is_stop(id) || v.bytes(id).size() <= 1) small.push_back(id);
      }
      if (all.empty()) throw std::runtime_error("empty mask before the grammar ended: " + text);
      const auto& pool = (rng() % 4 == 0 || small.empty()) ? all : small;
      int32_t id = pool[rng() % pool.size()];
      if (!m.accept_token(id)) throw std::runtime_error("mask allowed token " + std::to_string(id) + " that accept_token rejects");
      if (v.is_stop(id)) finished = true;
      else text += v.bytes(id);
    }
    outs.push_back({{"text", text}, {"finished", finished}});
  }
  return outs;
}

double since_us(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

json handle(const json& req, const TokenVocab& vocab) {
  const std::string cmd = req.at("cmd").get<std::string>();
  std::shared_ptr<const CompiledGrammar> g;
  const double cpu0 = thread_cpu_ms();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    g = compile(args_of(req), vocab);
  } catch (const deepinfer::structured::SchemaMatchesNothing& e) {  // every instance invalid
    return {{"error", e.what()}, {"matches_nothing", true}, {"compile_ms", since_us(t0) / 1e3}};
  } catch (const deepinfer::Error& e) {
    return {{"error", e.what()}, {"compile_ms", since_us(t0) / 1e3}};
  }
  const double compile_ms = since_us(t0) / 1e3, compile_cpu_ms = thread_cpu_ms() - cpu0;
  if (cmd == "ebnf") return {{"ebnf", grammar_from_args(args_of(req)).to_ebnf()}, {"masks", g->num_masks()}, {"mem", g->memory_bytes()}, {"nodes", g->automaton().nodes.size()}};
  if (cmd == "sample")
    return {{"outputs", sample(g, req.value("seed", 1), req.value("runs", 10), req.value("max_tokens", 200))}};
  if (cmd == "check" || cmd == "eval") {
    const bool timed = cmd == "eval";
    std::vector<uint32_t> words((vocab.size() + 31) / 32);
    json results = json::array(), mask_us = json::array(), mask_cpu_us = json::array();
    for (const json& input : req.at("inputs")) {
      Matcher m(g);
      bool ok = true;
      for (const json& id : input) {
        if (timed) {
          const double c = thread_cpu_ms();
          const auto t = std::chrono::steady_clock::now();
          m.fill_next_token_bitmask(words.data());
          mask_us.push_back(since_us(t));
          mask_cpu_us.push_back((thread_cpu_ms() - c) * 1e3);
        }
        ok = ok && m.accept_token(id.get<int32_t>());
        if (!ok) break;
      }
      results.push_back(ok && m.can_end());
    }
    json out = {{"error", nullptr}, {"results", results}};
    if (timed) out.update({{"compile_ms", compile_ms}, {"compile_cpu_ms", compile_cpu_ms}, {"mask_us", mask_us}, {"mask_cpu_us", mask_cpu_us}, {"masks", g->num_masks()}});
    return out;
  }
  return {{"error", "unknown cmd " + cmd}};
}

}  // namespace

int main() {
  TokenVocab vocab = load_vocab();
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    json out;
    try {
      out = handle(json::parse(line), vocab);
    } catch (const std::exception& e) {
      out = {{"fatal", e.what()}};
    }
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  }
}
