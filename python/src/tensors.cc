#include "python/src/tensors.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distopt {
namespace python {
namespace py = pybind11;

DType DTypeFromName(const std::string& name, const std::string& argument) {
  for (DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64}) {
    if (name == DTypeName(dtype)) return dtype;
  }
  throw py::value_error(
      absl::StrCat(argument, ": dtype ", name,
                   "; expected float32, float16, bfloat16 or int64"));
}

namespace {

// The struct-module format characters of `dtype`'s elements (bfloat16
// travels as its int16 bits); a leading native or little-endian mark is
// allowed (this is a little-endian machine).
bool FormatMatches(const char* format, DType dtype) {
  std::string f = format == nullptr ? "B" : format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) {
    f = f.substr(1);
  }
  switch (dtype) {
    case DType::kFloat32:
      return f == "f";
    case DType::kFloat16:
      return f == "e";
    case DType::kBFloat16:
      return f == "h";
    case DType::kInt64:
      return f == "q" || f == "l";
  }
  return false;
}

}  // namespace

Tensor BorrowedTensors::Borrow(const py::buffer& buffer,
                               const std::string& dtype_name,
                               const std::string& argument) {
  const DType dtype = DTypeFromName(dtype_name, argument);
  // The export lives in exports_ (and so does the memory it pins).
  py::memoryview view(buffer);
  exports_.append(view);
  const Py_buffer* info = PyMemoryView_GET_BUFFER(view.ptr());
  if (!FormatMatches(info->format, dtype) ||
      static_cast<size_t>(info->itemsize) != ElementSize(dtype)) {
    throw py::value_error(
        absl::StrCat(argument, ": elements of format '",
                     info->format == nullptr ? "B" : info->format, "' (",
                     info->itemsize, " bytes); expected ", dtype_name));
  }
  Shape shape(info->shape, info->shape + info->ndim);
  // C order: each stride is the product of the sizes after it.
  int64_t expected = info->itemsize;
  for (int d = info->ndim - 1; d >= 0; --d) {
    if (info->strides != nullptr && info->shape[d] > 1 &&
        info->strides[d] != expected) {
      throw py::value_error(absl::StrCat(
          argument, ": strides [",
          absl::StrJoin(info->strides, info->strides + info->ndim, ", "),
          "] are not C-contiguous; expected a contiguous tensor (call "
          ".contiguous())"));
    }
    expected *= info->shape[d];
  }
  return Tensor::Borrow(info->buf, dtype, std::move(shape), Device::Cpu());
}

py::tuple ToArray(Tensor tensor) {
  const DType dtype = tensor.dtype();
  std::vector<py::ssize_t> shape(tensor.shape().begin(), tensor.shape().end());
  py::dtype numpy_dtype = dtype == DType::kFloat32   ? py::dtype("float32")
                          : dtype == DType::kFloat16 ? py::dtype("float16")
                          : dtype == DType::kInt64   ? py::dtype("int64")
                                                     : py::dtype("int16");
  auto* owned = new Tensor(std::move(tensor));
  py::capsule owner(
      owned, [](void* pointer) { delete static_cast<Tensor*>(pointer); });
  py::array array(numpy_dtype, shape, owned->data(), owner);
  return py::make_tuple(std::move(array), std::string(DTypeName(dtype)));
}

}  // namespace python
}  // namespace distopt
