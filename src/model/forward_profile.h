// DEEPINFER_PROFILE_FORWARD=1 (analysis, not for serving): a forward cut into named sections. At each
// section's end the host waits for the device, so a section's "total" is its host and device work
// together and its "host" is how long the host took to enqueue it: where host ≈ total, the host is the
// bound. One line per section name (summed over its occurrences) on stderr after each forward.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace deepinfer::model {

class ForwardProfile {
 public:
  explicit ForwardProfile(DeviceMemory& mem);
  bool on() const { return on_; }
  void section(const char* name);  // ends the running section, if any, and starts `name`
  void finish();                   // ends the running section, prints the forward's sections, clears

 private:
  using Clock = std::chrono::steady_clock;
  struct Row {
    std::string name;
    double host = 0, total = 0;
    int64_t count = 0;
  };
  void end_running();

  DeviceMemory& mem_;
  bool on_ = false;
  std::vector<Row> rows_;
  int running_ = -1;
  Clock::time_point start_;
};

}  // namespace deepinfer::model
