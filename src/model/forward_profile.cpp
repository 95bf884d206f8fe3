#include "model/forward_profile.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace deepinfer::model {

ForwardProfile::ForwardProfile(DeviceMemory& mem) : mem_(mem) {
  const char* e = std::getenv("DEEPINFER_PROFILE_FORWARD");
  on_ = e && std::strcmp(e, "0") != 0 && *e;
}

void ForwardProfile::end_running() {
  if (running_ < 0) return;
  Row& r = rows_[running_];
  const auto enqueued = Clock::now();
  mem_.synchronize();
  const auto done = Clock::now();
  r.host += std::chrono::duration<double>(enqueued - start_).count();
  r.total += std::chrono::duration<double>(done - start_).count();
  ++r.count;
  running_ = -1;
}

void ForwardProfile::section(const char* name) {
  if (!on_) return;
  end_running();  // leaves running_ at -1
  for (size_t i = 0; i < rows_.size() && running_ < 0; ++i)
    if (rows_[i].name == name) running_ = static_cast<int>(i);
  if (running_ < 0) {
    rows_.push_back({name});
    running_ = static_cast<int>(rows_.size()) - 1;
  }
  start_ = Clock::now();  // after the sync above: the section starts with an idle device
}

void ForwardProfile::finish() {
  if (!on_) return;
  end_running();
  double host = 0, total = 0;
  for (const Row& r : rows_) host += r.host, total += r.total;
  std::fprintf(stderr, "[profile] forward: host %.3f ms, total %.3f ms\n", host * 1e3, total * 1e3);
  for (const Row& r : rows_)
    std::fprintf(stderr, "[profile]   %-22s x%-4lld host %9.3f ms  total %9.3f ms  (%4.1f%%)\n", r.name.c_str(),
                 static_cast<long long>(r.count), r.host * 1e3, r.total * 1e3, total > 0 ? 100 * r.total / total : 0.0);
  rows_.clear();
}

}  // namespace deepinfer::model
