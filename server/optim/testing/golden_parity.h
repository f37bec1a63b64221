// Runs a golden case from torch.optim on one device and checks every
// parameter, state tensor and step count after every step: fp32 within
// 1e-6 relative (or 1e-7 absolute near zero), fp16 and bf16 within one
// unit in the last place. Reports through GoogleTest.
#ifndef DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_PARITY_H_
#define DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_PARITY_H_

#include <vector>

#include "common/device.h"
#include "server/optim/testing/golden_cases.h"

namespace distopt {

void ExpectMatchesGolden(const GoldenCase& golden, const Device& device);

// The shipped golden cases; a test failure if they cannot be read.
std::vector<GoldenCase> LoadGoldenCasesOrFail();

}  // namespace distopt

#endif  // DISTOPT_SERVER_OPTIM_TESTING_GOLDEN_PARITY_H_
