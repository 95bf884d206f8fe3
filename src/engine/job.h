// One engine step's work: the plan (built while the previous forward runs) and its results. Shared by
// engine.cpp and speculation.cpp.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace deepinfer::engine {

// One step's work: the plan (built while the previous forward runs) and its results.
struct Engine::Job {
  struct Row {
    int chunk;
    int64_t position;                     // of the token whose logits this row holds
    bool sample;                          // else: a prompt-logprobs row
    int draft = 0;                        // sample rows: 0 = the chunk's own token, j = after j drafts
  };
  std::vector<ScheduledChunk> chunks;
  model::ForwardBatch batch;
  std::vector<Row> rows;
  std::vector<float> logits;              // the rows not drawn on the device, in row order
  model::RowDraws draws;                   // rows drawn on the model's device (batch.draws points here)
  std::vector<int32_t> slot;               // per row: its logits row, or -1 - its index in draws
  std::vector<std::vector<sampling::SampleOutput>> samples;  // per chunk: the tokens it emits, in order
  std::vector<std::string> sample_errors;                  // per chunk, "" = fine
  std::vector<std::pair<int, PositionLogprobs>> prompt_lps;  // (chunk, logprobs of position+1)
  std::vector<int64_t> prompt_lp_positions;
  std::vector<int> landed;                                 // per chunk: tokens appended
  bool failed = false;
  std::string error;
};

}  // namespace deepinfer::engine
