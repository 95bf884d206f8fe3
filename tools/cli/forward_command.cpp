// `deepinfer forward`: scores token ids with a model and writes every position's logits.
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/load.h"
#include "ops/ops.h"
#include "vision/image_decode.h"
#include "vision/image_prompt.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer forward --model DIR --input-ids 5,17,3,... [--chunk N | --decode-after P]\n"
    "                         [--device cpu|cuda|cuda:N] [--image FILE ...] --output OUT.safetensors\n"
    "Writes `logits` (F32, [S, vocab]) for every input position: one prefill by default; with --chunk N\n"
    "a prefill in chunks of N tokens continuing the state; with --decode-after P a prefill of the first\n"
    "P tokens, then one token at a time.\n";

int run_forward(const std::vector<std::string>& args) {
  std::string model_dir, output, ids_text, device;
  std::vector<std::vector<uint8_t>> images;
  int64_t chunk = 0, decode_after = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    check(i + 1 < args.size(), a, ": missing value\n", kUsage);
    const std::string& v = args[++i];
    if (a == "--model") model_dir = v;
    else if (a == "--input-ids") ids_text = v;
    else if (a == "--output") output = v;
    else if (a == "--device") device = v;
    else if (a == "--image") images.push_back(vision::read_image_bytes(v));  // one per placeholder, in order
    else if (a == "--chunk") chunk = parse_positive(a, v);
    else if (a == "--decode-after") decode_after = parse_positive(a, v);
    else fail("unknown option '", a, "'\n", kUsage);
  }
  check(!model_dir.empty() && !ids_text.empty() && !output.empty(), "--model, --input-ids and --output are required\n",
        kUsage);
  check(!(chunk && decode_after), "--chunk and --decode-after exclude each other");
  std::vector<int32_t> ids = parse_token_ids("--input-ids", ids_text);
  check(!ids.empty(), "--input-ids: no token ids given");
  int64_t S = static_cast<int64_t>(ids.size());
  check(decode_after <= S, "--decode-after ", decode_after, " exceeds the ", S, " input ids");

  auto lm = model::load_causal_lm(model_dir, device);
  const int64_t V = lm->vocab_size();
  // Image placeholders expand into their spans (the output covers the expanded sequence).
  model::InputRows rows;
  if (!images.empty()) {
    std::unique_ptr<vision::VisionStage> stage = vision::VisionStage::load(model_dir, ops::backend_for(Device::resolve(device)));
    vision::ImagePrompt ip = vision::prepare_prompt(stage.get(), ids, images);
    ids = std::move(ip.ids);
    rows = {std::move(ip.span_positions), std::move(ip.span_rows)};
    S = static_cast<int64_t>(ids.size());
    check(decode_after <= S, "--decode-after ", decode_after, " exceeds the ", S, " expanded input ids");
  }
  // Step boundaries: one prefill, fixed chunks, or a prefix then single tokens.
  std::vector<int64_t> cuts{0};
  if (chunk) {
    for (int64_t c = chunk; c < S; c += chunk) cuts.push_back(c);
  } else if (decode_after) {
    for (int64_t c = decode_after; c < S; ++c) cuts.push_back(c);
  }
  cuts.push_back(S);
  const std::vector<float> all = model::logits_in_steps(*lm, ids, cuts, nullptr, nullptr, &rows);
  io::write_safetensors(output, {{"logits", DType::F32, {S, V},
                                  {reinterpret_cast<const uint8_t*>(all.data()), all.size() * sizeof(float)}}});
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s\n", static_cast<long long>(S), static_cast<long long>(V),
               output.c_str());
  return 0;
}

const CommandRegistration kForward({"forward", "score token ids and write every position's logits", run_forward});

}  // namespace
}  // namespace deepinfer::cli
