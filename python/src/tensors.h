// Tensors between Python and the client library. Python hands the binding
// a C-contiguous buffer (a numpy array, or a CPU torch tensor's numpy view)
// with the name of its dtype; bfloat16, which numpy lacks, travels as its
// int16 bits. The binding borrows the buffer for the call (no copy) and
// returns host tensors as numpy arrays that own the client's memory (no
// copy either).
#ifndef DISTOPT_PYTHON_SRC_TENSORS_H_
#define DISTOPT_PYTHON_SRC_TENSORS_H_

#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/tensor.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"

namespace distopt {
namespace python {

// "float32", "float16", "bfloat16" or "int64" (common/dtype.h's names);
// raises ValueError naming `argument` for anything else.
DType DTypeFromName(const std::string& name, const std::string& argument);

// Tensors over Python buffers, and the buffer exports that pin their
// memory: while an export lives its exporter refuses to resize or free the
// memory (a bytearray or array.array resized by another thread mid-call, a
// call abandoned by Ctrl-C), so hand keep_alive() to the call.
class BorrowedTensors {
 public:
  // A tensor over `buffer`'s memory. Raises ValueError naming `argument`
  // when the buffer is not C-contiguous or its elements are not `dtype`'s.
  Tensor Borrow(const pybind11::buffer& buffer, const std::string& dtype,
                const std::string& argument);
  // The exports, to keep alive as long as the tensors are used.
  pybind11::object keep_alive() const { return exports_; }

 private:
  pybind11::list exports_;
};

// (array, dtype name): the array owns `tensor`'s memory; bfloat16 comes as
// int16 bits.
pybind11::tuple ToArray(Tensor tensor);

}  // namespace python
}  // namespace distopt

#endif  // DISTOPT_PYTHON_SRC_TENSORS_H_
