// One V4.1 forward's flat batch layout: the rows of every sequence, grouped by sequence in token
// order, with what the layers share across a forward (index selections, candidate masks).
#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::model {

struct V41Model::Step {
  std::vector<V41SequenceState*> st;  // [S] the sequences with tokens in this forward
  std::vector<int64_t> begin;         // [S+1] rows of each sequence in the per-row arrays
  std::vector<int64_t> end_pos;       // [S] each state's length after this forward
  std::vector<int64_t> pos;           // [T] position of each row
  std::vector<uint8_t> image;         // [T] image-span token rows
  std::vector<std::vector<int32_t>> sel;   // per index source layer: [T, sel_k] raw compressed rows or -1
  std::vector<int64_t> sel_k;
  std::vector<std::vector<uint8_t>> cand;  // per row: candidate mask over its sequence's compressed rows
  bool dspark = false;                     // DSpark draft blocks (positions p+1 .. p+block)

  int64_t rows() const { return static_cast<int64_t>(pos.size()); }
  int64_t num() const { return static_cast<int64_t>(st.size()); }
  int64_t first(int64_t s) const { return pos[begin[s]]; }  // first position of sequence s's rows

  // Removes the first cut[s] rows of each sequence s from v (rows of `width` entries, in this
  // step's row layout). Call for every per-row array, then commit_cut().
  template <class T>
  void cut_rows(std::vector<T>& v, int64_t width, const std::vector<int64_t>& cut) const {
    std::vector<T> kept;
    kept.reserve(v.size());
    for (int64_t q = 0; q < num(); ++q)
      kept.insert(kept.end(), v.begin() + (begin[q] + cut[q]) * width, v.begin() + begin[q + 1] * width);
    v.swap(kept);
  }
  void commit_cut(const std::vector<int64_t>& cut) {
    for (size_t l = 0; l < sel.size(); ++l) cut_rows(sel[l], sel_k[l], cut);
    cut_rows(cand, 1, cut);
    cut_rows(pos, 1, cut);
    cut_rows(image, 1, cut);
    int64_t r = 0;
    for (int64_t q = 0; q < num(); ++q) {
      const int64_t n = begin[q + 1] - begin[q] - cut[q];
      begin[q] = r;
      r += n;
    }
    begin[num()] = r;
  }
};

}  // namespace deepinfer::model
