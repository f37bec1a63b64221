// A 1 GiB parameter survives a write and a read through the client intact.
#include <cstdint>

#include "gtest/gtest.h"
#include "tests/worker_fixture.h"

namespace distopt {
namespace {

class LargeParameterTest : public testing::WorkerTest {};

TEST_F(LargeParameterTest, OneGibibyteRoundTripsIntact) {
  constexpr int64_t kElements = (int64_t{1} << 30) / 4;
  Tensor values = *Tensor::AllocateHost(DType::kFloat32, {kElements});
  // A pattern in which every 4-byte word differs from its neighbours, so a
  // chunk written to the wrong offset cannot go unnoticed.
  uint32_t* words = static_cast<uint32_t*>(values.data());
  for (int64_t i = 0; i < kElements; ++i) {
    words[i] = static_cast<uint32_t>(i * 2654435761u);
  }
  absl::StatusOr<RemoteParameter> p =
      client_.CreateParameterFrom(address_, "one_gib", values);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<ParameterInfo> info = client_.GetParameter(*p);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->byte_size, int64_t{1} << 30);

  absl::StatusOr<Tensor> read = client_.ReadParameter(*p);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->byte_size(), values.byte_size());
  const uint32_t* got = static_cast<const uint32_t*>(read->data());
  for (int64_t i = 0; i < kElements; ++i) {
    ASSERT_EQ(got[i], words[i]) << "word " << i;
  }
}

}  // namespace
}  // namespace distopt
