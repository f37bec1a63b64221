// Filling host buffers with one value of any dtype.
#ifndef DISTOPT_COMMON_FILL_H_
#define DISTOPT_COMMON_FILL_H_

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace distopt {

// The bit pattern of `value` in `dtype` (fp16/bf16 rounded to nearest even,
// int64 truncated toward zero), in the low bytes of the result.
uint64_t EncodeScalar(DType dtype, double value);

// Sets `count` elements of `dtype` at `dst` to `value`.
void FillHost(void* dst, DType dtype, size_t count, double value);

// dst += src for `count` floating-point elements of `dtype` in host memory;
// half precision is added in fp32 and rounded to nearest even.
void AddHost(void* dst, const void* src, DType dtype, size_t count);

}  // namespace distopt

#endif  // DISTOPT_COMMON_FILL_H_
