// A growable array of fixed-width rows of one stored format stored in blocks of a BlockPool (the
// per-sequence state's window rings, compressed rows, index keys and compressor carry). Rows never move
// once written; a row is row_bytes() bytes (width values in `format`, core/row_format.h), a block holds
// block_bytes / row_bytes of them, and ops address a row by its index (BlockPool::row_index). share_from() makes an array that holds the same blocks by
// reference (a cached prefix's compressed rows); a block that is shared is copied before a row is
// appended into it (copy on write), so the rows one holder sees never change under another.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/block_pool.h"
#include "core/row_format.h"

namespace deepinfer::model {

class PagedRows {
 public:
  PagedRows() = default;
  PagedRows(BlockPool* pool, int64_t width, RowFormat format = RowFormat::kF32);
  PagedRows(PagedRows&& o) noexcept { *this = std::move(o); }
  PagedRows& operator=(PagedRows&& o) noexcept;
  PagedRows(const PagedRows&) = delete;
  PagedRows& operator=(const PagedRows&) = delete;
  ~PagedRows() { clear(); }

  int64_t size() const { return rows_; }
  int64_t width() const { return width_; }
  RowFormat format() const { return format_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }
  const BlockPool* pool_ptr() const { return pool_; }  // null for a default-constructed (unused) array
  std::byte* row(int64_t i) { return static_cast<std::byte*>(blocks_[i / per_block_]) + (i % per_block_) * row_bytes_; }
  const std::byte* row(int64_t i) const {
    return static_cast<const std::byte*>(blocks_[i / per_block_]) + (i % per_block_) * row_bytes_;
  }
  template <class T>
  T* row_as(int64_t i) { return reinterpret_cast<T*>(row(i)); }
  template <class T>
  const T* row_as(int64_t i) const { return reinterpret_cast<const T*>(row(i)); }
  std::byte* append();             // a new zeroed row at the end
  void resize(int64_t rows);       // grows with zeroed rows or shrinks (keeping the blocks)
  void extend(int64_t n);          // n more rows, not zeroed (the caller writes them at once)
  void truncate(int64_t rows);     // shrinks to `rows` rows and returns the blocks no longer needed
  void clear();                    // no rows, every block back to the pool
  void copy_to(void* out) const;   // all rows, contiguous, as stored
  std::vector<float> floats() const;      // all rows, contiguous, decoded to fp32 (tests, inspection)
  void share_from(const PagedRows& src);  // the same rows, the blocks shared by reference
  void copy_from(const PagedRows& src);   // the same rows in blocks of its own

  // Blocks needed to hold `rows` rows of `row_bytes` bytes in blocks of `block_bytes`.
  static int64_t blocks_for(int64_t rows, int64_t row_bytes, int64_t block_bytes);

 private:
  void own_tail();                 // the partly filled last block, if shared, becomes a private copy
  BlockPool* pool_ = nullptr;
  int64_t width_ = 0, row_bytes_ = 0, per_block_ = 1, rows_ = 0;
  RowFormat format_ = RowFormat::kF32;
  std::vector<void*> blocks_;
};

}  // namespace deepinfer::model
