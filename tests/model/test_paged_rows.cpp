// BlockPool and PagedRows: bounded capacity, reuse of freed blocks, rows that stay where written,
// reference-counted blocks shared between arrays with copy on write (prefix caching).
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "core/row_format.h"
#include "ops/ops.h"
#include "model/paged_rows.h"

namespace deepinfer::model {
namespace {

float* f32(std::byte* row) { return reinterpret_cast<float*>(row); }

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
    float* p = f32(rows.append());
    for (int c = 0; c < 24; ++c) p[c] = r * 100.0f + c;
  }
  EXPECT_EQ(rows.size(), 5);
  EXPECT_EQ(rows.blocks(), 3);
  EXPECT_EQ(pool.used(), 3);
  EXPECT_EQ(PagedRows::blocks_for(5, 24 * 4, 256), 3);
  EXPECT_EQ(PagedRows::blocks_for(0, 24 * 4, 256), 0);
  std::vector<float> all(5 * 24);
  rows.copy_to(all.data());
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 24; ++c) EXPECT_EQ(all[r * 24 + c], r * 100.0f + c);
  PagedRows moved = std::move(rows);
  EXPECT_EQ(f32(moved.row(3))[1], 301.0f);
  EXPECT_EQ(rows.size(), 0);
  moved.resize(1);
  EXPECT_EQ(moved.blocks(), 3);  // shrinking keeps the blocks for reuse
  moved.resize(2);
  EXPECT_EQ(f32(moved.row(1))[0], 0.0f);  // regrown rows are zero
  moved.clear();
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(PagedRows(&pool, 65), Error);  // a row larger than a block
}

TEST(PagedRows, Bf16RowsTakeHalfTheBytesAndWidenExactly) {
  BlockPool pool(64 * 4, 0);
  PagedRows rows(&pool, 24, RowFormat::kBf16);  // 48-byte rows: 5 per block
  EXPECT_EQ(rows.row_bytes(), 48);
  for (int r = 0; r < 6; ++r) {
    auto* p = reinterpret_cast<uint16_t*>(rows.append());
    for (int c = 0; c < 24; ++c) p[c] = float_to_bf16(r + c / 8.0f);
  }
  EXPECT_EQ(rows.blocks(), 2);
  EXPECT_EQ(PagedRows::blocks_for(6, rows.row_bytes(), 256), 2);
  EXPECT_EQ(rows.row(1) - rows.row(0), 48);
  const std::vector<float> all = rows.floats();
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 24; ++c) EXPECT_EQ(all[r * 24 + c], r + c / 8.0f);
  EXPECT_THROW(PagedRows(&pool, 24, RowFormat::kFp8E8m0x32), Error);  // 24 values: not whole scale blocks
}

// Packed rows (66 bytes: 64 e4m3 + 2 UE8M0) in 1 KiB blocks: 15 a block, 34 bytes left over; the
// arena index of a row maps back to its address, and floats() decodes what fake_quant_fp8 gives.
TEST(PagedRows, PackedRowsAreAddressedPerBlockAndDecodeToTheFakeQuantValues) {
  BlockPool pool(1024, 0);
  PagedRows rows(&pool, 64, RowFormat::kFp8E8m0x32);
  EXPECT_EQ(rows.row_bytes(), 66);
  std::vector<float> x(20 * 64), want;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1.0f + i % 7) * (i % 64 < 32 ? 1e-3f : 30.0f);
  want = x;
  ops::cpu_backend().fake_quant_fp8(want.data(), 20, 64, 32);
  for (int r = 0; r < 20; ++r) {
    quantize_row(x.data() + r * 64, 64, RowFormat::kFp8E8m0x32, reinterpret_cast<uint8_t*>(rows.append()));
    const int64_t idx = pool.row_index(rows.row(r), 66);
    EXPECT_EQ(pool.base() + paged_row_offset(idx, 66, 1024), rows.row(r));
  }
  EXPECT_EQ(rows.blocks(), 2);
  EXPECT_EQ(rows.floats(), want);
  EXPECT_EQ(row_bytes(RowFormat::kFp4E4m3x16, 512), 288);
  EXPECT_EQ(row_bytes(RowFormat::kFp4E8m0x32, 128), 68);
  EXPECT_EQ(row_bytes(RowFormat::kFp8E8m0x32, 512), 528);
}

TEST(BlockPool, ABlockIsFreeWhenItsLastReferenceGoes) {
  BlockPool pool(256, 2);
  void* a = pool.allocate();
  pool.retain(a);
  EXPECT_EQ(pool.refs(a), 2);
  pool.release(a);
  EXPECT_EQ(pool.used(), 1);  // still held once
  pool.release(a);
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(pool.release(a), Error);  // no reference left to drop
}

TEST(PagedRows, SharedRowsAreCopiedBeforeAnAppendTouchesThem) {
  BlockPool pool(64 * 4, 0);  // 64 floats per block
  PagedRows src(&pool, 24);   // 2 rows per block
  for (int r = 0; r < 3; ++r) f32(src.append())[0] = 10.0f + r;  // block 0 full, block 1 half
  PagedRows shared;
  shared.share_from(src);
  EXPECT_EQ(pool.used(), 2);  // nothing copied yet
  EXPECT_EQ(shared.row(2), src.row(2));
  f32(shared.append())[0] = 99.0f;  // into the half block: it becomes the sharer's own
  EXPECT_EQ(pool.used(), 3);
  EXPECT_EQ(shared.row(0), src.row(0));  // the full block stays shared
  EXPECT_NE(shared.row(2), src.row(2));
  EXPECT_EQ(f32(shared.row(2))[0], 12.0f);
  f32(src.append())[0] = 13.0f;  // the original's half block is its own again (one reference): no copy
  EXPECT_EQ(pool.used(), 3);
  EXPECT_EQ(f32(src.row(3))[0], 13.0f);
  EXPECT_EQ(f32(shared.row(3))[0], 99.0f);
  src.truncate(1);  // rolls back into the shared full block, then writes there: copied first
  f32(src.append())[0] = -1.0f;
  EXPECT_EQ(f32(shared.row(1))[0], 11.0f);
  EXPECT_EQ(f32(src.row(1))[0], -1.0f);
  PagedRows copy;
  copy.copy_from(shared);  // a deep copy shares nothing
  for (int r = 0; r < 4; ++r) EXPECT_EQ(f32(copy.row(r))[0], f32(shared.row(r))[0]);
  EXPECT_NE(copy.row(0), shared.row(0));
  src.clear();
  shared.clear();
  copy.clear();
  EXPECT_EQ(pool.used(), 0);
}

}  // namespace
}  // namespace deepinfer::model
