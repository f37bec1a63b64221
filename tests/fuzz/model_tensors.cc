#include "tests/fuzz/model_tensors.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/fuzz/fuzz_support.h"

namespace distopt {
namespace fuzz {
namespace {

std::vector<uint64_t> WholeModel() {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; id <= kModelParameters; ++id) ids.push_back(id);
  return ids;
}

}  // namespace

ModelTensors::ModelTensors(uint8_t gradient_byte)
    : ModelTensors(WholeModel(), gradient_byte) {}

ModelTensors::ModelTensors(absl::Span<const uint64_t> ids,
                           uint8_t gradient_byte)
    : ids_(ids.begin(), ids.end()) {
  const std::vector<CreateParameterSpec> model = ModelParameters();
  for (uint64_t id : ids_) {
    const CreateParameterSpec& spec = model[id - 1];
    layouts_.push_back({spec.dtype, spec.shape});
    params_.push_back(Tensor::AllocateHost(spec.dtype, spec.shape).value());
    std::memset(params_.back().data(), 0x3c, params_.back().byte_size());
    grads_.push_back(Tensor::AllocateHost(spec.dtype, spec.shape).value());
    std::memset(grads_.back().data(), gradient_byte, grads_.back().byte_size());
  }
}

std::vector<Tensor*> ModelTensors::Params() {
  std::vector<Tensor*> pointers;
  for (Tensor& param : params_) pointers.push_back(&param);
  return pointers;
}

std::vector<const Tensor*> ModelTensors::Grads() {
  std::vector<const Tensor*> pointers;
  for (const Tensor& grad : grads_) pointers.push_back(&grad);
  return pointers;
}

std::vector<ParamGroup> ModelTensors::Groups(
    const std::vector<NamedGroupSpec>& groups) {
  std::vector<ParamGroup> made(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    made[g].hyperparameters = groups[g].hyperparameters;
    for (const std::string& name : groups[g].parameter_names) {
      made[g].params.push_back(&params_[Position(name)]);
    }
  }
  return made;
}

GroupGradientPointers ModelTensors::GroupGrads(
    const std::vector<NamedGroupSpec>& groups) {
  const std::vector<CreateParameterSpec> model = ModelParameters();
  GroupGradientPointers made(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const std::string& name : groups[g].parameter_names) {
      const bool skipped = name == model[kFcBias - 1].name;
      made[g].push_back(skipped ? nullptr : &grads_[Position(name)]);
    }
  }
  return made;
}

size_t ModelTensors::Position(const std::string& name) const {
  const std::vector<CreateParameterSpec> model = ModelParameters();
  for (size_t i = 0; i < ids_.size(); ++i) {
    if (model[ids_[i] - 1].name == name) return i;
  }
  std::fprintf(stderr, "ModelTensors: no parameter %s\n", name.c_str());
  std::abort();
}

}  // namespace fuzz
}  // namespace distopt
