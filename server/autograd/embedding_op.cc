// embedding: row lookup, as torch.nn.functional.embedding. Inputs: int64
// indices of any shape. Parameter: table [num_embeddings, dim] float32.
// Output: indices.shape + [dim]. Backward gives the table's gradient by row:
// only the rows used are accumulated. Tables on a GPU gather there.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "common/cpu_backend.h"
#include "server/autograd/cuda_embedding.h"
#include "server/autograd/op_registry.h"
#include "server/autograd/reply_limit.h"

namespace distopt {
namespace {

class EmbeddingOp : public AutogradOp {
 public:
  absl::StatusOr<std::vector<Tensor>> Forward(
      absl::Span<const Tensor> inputs, absl::Span<const Tensor* const> params,
      std::vector<Tensor>* saved, int64_t output_limit) const override {
    if (inputs.size() != 1 || params.size() != 1) {
      return absl::InvalidArgumentError(
          "inputs, parameter_ids: embedding expects 1 input (indices) and 1 "
          "parameter (the table)");
    }
    const Tensor& indices = inputs[0];
    const Tensor& table = *params[0];
    if (indices.dtype() != DType::kInt64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[0]: ", indices.DebugString(), "; expected int64 indices"));
    }
    if (table.dtype() != DType::kFloat32 || table.shape().size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter_ids[0]: ", table.DebugString(),
                       "; expected a float32 [num_embeddings, dim] table"));
    }
    const int64_t rows = table.shape()[0];
    const int64_t dim = table.shape()[1];
    const int64_t* index = static_cast<const int64_t*>(indices.data());
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      if (index[i] < 0 || index[i] >= rows) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[0]: index ", index[i], " at position ", i,
                         " is out of range; expected 0 to ", rows - 1));
      }
    }
    absl::Status fits = CheckFloatReplyFits(
        "inputs: the outputs", indices.num_elements(), dim, output_limit);
    if (!fits.ok()) return fits;
    Shape shape = indices.shape();
    shape.push_back(dim);
    if (table.device().is_cuda()) {
      absl::StatusOr<Tensor> gathered = GatherOnGpu(table, indices, shape);
      if (!gathered.ok()) return gathered.status();
      saved->push_back(indices);
      return std::vector<Tensor>{*std::move(gathered)};
    }
    absl::StatusOr<Tensor> out = Tensor::AllocateHost(DType::kFloat32, shape);
    if (!out.ok()) return out.status();
    const float* source = static_cast<const float*>(table.data());
    float* target = static_cast<float*>(out->data());
    for (int64_t i = 0; i < indices.num_elements(); ++i) {
      std::memcpy(target + i * dim, source + index[i] * dim,
                  dim * sizeof(float));
    }
    saved->push_back(indices);
    return std::vector<Tensor>{*std::move(out)};
  }

  absl::StatusOr<OpGradients> Backward(
      absl::Span<const Tensor> saved, absl::Span<const Tensor* const> params,
      absl::Span<const Tensor> output_gradients) const override {
    const Tensor& indices = saved[0];
    const int64_t dim = params[0]->shape()[1];
    OpGradients gradients;
    gradients.inputs.push_back(std::nullopt);
    OpParameterGradient table;
    const int64_t* index = static_cast<const int64_t*>(indices.data());
    table.rows.assign(index, index + indices.num_elements());
    // The output gradient is already [count, dim] in memory.
    table.row_values = Tensor::Borrow(
        const_cast<void*>(output_gradients[0].data()), DType::kFloat32,
        {indices.num_elements(), dim}, Device::Cpu());
    gradients.parameters.push_back(std::move(table));
    return gradients;
  }

 private:
  // Gathers on the GPU, returns the rows in host memory for the wire.
  static absl::StatusOr<Tensor> GatherOnGpu(const Tensor& table,
                                            const Tensor& indices,
                                            const Shape& shape) {
    absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(table.device());
    if (!gpu.ok()) return gpu.status();
    absl::StatusOr<Tensor> rows =
        Tensor::Allocate(*gpu, DType::kFloat32, shape);
    if (!rows.ok()) return rows.status();
    const std::string error = cuda_embedding::Gather(
        table.device().index, static_cast<const float*>(table.data()),
        static_cast<const int64_t*>(indices.data()), indices.num_elements(),
        table.shape()[1], static_cast<float*>(rows->data()));
    if (!error.empty()) {
      return absl::InternalError(absl::StrCat("embedding on the GPU: ", error));
    }
    return rows->CloneTo(CpuBackend());
  }
};

}  // namespace

std::unique_ptr<AutogradOp> MakeEmbeddingOp() {
  return std::make_unique<EmbeddingOp>();
}

}  // namespace distopt
