#include "server/autograd/autograd_engine.h"

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "server/autograd/reply_limit.h"
#include "server/params/parameter_locks.h"
#include "server/params/parameter_lookup.h"

namespace distopt {

absl::StatusOr<ForwardResult> AutogradEngine::Forward(const ForwardCall& call,
                                                      int64_t reply_limit) {
  absl::StatusOr<const AutogradOp*> op = ops_->Find(call.op);
  if (!op.ok()) return op.status();
  absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> parameters =
      FindDistinctParameters(
          *parameters_, KeysById(call.parameter_ids),
          [](size_t i) { return absl::StrCat("parameter_ids[", i, "]"); });
  if (!parameters.ok()) return parameters.status();
  AutogradContext::ForwardRecord record;
  record.op = call.op;
  absl::StatusOr<std::vector<Tensor>> outputs;
  {
    // Shared locks: a concurrent step cannot change the values mid-forward.
    SharedParameterLocks locks(*parameters);
    std::vector<const Tensor*> values;
    for (const auto& parameter : *parameters) {
      parameter->mutex().AssertReaderHeld();
      values.push_back(&parameter->values_shared_locked());
      record.parameter_ids.push_back(parameter->id());
      record.parameter_versions.push_back(parameter->version_locked());
    }
    outputs = (*op)->Forward(call.inputs, values, &record.saved, reply_limit);
  }
  if (!outputs.ok()) return outputs.status();
  int64_t output_bytes = 0;
  for (const Tensor& output : *outputs) output_bytes += output.byte_size();
  if (output_bytes > reply_limit) {
    return ReplyTooLarge("inputs: the outputs", output_bytes, reply_limit);
  }
  for (const Tensor& output : *outputs) {
    record.outputs.emplace_back(output.dtype(), output.shape());
  }
  uint64_t saved_bytes = 0;
  for (const Tensor& saved : record.saved) saved_bytes += saved.byte_size();
  absl::StatusOr<Reservation> saved_reservation =
      parameters_->budget().ReserveTotal(
          saved_bytes, absl::StrCat("tensors saved by a forward of ", call.op,
                                    " in context ", call.context_id));
  if (!saved_reservation.ok()) return saved_reservation.status();
  record.saved_reservation = *std::move(saved_reservation);
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->GetOrCreate(call.context_id, call.caller);
  if (!context.ok()) return context.status();
  ForwardResult result;
  result.outputs = *std::move(outputs);
  result.forward_id = (*context)->AddForward(std::move(record));
  return result;
}

absl::StatusOr<std::vector<std::optional<Tensor>>> AutogradEngine::Backward(
    uint64_t context_id, uint64_t forward_id,
    const std::vector<Tensor>& output_gradients, int64_t reply_limit,
    absl::string_view caller) {
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(context_id, caller);
  if (!context.ok()) return context.status();
  absl::StatusOr<std::shared_ptr<const AutogradContext::ForwardRecord>> record =
      (*context)->Forward(forward_id);
  if (!record.ok()) return record.status();
  const AutogradContext::ForwardRecord& forward = **record;
  if (output_gradients.size() != forward.outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "output_gradients: ", output_gradients.size(), " tensors; expected ",
        forward.outputs.size(), " (one per output)"));
  }
  for (size_t i = 0; i < output_gradients.size(); ++i) {
    const Tensor& gradient = output_gradients[i];
    const auto& [dtype, shape] = forward.outputs[i];
    if (gradient.dtype() != dtype || gradient.shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output_gradients[", i, "]: ", DTypeName(gradient.dtype()),
          ShapeToString(gradient.shape()), "; expected ", DTypeName(dtype),
          ShapeToString(shape), " as the output"));
    }
  }
  // One backward per forward; a retry (the same output gradients) is
  // answered again without accumulating twice.
  absl::StatusOr<AutogradContext::BackwardClaim> claim =
      (*context)->BeginBackward(forward_id, DigestOf(output_gradients));
  if (!claim.ok()) return claim.status();
  const bool first = *claim == AutogradContext::BackwardClaim::kFirst;
  bool accumulated = false;
  absl::Cleanup end_claim = [&] {
    if (first) (*context)->EndBackward(forward_id, accumulated);
  };
  absl::StatusOr<std::vector<std::shared_ptr<Parameter>>> parameters =
      FindDistinctParameters(
          *parameters_, KeysById(forward.parameter_ids),
          [](size_t i) { return absl::StrCat("parameter_ids[", i, "]"); });
  if (!parameters.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "forward ", forward_id, ": ", parameters.status().message()));
  }
  absl::StatusOr<OpGradients> gradients;
  {
    SharedParameterLocks locks(*parameters);
    std::vector<const Tensor*> values;
    for (size_t i = 0; i < parameters->size(); ++i) {
      Parameter& parameter = *(*parameters)[i];
      parameter.mutex().AssertReaderHeld();
      if (parameter.version_locked() != forward.parameter_versions[i]) {
        return absl::FailedPreconditionError(absl::StrCat(
            "forward_id: parameter ", parameter.id(), " (\"", parameter.name(),
            "\") changed since forward ", forward_id, " (version ",
            forward.parameter_versions[i], " -> ", parameter.version_locked(),
            "); expected backward before the step, as torch does"));
      }
      values.push_back(&parameter.values_shared_locked());
    }
    absl::StatusOr<const AutogradOp*> op = ops_->Find(forward.op);
    if (!op.ok()) return op.status();
    gradients = (*op)->Backward(forward.saved, values, output_gradients);
  }
  if (!gradients.ok()) return gradients.status();
  int64_t reply_bytes = 0;
  for (const std::optional<Tensor>& input : gradients->inputs) {
    if (input.has_value()) reply_bytes += input->byte_size();
  }
  // Before accumulating: a refused call changes nothing.
  if (reply_bytes > reply_limit) {
    return ReplyTooLarge("the inputs' gradients", reply_bytes, reply_limit);
  }
  if (first) {
    std::vector<GradientUpdate> updates(parameters->size());
    for (size_t i = 0; i < parameters->size(); ++i) {
      OpParameterGradient& gradient = gradients->parameters[i];
      updates[i].parameter = (*parameters)[i].get();
      updates[i].dense = std::move(gradient.dense);
      updates[i].rows = std::move(gradient.rows);
      updates[i].row_values = std::move(gradient.row_values);
    }
    absl::Status status = (*context)->Accumulate(
        updates, parameters_->backend(), parameters_->budget());
    if (!status.ok()) return status;
    accumulated = true;
  }
  return std::move(gradients->inputs);
}

absl::Status AutogradEngine::AccumulateGradients(
    uint64_t context_id, const std::vector<ParameterGradient>& gradients,
    absl::string_view caller) {
  // Check every gradient before adding any, so a bad one changes nothing.
  std::vector<std::shared_ptr<Parameter>> targets;
  std::vector<GradientUpdate> updates(gradients.size());
  for (size_t i = 0; i < gradients.size(); ++i) {
    const std::string field = absl::StrCat("gradients[", i, "]");
    absl::StatusOr<std::shared_ptr<Parameter>> parameter =
        parameters_->Find(ParameterKey::ById(gradients[i].parameter_id));
    if (!parameter.ok()) {
      return absl::NotFoundError(
          absl::StrCat(field, ".parameter_id: no parameter with id ",
                       gradients[i].parameter_id));
    }
    const Tensor& gradient = gradients[i].gradient;
    if (gradient.dtype() != (*parameter)->dtype() ||
        gradient.shape() != (*parameter)->shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".gradient: ", DTypeName(gradient.dtype()),
                       ShapeToString(gradient.shape()), "; expected ",
                       DTypeName((*parameter)->dtype()),
                       ShapeToString((*parameter)->shape()), " as parameter \"",
                       (*parameter)->name(), "\""));
    }
    updates[i].parameter = parameter->get();
    updates[i].dense = gradient;  // Shares the bytes.
    targets.push_back(*std::move(parameter));
  }
  bool created = false;
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->GetOrCreate(context_id, caller, &created);
  if (!context.ok()) return context.status();
  absl::Status status = (*context)->Accumulate(updates, parameters_->backend(),
                                               parameters_->budget());
  // A refused call leaves no context behind.
  if (!status.ok() && created) contexts_->ReleaseIfUnused(*context);
  return status;
}

absl::StatusOr<std::vector<ParameterGradient>> AutogradEngine::GetGradients(
    uint64_t context_id, const std::vector<uint64_t>& parameter_ids,
    int64_t reply_limit, absl::string_view caller) {
  absl::StatusOr<std::shared_ptr<AutogradContext>> context =
      contexts_->Find(context_id, caller);
  if (!context.ok()) return context.status();
  const std::vector<uint64_t> ids =
      parameter_ids.empty() ? (*context)->GradientIds() : parameter_ids;
  std::vector<std::optional<Tensor>> gradients = (*context)->Gradients(ids);
  std::vector<ParameterGradient> result;
  int64_t bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t id = ids[i];
    std::optional<Tensor>& gradient = gradients[i];
    if (!gradient.has_value()) continue;
    bytes += gradient->byte_size();
    if (bytes > reply_limit) {
      return ReplyTooLarge("parameter_ids: the gradients asked for", bytes,
                           reply_limit);
    }
    // Host gradients are shared, not copied: the reply copies them once.
    if (gradient->device().is_cpu()) {
      result.push_back({id, *std::move(gradient)});
      continue;
    }
    absl::StatusOr<Tensor> host = gradient->CloneTo(CpuBackend());
    if (!host.ok()) return host.status();
    result.push_back({id, *std::move(host)});
  }
  return result;
}

}  // namespace distopt
