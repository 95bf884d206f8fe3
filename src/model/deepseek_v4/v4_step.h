// One V4 forward's flat batch layout: the rows of every sequence, grouped by sequence in token order
// (host metadata, and the positions on the device).
#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::model {

struct V4Model::Step {
  std::vector<V4SequenceState*> st;  // [S] the sequences with tokens in this forward
  std::vector<int64_t> begin;        // [S+1] rows of each sequence
  std::vector<int64_t> end_pos;      // [S] each state's length after this forward
  std::vector<int64_t> pos;          // [T] position of each row
  std::vector<int32_t> ids;          // [T] token of each row
  Tensor pos_d;                      // pos on the device (I64)

  int64_t rows() const { return static_cast<int64_t>(pos.size()); }
  int64_t num() const { return static_cast<int64_t>(st.size()); }
  int64_t first(int64_t q) const { return pos[begin[q]]; }
};

}  // namespace deepinfer::model
