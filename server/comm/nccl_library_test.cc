#include "server/comm/nccl_library.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NcclLibraryTest, CandidatesAreTheSonameThenTheToolkitsFolder) {
  const std::vector<std::string> candidates = NcclCandidates();
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0], "libnccl.so." + std::to_string(NCCL_MAJOR));
  EXPECT_THAT(candidates[1],
              AllOf(StartsWith("/"), EndsWith("/lib64/" + candidates[0])));
}

// dlopen() needs no GPU: the toolkit the build found has the library.
TEST(NcclLibraryTest, LoadsTheToolkitsNcclOnceWithEveryFunction) {
  absl::StatusOr<const NcclLibrary*> library = LoadNccl();
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_NE((*library)->get_unique_id, nullptr);
  EXPECT_NE((*library)->comm_init_rank_config, nullptr);
  EXPECT_NE((*library)->group_end, nullptr);
  ASSERT_NE((*library)->get_error_string, nullptr);
  EXPECT_STRNE((*library)->get_error_string(ncclInvalidArgument), "");
  absl::StatusOr<const NcclLibrary*> again = LoadNccl();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *library);
}

TEST(NcclLibraryTest, ALibraryWithoutTheFunctionsIsRefused) {
  absl::StatusOr<NcclLibrary> library = OpenNccl({"libz.so.1"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(library.status().message(),
              HasSubstr("libz.so.1 has no function ncclGetUniqueId"));
}

}  // namespace
}  // namespace distopt
