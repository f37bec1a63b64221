#include "common/fill.h"

#include <algorithm>
#include <cstring>

#include "common/half.h"

namespace distopt {

uint64_t EncodeScalar(DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat32: {
      const float f = static_cast<float>(value);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      return bits;
    }
    case DType::kFloat16:
      return FloatToHalf(static_cast<float>(value));
    case DType::kBFloat16:
      return FloatToBFloat16(static_cast<float>(value));
    case DType::kInt64:
      return static_cast<uint64_t>(static_cast<int64_t>(value));
  }
  return 0;
}

void FillHost(void* dst, DType dtype, size_t count, double value) {
  const uint64_t bits = EncodeScalar(dtype, value);
  switch (ElementSize(dtype)) {
    case 2:
      std::fill_n(static_cast<uint16_t*>(dst), count,
                  static_cast<uint16_t>(bits));
      break;
    case 4:
      std::fill_n(static_cast<uint32_t*>(dst), count,
                  static_cast<uint32_t>(bits));
      break;
    case 8:
      std::fill_n(static_cast<uint64_t*>(dst), count, bits);
      break;
  }
}

void AddHost(void* dst, const void* src, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kFloat32: {
      float* out = static_cast<float*>(dst);
      const float* in = static_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) out[i] += in[i];
      break;
    }
    case DType::kFloat16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      const uint16_t* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) {
        out[i] = FloatToHalf(HalfToFloat(out[i]) + HalfToFloat(in[i]));
      }
      break;
    }
    case DType::kBFloat16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      const uint16_t* in = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) {
        out[i] =
            FloatToBFloat16(BFloat16ToFloat(out[i]) + BFloat16ToFloat(in[i]));
      }
      break;
    }
    case DType::kInt64: {
      int64_t* out = static_cast<int64_t*>(dst);
      const int64_t* in = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < count; ++i) out[i] += in[i];
      break;
    }
  }
}

}  // namespace distopt
