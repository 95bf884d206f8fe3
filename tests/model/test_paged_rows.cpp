// BlockPool and PagedRows: bounded capacity, reuse of freed blocks, rows that stay where written.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/paged_rows.h"

namespace deepinfer::model {
namespace {

TEST(BlockPool, CapacityIsEnforcedAndBlocksAreReused) {
  BlockPool pool(256, 3);
  void* a = pool.allocate();
  void* b = pool.allocate();
  void* c = pool.allocate();
  EXPECT_EQ(pool.used(), 3);
  EXPECT_THROW(pool.allocate(), Error);
  static_cast<float*>(b)[5] = 7.0f;
  pool.release(b);
  void* d = pool.allocate();
  EXPECT_EQ(d, b);                             // the freed block comes back
  EXPECT_EQ(static_cast<float*>(d)[5], 0.0f);  // zeroed
  for (void* p : {a, c, d}) pool.release(p);
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(BlockPool(100, 1), Error);  // not a multiple of 64
}

TEST(PagedRows, RowsSpanBlocksAndReturnThemOnClear) {
  BlockPool pool(64 * 4, 0);  // 64 floats per block
  PagedRows rows(&pool, 24);   // 2 rows per block
  for (int r = 0; r < 5; ++r) {
    float* p = rows.append();
    for (int c = 0; c < 24; ++c) p[c] = r * 100.0f + c;
  }
  EXPECT_EQ(rows.size(), 5);
  EXPECT_EQ(rows.blocks(), 3);
  EXPECT_EQ(pool.used(), 3);
  EXPECT_EQ(PagedRows::blocks_for(5, 24, 256), 3);
  EXPECT_EQ(PagedRows::blocks_for(0, 24, 256), 0);
  std::vector<float> all(5 * 24);
  rows.copy_to(all.data());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 24; ++c) EXPECT_EQ(all[r * 24 + c], r * 100.0f + c);
  PagedRows moved = std::move(rows);
  EXPECT_EQ(moved.row(3)[1], 301.0f);
  EXPECT_EQ(rows.size(), 0);
  moved.resize(1);
  EXPECT_EQ(moved.blocks(), 3);  // shrinking keeps the blocks for reuse
  moved.resize(2);
  EXPECT_EQ(moved.row(1)[0], 0.0f);  // regrown rows are zero
  moved.clear();
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(PagedRows(&pool, 65), Error);  // a row larger than a block
}

}  // namespace
}  // namespace deepinfer::model
