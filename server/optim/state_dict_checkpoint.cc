#include "server/optim/state_dict_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/cpu_backend.h"
#include "server/optim/wire_optimizer.h"

namespace distopt {

void StateValuesWriter::Add(const OptimizerStateDict& dict,
                            checkpoint::SavedStateDict* saved) {
  saved->set_kind(dict.kind);
  for (const OptimizerStateDict::ParamGroup& group : dict.param_groups) {
    checkpoint::SavedParamGroup* out = saved->add_param_groups();
    for (const auto& [name, value] : group.hyperparameters) {
      (*out->mutable_hyperparameters())[name] = HyperValueToProto(value);
    }
    for (int64_t index : group.params) out->add_params(index);
  }
  for (const auto& [index, entry] : dict.state) {
    checkpoint::SavedParameterState* state = saved->add_state();
    state->set_index(index);
    if (entry.step.has_value()) state->set_step(*entry.step);
    for (const auto& [name, buffer] : entry.buffers) {
      checkpoint::SavedBuffer* out = state->add_buffers();
      out->set_name(name);
      for (int64_t d : buffer.shape()) out->add_shape(d);
      out->set_offset(size_);
      size_ += buffer.byte_size();
      buffers_.push_back(buffer);
    }
  }
}

CheckpointSection StateValuesWriter::Section(const std::string& name) const {
  // Where each buffer starts, to find the one an offset falls in.
  std::vector<uint64_t> starts;
  uint64_t start = 0;
  for (const Tensor& buffer : buffers_) {
    starts.push_back(start);
    start += buffer.byte_size();
  }
  CheckpointSection section;
  section.name = name;
  section.size = size_;
  section.read = [buffers = buffers_, starts](size_t offset, size_t length,
                                              char* out) {
    size_t i = std::upper_bound(starts.begin(), starts.end(), offset) -
               starts.begin() - 1;
    while (length > 0) {
      const size_t within = offset - starts[i];
      const size_t take = std::min(length, buffers[i].byte_size() - within);
      std::memcpy(out, static_cast<const char*>(buffers[i].data()) + within,
                  take);
      out += take;
      offset += take;
      length -= take;
      ++i;
    }
    return absl::OkStatus();
  };
  return section;
}

namespace {

absl::Status Damaged(const std::string& section, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("section ", section, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<OptimizerStateDict>> ReadStateDicts(
    const std::vector<const checkpoint::SavedStateDict*>& saved,
    const CheckpointSections& sections, const std::string& values_section) {
  absl::StatusOr<uint64_t> size = sections.Size(values_section);
  if (!size.ok()) return size.status();
  // The headers first: every buffer where the previous one ended, shapes
  // that fit the section, before anything is allocated.
  std::vector<OptimizerStateDict> dicts(saved.size());
  // Where the values go: every buffer's tensor, in the section's order.
  std::vector<absl::Span<char>> destinations;
  uint64_t expected = 0;
  for (size_t d = 0; d < saved.size(); ++d) {
    const checkpoint::SavedStateDict& proto = *saved[d];
    OptimizerStateDict& dict = dicts[d];
    dict.kind = proto.kind();
    for (const checkpoint::SavedParamGroup& group : proto.param_groups()) {
      OptimizerStateDict::ParamGroup out;
      absl::StatusOr<absl::flat_hash_map<std::string, HyperValue>> values =
          HyperparametersFromProto(group.hyperparameters(), "hyperparameters");
      if (!values.ok()) {
        return Damaged(values_section, values.status().message());
      }
      out.hyperparameters = *std::move(values);
      out.params.assign(group.params().begin(), group.params().end());
      dict.param_groups.push_back(std::move(out));
    }
    for (const checkpoint::SavedParameterState& state : proto.state()) {
      if (dict.state.count(state.index()) > 0) {
        return Damaged(values_section,
                       absl::StrCat("state[", state.index(), "] twice"));
      }
      OptimizerStateDict::Entry& entry = dict.state[state.index()];
      if (state.has_step()) entry.step = state.step();
      for (const checkpoint::SavedBuffer& buffer : state.buffers()) {
        const std::string what =
            absl::StrCat("state[", state.index(), "].", buffer.name());
        if (buffer.offset() != expected) {
          return Damaged(values_section,
                         absl::StrCat(what, " at byte ", buffer.offset(),
                                      "; expected ", expected));
        }
        uint64_t elements = 1;
        for (int64_t d : buffer.shape()) {
          if (d < 0 || (d > 0 && elements > (*size / sizeof(float)) /
                                                static_cast<uint64_t>(d))) {
            return Damaged(values_section,
                           absl::StrCat(what,
                                        ": a shape larger than the "
                                        "section"));
          }
          elements *= static_cast<uint64_t>(d);
        }
        expected += elements * sizeof(float);
        if (expected > *size) {
          return Damaged(
              values_section,
              absl::StrCat(what, " ends past the section's ", *size, " bytes"));
        }
        entry.buffers.emplace_back(buffer.name(), Tensor());
      }
    }
  }
  if (expected != *size) {
    return Damaged(values_section, absl::StrCat(*size,
                                                " bytes; the state "
                                                "dicts hold ",
                                                expected));
  }
  // Then the values, into tensors of the recorded shapes, in order.
  for (size_t d = 0; d < saved.size(); ++d) {
    for (const checkpoint::SavedParameterState& state : saved[d]->state()) {
      auto& buffers = dicts[d].state[state.index()].buffers;
      for (int b = 0; b < state.buffers_size(); ++b) {
        const auto& shape = state.buffers(b).shape();
        absl::StatusOr<Tensor> tensor = Tensor::AllocateHost(
            DType::kFloat32, Shape(shape.begin(), shape.end()));
        if (absl::IsInvalidArgument(tensor.status())) {
          return Damaged(values_section, tensor.status().message());
        }
        if (!tensor.ok()) return tensor.status();
        destinations.emplace_back(static_cast<char*>(tensor->data()),
                                  tensor->byte_size());
        buffers[b].second = *std::move(tensor);
      }
    }
  }
  absl::Status read = sections.ReadInto(values_section, destinations);
  if (!read.ok()) return read;
  return dicts;
}

}  // namespace distopt
