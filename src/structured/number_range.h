// Grammar expressions for JSON numbers within bounds: exact digit-by-digit constructions, no floats.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "structured/grammar.h"

namespace deepinfer::structured {

struct Bound {
  std::string text;  // the bound as written in the schema (a JSON number)
  bool exclusive = false;
};

// Integers (no fraction, no exponent) within the bounds.
int integer_in_range(Grammar& g, const std::optional<Bound>& lo, const std::optional<Bound>& hi);
// Numbers (optional fraction, exponent only when unbounded) within the bounds.
int number_in_range(Grammar& g, const std::optional<Bound>& lo, const std::optional<Bound>& hi);

}  // namespace deepinfer::structured
