#include "model/paged_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace deepinfer::model {

PagedRows::PagedRows(BlockPool* pool, int64_t width, RowFormat format)
    : pool_(pool), width_(width), row_bytes_(deepinfer::row_bytes(format, width)), format_(format) {
  per_block_ = pool->block_bytes() / row_bytes_;
  check(per_block_ >= 1, "state block of ", pool->block_bytes(), " bytes cannot hold a row of ", row_bytes_, " bytes");
}

PagedRows& PagedRows::operator=(PagedRows&& o) noexcept {
  if (this != &o) {
    clear();
    pool_ = o.pool_;
    width_ = o.width_;
    row_bytes_ = o.row_bytes_;
    format_ = o.format_;
    per_block_ = o.per_block_;
    rows_ = o.rows_;
    blocks_ = std::move(o.blocks_);
    o.blocks_.clear();
    o.rows_ = 0;
  }
  return *this;
}

std::byte* PagedRows::append() {
  resize(rows_ + 1);
  return row(rows_ - 1);
}

void PagedRows::own_tail() {
  const int64_t last = rows_ / per_block_;
  if (rows_ % per_block_ == 0 || last >= static_cast<int64_t>(blocks_.size()) || pool_->refs(blocks_[last]) == 1) return;
  void* mine = pool_->allocate();
  pool_->memory().copy(mine, blocks_[last], (rows_ % per_block_) * row_bytes_);
  pool_->release(blocks_[last]);
  blocks_[last] = mine;
}

void PagedRows::resize(int64_t rows) {
  if (rows > rows_) own_tail();
  while (static_cast<int64_t>(blocks_.size()) * per_block_ < rows) blocks_.push_back(pool_->allocate());
  for (int64_t r = rows_; r < rows; ++r) pool_->memory().zero(row(r), row_bytes_);  // reused rows
  rows_ = rows;
}

void PagedRows::extend(int64_t n) {
  if (n > 0) own_tail();
  while (static_cast<int64_t>(blocks_.size()) * per_block_ < rows_ + n) blocks_.push_back(pool_->allocate());
  rows_ += n;
}

void PagedRows::truncate(int64_t rows) {
  check(rows >= 0 && rows <= rows_, "PagedRows::truncate: ", rows, " rows asked of ", rows_);
  rows_ = rows;
  for (int64_t keep = (rows + per_block_ - 1) / per_block_; static_cast<int64_t>(blocks_.size()) > keep;) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
  }
}

void PagedRows::clear() {
  for (void* b : blocks_) pool_->release(b);
  blocks_.clear();
  rows_ = 0;
}

void PagedRows::copy_to(void* out) const {
  for (int64_t r = 0; r < rows_; r += per_block_) {
    int64_t n = std::min(per_block_, rows_ - r);
    pool_->memory().download(static_cast<std::byte*>(out) + r * row_bytes_, row(r), n * row_bytes_);
  }
}

std::vector<float> PagedRows::floats() const {
  std::vector<float> out(rows_ * width_);
  std::vector<uint8_t> bytes(rows_ * row_bytes_);
  copy_to(bytes.data());
  for (int64_t r = 0; r < rows_; ++r) dequantize_row(bytes.data() + r * row_bytes_, width_, format_, out.data() + r * width_);
  return out;
}

void PagedRows::share_from(const PagedRows& src) {
  if (this == &src) return;
  clear();
  pool_ = src.pool_;
  width_ = src.width_;
  row_bytes_ = src.row_bytes_;
  format_ = src.format_;
  per_block_ = src.per_block_;
  for (void* b : src.blocks_) pool_->retain(b);
  blocks_ = src.blocks_;
  rows_ = src.rows_;
}

void PagedRows::copy_from(const PagedRows& src) {
  if (this == &src) return;
  clear();
  pool_ = src.pool_;
  width_ = src.width_;
  row_bytes_ = src.row_bytes_;
  format_ = src.format_;
  per_block_ = src.per_block_;
  extend(src.rows_);
  for (int64_t r = 0; r < rows_; r += per_block_)
    pool_->memory().copy(row(r), src.row(r), std::min(per_block_, rows_ - r) * row_bytes_);
}

int64_t PagedRows::blocks_for(int64_t rows, int64_t row_bytes, int64_t block_bytes) {
  int64_t per_block = block_bytes / row_bytes;
  return (rows + per_block - 1) / per_block;
}

}  // namespace deepinfer::model
