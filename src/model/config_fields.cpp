#include "model/config_fields.h"

#include <cmath>

#include "core/error.h"

namespace deepinfer::model {

using nlohmann::json;

std::string show(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

void bad_field(const std::string& field, const std::string& value, const std::string& allowed) {
  fail("config: ", field, " = ", value, ": ", allowed);
}

ConfigFields::ConfigFields(const json& object, std::string path) : j_(object), path_(std::move(path)) {
  check(j_.is_object(), "config: ", path_.empty() ? "the file" : path_, " must be a JSON object, got ", show(j_));
}

const json* ConfigFields::find(Key keys) const {
  for (const char* k : {keys.first, keys.second}) {
    if (!k) continue;
    auto it = j_.find(k);
    if (it != j_.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

std::string ConfigFields::name(Key keys) const {
  const char* key = keys.second && !(j_.contains(keys.first) && !j_.at(keys.first).is_null()) &&
                            j_.contains(keys.second) && !j_.at(keys.second).is_null()
                        ? keys.second
                        : keys.first;
  return path_.empty() ? key : path_ + "." + key;
}

void ConfigFields::bad(Key keys, const std::string& allowed) const {
  const json* v = find(keys);
  bad_field(name(keys), v ? show(*v) : "(absent)", allowed);
}

namespace {

std::string range_text(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

int64_t ConfigFields::integer(Key keys, int64_t lo, int64_t hi,
                              std::optional<int64_t> fallback) const {
  const json* v = find(keys);
  if (!v) {
    if (!fallback) bad(keys, "required, an integer in " + range_text(lo, hi));
    return *fallback;
  }
  int64_t out = 0;
  if (v->is_number_integer() && !v->is_number_unsigned()) {
    out = v->get<int64_t>();
  } else if (v->is_number_unsigned() && v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
    out = static_cast<int64_t>(v->get<uint64_t>());
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && v->get<double>() == std::floor(v->get<double>()) &&
             std::fabs(v->get<double>()) < 9.0e18) {
    out = static_cast<int64_t>(v->get<double>());  // 1e9 is an integer written as a float
  } else {
    bad(keys, "must be an integer in " + range_text(lo, hi));
  }
  if (out < lo || out > hi) bad(keys, "must be in " + range_text(lo, hi));
  return out;
}

double ConfigFields::real(Key keys, double lo, double hi, std::optional<double> fallback,
                          bool lo_open) const {
  auto allowed = [&] {
    std::ostringstream os;
    os << "must be a finite number in " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
    return os.str();
  };
  const json* v = find(keys);
  if (!v) {
    if (!fallback) bad(keys, "required, " + allowed());
    return *fallback;
  }
  if (!v->is_number()) bad(keys, allowed());
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) bad(keys, allowed());
  return x;
}

bool ConfigFields::boolean(Key keys, std::optional<bool> fallback) const {
  const json* v = find(keys);
  if (!v) {
    if (!fallback) bad(keys, "required, true or false");
    return *fallback;
  }
  if (!v->is_boolean()) bad(keys, "must be true or false");
  return v->get<bool>();
}

std::string ConfigFields::choice(Key keys, std::initializer_list<const char*> allowed,
                                 bool required) const {
  std::string list;
  for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + "\"" + a + "\"";
  const json* v = find(keys);
  if (!v) {
    if (required) bad(keys, "required, one of " + list);
    return *allowed.begin();
  }
  if (v->is_string())
    for (const char* a : allowed)
      if (v->get_ref<const std::string&>() == a) return a;
  bad(keys, "not supported (supported: " + list + ")");
}

std::vector<int64_t> ConfigFields::integers(Key keys, int64_t lo, int64_t hi,
                                            size_t max_len, std::optional<std::vector<int64_t>> fallback) const {
  const json* v = find(keys);
  const std::string allowed = "must be a list of at most " + std::to_string(max_len) + " integers in " + range_text(lo, hi);
  if (!v) {
    if (!fallback) bad(keys, "required, " + allowed.substr(5));
    return *fallback;
  }
  if (!v->is_array() || v->size() > max_len) bad(keys, allowed);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json holder{{"x", (*v)[i]}};
    ConfigFields item(holder, "");
    try {
      out.push_back(item.integer("x", lo, hi));
    } catch (const Error&) {
      bad_field(name(keys) + "[" + std::to_string(i) + "]", show((*v)[i]), "must be an integer in " + range_text(lo, hi));
    }
  }
  return out;
}

const json* ConfigFields::object(Key keys) const {
  const json* v = find(keys);
  if (v && !v->is_object()) bad(keys, "must be a JSON object");
  return v;
}

}  // namespace deepinfer::model
