// Every DEEPINFER_* environment variable, with its default and meaning, is defined in env.cpp:
// the one place to look them up. Reading an unregistered name is a programming error (throws).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

struct EnvVar {
  const char* name;
  const char* default_value;  // "" = unset
  const char* meaning;
};

// All variables, in documentation order (the README table is generated from this list).
const std::vector<EnvVar>& env_vars();

std::string env_string(const char* name);   // the value, or the registered default
int64_t env_int(const char* name);          // fails with a clear message on a non-integer value
bool env_bool(const char* name);            // 1/true/yes/on or 0/false/no/off

}  // namespace deepinfer
