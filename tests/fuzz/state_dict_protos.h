// The optimizers' state dicts as the daemon's services send them
// (GetStateDict) and take them (LoadStateDict, once the chunks are read):
// what the state-dict targets load and compare, and what the seed writer
// saves for them.
#ifndef DISTOPT_TESTS_FUZZ_STATE_DICT_PROTOS_H_
#define DISTOPT_TESTS_FUZZ_STATE_DICT_PROTOS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/distopt/v1/local_sgd.pb.h"
#include "proto/distopt/v1/optimizer.pb.h"
#include "proto/distopt/v1/zero.pb.h"
#include "server/optim/functional_optimizer.h"
#include "server/zero/zero_runner.h"
#include "tests/fuzz/fuzz_support.h"

namespace distopt {
namespace fuzz {

// `dict` as OptimizerServiceImpl::GetStateDict sends it; aborts (as
// CheckOk), naming `what`, when `dict` is an error.
v1::OptimizerStateDict CheckedStateDictProto(
    const absl::StatusOr<OptimizerStateDict>& dict, absl::string_view what);

// As ZeroServiceImpl::GetStateDict, after consolidating on rank 0.
absl::StatusOr<v1::ZeroStateDict> GetZeroStateDict(Daemon& daemon);
// The runner's form of `proto`, as ZeroServiceImpl::LoadStateDict makes it.
absl::StatusOr<NamedStateDict> ZeroStateDictFromProto(
    const v1::ZeroStateDict& proto);
// As ZeroServiceImpl::LoadStateDict: a dict that does not convert still
// goes to the runner (its collective), as the error.
absl::Status LoadZeroStateDict(Daemon& daemon, const v1::ZeroStateDict& proto);

// As LocalSgdServiceImpl::GetStateDict.
absl::StatusOr<v1::PostLocalSgdStateDict> GetLocalSgdStateDict(Daemon& daemon);
// The averager's step `proto` loads: its own, or none (the step is kept).
std::optional<int64_t> LoadedStep(const v1::PostLocalSgdStateDict& proto);
// As LocalSgdServiceImpl::LoadStateDict.
absl::Status LoadLocalSgdStateDict(Daemon& daemon,
                                   const v1::PostLocalSgdStateDict& proto);

}  // namespace fuzz
}  // namespace distopt

#endif  // DISTOPT_TESTS_FUZZ_STATE_DICT_PROTOS_H_
