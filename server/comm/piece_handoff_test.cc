#include "server/comm/piece_handoff.h"

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace distopt {
namespace {

// Pieces are taken in the order handed, each once, on a thread that is
// not the one handing them; the destructor returns once all are taken,
// even those handed just before it (a slow consumer).
TEST(PieceHandoffTest, TakesEveryPieceInOrderBesideTheCaller) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  std::vector<size_t> taken_at;
  std::vector<float> seen;
  std::atomic<bool> on_caller{false};
  const std::thread::id caller = std::this_thread::get_id();
  {
    auto take = [&](size_t at, absl::Span<const float> piece) {
      if (std::this_thread::get_id() == caller) on_caller = true;
      absl::SleepFor(absl::Milliseconds(5));
      taken_at.push_back(at);
      seen.insert(seen.end(), piece.begin(), piece.end());
    };
    PieceHandoff handoff(take);
    handoff.Hand(0, absl::MakeConstSpan(values.data(), 2));
    handoff.Hand(2, absl::MakeConstSpan(values.data() + 2, 3));
    handoff.Hand(5, absl::MakeConstSpan(values.data() + 5, 1));
  }
  EXPECT_FALSE(on_caller);
  EXPECT_EQ(taken_at, (std::vector<size_t>{0, 2, 5}));
  EXPECT_EQ(seen, values);
}

// Hand returns at once; taken() counts a piece only once its take has
// returned, and AwaitTaken waits for that.
TEST(PieceHandoffTest, TakenCountsPiecesOnlyOnceDone) {
  std::atomic<bool> release{false};
  std::atomic<int> returned{0};
  auto take = [&](size_t, absl::Span<const float>) {
    while (!release) absl::SleepFor(absl::Milliseconds(1));
    ++returned;
  };
  PieceHandoff handoff(take);
  const float value = 1;
  handoff.Hand(0, absl::MakeConstSpan(&value, 1));
  handoff.Hand(1, absl::MakeConstSpan(&value, 1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(handoff.taken(), 0u);
  release = true;
  handoff.AwaitTaken(2);
  EXPECT_EQ(returned, 2);
  EXPECT_EQ(handoff.taken(), 2u);
}

// A take that throws does not end the process from the handoff's thread:
// the pieces after it are counted, not taken, and Finish throws the
// exception on the caller's thread once all are done.
TEST(PieceHandoffTest, FinishThrowsWhatATakeThrew) {
  std::vector<size_t> taken_at;
  auto take = [&](size_t at, absl::Span<const float>) {
    if (at == 1) throw std::runtime_error("take failed");
    taken_at.push_back(at);
  };
  PieceHandoff handoff(take);
  const float value = 1;
  for (size_t at = 0; at < 3; ++at) {
    handoff.Hand(at, absl::MakeConstSpan(&value, 1));
  }
  EXPECT_THROW(
      {
        try {
          handoff.Finish();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "take failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(handoff.taken(), 3u);
  EXPECT_EQ(taken_at, std::vector<size_t>{0});
}

// Nothing handed: Finish and the destructor return at once.
TEST(PieceHandoffTest, NothingHandedFinishesAtOnce) {
  bool called = false;
  auto take = [&](size_t, absl::Span<const float>) { called = true; };
  {
    PieceHandoff handoff(take);
    handoff.AwaitTaken(0);
    handoff.Finish();
    EXPECT_EQ(handoff.taken(), 0u);
  }
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace distopt
