// The few CUDA runtime operations the CUDA backend needs, behind a plain C++
// interface so that only cuda_ops.cu is compiled by nvcc. When the build has
// no CUDA toolkit, cuda_ops_unavailable.cc provides the same functions and
// every one of them fails.
//
// Each operation returns an empty string on success and the CUDA error text
// otherwise. Copies and kernels run on the calling thread's own stream
// (common/cuda_stream.h) and are complete when the function returns: work
// on any other stream or thread sees their results. They do not wait for a
// collective in flight on NCCL's stream (a non-blocking one) nor for other
// threads' streams; they do wait for work on the legacy default stream
// (cuBLAS, the embedding gather, which synchronise the device anyway), and
// CUDA may synchronise the device for an allocation, a free or a kernel's
// first launch, so overlap holds once buffers are sized. All are safe to
// call from any thread; each selects `device` on the calling thread first.
#ifndef DISTOPT_COMMON_CUDA_OPS_H_
#define DISTOPT_COMMON_CUDA_OPS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace distopt {
namespace cuda_ops {

// Whether this binary was compiled with the CUDA toolkit.
bool BuiltWithCuda();

std::string DeviceCount(int* count);
std::string DeviceName(int device, std::string* name);
std::string Malloc(int device, size_t bytes, void** pointer);
std::string Free(int device, void* pointer);
std::string CopyHostToDevice(int device, void* dst, const void* src,
                             size_t bytes);
std::string CopyDeviceToHost(int device, void* dst, const void* src,
                             size_t bytes);
std::string CopyDeviceToDevice(int device, void* dst, const void* src,
                               size_t bytes);
// dst += src for `count` elements; `dtype` 0 fp32, 1 fp16, 2 bf16, 3 int64.
std::string Add(int device, void* dst, const void* src, int dtype,
                size_t count);
// Writes the low `element_size` bytes of `bits` (2, 4 or 8) `count` times.
std::string Fill(int device, void* dst, int element_size, uint64_t bits,
                 size_t count);
// dst[i] = src[i] converted from `src_dtype` to `dst_dtype` (0 fp32, 1 fp16,
// 2 bf16), both on the device: exact widening, narrowing rounded to
// nearest even (as common/half.h does on the host).
std::string Convert(int device, void* dst, int dst_dtype, const void* src,
                    int src_dtype, size_t count);
// Page-locked host memory, which copies to and from the device reach at
// full speed (and which a copy can overlap).
std::string MallocHost(size_t bytes, void** pointer);
std::string FreeHost(void* pointer);
// The GPU's UUID ("GPU-xxxxxxxx-..."), as nvidia-smi prints it: two
// processes (or ranks) on one host with the same UUID share that GPU,
// whatever CUDA_VISIBLE_DEVICES numbers it.
std::string DeviceUuid(int device, std::string* uuid);

}  // namespace cuda_ops
}  // namespace distopt

#endif  // DISTOPT_COMMON_CUDA_OPS_H_
