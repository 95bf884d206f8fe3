#include "args.h"

#include <climits>

#include "core/error.h"

namespace deepinfer::cli {
namespace {

// The whole of `text` as an integer, or nullopt-like false.
bool parse_integer(const std::string& text, long long* value) {
  size_t used = 0;
  try {
    *value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == text.size() && !text.empty();
}

}  // namespace

std::vector<int32_t> parse_token_ids(const std::string& flag, const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size() && !text.empty()) {
    size_t end = text.find(',', i);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(i, end - i);
    long long v = 0;
    check(parse_integer(item, &v) && v >= 0 && v <= INT32_MAX, flag, ": '", item, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    i = end + 1;
  }
  return ids;
}

int64_t parse_positive(const std::string& flag, const std::string& text) {
  long long v = 0;
  check(parse_integer(text, &v) && v > 0, flag, ": expected a positive integer, got '", text, "'");
  return v;
}

}  // namespace deepinfer::cli
