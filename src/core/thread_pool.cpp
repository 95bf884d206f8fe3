#include "core/thread_pool.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {
namespace {

class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs task(i) for i in [0, size()) with the caller as worker 0.
  void run(const std::function<void(int)>& task) {
    std::unique_lock<std::mutex> outer(run_mu_);  // one parallel region at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      pending_ = size() - 1;
      ++generation_;
    }
    cv_.notify_all();
    task(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        task = task_;
      }
      (*task)(index);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

ThreadPool& pool() {
  static ThreadPool p(cpu_thread_count());
  return p;
}

thread_local bool in_parallel_region = false;

}  // namespace

int cpu_thread_count() {
  static const int n = [] {
    if (const char* v = std::getenv("DEEPINFER_CPU_THREADS"); v && std::atoi(v) > 0) return std::atoi(v);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return n;
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body, int64_t grain) {
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(cpu_thread_count(), (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (threads <= 1 || in_parallel_region) {  // nested loops run serially inside a worker
    body(0, n);
    return;
  }
  ThreadPool& p = pool();
  threads = std::min<int64_t>(threads, p.size());
  p.run([&](int i) {
    if (i >= threads) return;
    in_parallel_region = true;
    int64_t begin = n * i / threads, end = n * (i + 1) / threads;
    if (begin < end) body(begin, end);
    in_parallel_region = false;
  });
}

}  // namespace deepinfer
