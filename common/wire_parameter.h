// ParameterInfo <-> distopt.v1.ParameterInfo.
#ifndef DISTOPT_COMMON_WIRE_PARAMETER_H_
#define DISTOPT_COMMON_WIRE_PARAMETER_H_

#include "absl/status/statusor.h"
#include "common/parameter_info.h"
#include "proto/distopt/v1/parameter.pb.h"

namespace distopt {

void ParameterInfoToProto(const ParameterInfo& info, v1::ParameterInfo* proto);

// INVALID_ARGUMENT when the message holds an unknown dtype or device.
absl::StatusOr<ParameterInfo> ParameterInfoFromProto(
    const v1::ParameterInfo& proto);

}  // namespace distopt

#endif  // DISTOPT_COMMON_WIRE_PARAMETER_H_
