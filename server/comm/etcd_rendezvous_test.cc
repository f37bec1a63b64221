// The etcd client, store and rank claim against Debian's etcd (3.4), run
// by the test as a one-member cluster.
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "common/testing/local_etcd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/etcd_client.h"
#include "server/comm/etcd_rank_claim.h"
#include "server/comm/etcd_rendezvous_store.h"

namespace distopt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::LocalEtcd>> etcd =
        testing::LocalEtcd::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
    client_ = std::make_shared<EtcdClient>(etcd_->endpoint());
  }

  std::unique_ptr<EtcdRendezvousStore> Store(const std::string& job) {
    absl::StatusOr<EtcdRendezvous> where =
        ParseEtcdUrl(etcd_->Url(job), "--rendezvous");
    EXPECT_TRUE(where.ok()) << where.status();
    return std::make_unique<EtcdRendezvousStore>(client_, *where);
  }

  std::unique_ptr<testing::LocalEtcd> etcd_;
  std::shared_ptr<EtcdClient> client_;
};

TEST_F(EtcdTest, KeysArePutReadListedAndDeleted) {
  ASSERT_TRUE(client_->Put("/a/1", "one").ok());
  ASSERT_TRUE(client_->Put("/a/2", std::string("t\0o", 3)).ok());
  ASSERT_TRUE(client_->Put("/b/1", "other").ok());
  absl::StatusOr<std::optional<std::string>> one = client_->Get("/a/1");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, "one");
  absl::StatusOr<std::optional<std::string>> missing = client_->Get("/a/3");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> listed =
      client_->List("/a/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, ElementsAre(Pair("/a/1", "one"),
                                   Pair("/a/2", std::string("t\0o", 3))));
  ASSERT_TRUE(client_->Delete("/a/1").ok());
  EXPECT_FALSE(client_->Get("/a/1")->has_value());
}

TEST_F(EtcdTest, PutIfAbsentPutsOnceAndNamesTheHolder) {
  std::string holder;
  absl::StatusOr<bool> first = client_->PutIfAbsent("/k", "first", 0, &holder);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first);
  absl::StatusOr<bool> second =
      client_->PutIfAbsent("/k", "second", 0, &holder);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  EXPECT_EQ(holder, "first");
  EXPECT_EQ(*client_->Get("/k"), "first");
}

TEST_F(EtcdTest, ALeaseNotKeptAliveExpiresWithItsKeys) {
  absl::StatusOr<int64_t> kept = client_->GrantLease(absl::Seconds(2));
  absl::StatusOr<int64_t> left = client_->GrantLease(absl::Seconds(2));
  ASSERT_TRUE(kept.ok() && left.ok()) << kept.status() << left.status();
  ASSERT_TRUE(client_->Put("/kept", "x", *kept).ok());
  ASSERT_TRUE(client_->Put("/left", "x", *left).ok());
  // etcd expires the lease left alone within a few seconds of its ttl;
  // the one kept alive meanwhile stays.
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (client_->Get("/left")->has_value() && absl::Now() < end) {
    ASSERT_TRUE(client_->KeepAlive(*kept).ok());
    absl::SleepFor(absl::Milliseconds(300));
  }
  ASSERT_TRUE(client_->KeepAlive(*kept).ok());
  EXPECT_FALSE(client_->Get("/left")->has_value());
  EXPECT_TRUE(client_->Get("/kept")->has_value());
  EXPECT_TRUE(absl::IsNotFound(client_->KeepAlive(*left)));
  ASSERT_TRUE(client_->RevokeLease(*kept).ok());
  EXPECT_FALSE(client_->Get("/kept")->has_value());
}

TEST_F(EtcdTest, AStoreWaitsForAKeySetLater) {
  std::unique_ptr<EtcdRendezvousStore> reader = Store("job");
  std::unique_ptr<EtcdRendezvousStore> writer = Store("job");
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(300));
    ASSERT_TRUE(writer->Set("gloo/0", "address").ok());
  });
  absl::StatusOr<std::string> value = reader->Get("gloo/0", absl::Seconds(10));
  later.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "address");
  // Under the job's prefix, and another job does not see it.
  EXPECT_EQ(*client_->Get("/distopt/job/gloo/0"), "address");
  absl::Status other =
      Store("other")->Wait({"gloo/0"}, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(other)) << other;
  EXPECT_THAT(other.message(), HasSubstr("gloo/0"));
  ASSERT_TRUE(reader->Delete("gloo/0").ok());
  EXPECT_FALSE(client_->Get("/distopt/job/gloo/0")->has_value());
}

TEST_F(EtcdTest, ARankIsHeldByOneDaemonAndFreedWhenItLetsGo) {
  std::unique_ptr<EtcdRendezvousStore> store = Store("claims");
  absl::StatusOr<std::unique_ptr<EtcdRankClaim>> first = EtcdRankClaim::Acquire(
      *store, 1, "10.0.0.1:5000", absl::Seconds(2), absl::Seconds(1), nullptr);
  ASSERT_TRUE(first.ok()) << first.status();
  // Kept alive past its ttl, the claim still stands against a second one.
  absl::SleepFor(absl::Seconds(3));
  EXPECT_FALSE((*first)->lost());
  absl::StatusOr<std::unique_ptr<EtcdRankClaim>> second =
      EtcdRankClaim::Acquire(*store, 1, "10.0.0.2:5000", absl::Seconds(2),
                             absl::Milliseconds(500), nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(second.status()));
  EXPECT_THAT(second.status().message(),
              HasSubstr("rank 1 is held by the daemon at \"10.0.0.1:5000\""));
  // Another rank is free.
  EXPECT_TRUE(EtcdRankClaim::Acquire(*store, 0, "10.0.0.2:5000",
                                     absl::Seconds(2), absl::Seconds(1),
                                     nullptr)
                  .ok());
  // A graceful stop frees the rank at once: a waiting claimant takes it.
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(300));
    first->reset();
  });
  absl::StatusOr<std::unique_ptr<EtcdRankClaim>> third = EtcdRankClaim::Acquire(
      *store, 1, "10.0.0.3:5000", absl::Seconds(2), absl::Seconds(10), nullptr);
  release.join();
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(*client_->Get(store->EtcdKey(RankClaimKey(1))), "10.0.0.3:5000");
}

// Anyone who can write to etcd can put anything in a rank's claim: a
// megabyte of bytes that are not text is said escaped and cut, not copied
// into the error (which travels in gRPC metadata and a log line per call).
TEST_F(EtcdTest, AClaimHeldByGarbageSaysItQuoted) {
  std::unique_ptr<EtcdRendezvousStore> store = Store("garbage");
  std::string garbage(1 << 20, '\xff');
  garbage[0] = '\n';
  ASSERT_TRUE(client_->Put(store->EtcdKey(RankClaimKey(1)), garbage).ok());
  absl::StatusOr<std::unique_ptr<EtcdRankClaim>> claim =
      EtcdRankClaim::Acquire(*store, 1, "10.0.0.2:5000", absl::Seconds(2),
                             absl::Milliseconds(300), nullptr);
  ASSERT_FALSE(claim.ok());
  EXPECT_LT(claim.status().message().size(), 1024u);
  EXPECT_THAT(claim.status().message(), HasSubstr("(1048576 bytes)"));
  for (char c : claim.status().message()) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
}

// With no etcd there, a claim gives up at its timeout, not later, saying
// why.
TEST(EtcdAbsentTest, AClaimGivesUpAtItsTimeout) {
  absl::StatusOr<EtcdRendezvous> where =
      ParseEtcdUrl("etcd://127.0.0.1:1/job", "--rendezvous");
  ASSERT_TRUE(where.ok());
  EtcdRendezvousStore store(std::make_shared<EtcdClient>(where->endpoint),
                            *where);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<EtcdRankClaim>> claim = EtcdRankClaim::Acquire(
      store, 0, "10.0.0.1:5000", absl::Seconds(5), absl::Seconds(1), nullptr);
  ASSERT_FALSE(claim.ok());
  EXPECT_TRUE(absl::IsUnavailable(claim.status()) ||
              absl::IsDeadlineExceeded(claim.status()))
      << claim.status();
  EXPECT_THAT(claim.status().message(), HasSubstr("etcd at 127.0.0.1:1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(EtcdUrlTest, OnlyEtcdUrlsWithAnAddressAndAJobAreTaken) {
  absl::StatusOr<EtcdRendezvous> where =
      ParseEtcdUrl("etcd://node1:2379/run-7", "--rendezvous");
  ASSERT_TRUE(where.ok()) << where.status();
  EXPECT_EQ(where->endpoint, "node1:2379");
  EXPECT_EQ(where->job, "run-7");
  EXPECT_EQ(where->Prefix(), "/distopt/run-7/");
  EXPECT_EQ(where->Url(), "etcd://node1:2379/run-7");
  for (const char* bad :
       {"node1:2379", "etcd://node1:2379", "etcd://node1/job",
        "etcd://node1:0/job", "etcd://node1:2379/", "etcd://node1:2379/a/b",
        "etcd://:2379/job", "etcd://node1:99999/job"}) {
    absl::StatusOr<EtcdRendezvous> parsed = ParseEtcdUrl(bad, "--rendezvous");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(),
                HasSubstr("expected etcd://HOST:PORT/JOB"));
  }
}

}  // namespace
}  // namespace distopt
