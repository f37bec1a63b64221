#include "server/services/metadata_secret.h"

#include <deque>
#include <string>

#include "gtest/gtest.h"

namespace distopt {
namespace {

constexpr char kKey[] = "distopt-group-secret";

class CheckSecretTest : public ::testing::Test {
 protected:
  void Add(const std::string& key, const std::string& value) {
    // string_ref points into strings_, which keeps them.
    const std::string& k = strings_.emplace_back(key);
    const std::string& v = strings_.emplace_back(value);
    metadata_.emplace(grpc::string_ref(k), grpc::string_ref(v));
  }

  std::deque<std::string> strings_;
  CallMetadata metadata_;
};

TEST_F(CheckSecretTest, OneMatchingValuePasses) {
  Add("other", "x");
  Add(kKey, "sixteen-byte-key");
  EXPECT_EQ(CheckSecret(metadata_, kKey, "sixteen-byte-key"),
            SecretCheck::kMatches);
}

TEST_F(CheckSecretTest, NoValueIsMissing) {
  Add("other", "sixteen-byte-key");
  EXPECT_EQ(CheckSecret(metadata_, kKey, "sixteen-byte-key"),
            SecretCheck::kMissing);
}

// Even when one of them is right: a check that read only one could be
// passed with the other.
TEST_F(CheckSecretTest, TwoValuesAreRefused) {
  Add(kKey, "sixteen-byte-key");
  Add(kKey, "another-value");
  EXPECT_EQ(CheckSecret(metadata_, kKey, "sixteen-byte-key"),
            SecretCheck::kRepeated);
}

TEST_F(CheckSecretTest, AnotherValueIsWrong) {
  Add(kKey, "sixteen-byte-kez");
  EXPECT_EQ(CheckSecret(metadata_, kKey, "sixteen-byte-key"),
            SecretCheck::kWrong);
  EXPECT_EQ(CheckSecret(metadata_, kKey, "sixteen-byte-key-longer"),
            SecretCheck::kWrong);
}

}  // namespace
}  // namespace distopt
