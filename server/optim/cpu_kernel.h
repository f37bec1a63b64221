// Conventions for the CPU update loops of the optimizer kinds.
//
// The loops reproduce torch.optim's operations in its order, rounding as
// its AVX2 CPU kernels do: `x.add(y, alpha=a)` is fma(a, y, x),
// `x.addcmul(t1, t2, value=v)` is fma(v * t1, t2, x) and
// `x.addcdiv(t1, t2, value=v)` is x + (v * t1) / t2. Every loop is compiled
// twice, for x86-64-v3 (AVX2 and FMA, where fma is one instruction; the
// loader checks the features, not the CPU model) and for baseline
// x86-64 (where it is a correct but slower library call); the dynamic
// loader picks the clone the CPU can run. Not under ThreadSanitizer: g++
// instruments the clones' resolver, which the loader runs before the
// sanitizer's runtime is up, and the program dies at start.
#ifndef DISTOPT_SERVER_OPTIM_CPU_KERNEL_H_
#define DISTOPT_SERVER_OPTIM_CPU_KERNEL_H_

#include <cmath>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define DISTOPT_CPU_KERNEL \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DISTOPT_CPU_KERNEL
#endif

namespace distopt {

// x.add(y, alpha=a)
inline float AddScaled(float x, float a, float y) { return std::fma(a, y, x); }
// x.addcmul(t1, t2, value=v)
inline float AddProduct(float x, float v, float t1, float t2) {
  return std::fma(v * t1, t2, x);
}
// x.addcdiv(t1, t2, value=v)
inline float AddQuotient(float x, float v, float t1, float t2) {
  return x + (v * t1) / t2;
}

// Calls `f` with one std::bool_constant per runtime flag, so that a loop can
// take its options as template arguments and carry no branch inside:
//   WithFlags([&](auto maximize) { Loop<decltype(maximize)::value>(); }, m);
template <typename F>
void WithFlags(F&& f) {
  f();
}
template <typename F, typename... Rest>
void WithFlags(F&& f, bool flag, Rest... rest) {
  if (flag) {
    WithFlags([&](auto... flags) { f(std::true_type{}, flags...); }, rest...);
  } else {
    WithFlags([&](auto... flags) { f(std::false_type{}, flags...); }, rest...);
  }
}

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_CPU_KERNEL_H_
