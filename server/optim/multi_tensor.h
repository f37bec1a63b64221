// The multi-tensor CUDA step: what the host passes to one fused kernel that
// updates every parameter of one dtype in a single launch. Plain C++ shared
// by the kinds (host) and multi_tensor_cuda.cu (nvcc), which keeps Abseil
// out of nvcc's way.
//
// The device code does the same fp32 arithmetic as the CPU loops
// (cpu_kernel.h): explicit fused multiply-adds where torch's AVX2 kernels
// have them and none elsewhere (nvcc runs with --fmad=false), so CPU and
// GPU results agree with the same golden vectors.
#ifndef DISTOPT_SERVER_OPTIM_MULTI_TENSOR_H_
#define DISTOPT_SERVER_OPTIM_MULTI_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

namespace distopt {
namespace multi_tensor {

constexpr int kMaxBuffers = 3;
constexpr int kMaxTensorScalars = 4;
constexpr int kMaxScalars = 8;

enum ElementType : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// One parameter: its values, gradient and state buffers (fp32) on the
// device, and the scalars that depend on its own step count.
struct TensorArgs {
  void* param = nullptr;
  const void* grad = nullptr;
  float* buffers[kMaxBuffers] = {nullptr, nullptr, nullptr};
  int64_t size = 0;
  float scalars[kMaxTensorScalars] = {0, 0, 0, 0};
};

enum class Op : int32_t {
  kSgd,
  kAdam,  // AdamW too, with the decoupled flag.
  kAdagrad,
  kAdadelta,
  kAdamax,
  kRmsprop,
  kRprop,
};

// Flag bits; each kind reads the ones it knows.
enum Flag : uint32_t {
  kMaximize = 1u << 0,
  kWeightDecay = 1u << 1,
  kMomentum = 1u << 2,
  kNesterov = 1u << 3,
  kDecoupled = 1u << 4,
  kAmsgrad = 1u << 5,
  kCentered = 1u << 6,
};

struct Launch {
  int device = 0;
  Op op = Op::kSgd;
  ElementType type = kFloat32;
  uint32_t flags = 0;
  float scalars[kMaxScalars] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<TensorArgs> tensors;
};

// Runs the step on the device and waits for it; returns "" or the CUDA
// error. Without a CUDA build it says so.
std::string Run(const Launch& launch);

}  // namespace multi_tensor
}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_MULTI_TENSOR_H_
