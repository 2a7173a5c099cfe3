// 16-byte vectors (GCC and Clang vector extensions) for the CPU energy's reductions and per-pixel
// formulas: loops the compiler leaves scalar without fast-math (min / max / sum reductions, float to
// double sums) written four floats or sixteen bytes at a time. SSE2 on x86-64, NEON on arm64: the
// baseline of both, no runtime dispatch. Every operation rounds as its scalar form does (no fused
// multiply-adds: the library is compiled with -ffp-contract=off).
#pragma once

#include <cstdint>
#include <cstring>

namespace torchcut_simd {

template <class T>
struct Vec {
  typedef T type __attribute__((vector_size(16)));
  static constexpr int kLanes = 16 / static_cast<int>(sizeof(T));
};

typedef Vec<float>::type f4;
typedef Vec<int32_t>::type i4;
typedef Vec<double>::type d2;

template <class V, class T>
inline V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

template <class V, class T>
inline void store(T* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

// every lane a (T the lane type)
template <class V, class T>
inline V splat(T a) {
  V v;
  for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(T)); ++i) v[i] = a;
  return v;
}

// m ? a : b lane by lane, m a comparison's result (all bits set or clear), bitwise as both compilers take it
template <class V, class M>
inline V select(M m, V a, V b) {
  return (V)(((M)a & m) | ((M)b & ~m));  // vector casts keep the bits
}

// the scalar forms `a < b ? a : b` and `a > b ? a : b` lane by lane: a NaN in `a` is never taken
template <class V>
inline V min_of(V a, V b) {
  return select(a < b, a, b);
}
template <class V>
inline V max_of(V a, V b) {
  return select(a > b, a, b);
}

}  // namespace torchcut_simd
