// linear: y = x W^T + b, as torch.nn.functional.linear: OpenBLAS for
// parameters on the CPU, cuBLAS for parameters on a GPU. Inputs: x [N, in]
// float32 (from the wire, in host memory). Parameters: W [out, in],
// optionally b [out], on one device.
#include <cblas.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/backend.h"
#include "common/cpu_backend.h"
#include "server/autograd/cuda_linear.h"
#include "server/autograd/op_registry.h"
#include "server/autograd/reply_limit.h"

namespace distopt {
namespace {

absl::Status RequireFloat32(const Tensor& t, absl::string_view field,
                            const Device& device) {
  if (t.dtype() == DType::kFloat32 && t.device() == device) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", t.DebugString(),
                                                 "; linear expects float32 on ",
                                                 device.ToString()));
}

absl::Status FromCuda(const std::string& error) {
  if (error.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("linear on the GPU: ", error));
}

class LinearOp : public AutogradOp {
 public:
  absl::StatusOr<std::vector<Tensor>> Forward(
      absl::Span<const Tensor> inputs, absl::Span<const Tensor* const> params,
      std::vector<Tensor>* saved, int64_t output_limit) const override {
    if (inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs: ", inputs.size(), " tensors; linear expects 1 (x)"));
    }
    if (params.size() != 1 && params.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter_ids: ", params.size(),
                       " parameters; linear expects weight and optional bias"));
    }
    const Tensor& x = inputs[0];
    const Tensor& w = *params[0];
    absl::Status status = RequireFloat32(x, "inputs[0]", Device::Cpu());
    if (status.ok()) status = RequireFloat32(w, "parameter_ids[0]", w.device());
    if (!status.ok()) return status;
    if (w.shape().size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter_ids[0]: weight ", ShapeToString(w.shape()),
                       "; expected [out_features, in_features]"));
    }
    const int64_t out = w.shape()[0];
    const int64_t in = w.shape()[1];
    if (x.shape().size() != 2 || x.shape()[1] != in) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[0]: x ", ShapeToString(x.shape()),
                       "; expected [N, ", in, "]"));
    }
    if (params.size() == 2) {
      status = RequireFloat32(*params[1], "parameter_ids[1]", w.device());
      if (!status.ok()) return status;
      if (params[1]->shape() != Shape{out}) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter_ids[1]: bias ", ShapeToString(params[1]->shape()),
            "; expected [", out, "]"));
      }
    }
    const int64_t n = x.shape()[0];
    status = CheckFloatReplyFits("inputs: the outputs", n, out, output_limit);
    if (!status.ok()) return status;
    if (w.device().is_cuda()) {
      return ForwardOnGpu(x, params, n, in, out, saved);
    }
    absl::StatusOr<Tensor> y = Tensor::AllocateHost(DType::kFloat32, {n, out});
    if (!y.ok()) return y.status();
    float* yv = static_cast<float*>(y->data());
    if (n > 0 && out > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f,
                  static_cast<const float*>(x.data()), in,
                  static_cast<const float*>(w.data()), in, 0.0f, yv, out);
      if (params.size() == 2) {
        const float* b = static_cast<const float*>(params[1]->data());
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < out; ++c) yv[r * out + c] += b[c];
        }
      }
    }
    saved->push_back(x);
    return std::vector<Tensor>{*std::move(y)};
  }

  absl::StatusOr<OpGradients> Backward(
      absl::Span<const Tensor> saved, absl::Span<const Tensor* const> params,
      absl::Span<const Tensor> output_gradients) const override {
    const Tensor& x = saved[0];
    const Tensor& w = *params[0];
    const Tensor& dy = output_gradients[0];
    const int64_t n = x.shape()[0];
    const int64_t in = x.shape()[1];
    const int64_t out = w.shape()[0];
    if (w.device().is_cuda()) return BackwardOnGpu(x, params, dy, n, in, out);
    absl::StatusOr<Tensor> dx = Tensor::AllocateHost(DType::kFloat32, {n, in});
    absl::StatusOr<Tensor> dw =
        Tensor::AllocateHost(DType::kFloat32, {out, in});
    if (!dx.ok()) return dx.status();
    if (!dw.ok()) return dw.status();
    const float* dyv = static_cast<const float*>(dy.data());
    std::memset(dx->data(), 0, dx->byte_size());
    std::memset(dw->data(), 0, dw->byte_size());
    if (n > 0 && in > 0 && out > 0) {
      // dx = dy W;  dW = dy^T x.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f,
                  dyv, out, static_cast<const float*>(w.data()), in, 0.0f,
                  static_cast<float*>(dx->data()), in);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f,
                  dyv, out, static_cast<const float*>(x.data()), in, 0.0f,
                  static_cast<float*>(dw->data()), in);
    }
    OpGradients gradients;
    gradients.inputs.push_back(*std::move(dx));
    gradients.parameters.push_back({*std::move(dw), {}, Tensor()});
    if (params.size() == 2) {
      absl::StatusOr<Tensor> db = Tensor::AllocateHost(DType::kFloat32, {out});
      if (!db.ok()) return db.status();
      float* dbv = static_cast<float*>(db->data());
      for (int64_t c = 0; c < out; ++c) dbv[c] = 0;
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < out; ++c) dbv[c] += dyv[r * out + c];
      }
      gradients.parameters.push_back({*std::move(db), {}, Tensor()});
    }
    return gradients;
  }

 private:
  // The GPU path: x and dy are copied over, the outputs and dx back; the
  // parameters' gradients stay on the GPU for the context.
  static absl::StatusOr<std::vector<Tensor>> ForwardOnGpu(
      const Tensor& x, absl::Span<const Tensor* const> params, int64_t n,
      int64_t in, int64_t out, std::vector<Tensor>* saved) {
    const Device device = params[0]->device();
    absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(device);
    if (!gpu.ok()) return gpu.status();
    absl::StatusOr<Tensor> x_gpu = x.CloneTo(*gpu);
    if (!x_gpu.ok()) return x_gpu.status();
    absl::StatusOr<Tensor> y_gpu =
        Tensor::Allocate(*gpu, DType::kFloat32, {n, out});
    if (!y_gpu.ok()) return y_gpu.status();
    absl::Status status = FromCuda(cuda_linear::Forward(
        device.index, static_cast<const float*>(x_gpu->data()),
        static_cast<const float*>(params[0]->data()),
        params.size() == 2 ? static_cast<const float*>(params[1]->data())
                           : nullptr,
        static_cast<float*>(y_gpu->data()), n, in, out));
    if (!status.ok()) return status;
    absl::StatusOr<Tensor> y = y_gpu->CloneTo(CpuBackend());
    if (!y.ok()) return y.status();
    saved->push_back(*std::move(x_gpu));
    return std::vector<Tensor>{*std::move(y)};
  }

  static absl::StatusOr<OpGradients> BackwardOnGpu(
      const Tensor& x_gpu, absl::Span<const Tensor* const> params,
      const Tensor& dy, int64_t n, int64_t in, int64_t out) {
    const Device device = params[0]->device();
    absl::StatusOr<std::shared_ptr<Backend>> gpu = GetBackend(device);
    if (!gpu.ok()) return gpu.status();
    absl::StatusOr<Tensor> dy_gpu = dy.CloneTo(*gpu);
    absl::StatusOr<Tensor> dx_gpu =
        Tensor::Allocate(*gpu, DType::kFloat32, {n, in});
    absl::StatusOr<Tensor> dw =
        Tensor::Allocate(*gpu, DType::kFloat32, {out, in});
    absl::StatusOr<Tensor> db = Tensor::Allocate(*gpu, DType::kFloat32, {out});
    for (const auto* t : {&dy_gpu, &dx_gpu, &dw, &db}) {
      if (!t->ok()) return t->status();
    }
    const bool with_bias = params.size() == 2;
    absl::Status status = FromCuda(cuda_linear::Backward(
        device.index, static_cast<const float*>(dy_gpu->data()),
        static_cast<const float*>(x_gpu.data()),
        static_cast<const float*>(params[0]->data()),
        static_cast<float*>(dx_gpu->data()), static_cast<float*>(dw->data()),
        with_bias ? static_cast<float*>(db->data()) : nullptr, n, in, out));
    if (!status.ok()) return status;
    absl::StatusOr<Tensor> dx = dx_gpu->CloneTo(CpuBackend());
    if (!dx.ok()) return dx.status();
    OpGradients gradients;
    gradients.inputs.push_back(*std::move(dx));
    gradients.parameters.push_back({*std::move(dw), {}, Tensor()});
    if (with_bias)
      gradients.parameters.push_back({*std::move(db), {}, Tensor()});
    return gradients;
  }
};

}  // namespace

std::unique_ptr<AutogradOp> MakeLinearOp() {
  return std::make_unique<LinearOp>();
}

}  // namespace distopt
