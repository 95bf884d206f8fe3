// Fuzz targets for the structured-output front ends: JSON schema, regex and EBNF (one source, three
// binaries by FUZZ_FRONT_END). Input the front end accepts must lower to a grammar whose rules all
// have bodies; anything else must be a deepinfer::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "structured/structured.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // grammar sizes are bounded elsewhere; keep each run fast
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace deepinfer::structured;
  try {
#if FUZZ_FRONT_END == 0
    SchemaArgs args;
    Grammar g = json_schema_grammar(text, args);
#elif FUZZ_FRONT_END == 1
    Grammar g = regex_grammar(text);
#else
    Grammar g = parse_ebnf(text);
#endif
    g.check_complete();
    (void)g.productive_rules();
    (void)g.to_ebnf();
  } catch (const deepinfer::Error&) {
  }
  return 0;
}
