// deepinfer._core: the C++ engine for the Python package (python/deepinfer/). The Python side
// owns the vLLM-shaped classes; this layer converts plain dicts and releases the GIL in step().
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <map>
#include <type_traits>

#include "core/env.h"
#include "core/error.h"
#include "deepinfer/llm.h"
#include "engine/engine.h"
#include "engine/hub.h"

namespace py = pybind11;
using namespace deepinfer;

namespace {

// Strict conversions with errors that name the argument (TypeError for the wrong type, ValueError
// for a value out of range), instead of pybind11's casting messages: no 1.7 -> 1, True -> 1, "12" -> 12.
[[noreturn]] void type_error(const std::string& what, const py::handle& v, const char* expected) {
  throw py::type_error(what + " must be " + expected + ", got " + std::string(py::str(py::type::of(v).attr("__name__"))));
}

bool is_int(const py::handle& v) { return PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr()); }

template <typename T>
T to_int(const py::handle& v, const std::string& what) {
  if (!is_int(v)) type_error(what, v, "an int");
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (std::is_unsigned_v<T> && overflow > 0) {  // above int64: maybe still a uint64
    const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (!PyErr_Occurred()) return static_cast<T>(u);
    PyErr_Clear();
  }
  if (overflow || x < static_cast<long long>(std::numeric_limits<T>::min()) ||
      (x > 0 && static_cast<unsigned long long>(x) > static_cast<unsigned long long>(std::numeric_limits<T>::max())))
    throw py::value_error(what + " = " + std::string(py::str(v)) + " is out of range [" +
                          std::to_string(std::numeric_limits<T>::min()) + ", " +
                          std::to_string(std::numeric_limits<T>::max()) + "]");
  return static_cast<T>(x);
}

std::string to_str(const py::handle& v, const std::string& what) {
  if (!PyUnicode_Check(v.ptr())) type_error(what, v, "a str");
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(v.ptr(), &n);
  if (!p) {
    PyErr_Clear();
    throw py::value_error(what + " is not valid Unicode (it holds a lone surrogate)");
  }
  return std::string(p, static_cast<size_t>(n));
}

template <typename T>
void convert(const py::handle& v, const std::string& what, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!PyBool_Check(v.ptr())) type_error(what, v, "a bool");
    out = v.ptr() == Py_True;
  } else if constexpr (std::is_integral_v<T>) {
    out = to_int<T>(v, what);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!(is_int(v) || PyFloat_Check(v.ptr()))) type_error(what, v, "a number");
    out = static_cast<T>(v.cast<double>());
  } else if constexpr (std::is_same_v<T, std::string>) {
    out = to_str(v, what);
  } else if constexpr (std::is_same_v<T, std::map<int32_t, float>>) {
    if (!PyDict_Check(v.ptr())) type_error(what, v, "a dict");
    out.clear();
    for (auto [k, x] : v.cast<py::dict>()) convert(x, what + "[" + std::string(py::str(k)) + "]", out[to_int<int32_t>(k, what + " key")]);
  } else {  // std::vector<...>
    if (!PyList_Check(v.ptr()) && !PyTuple_Check(v.ptr())) type_error(what, v, "a list");
    out.clear();
    size_t i = 0;
    for (auto x : v) convert(x, what + "[" + std::to_string(i++) + "]", out.emplace_back());
  }
}

template <typename T>
void get(const py::dict& d, const char* key, T& out, const char* owner = "SamplingParams") {
  if (d.contains(key) && !d[key].is_none()) convert(d[key], std::string(owner) + "." + key, out);
}

template <typename T>
void get(const py::dict& d, const char* key, std::optional<T>& out, const char* owner = "SamplingParams") {
  if (d.contains(key) && !d[key].is_none()) convert(d[key], std::string(owner) + "." + key, out.emplace());
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
  get(d, "seed", p.seed);
  get(d, "max_tokens", p.max_tokens);
  get(d, "min_tokens", p.min_tokens);
  get(d, "stop", p.stop);
  get(d, "stop_token_ids", p.stop_token_ids);
  get(d, "include_stop_str_in_output", p.include_stop_str_in_output);
  get(d, "ignore_eos", p.ignore_eos);
  get(d, "logprobs", p.logprobs);
  get(d, "prompt_logprobs", p.prompt_logprobs);
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
  const SpeculativeMetrics& m = o.metrics.speculative;
  py::dict spec;
  spec["drafted"] = m.drafted;
  spec["verified"] = m.verified;
  spec["accepted"] = m.accepted;
  spec["decode_steps"] = m.decode_steps;
  spec["verified_at"] = m.verified_at;
  spec["accepted_at"] = m.accepted_at;
  d["speculative"] = spec;
  d["num_cached_tokens"] = o.metrics.num_cached_tokens;
  return d;
}

EngineConfig config_from_dict(const std::string& model, const py::dict& d) {
  EngineConfig c;
  c.model = model;
  get(d, "tokenizer", c.tokenizer, "LLM");
  get(d, "device", c.device, "LLM");
  get(d, "load_format", c.load_format, "LLM");
  get(d, "max_num_seqs", c.max_num_seqs, "LLM");
  get(d, "max_num_batched_tokens", c.max_num_batched_tokens, "LLM");
  get(d, "max_model_len", c.max_model_len, "LLM");
  get(d, "allow_long_max_model_len", c.allow_long_max_model_len, "LLM");
  get(d, "state_memory_bytes", c.state_memory_bytes, "LLM");
  get(d, "num_state_blocks", c.num_state_blocks, "LLM");
  get(d, "max_logprobs", c.max_logprobs, "LLM");
  get(d, "async_scheduling", c.async_scheduling, "LLM");
  get(d, "batch_invariant", c.batch_invariant, "LLM");
  get(d, "device_sampling", c.device_sampling, "LLM");
  get(d, "seed", c.seed, "LLM");
  get(d, "enable_prefix_caching", c.enable_prefix_caching, "LLM");
  get(d, "prefix_block_tokens", c.prefix_block_tokens, "LLM");
  get(d, "data_parallel_size", c.data_parallel_size, "LLM");
  get(d, "enable_expert_parallel", c.enable_expert_parallel, "LLM");
  get(d, "context_parallel_size", c.context_parallel_size, "LLM");
  get(d, "context_parallel_layout", c.context_parallel_layout, "LLM");
  if (d.contains("speculative") && !d["speculative"].is_none()) {  // normalized by deepinfer/llm.py
    if (!PyDict_Check(d["speculative"].ptr())) type_error("LLM.speculative", d["speculative"], "a dict");
    py::dict s = d["speculative"];
    get(s, "enabled", c.speculative.enabled, "LLM.speculative");
    get(s, "num_draft_tokens", c.speculative.num_draft_tokens, "LLM.speculative");
    get(s, "confidence_scheduling", c.speculative.confidence_scheduling, "LLM.speculative");
    get(s, "step_costs", c.speculative.step_costs, "LLM.speculative");
    get(s, "log_steps", c.speculative.log_steps, "LLM.speculative");
  }
  // Given explicitly, these must mean what they say: C++'s "0 / -1 = default" is not for Python callers.
  auto positive = [&](const char* key, int64_t v, int64_t lo) {
    if (d.contains(key) && !d[key].is_none() && v < lo)
      throw py::value_error(std::string("LLM.") + key + " = " + std::to_string(v) + " must be >= " + std::to_string(lo));
  };
  positive("max_num_seqs", c.max_num_seqs, 1);
  positive("max_num_batched_tokens", c.max_num_batched_tokens, 1);
  positive("max_model_len", c.max_model_len, 2);
  positive("state_memory_bytes", c.state_memory_bytes, 0);
  positive("num_state_blocks", c.num_state_blocks, 1);
  positive("max_logprobs", c.max_logprobs, 0);
  positive("prefix_block_tokens", c.prefix_block_tokens, 1);
  positive("data_parallel_size", c.data_parallel_size, 1);
  positive("context_parallel_size", c.context_parallel_size, 1);
  return c;
}

}  // namespace

void bind_chat(py::module_& m);  // chat_binding.cpp
void bind_eplb(py::module_& m);  // eplb_binding.cpp

PYBIND11_MODULE(_core, m) {
  m.doc() = "DeepInfer's C++ engine (use the deepinfer package, not this module)";
  py::register_exception<Error>(m, "DeepInferError", PyExc_ValueError);

  m.def("validate_params", [](const py::dict& d) { params_from_dict(d).validate(); });
  m.def("resolve_model", &engine::resolve_model, py::arg("name"), py::arg("revision") = "main",
        py::call_guard<py::gil_scoped_release>());
  bind_chat(m);
  bind_eplb(m);
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
           [](LLM& llm, const py::object& text, const py::object& ids, const py::dict& params,
              const py::object& request_id, const std::vector<py::bytes>& images) {
             Prompt p;
             convert(text, "prompt", p.text);
             convert(ids, "prompt_token_ids", p.token_ids);
             for (const py::bytes& b : images) {
               const std::string s = b;
               p.images.emplace_back(s.begin(), s.end());
             }
             std::string rid;
             convert(request_id, "request_id", rid);
             const SamplingParams sp = params_from_dict(params);
             py::gil_scoped_release release;  // image prompts run the vision tower here
             return llm.engine().add_request(p, sp, rid);
           },
           py::arg("text"), py::arg("token_ids"), py::arg("params"), py::arg("request_id") = "",
           py::arg("images") = std::vector<py::bytes>{})
      .def("abort", [](LLM& llm, const std::string& id) { llm.engine().abort(id); })
      .def("claim_driver", [](LLM& llm) { llm.engine().claim_driver(); })
      .def("release_driver", [](LLM& llm) { llm.engine().release_driver(); })
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
           [](LLM& llm, const py::object& text_obj) {
             check(llm.engine().codec(), "this model has no tokenizer");
             std::string text;
             convert(text_obj, "LLM.encode: text", text);
             return llm.engine().codec()->encode(text);
           })
      .def("decode",  // ids outside the vocabulary are refused, not skipped silently
           [](LLM& llm, const py::object& ids_obj, const py::object& skip_obj) {
             check(llm.engine().codec(), "this model has no tokenizer");
             std::vector<int32_t> ids;
             bool skip_special = true;
             convert(ids_obj, "LLM.decode: token_ids", ids);
             convert(skip_obj, "LLM.decode: skip_special_tokens", skip_special);
             const int64_t vocab = llm.engine().model().vocab_size();
             for (size_t i = 0; i < ids.size(); ++i)
               if (ids[i] < 0 || ids[i] >= vocab)
                 throw py::value_error("LLM.decode: token_ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                       " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
             return llm.engine().codec()->decode(ids, skip_special);
           },
           py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("encode_chat",
           [](LLM& llm, const py::object& messages_json, const py::object& tools_json, bool thinking,
              const std::string& reasoning_effort, bool add_generation_prompt, bool special_tokens_in_content) {
             check(llm.engine().codec(), "chat needs a tokenizer, and this model has none");
             std::string messages, tools;
             convert(messages_json, "messages", messages);
             convert(tools_json, "tools", tools);
             ChatOptions o{thinking, reasoning_effort, add_generation_prompt, tools, special_tokens_in_content};
             return llm.engine().codec()->encode_chat(chat_messages_from_json(messages), o);
           },
           py::arg("messages_json"), py::arg("tools_json") = "", py::arg("thinking") = false,
           py::arg("reasoning_effort") = "", py::arg("add_generation_prompt") = true,
           py::arg("special_tokens_in_content") = false)
      .def("chat_prompt",  // encode_chat with the images of image_url parts: (token ids, [image bytes])
           [](LLM& llm, const std::string& messages, const std::string& tools, bool thinking,
              const std::string& reasoning_effort, bool add_generation_prompt, bool special_tokens_in_content,
              bool local_files, const std::string& local_root) {
             check(llm.engine().codec(), "chat needs a tokenizer, and this model has none");
             std::vector<ChatMessage> msgs;
             std::vector<int32_t> ids;
             {
               py::gil_scoped_release release;  // large data: URLs take a while to decode
               msgs = chat_messages_from_json(messages, {.local_files = local_files, .local_root = local_root});
               ChatOptions o{thinking, reasoning_effort, add_generation_prompt, tools, special_tokens_in_content};
               ids = llm.engine().codec()->encode_chat(msgs, o);
             }
             py::list images;
             for (auto& img : chat_images(msgs)) images.append(py::bytes(reinterpret_cast<const char*>(img.data()), img.size()));
             return py::make_tuple(ids, images);
           },
           py::arg("messages_json"), py::arg("tools_json") = "", py::arg("thinking") = false,
           py::arg("reasoning_effort") = "", py::arg("add_generation_prompt") = true,
           py::arg("special_tokens_in_content") = false, py::arg("local_files") = true, py::arg("local_root") = "")
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
        d["draft_tokens_verified"] = s.draft_tokens_verified;
        d["draft_tokens_accepted"] = s.draft_tokens_accepted;
        d["device_drawn_rows"] = s.device_drawn_rows;
        d["device_idle_ms"] = s.device_idle_ms;
        d["device_idle_forwards"] = s.device_idle_forwards;
        d["last_verify_budget"] = s.last_verify_budget;
        d["state_blocks_reserved"] = s.state_blocks_reserved;
        d["state_blocks_allocated"] = s.state_blocks_allocated;
        d["live_states"] = s.live_states;
        d["waiting_seqs"] = s.waiting_seqs;
        d["running_seqs"] = s.running_seqs;
        d["prefix_cached_tokens"] = s.prefix_cached_tokens;
        d["prefix_hits"] = s.prefix_hits;
        d["prefix_snapshots"] = s.prefix_snapshots;
        d["prefix_evictions"] = s.prefix_evictions;
        d["prefix_cached_blocks"] = s.prefix_cached_blocks;
        return d;
      })
      .def("options", [](LLM& llm) {
        auto& o = llm.engine().options();
        py::dict d;
        d["async_scheduling"] = o.async_scheduling;
        d["prefix_caching"] = o.prefix_caching;
        d["speculative"] = o.speculative;
        d["batch_invariant"] = o.batch_invariant;
        d["device_sampling"] = o.device_sampling;
        d["max_num_seqs"] = o.max_num_seqs;
        d["max_num_batched_tokens"] = o.max_num_batched_tokens;
        d["num_state_blocks"] = o.num_state_blocks;
        d["state_block_bytes"] = llm.engine().state_block_bytes();
        d["eos_token_ids"] = o.eos_token_ids;
        return d;
      });
}
