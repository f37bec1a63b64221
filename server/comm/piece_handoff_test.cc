#include "server/comm/piece_handoff.h"

#include <atomic>
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

}  // namespace
}  // namespace distopt
