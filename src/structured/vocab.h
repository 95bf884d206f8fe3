// TokenVocab: the model's output vocabulary as raw byte strings, preprocessed once per tokenizer
// (sorted order, shared-prefix lengths, trie subtree ends) for the mask computations.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::structured {

// Token classes of automaton parts that do not depend on the grammar around them (a JSON
// string's content...), shared by every grammar over one vocabulary (compiled_grammar.cpp).
struct SharedClasses;
std::shared_ptr<SharedClasses> make_shared_classes();

class TokenVocab {
 public:
  // tokens[id] = raw bytes of the token; its size is the logit width (pad with "" up to it).
  // An empty string marks a special/control/padding id: never matched as text. stop_ids (EOS...)
  // are allowed exactly where the grammar may end.
  TokenVocab(std::vector<std::string> tokens, std::vector<int32_t> stop_ids);
  TokenVocab() = default;

  int32_t size() const { return d_ ? static_cast<int32_t>(d_->tokens.size()) : 0; }
  const std::string& bytes(int32_t id) const { return d_->tokens[id]; }
  const std::vector<int32_t>& stop_ids() const { return d_->stop_ids; }
  bool is_stop(int32_t id) const;

  // Text tokens sorted by bytes. Index i refers to sorted position, not id.
  int32_t num_sorted() const { return static_cast<int32_t>(d_->sorted_ids.size()); }
  int32_t sorted_id(int32_t i) const { return d_->sorted_ids[i]; }
  const std::string& sorted_bytes(int32_t i) const { return d_->tokens[d_->sorted_ids[i]]; }
  // The same bytes from one buffer in sorted order (sequential walks stay in cache).
  std::string_view sorted_view(int32_t i) const {
    return std::string_view(d_->sorted_blob).substr(d_->sorted_offset[i], d_->sorted_offset[i + 1] - d_->sorted_offset[i]);
  }
  // Length of the common prefix of sorted tokens i-1 and i (0 for i == 0).
  uint16_t lcp_prev(int32_t i) const { return d_->lcp_prev[i]; }
  // One past the last sorted index whose token has sorted token i as a prefix.
  int32_t subtree_end(int32_t i) const { return d_->subtree_end[i]; }
  // Sorted tokens starting with byte b are [first_byte_begin(b), first_byte_begin(b + 1)).
  int32_t first_byte_begin(int b) const { return d_->first_byte_begin[b]; }
  SharedClasses& shared_classes() const { return *d_->shared; }

 private:
  struct Data {
    std::vector<std::string> tokens;
    std::vector<int32_t> stop_ids;
    std::vector<int32_t> sorted_ids;
    std::string sorted_blob;              // the sorted tokens' bytes, concatenated
    std::vector<uint32_t> sorted_offset;  // num_sorted() + 1 offsets into sorted_blob
    std::vector<uint16_t> lcp_prev;
    std::vector<int32_t> subtree_end;
    int32_t first_byte_begin[257];
    std::shared_ptr<SharedClasses> shared;  // filled as grammars compute their masks
  };
  std::shared_ptr<const Data> d_;
};

}  // namespace deepinfer::structured
