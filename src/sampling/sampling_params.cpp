// SamplingParams::validate (declared in the public header).
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

void SamplingParams::validate() const {
  check(n >= 1, "SamplingParams.n must be at least 1, got ", n);
  check(std::isfinite(temperature) && temperature >= 0, "SamplingParams.temperature must be >= 0, got ", temperature);
  check(top_p > 0 && top_p <= 1, "SamplingParams.top_p must be in (0, 1], got ", top_p);
  check(top_k >= -1, "SamplingParams.top_k must be -1, 0 (off) or positive, got ", top_k);
  check(min_p >= 0 && min_p <= 1, "SamplingParams.min_p must be in [0, 1], got ", min_p);
  check(std::isfinite(repetition_penalty) && repetition_penalty > 0,
        "SamplingParams.repetition_penalty must be > 0, got ", repetition_penalty);
  check(presence_penalty >= -2 && presence_penalty <= 2, "SamplingParams.presence_penalty must be in [-2, 2], got ", presence_penalty);
  check(frequency_penalty >= -2 && frequency_penalty <= 2, "SamplingParams.frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  check(max_tokens >= 1, "SamplingParams.max_tokens must be at least 1, got ", max_tokens);
  check(min_tokens >= 0 && min_tokens <= max_tokens, "SamplingParams.min_tokens must be in [0, max_tokens], got ", min_tokens);
  for (const auto& s : stop) check(!s.empty(), "SamplingParams.stop must not contain an empty string");
  check(detokenize || stop.empty(), "SamplingParams.stop needs detokenize=True (stop strings are matched in the text)");
  if (logprobs) check(*logprobs >= 0, "SamplingParams.logprobs must be >= 0, got ", *logprobs);
  if (prompt_logprobs) check(*prompt_logprobs >= 0, "SamplingParams.prompt_logprobs must be >= 0, got ", *prompt_logprobs);
  for (auto [t, b] : logit_bias) {
    check(t >= 0, "SamplingParams.logit_bias has a negative token id ", t);
    check(std::isfinite(b), "SamplingParams.logit_bias for token ", t, " is not finite");
  }
  if (!so_args.empty()) {
    auto j = nlohmann::json::parse(so_args, nullptr, false);
    check(!j.is_discarded() && j.is_object(), "SamplingParams.so_args must be a JSON object");
    check(j.contains("schema_type") && j["schema_type"].is_string(), "SamplingParams.so_args needs a string \"schema_type\"");
    std::string type = j["schema_type"];
    check(type == "regex" || type == "json" || type == "json_schema" || type == "ebnf" || type == "grammar" ||
              type == "json_object" || type == "choice",
          "SamplingParams.so_args.schema_type '", type, "' is not one of regex, json, json_schema, ebnf, grammar, json_object, choice");
    check(type == "json_object" || j.contains("schema"), "SamplingParams.so_args needs \"schema\" for schema_type '", type, "'");
  }
}

}  // namespace deepinfer
