#include "server/autograd/cublas_library.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(CublasLibraryTest, CandidatesAreTheSonameThenTheToolkitsFolder) {
  const std::vector<std::string> candidates = CublasCandidates();
  ASSERT_EQ(candidates.size(), 2u);
  EXPECT_EQ(candidates[0], "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  EXPECT_THAT(candidates[1],
              AllOf(StartsWith("/"), EndsWith("/lib64/" + candidates[0])));
}

// dlopen() needs no GPU: the toolkit the build found has the library.
TEST(CublasLibraryTest, LoadsTheToolkitsCublasOnceAndKeepsIt) {
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_NE((*library)->create, nullptr);
  EXPECT_NE((*library)->sgemm, nullptr);
  absl::StatusOr<const CublasLibrary*> again = LoadCublas();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *library);
}

TEST(CublasLibraryTest, ALibraryWithoutTheFunctionsIsRefused) {
  absl::StatusOr<CublasLibrary> library = OpenCublas({"libz.so.1"});
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(library.status().message(),
              HasSubstr("libz.so.1 has no function cublasCreate_v2"));
}

}  // namespace
}  // namespace distopt
