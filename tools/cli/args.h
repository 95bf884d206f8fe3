// Argument parsing shared by the CLI's subcommands; errors name the flag and the bad value.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer::cli {

// "5,17,3" -> {5, 17, 3}; every item must be a non-negative 32-bit integer.
std::vector<int32_t> parse_token_ids(const std::string& flag, const std::string& text);
// A positive integer.
int64_t parse_positive(const std::string& flag, const std::string& text);

}  // namespace deepinfer::cli
