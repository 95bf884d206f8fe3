// cpu::torch_topk (backends/cpu/torch_topk.h) for one row, callable on the host and the device, with
// the CPU's exact tie order: the same libstdc++ algorithms on (value, index) pairs compared by value
// only — std::partial_sort (heap select, then sort_heap), std::nth_element (introselect) and std::sort
// (introsort with threshold 16, then insertion sort), step for step as GCC's bits/stl_algo.h and
// stl_heap.h run them. The CUDA ops run it with one thread per row; tests/backends/torch_topk_port_test
// checks it against the CPU on tie-heavy rows.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DEEPINFER_HD __host__ __device__
#else
#define DEEPINFER_HD
#endif

namespace deepinfer::cuda::topk {

struct Elem {
  float v;
  int32_t i;
};

// torch_topk's comparator: NaN before everything else, then larger values first.
DEEPINFER_HD inline bool before(const Elem& x, const Elem& y) { return (x.v != x.v && y.v == y.v) || x.v > y.v; }
DEEPINFER_HD inline void swap(Elem& a, Elem& b) {
  const Elem t = a;
  a = b;
  b = t;
}
DEEPINFER_HD inline int64_t floor_log2(int64_t n) {
  int64_t r = -1;
  for (; n; n >>= 1) ++r;
  return r;
}

// --- heaps (stl_heap.h) over f[0, len)
DEEPINFER_HD inline void push_heap(Elem* f, int64_t hole, int64_t top, Elem value) {
  int64_t parent = (hole - 1) / 2;
  while (hole > top && before(f[parent], value)) {
    f[hole] = f[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  f[hole] = value;
}
DEEPINFER_HD inline void adjust_heap(Elem* f, int64_t hole, int64_t len, Elem value) {
  const int64_t top = hole;
  int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (before(f[child], f[child - 1])) --child;
    f[hole] = f[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    f[hole] = f[child - 1];
    hole = child - 1;
  }
  push_heap(f, hole, top, value);
}
DEEPINFER_HD inline void make_heap(Elem* f, int64_t len) {
  if (len < 2) return;
  for (int64_t parent = (len - 2) / 2;; --parent) {
    adjust_heap(f, parent, len, f[parent]);
    if (parent == 0) return;
  }
}
// Moves f[0] to *result and sifts the old *result into the heap f[0, len).
DEEPINFER_HD inline void pop_heap(Elem* f, int64_t len, Elem* result) {
  const Elem value = *result;
  *result = f[0];
  adjust_heap(f, 0, len, value);
}
DEEPINFER_HD inline void heap_select(Elem* first, Elem* middle, Elem* last) {
  make_heap(first, middle - first);
  for (Elem* i = middle; i < last; ++i)
    if (before(*i, *first)) pop_heap(first, middle - first, i);
}
DEEPINFER_HD inline void sort_heap(Elem* first, Elem* last) {
  while (last - first > 1) {
    --last;
    pop_heap(first, last - first, last);
  }
}
DEEPINFER_HD inline void partial_sort(Elem* first, Elem* middle, Elem* last) {
  heap_select(first, middle, last);
  sort_heap(first, middle);
}

// --- insertion sorts and the partition (stl_algo.h)
DEEPINFER_HD inline void unguarded_linear_insert(Elem* last) {
  const Elem val = *last;
  Elem* next = last - 1;
  while (before(val, *next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = val;
}
DEEPINFER_HD inline void insertion_sort(Elem* first, Elem* last) {
  if (first == last) return;
  for (Elem* i = first + 1; i != last; ++i) {
    if (before(*i, *first)) {
      const Elem val = *i;
      for (Elem* p = i; p != first; --p) *p = *(p - 1);
      *first = val;
    } else {
      unguarded_linear_insert(i);
    }
  }
}
constexpr int64_t kSortThreshold = 16;
DEEPINFER_HD inline void final_insertion_sort(Elem* first, Elem* last) {
  if (last - first > kSortThreshold) {
    insertion_sort(first, first + kSortThreshold);
    for (Elem* i = first + kSortThreshold; i != last; ++i) unguarded_linear_insert(i);
  } else {
    insertion_sort(first, last);
  }
}
DEEPINFER_HD inline void move_median_to_first(Elem* result, Elem* a, Elem* b, Elem* c) {
  if (before(*a, *b)) {
    if (before(*b, *c)) swap(*result, *b);
    else if (before(*a, *c)) swap(*result, *c);
    else swap(*result, *a);
  } else if (before(*a, *c)) {
    swap(*result, *a);
  } else if (before(*b, *c)) {
    swap(*result, *c);
  } else {
    swap(*result, *b);
  }
}
DEEPINFER_HD inline Elem* unguarded_partition(Elem* first, Elem* last, Elem* pivot) {
  while (true) {
    while (before(*first, *pivot)) ++first;
    --last;
    while (before(*pivot, *last)) --last;
    if (!(first < last)) return first;
    swap(*first, *last);
    ++first;
  }
}
DEEPINFER_HD inline Elem* unguarded_partition_pivot(Elem* first, Elem* last) {
  Elem* mid = first + (last - first) / 2;
  move_median_to_first(first, first + 1, mid, last - 1);
  return unguarded_partition(first + 1, last, first);
}

// std::sort. The introsort recursion runs from an explicit stack: its subranges are disjoint and each
// one's result depends only on its contents and depth, so the processing order does not matter.
DEEPINFER_HD inline void sort(Elem* first, Elem* last) {
  if (first == last) return;
  struct Range {
    Elem *first, *last;
    int64_t depth;
  };
  Range stack[128];  // one entry per depth level: depth <= 2 * 63
  int top = 0;
  stack[top++] = {first, last, floor_log2(last - first) * 2};
  while (top > 0) {
    Range r = stack[--top];
    while (r.last - r.first > kSortThreshold) {
      if (r.depth == 0) {
        partial_sort(r.first, r.last, r.last);
        break;
      }
      --r.depth;
      Elem* cut = unguarded_partition_pivot(r.first, r.last);
      stack[top++] = {cut, r.last, r.depth};
      r.last = cut;
    }
  }
  final_insertion_sort(first, last);
}

// std::nth_element.
DEEPINFER_HD inline void nth_element(Elem* first, Elem* nth, Elem* last) {
  if (first == last || nth == last) return;
  int64_t depth = floor_log2(last - first) * 2;
  while (last - first > 3) {
    if (depth == 0) {
      heap_select(first, nth + 1, last);
      swap(*first, *nth);  // the nth element to its final place
      return;
    }
    --depth;
    Elem* cut = unguarded_partition_pivot(first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(first, last);
}

// cpu::torch_topk on q[0, n) = (v[j], j): afterwards q[0, k) holds the selection in its order.
DEEPINFER_HD inline void torch_topk(Elem* q, int64_t n, int64_t k, bool sorted) {
  if (k <= 0 || k > n) return;
  if (k * 64 <= n) {
    partial_sort(q, q + k, q + n);
  } else {
    nth_element(q, q + (k - 1), q + n);
    if (sorted) sort(q, q + (k - 1));
  }
}

}  // namespace deepinfer::cuda::topk
