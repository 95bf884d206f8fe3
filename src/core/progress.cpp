#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/env.h"
#include "core/error.h"

namespace deepinfer {

Progress::Progress(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(std::max<int64_t>(total, 1)),
      start_(std::chrono::steady_clock::now()) {
  const std::string mode = env_string("DEEPINFER_PROGRESS");
  check(mode == "auto" || mode == "1" || mode == "0", "DEEPINFER_PROGRESS = '", mode, "': not auto, 1 or 0");
  tty_ = isatty(fileno(stderr)) != 0;
  on_ = mode == "1" || (mode == "auto" && tty_);
  update(0);
}

Progress::~Progress() {
  if (on_ && tty_) std::fputc('\n', stderr);
}

void Progress::update(int64_t done) {
  if (!on_) return;
  constexpr int kWidth = 30;
  done = std::clamp<int64_t>(done, 0, total_);
  const int fill = static_cast<int>(kWidth * done / total_);
  std::string bar(kWidth, ' ');
  std::fill_n(bar.begin(), fill, '=');
  if (fill < kWidth && done > 0) bar[fill] = '>';
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // A terminal redraws one line; a log gets one line per update.
  std::fprintf(stderr, "%s%s [%s] %lld/%lld %s, %.1f s%s", tty_ ? "\r" : "", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(), s, tty_ ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace deepinfer
