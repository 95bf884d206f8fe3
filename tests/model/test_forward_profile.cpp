// ForwardProfile (DEEPINFER_PROFILE_FORWARD=1): off by default; on, one line per section name with its
// occurrences summed, in the order first reached, and the device synchronized at each section's end.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/device.h"
#include "model/forward_profile.h"

namespace deepinfer::model {
namespace {

struct CountingMemory : DeviceMemory {  // host memory that counts synchronize() calls
  int syncs = 0;
  Device device() const override { return host_memory().device(); }
  void* allocate(size_t b) override { return host_memory().allocate(b); }
  void release(void* p) override { host_memory().release(p); }
  void upload(void* d, const void* s, size_t b) override { host_memory().upload(d, s, b); }
  void download(void* d, const void* s, size_t b) override { host_memory().download(d, s, b); }
  void copy(void* d, const void* s, size_t b) override { host_memory().copy(d, s, b); }
  void zero(void* d, size_t b) override { host_memory().zero(d, b); }
  void synchronize() override { ++syncs; }
};

TEST(ForwardProfile, OffByDefaultPrintsNothing) {
  unsetenv("DEEPINFER_PROFILE_FORWARD");
  CountingMemory mem;
  ForwardProfile p(mem);
  EXPECT_FALSE(p.on());
  ::testing::internal::CaptureStderr();
  p.section("a");
  p.finish();
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(mem.syncs, 0);
}

TEST(ForwardProfile, SumsSectionsByNameAndSyncsAtEachEnd) {
  setenv("DEEPINFER_PROFILE_FORWARD", "1", 1);
  CountingMemory mem;
  ForwardProfile p(mem);
  ASSERT_TRUE(p.on());
  ::testing::internal::CaptureStderr();
  p.section("attn");
  p.section("ffn");
  p.section("attn");
  p.finish();
  const std::string out = ::testing::internal::GetCapturedStderr();
  unsetenv("DEEPINFER_PROFILE_FORWARD");
  EXPECT_EQ(mem.syncs, 3);  // the end of each of the three sections
  const size_t attn = out.find("attn"), ffn = out.find("ffn");
  ASSERT_NE(attn, std::string::npos) << out;
  ASSERT_NE(ffn, std::string::npos) << out;
  EXPECT_LT(attn, ffn) << "first reached, first printed";
  EXPECT_NE(out.find("x2"), std::string::npos) << "attn's two occurrences summed: " << out;
  EXPECT_EQ(out.find("attn", attn + 1), std::string::npos) << "one line per name: " << out;
  ::testing::internal::CaptureStderr();
  p.finish();  // cleared: nothing left to print but the empty total
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("attn"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::model
