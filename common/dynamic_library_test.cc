#include "common/dynamic_library.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(DynamicLibraryTest, AMissingLibraryNamesEachPlaceAndTheReason) {
  std::string opened;
  absl::StatusOr<void*> handle =
      OpenFirstLibrary({"libcublas.so.0", "/nonexistent/lib64/libcublas.so.0"},
                       "cuBLAS", "libcublas.so.12", &opened);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(
      handle.status().message(),
      AllOf(HasSubstr("cuBLAS: cannot load it"), HasSubstr("libcublas.so.0: "),
            HasSubstr("/nonexistent/lib64/libcublas.so.0: "),
            HasSubstr("No such file"),
            HasSubstr("expected libcublas.so.12 on LD_LIBRARY_PATH")));
}

TEST(DynamicLibraryTest, OpensTheFirstThatLoadsAndFindsItsFunctions) {
  std::string opened;
  absl::StatusOr<void*> handle = OpenFirstLibrary(
      {"libnothing.so.0", "libz.so.1"}, "zlib", "libz.so.1", &opened);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(opened, "libz.so.1");
  const char* (*version)() = nullptr;
  ASSERT_TRUE(ResolveFunction(*handle, opened, "zlibVersion", "zlib", "zlib 1",
                              &version)
                  .ok());
  EXPECT_STRNE(version(), "");
  // A library without the function is refused, naming both.
  absl::Status missing = ResolveFunction(*handle, opened, "ncclGetUniqueId",
                                         "NCCL", "NCCL 2.19", &version);
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(),
              HasSubstr("NCCL: libz.so.1 has no function ncclGetUniqueId; "
                        "expected NCCL 2.19"));
}

}  // namespace
}  // namespace distopt
