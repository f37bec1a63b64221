// The fused multi-tensor optimizer step on CUDA: one launch updates every
// parameter of one dtype. Each block takes one chunk of one tensor (a chunk
// table maps blocks to tensors), so small and large tensors share a launch.
// Compiled with --fmad=false: fused multiply-adds appear exactly where the
// CPU loops (cpu_kernel.h) have them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <mutex>

#include "common/cuda_stream.h"
#include "server/optim/multi_tensor.h"

namespace distopt {
namespace multi_tensor {
namespace {

constexpr int64_t kChunkElements = 1 << 16;
constexpr int kThreads = 512;

struct Chunk {
  int32_t tensor;
  int64_t start;
};

struct Scalars {
  float v[kMaxScalars];
};

__device__ __forceinline__ float Load(const void* base, int64_t i,
                                      ElementType type) {
  switch (type) {
    case kFloat16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void Store(void* base, int64_t i, float value,
                                      ElementType type) {
  switch (type) {
    case kFloat16:
      static_cast<__half*>(base)[i] = __float2half_rn(value);
      break;
    case kBFloat16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(value);
      break;
    default:
      static_cast<float*>(base)[i] = value;
  }
}

// x.add(y, alpha=a), x.addcmul(t1, t2, value=v), x.addcdiv(t1, t2, value=v)
__device__ __forceinline__ float AddScaled(float x, float a, float y) {
  return __fmaf_rn(a, y, x);
}
__device__ __forceinline__ float AddProduct(float x, float v, float t1,
                                            float t2) {
  return __fmaf_rn(__fmul_rn(v, t1), t2, x);
}
__device__ __forceinline__ float AddQuotient(float x, float v, float t1,
                                             float t2) {
  return __fadd_rn(x, __fdiv_rn(__fmul_rn(v, t1), t2));
}

// One element of each kind, the same operations as the CPU loops.
__device__ __forceinline__ void Step(Op op, uint32_t f, const float* s,
                                     const float* ts, float* const* b,
                                     int64_t i, float& p, float g) {
  if (f & kMaximize) g = -g;
  switch (op) {
    case Op::kSgd: {  // s: lr, momentum, 1 - dampening, wd; ts: first
      if (f & kWeightDecay) g = AddScaled(g, s[3], p);
      if (f & kMomentum) {
        float& buf = b[0][i];
        buf = ts[0] != 0 ? g : AddScaled(__fmul_rn(buf, s[1]), s[2], g);
        g = (f & kNesterov) ? AddScaled(g, s[1], buf) : buf;
      }
      p = AddScaled(p, -s[0], g);
      break;
    }
    case Op::kAdam: {  // s: b1, b2, 1-b1, 1-b2, eps, l2, decay; ts: -step, bc2
      if (f & kDecoupled) {
        p = __fmul_rn(p, s[6]);
      } else if (f & kWeightDecay) {
        g = AddScaled(g, s[5], p);
      }
      float& m = b[0][i];
      float& v = b[1][i];
      m = AddScaled(__fmul_rn(m, s[0]), s[2], g);
      v = AddProduct(__fmul_rn(v, s[1]), s[3], g, g);
      float second = v;
      if (f & kAmsgrad) {
        float& max_v = b[2][i];
        max_v = fmaxf(max_v, v);
        second = max_v;
      }
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(second), ts[1]), s[4]);
      p = AddQuotient(p, ts[0], m, denom);
      break;
    }
    case Op::kAdagrad: {  // s: wd, eps; ts: -clr
      if (f & kWeightDecay) g = AddScaled(g, s[0], p);
      float& sum = b[0][i];
      sum = AddProduct(sum, 1.0f, g, g);
      p = AddQuotient(p, ts[0], g, __fadd_rn(__fsqrt_rn(sum), s[1]));
      break;
    }
    case Op::kAdadelta: {  // s: -lr, rho, 1-rho, eps, wd
      if (f & kWeightDecay) g = AddScaled(g, s[4], p);
      float& square_avg = b[0][i];
      float& acc_delta = b[1][i];
      square_avg = AddProduct(__fmul_rn(square_avg, s[1]), s[2], g, g);
      const float std_dev = __fsqrt_rn(__fadd_rn(square_avg, s[3]));
      const float delta = __fmul_rn(
          __fdiv_rn(__fsqrt_rn(__fadd_rn(acc_delta, s[3])), std_dev), g);
      acc_delta = AddProduct(__fmul_rn(acc_delta, s[1]), s[2], delta, delta);
      p = AddScaled(p, s[0], delta);
      break;
    }
    case Op::kAdamax: {  // s: b1, b2, 1-b1, eps, wd; ts: -clr
      if (f & kWeightDecay) g = AddScaled(g, s[4], p);
      float& m = b[0][i];
      float& u = b[1][i];
      m = AddScaled(__fmul_rn(m, s[0]), s[2], g);
      u = fmaxf(__fmul_rn(u, s[1]), __fadd_rn(fabsf(g), s[3]));
      p = AddQuotient(p, ts[0], m, u);
      break;
    }
    case Op::kRmsprop: {  // s: -lr, alpha, 1-alpha, eps, wd, momentum
      if (f & kWeightDecay) g = AddScaled(g, s[4], p);
      float& square_avg = b[0][i];
      square_avg = AddProduct(__fmul_rn(square_avg, s[1]), s[2], g, g);
      float avg;
      if (f & kCentered) {
        float& grad_avg = b[(f & kMomentum) ? 2 : 1][i];
        grad_avg = AddScaled(__fmul_rn(grad_avg, s[1]), s[2], g);
        avg = __fsqrt_rn(AddProduct(square_avg, -1.0f, grad_avg, grad_avg));
      } else {
        avg = __fsqrt_rn(square_avg);
      }
      avg = __fadd_rn(avg, s[3]);
      if (f & kMomentum) {
        float& buf = b[1][i];
        buf = AddQuotient(__fmul_rn(buf, s[5]), 1.0f, g, avg);
        p = AddScaled(p, s[0], buf);
      } else {
        p = AddQuotient(p, s[0], g, avg);
      }
      break;
    }
    case Op::kRprop: {  // s: etaminus, etaplus, step_min, step_max
      float& prev = b[0][i];
      float& step_size = b[1][i];
      const float product = __fmul_rn(g, prev);
      const float factor = product > 0 ? s[1] : (product < 0 ? s[0] : 1.0f);
      step_size = fminf(fmaxf(__fmul_rn(step_size, factor), s[2]), s[3]);
      if (product < 0) g = 0;
      const float sign = g > 0 ? 1.0f : (g < 0 ? -1.0f : 0.0f);
      p = AddProduct(p, -1.0f, sign, step_size);
      prev = g;
      break;
    }
  }
}

__global__ void MultiTensorStep(const TensorArgs* tensors, const Chunk* chunks,
                                Op op, ElementType type, uint32_t flags,
                                Scalars scalars) {
  const Chunk chunk = chunks[blockIdx.x];
  const TensorArgs& t = tensors[chunk.tensor];
  const int64_t end = min(chunk.start + kChunkElements, t.size);
  for (int64_t i = chunk.start + threadIdx.x; i < end; i += blockDim.x) {
    float p = Load(t.param, i, type);
    const float g = Load(t.grad, i, type);
    Step(op, flags, scalars.v, t.scalars, t.buffers, i, p, g);
    Store(t.param, i, p, type);
  }
}

// Device memory for the tensor and chunk tables, kept between launches.
struct Scratch {
  std::mutex mutex;
  void* memory = nullptr;
  size_t bytes = 0;
};

Scratch& ScratchFor(int device) {
  static Scratch scratch[64];
  return scratch[device % 64];
}

}  // namespace

std::string Run(const Launch& launch) {
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < launch.tensors.size(); ++t) {
    for (int64_t start = 0; start < launch.tensors[t].size;
         start += kChunkElements) {
      chunks.push_back({static_cast<int32_t>(t), start});
    }
  }
  if (chunks.empty()) return std::string();
  cudaError_t error = cudaSetDevice(launch.device);
  if (error != cudaSuccess) return CudaErrorText(error);

  const size_t tensor_bytes = launch.tensors.size() * sizeof(TensorArgs);
  const size_t chunk_offset = (tensor_bytes + 255) / 256 * 256;
  const size_t needed = chunk_offset + chunks.size() * sizeof(Chunk);
  Scratch& scratch = ScratchFor(launch.device);
  std::lock_guard<std::mutex> lock(scratch.mutex);
  if (scratch.bytes < needed) {
    if (scratch.memory != nullptr) cudaFree(scratch.memory);
    scratch.memory = nullptr;
    scratch.bytes = 0;
    error = cudaMalloc(&scratch.memory, needed);
    if (error != cudaSuccess) return CudaErrorText(error);
    scratch.bytes = needed;
  }
  char* base = static_cast<char*>(scratch.memory);
  // On the caller's stream, as every CUDA operation (common/cuda_stream.h).
  error = cudaMemcpyAsync(base, launch.tensors.data(), tensor_bytes,
                          cudaMemcpyHostToDevice, CallerStream());
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(base + chunk_offset, chunks.data(),
                            chunks.size() * sizeof(Chunk),
                            cudaMemcpyHostToDevice, CallerStream());
  }
  if (error != cudaSuccess) {
    // The first copy may still be queued: it may read `chunks`, and the
    // scratch is another thread's once the lock is released.
    cudaStreamSynchronize(CallerStream());
    return CudaErrorText(error);
  }
  Scalars scalars;
  for (int i = 0; i < kMaxScalars; ++i) scalars.v[i] = launch.scalars[i];
  error = LaunchOnCallerStream(
      MultiTensorStep, static_cast<unsigned>(chunks.size()), kThreads,
      reinterpret_cast<const TensorArgs*>(base),
      reinterpret_cast<const Chunk*>(base + chunk_offset), launch.op,
      launch.type, launch.flags, scalars);
  return CudaErrorText(error);
}

}  // namespace multi_tensor
}  // namespace distopt
