// `deepinfer tokenize`: encode text to ids or decode ids to text with a tokenizer.json.
//   deepinfer tokenize --tokenizer PATH [--add-special-tokens] --text TEXT   -> JSON array of ids
//   deepinfer tokenize --tokenizer PATH [--skip-special-tokens] --decode 1,2,3
//   deepinfer tokenize --tokenizer PATH --jsonl [--add-special-tokens]       -> batch (tests, tools)
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace {

using deepinfer::check;
using deepinfer::fail;
using deepinfer::tokenizer::Tokenizer;

const char* kUsage =
    "usage: deepinfer tokenize --tokenizer PATH [--add-special-tokens] --text TEXT|-\n"
    "       deepinfer tokenize --tokenizer PATH [--skip-special-tokens] --decode ID,ID,...\n"
    "       deepinfer tokenize --tokenizer PATH [--add-special-tokens] --jsonl < lines\n"
    "PATH is a tokenizer.json file or a folder holding one. --text - reads stdin.\n"
    "--jsonl: each stdin line is a JSON string; prints {\"ids\":[...],\"text\":decode(ids),\"skip\":decode(ids, skip special)}.\n";

int run(const std::vector<std::string>& args) {
  std::string path, text, decode;
  bool have_text = false, have_decode = false, add_special = false, skip_special = false, jsonl = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      check(i + 1 < args.size(), a, " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") return std::fputs(kUsage, stdout), 0;
    else if (a == "--tokenizer") path = value();
    else if (a == "--text") text = value(), have_text = true;
    else if (a == "--decode") decode = value(), have_decode = true;
    else if (a == "--add-special-tokens") add_special = true;
    else if (a == "--skip-special-tokens") skip_special = true;
    else if (a == "--jsonl") jsonl = true;
    else fail("unknown option '", a, "'\n", kUsage);
  }
  check(!path.empty(), "--tokenizer PATH is required\n", kUsage);
  check(int(have_text) + int(have_decode) + int(jsonl) == 1, "give exactly one of --text, --decode, --jsonl\n", kUsage);
  Tokenizer tok = Tokenizer::load(path);
  if (have_decode) {
    auto ids = deepinfer::cli::parse_token_ids("--decode", decode);
    for (int32_t id : ids) check(id < tok.vocab_size(), "--decode: id ", id, " >= vocab size ", tok.vocab_size());
    std::string out = tok.decode(ids, skip_special);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  if (jsonl) {
    std::string line;
    while (std::getline(std::cin, line)) {
      std::string s = nlohmann::json::parse(line).get<std::string>();
      auto ids = tok.encode(s, add_special);
      nlohmann::json o = {{"ids", ids}, {"text", tok.decode(ids, false)}, {"skip", tok.decode(ids, true)}};
      std::string dumped = o.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      std::fwrite(dumped.data(), 1, dumped.size(), stdout);
      std::fputc('\n', stdout);
    }
    return 0;
  }
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  nlohmann::json ids = tok.encode(text, add_special);
  std::printf("%s\n", ids.dump().c_str());
  return 0;
}

deepinfer::cli::CommandRegistration reg(
    deepinfer::cli::Command{"tokenize", "encode text to token ids or decode ids (tokenizer.json)", run});

}  // namespace
