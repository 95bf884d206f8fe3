// A one-line progress bar on stderr for long host work (model loading): "label [=====>    ] 12/43 layers,
// 3.1 s". DEEPINFER_PROGRESS: auto (only when stderr is a terminal), 1 (always, one line per update
// when not a terminal: logs and tests read it), 0 (never).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace deepinfer {

class Progress {
 public:
  Progress(std::string label, int64_t total, std::string unit);
  ~Progress();  // ends the line
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(int64_t done);
  bool shown() const { return on_; }

 private:
  std::string label_, unit_;
  int64_t total_;
  bool on_ = false, tty_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace deepinfer
