// deepinfer._core: the C++ engine for the Python package (python/deepinfer/). The Python side
// owns the vLLM-shaped classes; this layer converts plain dicts and releases the GIL in step().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/env.h"
#include "core/error.h"
#include "deepinfer/llm.h"
#include "engine/engine.h"
#include "engine/hub.h"

namespace py = pybind11;
using namespace deepinfer;

namespace {

template <typename T>
void get(const py::dict& d, const char* key, T& out) {
  if (d.contains(key) && !d[key].is_none()) out = d[key].cast<T>();
}

SamplingParams params_from_dict(const py::dict& d) {
  SamplingParams p;
  get(d, "n", p.n);
  get(d, "temperature", p.temperature);
  get(d, "top_p", p.top_p);
  get(d, "top_k", p.top_k);
  get(d, "min_p", p.min_p);
  get(d, "repetition_penalty", p.repetition_penalty);
  get(d, "presence_penalty", p.presence_penalty);
  get(d, "frequency_penalty", p.frequency_penalty);
  get(d, "logit_bias", p.logit_bias);
  if (d.contains("seed") && !d["seed"].is_none()) p.seed = d["seed"].cast<uint64_t>();
  get(d, "max_tokens", p.max_tokens);
  get(d, "min_tokens", p.min_tokens);
  get(d, "stop", p.stop);
  get(d, "stop_token_ids", p.stop_token_ids);
  get(d, "include_stop_str_in_output", p.include_stop_str_in_output);
  get(d, "ignore_eos", p.ignore_eos);
  if (d.contains("logprobs") && !d["logprobs"].is_none()) p.logprobs = d["logprobs"].cast<int>();
  if (d.contains("prompt_logprobs") && !d["prompt_logprobs"].is_none()) p.prompt_logprobs = d["prompt_logprobs"].cast<int>();
  get(d, "skip_special_tokens", p.skip_special_tokens);
  get(d, "detokenize", p.detokenize);
  get(d, "so_args", p.so_args);
  return p;
}

py::list logprobs_to_py(const std::vector<PositionLogprobs>& lps) {
  py::list out;
  for (auto& pos : lps) {
    py::list entries;
    for (auto& e : pos) entries.append(py::make_tuple(e.token_id, e.logprob, e.rank));
    out.append(entries);
  }
  return out;
}

py::dict output_to_py(const RequestOutput& o) {
  py::dict d;
  d["request_id"] = o.request_id;
  d["prompt"] = o.prompt;
  d["prompt_token_ids"] = o.prompt_token_ids;
  d["prompt_logprobs"] = logprobs_to_py(o.prompt_logprobs);
  d["finished"] = o.finished;
  d["error"] = o.error;
  py::list outs;
  for (auto& c : o.outputs) {
    py::dict x;
    x["index"] = c.index;
    x["text"] = c.text;
    x["token_ids"] = c.token_ids;
    x["cumulative_logprob"] = c.cumulative_logprob;
    x["logprobs"] = logprobs_to_py(c.logprobs);
    x["finish_reason"] = c.finish_reason;
    if (c.stop_string) x["stop_reason"] = *c.stop_string;
    else if (c.stop_token) x["stop_reason"] = *c.stop_token;
    else x["stop_reason"] = py::none();
    outs.append(x);
  }
  d["outputs"] = outs;
  return d;
}

EngineConfig config_from_dict(const std::string& model, const py::dict& d) {
  EngineConfig c;
  c.model = model;
  get(d, "tokenizer", c.tokenizer);
  get(d, "max_num_seqs", c.max_num_seqs);
  get(d, "max_num_batched_tokens", c.max_num_batched_tokens);
  get(d, "max_model_len", c.max_model_len);
  get(d, "state_memory_bytes", c.state_memory_bytes);
  get(d, "num_state_blocks", c.num_state_blocks);
  if (d.contains("async_scheduling") && !d["async_scheduling"].is_none()) c.async_scheduling = d["async_scheduling"].cast<bool>();
  if (d.contains("batch_invariant") && !d["batch_invariant"].is_none()) c.batch_invariant = d["batch_invariant"].cast<bool>();
  get(d, "seed", c.seed);
  return c;
}

}  // namespace

void bind_chat(py::module_& m);  // chat_binding.cpp

PYBIND11_MODULE(_core, m) {
  m.doc() = "DeepInfer's C++ engine (use the deepinfer package, not this module)";
  py::register_exception<Error>(m, "DeepInferError", PyExc_ValueError);

  m.def("validate_params", [](const py::dict& d) { params_from_dict(d).validate(); });
  m.def("resolve_model", &engine::resolve_model, py::arg("name"), py::arg("revision") = "main",
        py::call_guard<py::gil_scoped_release>());
  bind_chat(m);
  m.def("env_vars", [] {
    py::list out;
    for (auto& v : env_vars()) out.append(py::make_tuple(v.name, v.default_value, v.meaning));
    return out;
  });

  py::class_<LLM>(m, "Engine")
      .def(py::init([](const std::string& model, const py::dict& config) {
             EngineConfig c = config_from_dict(model, config);
             py::gil_scoped_release release;
             return std::make_unique<LLM>(c);
           }),
           py::arg("model"), py::arg("config"))
      .def("add_request",
           [](LLM& llm, const std::string& text, const std::vector<int32_t>& ids, const py::dict& params,
              const std::string& request_id) {
             Prompt p{text, ids};
             return llm.engine().add_request(p, params_from_dict(params), request_id);
           },
           py::arg("text"), py::arg("token_ids"), py::arg("params"), py::arg("request_id") = "")
      .def("abort", [](LLM& llm, const std::string& id) { llm.engine().abort(id); })
      .def("step",
           [](LLM& llm, bool include_unfinished) {
             std::vector<RequestOutput> outs;
             {
               py::gil_scoped_release release;  // other Python threads run while the engine works
               outs = llm.engine().step(include_unfinished);
             }
             py::list l;
             for (auto& o : outs) l.append(output_to_py(o));
             return l;
           },
           py::arg("include_unfinished") = false)
      .def("has_unfinished", [](LLM& llm) { return llm.engine().has_unfinished(); })
      .def("has_tokenizer", [](LLM& llm) { return llm.engine().codec() != nullptr; })
      .def("encode",
           [](LLM& llm, const std::string& text) {
             check(llm.engine().codec(), "this model has no tokenizer");
             return llm.engine().codec()->encode(text);
           })
      .def("decode",
           [](LLM& llm, const std::vector<int32_t>& ids, bool skip_special) {
             check(llm.engine().codec(), "this model has no tokenizer");
             return llm.engine().codec()->decode(ids, skip_special);
           },
           py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("encode_chat",
           [](LLM& llm, const std::vector<std::pair<std::string, std::string>>& messages, bool thinking,
              const std::string& reasoning_effort, bool add_generation_prompt) {
             check(llm.engine().codec(), "chat needs a tokenizer, and this model has none");
             std::vector<ChatMessage> msgs;
             for (auto& [role, content] : messages) msgs.push_back({role, content});
             return llm.engine().codec()->encode_chat(msgs, {thinking, reasoning_effort, add_generation_prompt});
           },
           py::arg("messages"), py::arg("thinking") = false, py::arg("reasoning_effort") = "",
           py::arg("add_generation_prompt") = true)
      .def("vocab_size", [](LLM& llm) { return llm.engine().model().vocab_size(); })
      .def("max_model_len", [](LLM& llm) { return llm.engine().options().max_model_len; })
      .def("model_dir", &LLM::model_dir)
      .def("stats", [](LLM& llm) {
        auto s = llm.engine().stats();
        py::dict d;
        d["steps"] = s.steps;
        d["forward_tokens"] = s.forward_tokens;
        d["preemptions"] = s.preemptions;
        d["failed_batches"] = s.failed_batches;
        d["max_seqs_in_step"] = s.max_seqs_in_step;
        return d;
      })
      .def("options", [](LLM& llm) {
        auto& o = llm.engine().options();
        py::dict d;
        d["async_scheduling"] = o.async_scheduling;
        d["batch_invariant"] = o.batch_invariant;
        d["max_num_seqs"] = o.max_num_seqs;
        d["max_num_batched_tokens"] = o.max_num_batched_tokens;
        d["num_state_blocks"] = o.num_state_blocks;
        d["state_block_bytes"] = llm.engine().state_block_bytes();
        d["eos_token_ids"] = o.eos_token_ids;
        return d;
      });
}
