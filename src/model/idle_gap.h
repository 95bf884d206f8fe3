// The device's idle time between consecutive forwards (what asynchronous scheduling shortens): each
// forward marks its first device op and the end of its device work on the device's clock
// (DeviceMemory::mark), and the idle time is the previous forward's end to this one's beginning.
#pragma once
#include "core/device.h"

namespace deepinfer::model {

class IdleGap {
 public:
  void begin(DeviceMemory& mem) { mem.mark(0); }  // before the forward's first device op
  void end(DeviceMemory& mem) {                  // after its last one (its read-back included)
    prev_ = cur_;
    cur_ = cur_ == 1 ? 2 : 1;
    mem.mark(cur_);
    ++forwards_;
  }
  // Device ms from the previous forward's end to the last forward's beginning (-1: no earlier
  // forward, or no device clock). Call after end(): both points are then reached.
  double last_ms(DeviceMemory& mem) const { return forwards_ > 1 ? mem.marked_ms(prev_, 0) : -1; }

 private:
  int prev_ = 2, cur_ = 2;
  long forwards_ = 0;
};

}  // namespace deepinfer::model
