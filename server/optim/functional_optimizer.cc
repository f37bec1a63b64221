#include "server/optim/functional_optimizer.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "common/half.h"
#include "common/thread_pool.h"

namespace distopt {
namespace {

// Elements per parallel range: large enough that a range outweighs the
// cost of handing it to a thread.
constexpr int64_t kGrain = int64_t{1} << 16;

}  // namespace

absl::StatusOr<std::unique_ptr<FunctionalOptimizer>>
FunctionalOptimizer::Create(
    const OptimizerKind* kind,
    const absl::flat_hash_map<std::string, HyperValue>& hyperparameters,
    std::vector<ParameterLayout> parameters, Device device,
    MemoryBudget* budget) {
  absl::StatusOr<std::shared_ptr<Backend>> backend = GetBackend(device);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<Hyperparameters> resolved =
      ResolveHyperparameters(kind->hyperparameters(), hyperparameters);
  if (!resolved.ok()) return resolved.status();
  absl::Status status = kind->Validate(*resolved);
  if (!status.ok()) return status;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!IsFloatingPoint(parameters[i].dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("params[", i, "]: ", DTypeName(parameters[i].dtype),
                       "; expected a float32, float16 or bfloat16 parameter"));
    }
    absl::StatusOr<int64_t> count =
        CheckedNumElements(parameters[i].shape, parameters[i].dtype,
                           absl::StrCat("params[", i, "].shape"));
    if (!count.ok()) return count.status();
  }
  std::unique_ptr<FunctionalOptimizer> optimizer(
      new FunctionalOptimizer(kind, *std::move(resolved), std::move(parameters),
                              *std::move(backend), budget));
  status = optimizer->ReserveStateFor(optimizer->hyperparameters_);
  if (!status.ok()) return status;
  if (kind->creates_state_eagerly()) {
    for (size_t i = 0; i < optimizer->layouts_.size(); ++i) {
      absl::StatusOr<bool> created = optimizer->EnsureBuffers(i);
      if (!created.ok()) return created.status();
    }
  }
  return optimizer;
}

FunctionalOptimizer::FunctionalOptimizer(const OptimizerKind* kind,
                                         Hyperparameters h,
                                         std::vector<ParameterLayout> layouts,
                                         std::shared_ptr<Backend> backend,
                                         MemoryBudget* budget)
    : kind_(kind),
      hyperparameters_(std::move(h)),
      layouts_(std::move(layouts)),
      backend_(std::move(backend)),
      budget_(budget),
      states_(layouts_.size()),
      slices_(layouts_.size()) {}

absl::Status FunctionalOptimizer::SetHyperparameters(
    const absl::flat_hash_map<std::string, HyperValue>& changes) {
  absl::StatusOr<Hyperparameters> resolved = ResolveHyperparameters(
      kind_->hyperparameters(), changes, &hyperparameters_);
  if (!resolved.ok()) return resolved.status();
  absl::Status status = kind_->Validate(*resolved);
  if (!status.ok()) return status;
  status = ReserveStateFor(*resolved);
  if (!status.ok()) return status;
  hyperparameters_ = *std::move(resolved);
  // A step under way slice by slice would go on with other hyperparameters
  // (and perhaps buffers it has not made): its next slice is refused.
  slices_.assign(layouts_.size(), SliceProgress());
  return absl::OkStatus();
}

absl::Status FunctionalOptimizer::CheckParameter(size_t index,
                                                 const Tensor& param) const {
  const ParameterLayout& layout = layouts_[index];
  if (param.dtype() == layout.dtype && param.shape() == layout.shape &&
      param.device() == device()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("params[", index, "]: ", param.DebugString(), "; expected ",
                   DTypeName(layout.dtype), ShapeToString(layout.shape), " on ",
                   device().ToString()));
}

absl::Status FunctionalOptimizer::CheckInputs(
    absl::Span<Tensor* const> params,
    absl::Span<const Tensor* const> grads) const {
  if (params.size() != layouts_.size() || grads.size() != layouts_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "params: ", params.size(), " parameters and ", grads.size(),
        " gradients; expected ", layouts_.size(), " of each"));
  }
  for (size_t i = 0; i < layouts_.size(); ++i) {
    const ParameterLayout& layout = layouts_[i];
    absl::Status status = CheckParameter(i, *params[i]);
    if (!status.ok()) return status;
    if (grads[i] == nullptr) continue;
    const Tensor& grad = *grads[i];
    if (grad.dtype() != layout.dtype || grad.shape() != layout.shape ||
        grad.device() != device()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grads[", i, "]: ", grad.DebugString(), "; expected ",
                       DTypeName(layout.dtype), ShapeToString(layout.shape),
                       " on ", device().ToString()));
    }
  }
  return absl::OkStatus();
}

uint64_t FunctionalOptimizer::MaxStateBytes(const Hyperparameters& h) const {
  const uint64_t buffers = kind_->StateBuffers(h).size();
  uint64_t elements = 0;
  for (const ParameterLayout& layout : layouts_) {
    elements += static_cast<uint64_t>(NumElements(layout.shape));
  }
  return buffers * elements * sizeof(float);
}

absl::Status FunctionalOptimizer::ReserveStateFor(const Hyperparameters& h) {
  if (budget_ == nullptr) return absl::OkStatus();
  return budget_->Resize(state_reservation_, MaxStateBytes(h),
                         "the optimizer's state");
}

absl::StatusOr<bool> FunctionalOptimizer::EnsureBuffers(size_t index) {
  ParameterState& state = states_[index];
  bool created = false;
  // Buffers may be added later, when hyperparameters change (momentum
  // turned on, say); they are kept in the kind's order.
  std::vector<std::pair<std::string, Tensor>> buffers;
  for (const StateBufferSpec& spec : kind_->StateBuffers(hyperparameters_)) {
    auto it = std::find_if(
        state.buffers.begin(), state.buffers.end(),
        [&](const auto& entry) { return entry.first == spec.name; });
    if (it != state.buffers.end()) {
      buffers.push_back(std::move(*it));
      continue;
    }
    absl::StatusOr<Tensor> buffer =
        Tensor::Allocate(backend_, DType::kFloat32, layouts_[index].shape);
    if (!buffer.ok()) return buffer.status();
    absl::Status filled =
        backend_->Fill(buffer->data(), DType::kFloat32, buffer->num_elements(),
                       static_cast<float>(spec.initial_value));
    if (!filled.ok()) return filled;
    buffers.emplace_back(spec.name, *std::move(buffer));
    created = true;
  }
  state.buffers = std::move(buffers);
  return created;
}

void FunctionalOptimizer::CountStep(size_t index) {
  // A loaded count may be the largest there is: it stays there.
  if (states_[index].step < std::numeric_limits<int64_t>::max()) {
    ++states_[index].step;
  }
  // A step begun slice by slice and never finished (its bucket step
  // failed) is over.
  slices_[index] = SliceProgress();
}

absl::Status FunctionalOptimizer::Step(absl::Span<Tensor* const> params,
                                       absl::Span<const Tensor* const> grads) {
  absl::Status status = CheckInputs(params, grads);
  if (!status.ok()) return status;
  // Allocate every buffer before the first update, so that running out of
  // memory leaves every parameter as it was.
  std::vector<Range> ranges;
  for (size_t i = 0; i < layouts_.size(); ++i) {
    if (grads[i] == nullptr) continue;
    absl::StatusOr<bool> created = EnsureBuffers(i);
    if (!created.ok()) return created.status();
    Range range;
    range.index = i;
    range.param = params[i]->data();
    range.grad = grads[i]->data();
    range.count = params[i]->num_elements();
    range.fresh = *created;
    ranges.push_back(range);
  }
  for (const Range& range : ranges) CountStep(range.index);
  return Update(ranges);
}

absl::Status FunctionalOptimizer::StepSlice(size_t index, Tensor& param,
                                            int64_t begin, const Tensor& grad) {
  if (index >= layouts_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("params[", index, "]: no such parameter; expected 0 to ",
                     static_cast<int64_t>(layouts_.size()) - 1));
  }
  absl::Status status = CheckParameter(index, param);
  if (!status.ok()) return status;
  const ParameterLayout& layout = layouts_[index];
  const int64_t total = param.num_elements();
  const int64_t count = grad.num_elements();
  if (grad.dtype() != layout.dtype || grad.device() != device() || count < 1 ||
      begin < 0 || begin > total - count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grads[", index, "]: ", grad.DebugString(), " from element ", begin,
        "; expected a slice of 1 to ", total, " ", DTypeName(layout.dtype),
        " elements within the parameter's ", total, ", on ",
        device().ToString()));
  }
  SliceProgress& progress = slices_[index];
  if (begin != 0 && begin != progress.next) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grads[", index, "]: a slice from element ", begin, "; expected ",
        progress.next == 0
            ? std::string("the step's first slice, from element 0")
            : absl::StrCat("the slice from element ", progress.next),
        " (a parameter's slices are stepped in order)"));
  }
  if (begin == 0) {
    absl::StatusOr<bool> created = EnsureBuffers(index);
    if (!created.ok()) return created.status();
    CountStep(index);
    progress.fresh = *created;
  }
  Range range;
  range.index = index;
  range.param = param.data();
  range.grad = grad.data();
  range.begin = begin;
  range.count = count;
  range.fresh = progress.fresh;
  progress.next = begin + count == total ? 0 : begin + count;
  return Update({range});
}

absl::Status FunctionalOptimizer::Update(const std::vector<Range>& ranges) {
  if (!device().is_cpu()) return UpdateOnCuda(ranges);
  for (const Range& range : ranges) UpdateOnCpu(range);
  return absl::OkStatus();
}

absl::Status FunctionalOptimizer::UpdateOnCuda(
    const std::vector<Range>& ranges) {
  for (const DType dtype :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    multi_tensor::Launch launch;
    launch.device = device().index;
    launch.type = dtype == DType::kFloat32   ? multi_tensor::kFloat32
                  : dtype == DType::kFloat16 ? multi_tensor::kFloat16
                                             : multi_tensor::kBFloat16;
    std::vector<int64_t> steps;
    std::vector<bool> fresh_in_launch;
    const size_t element = ElementSize(dtype);
    for (const Range& range : ranges) {
      if (layouts_[range.index].dtype != dtype) continue;
      ParameterState& state = states_[range.index];
      multi_tensor::TensorArgs args;
      args.param = static_cast<char*>(range.param) + range.begin * element;
      args.grad = range.grad;
      args.size = range.count;
      for (size_t b = 0; b < state.buffers.size(); ++b) {
        args.buffers[b] =
            static_cast<float*>(state.buffers[b].second.data()) + range.begin;
      }
      launch.tensors.push_back(args);
      steps.push_back(state.step);
      fresh_in_launch.push_back(range.fresh);
    }
    if (launch.tensors.empty()) continue;
    absl::Status status = kind_->PrepareCudaLaunch(hyperparameters_, steps,
                                                   fresh_in_launch, launch);
    if (!status.ok()) return status;
    const std::string error = multi_tensor::Run(launch);
    if (!error.empty()) {
      return absl::InternalError(absl::StrCat(
          device().ToString(), ": optimizer step failed: ", error));
    }
  }
  return absl::OkStatus();
}

void FunctionalOptimizer::UpdateOnCpu(const Range& range) {
  ParameterState& state = states_[range.index];
  const DType dtype = layouts_[range.index].dtype;
  const size_t element = ElementSize(dtype);
  char* const param_at =
      static_cast<char*>(range.param) + range.begin * element;
  const char* const grad_at = static_cast<const char*>(range.grad);
  ThreadPool::Default().ParallelFor(
      range.count, kGrain, [&](int64_t begin, int64_t end) {
        const int64_t count = end - begin;
        std::vector<float*> buffers;
        for (auto& entry : state.buffers) {
          buffers.push_back(static_cast<float*>(entry.second.data()) +
                            range.begin + begin);
        }
        UpdateArgs args;
        args.hyperparameters = &hyperparameters_;
        args.step = state.step;
        args.fresh_buffers = range.fresh;
        args.buffers = buffers.data();
        args.count = count;
        char* param_bytes = param_at + begin * element;
        const char* grad_bytes = grad_at + begin * element;
        if (dtype == DType::kFloat32) {
          args.param = reinterpret_cast<float*>(param_bytes);
          args.grad = reinterpret_cast<const float*>(grad_bytes);
          kind_->Update(args);
          return;
        }
        // Half precision: update an fp32 copy, then round to nearest even.
        std::vector<float> param32(count);
        std::vector<float> grad32(count);
        WidenToFloat(dtype, param_bytes, absl::MakeSpan(param32));
        WidenToFloat(dtype, grad_bytes, absl::MakeSpan(grad32));
        args.param = param32.data();
        args.grad = grad32.data();
        kind_->Update(args);
        NarrowFromFloat(param32, dtype, param_bytes);
      });
}

absl::StatusOr<OptimizerStateDict> FunctionalOptimizer::StateDict(
    const std::string& kind_name, OptimizerStateDict recycled) const {
  OptimizerStateDict dict;
  dict.kind = kind_name;
  OptimizerStateDict::ParamGroup group;
  group.hyperparameters = hyperparameters_.values();
  for (size_t i = 0; i < layouts_.size(); ++i) group.params.push_back(i);
  dict.param_groups.push_back(std::move(group));
  for (size_t i = 0; i < states_.size(); ++i) {
    const ParameterState& state = states_[i];
    if (state.step == 0 && state.buffers.empty()) continue;
    OptimizerStateDict::Entry entry;
    if (kind_->has_step_state()) entry.step = state.step;
    auto old = recycled.state.find(static_cast<int64_t>(i));
    for (const auto& [name, buffer] : state.buffers) {
      Tensor* reuse = nullptr;
      if (old != recycled.state.end()) {
        for (auto& [old_name, old_buffer] : old->second.buffers) {
          if (old_name == name && old_buffer.owns_storage() &&
              old_buffer.device().is_cpu() &&
              old_buffer.dtype() == buffer.dtype() &&
              old_buffer.shape() == buffer.shape()) {
            reuse = &old_buffer;
          }
        }
      }
      if (reuse != nullptr) {
        absl::Status copied = backend_->CopyToHost(reuse->data(), buffer.data(),
                                                   buffer.byte_size());
        if (!copied.ok()) return copied;
        entry.buffers.emplace_back(name, *reuse);
        continue;
      }
      absl::StatusOr<Tensor> copy = buffer.CloneTo(CpuBackend());
      if (!copy.ok()) return copy.status();
      entry.buffers.emplace_back(name, *std::move(copy));
    }
    dict.state[static_cast<int64_t>(i)] = std::move(entry);
  }
  return dict;
}

absl::Status FunctionalOptimizer::LoadStateDict(
    const std::string& kind_name, const OptimizerStateDict& dict) {
  return Load(kind_name, dict, /*adopt=*/false);
}

absl::Status FunctionalOptimizer::LoadStateDict(const std::string& kind_name,
                                                OptimizerStateDict&& dict) {
  return Load(kind_name, dict, /*adopt=*/true);
}

absl::Status FunctionalOptimizer::Load(const std::string& kind_name,
                                       const OptimizerStateDict& dict,
                                       bool adopt) {
  if (dict.kind != kind_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "state_dict.kind: \"", dict.kind, "\"; expected \"", kind_name, "\""));
  }
  if (dict.param_groups.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dict.param_groups: ", dict.param_groups.size(),
                     " groups; expected 1"));
  }
  const OptimizerStateDict::ParamGroup& group = dict.param_groups[0];
  if (group.params.size() != layouts_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dict.param_groups[0].params: ", group.params.size(),
                     " parameters; expected ", layouts_.size()));
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    if (group.params[i] != static_cast<int64_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("state_dict.param_groups[0].params[", i,
                       "]: ", group.params[i], "; expected ", i));
    }
  }
  absl::StatusOr<Hyperparameters> h =
      ResolveHyperparameters(kind_->hyperparameters(), group.hyperparameters);
  if (!h.ok()) return h.status();
  absl::Status status = kind_->Validate(*h);
  if (!status.ok()) return status;
  const std::vector<StateBufferSpec> expected = kind_->StateBuffers(*h);

  std::vector<ParameterState> states(layouts_.size());
  for (const auto& [index, entry] : dict.state) {
    const std::string field = absl::StrCat("state_dict.state[", index, "]");
    if (index < 0 || index >= static_cast<int64_t>(layouts_.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": no such parameter; expected 0 to ", layouts_.size() - 1));
    }
    if (kind_->has_step_state() != entry.step.has_value() ||
        (entry.step.has_value() && *entry.step < 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".step: ",
          kind_->has_step_state() ? "expected a count >= 0"
                                  : "expected none for this kind"));
    }
    ParameterState& state = states[index];
    state.step = entry.step.value_or(0);
    for (const StateBufferSpec& spec : expected) {
      auto it = std::find_if(
          entry.buffers.begin(), entry.buffers.end(),
          [&](const auto& buffer) { return buffer.first == spec.name; });
      if (it == entry.buffers.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": missing \"", spec.name, "\""));
      }
      const Tensor& given = it->second;
      if (given.dtype() != DType::kFloat32 ||
          given.shape() != layouts_[index].shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".", spec.name, ": ", given.DebugString(),
            "; expected float32", ShapeToString(layouts_[index].shape)));
      }
      if (adopt && given.owns_storage() &&
          given.device() == backend_->device()) {
        state.buffers.emplace_back(spec.name, given);  // Shares the storage.
        continue;
      }
      absl::StatusOr<Tensor> copy = given.CloneTo(backend_);
      if (!copy.ok()) return copy.status();
      state.buffers.emplace_back(spec.name, *std::move(copy));
    }
    if (entry.buffers.size() != expected.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": ", entry.buffers.size(), " state tensors; expected ",
          expected.size(), " for these hyperparameters"));
    }
  }
  // The dict's hyperparameters may need more state than the current ones.
  status = ReserveStateFor(*h);
  if (!status.ok()) return status;
  hyperparameters_ = *std::move(h);
  states_ = std::move(states);
  slices_.assign(layouts_.size(), SliceProgress());  // A new state's steps.
  return absl::OkStatus();
}

}  // namespace distopt
