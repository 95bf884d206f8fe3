// One V4.1 forward's flat batch layout: the rows of every sequence, grouped by sequence in token
// order (host metadata, and its device copies), with what the layers share across a forward (index
// selections, candidate masks: device tensors of the forward's workspace).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "model/deepseek_v41/v41_model.h"

namespace deepinfer::model {

struct V41Model::CompressedRows {  // see compressed_rows()
  Tensor table, begin;             // I32: arena rows of every sequence's compressed rows; [T] start per row
};

struct V41Model::Step {
  std::vector<V41SequenceState*> st;  // [S] the sequences with tokens in this forward
  std::vector<int64_t> begin;         // [S+1] rows of each sequence in the per-row arrays
  std::vector<int64_t> end_pos;       // [S] each state's length after this forward
  std::vector<int64_t> pos;           // [T] position of each row
  std::vector<uint8_t> image;         // [T] image-span token rows
  Tensor pos_d, image_d;              // pos (I64) and image (U8) on the device
  std::vector<Tensor> sel;            // per index source layer: [T, sel_k] raw compressed rows or -1 (I32)
  std::vector<int64_t> sel_k;
  Tensor cand;                        // [T, cand_ld] candidate mask over each row's compressed rows (U8)
  int64_t cand_ld = 0;
  std::vector<int64_t> cand_width;    // [S] compressed rows the mask covers
  std::map<int64_t, CompressedRows> ckv_rows;  // per KV source, built at first use in a step
  bool dspark = false;                // DSpark draft blocks (positions p+1 .. p+block)
  const ForwardTaps* taps = nullptr;  // the forward's observation points (on_point), if any
  // Context parallelism (v41_context_parallel.cpp): a rank's step holds the rows it computes and
  // points to the whole step (`all`), whose `owner` names the rank computing each row.
  Step* all = nullptr;
  std::vector<int32_t> owner;         // whole step: [T] CP rank of each row

  Step& whole() { return all ? *all : *this; }

  int64_t rows() const { return static_cast<int64_t>(pos.size()); }
  int64_t num() const { return static_cast<int64_t>(st.size()); }
  int64_t first(int64_t s) const { return pos[begin[s]]; }  // first position of sequence s's rows

  // Removes the first cut[s] rows of each sequence s from a host array v (rows of `width` entries).
  template <class T>
  void cut_rows(std::vector<T>& v, int64_t width, const std::vector<int64_t>& cut) const {
    std::vector<T> kept;
    kept.reserve(v.size());
    for (int64_t q = 0; q < num(); ++q)
      kept.insert(kept.end(), v.begin() + (begin[q] + cut[q]) * width, v.begin() + begin[q + 1] * width);
    v.swap(kept);
  }
  // The rows that stay after removing cut[s] rows from each sequence (old row numbers).
  std::vector<int32_t> kept_rows(const std::vector<int64_t>& cut) const {
    std::vector<int32_t> kept;
    for (int64_t q = 0; q < num(); ++q)
      for (int64_t i = begin[q] + cut[q]; i < begin[q + 1]; ++i) kept.push_back(static_cast<int32_t>(i));
    return kept;
  }
  // The host metadata after the cut (the caller compacts the device tensors and re-uploads).
  void commit_cut(const std::vector<int64_t>& cut) {
    ckv_rows.clear();  // their per-row starts follow the old rows
    cut_rows(pos, 1, cut);
    cut_rows(image, 1, cut);
    if (!owner.empty()) cut_rows(owner, 1, cut);
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
