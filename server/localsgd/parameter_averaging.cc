#include "server/localsgd/parameter_averaging.h"

#include <algorithm>

#include "common/half.h"

namespace distopt {

absl::Status AverageParameters(Communicator& communicator,
                               const std::vector<Tensor*>& params,
                               std::vector<float>* storage) {
  size_t size = 0;
  for (const Tensor* p : params) size += p->num_elements();
  if (size == 0) return absl::OkStatus();
  storage->resize(size);
  size_t offset = 0;
  for (Tensor* p : params) {
    absl::Span<float> out(storage->data() + offset, p->num_elements());
    switch (p->dtype()) {
      case DType::kFloat16:
        HalfToFloat(p->host_span<uint16_t>(), out);
        break;
      case DType::kBFloat16:
        BFloat16ToFloat(p->host_span<uint16_t>(), out);
        break;
      default:
        std::copy_n(p->host_span<float>().begin(), out.size(), out.begin());
    }
    offset += out.size();
  }
  absl::Status status =
      communicator.AllReduce(absl::MakeSpan(*storage), ReduceOp::kAverage);
  if (!status.ok()) return status;
  offset = 0;
  for (Tensor* p : params) {
    absl::Span<const float> in(storage->data() + offset, p->num_elements());
    switch (p->dtype()) {
      case DType::kFloat16:
        FloatToHalf(in, p->host_span<uint16_t>());
        break;
      case DType::kBFloat16:
        FloatToBFloat16(in, p->host_span<uint16_t>());
        break;
      default:
        std::copy(in.begin(), in.end(), p->host_span<float>().begin());
    }
    offset += in.size();
  }
  return absl::OkStatus();
}

}  // namespace distopt
