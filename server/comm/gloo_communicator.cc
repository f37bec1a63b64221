#include "server/comm/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/gather.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"
#include "server/comm/block_offsets.h"
#include "server/comm/collective_metrics.h"
#include "server/comm/gloo_device.h"
#include "server/comm/piece_handoff.h"

namespace distopt {
namespace {

// AllGatherSegments sends segments this large on average straight from
// and into their memory; smaller ones are packed into one buffer.
constexpr size_t kSegmentRingMinAverageBytes = size_t{256} << 10;

// Slots of the ring collectives (gloo's own prefixes are 0x01 to 0x08).
constexpr uint8_t kRingSlotPrefix = 0x41;
// The pieces the ring reduce-scatter moves blocks in: small enough to stay
// in cache between arriving and being added, large enough that a message
// costs little. A slot numbers at most 2^kChunkBits chunks of a step (the
// bits below the tag in gloo's slots); ReduceScatterBlocks' larger blocks
// take larger chunks, and ReduceScatterSegments refuses more pieces.
constexpr size_t kRingChunkBytes = size_t{1} << 20;
constexpr int kChunkBits = 24;
// The chunks a piecewise reduce-scatter's last step receives into (at
// most): two in flight while the pieces of the others are added and taken.
constexpr size_t kHandoffChunks = 4;

// How long a rank waits for a peer that gave its address to connect. gloo
// waits 5 times its context's timeout for a pair's first connection.
constexpr absl::Duration kPairConnectTimeout = absl::Seconds(10);
constexpr int kGlooConnectTimeoutFactor = 5;

// gloo's store interface over ours. gloo expects get() to block until the
// key exists and failures to be thrown.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(RendezvousStore* store, std::string prefix,
                   absl::Duration timeout, std::function<bool()> cancelled)
      : store_(store),
        prefix_(std::move(prefix)),
        timeout_(timeout),
        cancelled_(std::move(cancelled)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_->Set(Key(key), std::string(data.begin(), data.end())));
  }
  std::vector<char> get(const std::string& key) override {
    WaitInSlices({Key(key)}, timeout_);
    absl::StatusOr<std::string> value = store_->Get(Key(key), timeout_);
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  }
  // gloo passes its context's timeout, which CreateGlooCommunicator keeps
  // short while the pairs connect: waiting for a rank to arrive takes the
  // rendezvous's own.
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds&) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back(Key(key));
    WaitInSlices(prefixed, timeout_);
  }

 private:
  std::string Key(const std::string& key) const {
    return absl::StrCat(prefix_, "/", key);
  }
  // Waits in short slices, so that a cancellation is noticed.
  void WaitInSlices(const std::vector<std::string>& keys,
                    absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      if (cancelled_ && cancelled_()) {
        throw gloo::IoException("the rendezvous was cancelled");
      }
      const absl::Duration left = deadline - absl::Now();
      const absl::Duration slice = std::min(left, absl::Milliseconds(200));
      absl::Status status =
          store_->Wait(keys, std::max(slice, absl::Milliseconds(1)));
      if (status.ok()) return;
      if (status.code() != absl::StatusCode::kDeadlineExceeded) Check(status);
      if (absl::Now() >= deadline) {
        // The store names its last slice's wait; the rendezvous waited the
        // whole timeout.
        throw gloo::IoException(absl::StrCat("waited ",
                                             absl::FormatDuration(timeout),
                                             " in all: ", status.message()));
      }
    }
  }

  static void Check(const absl::Status& status) {
    if (!status.ok()) throw gloo::IoException(std::string(status.message()));
  }

  RendezvousStore* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
  const std::function<bool()> cancelled_;
};

// A ring reduce-scatter's step on one arrived chunk: out = own + in, and
// at the last step of an average times `scale` (0: a sum). `out` may be
// `own`.
void AddArrived(float* out, const float* own, const float* in, size_t length,
                float scale) {
  if (scale != 0.0f) {
    for (size_t e = 0; e < length; ++e) out[e] = (own[e] + in[e]) * scale;
  } else {
    for (size_t e = 0; e < length; ++e) out[e] = own[e] + in[e];
  }
}

// Makes `buffer` hold `n` elements at least: kept between calls, its
// capacity counts as scratch (kept_bytes), so when it must grow it grows
// to `n` exactly, not to a vector's doubling. Its values are not kept.
void GrowExactly(std::vector<float>& buffer, size_t n) {
  if (buffer.size() >= n) return;
  if (buffer.capacity() >= n) {
    buffer.resize(n);
    return;
  }
  std::vector<float>(n).swap(buffer);
}

// Runs a gloo call and turns its exceptions into a status naming `what`.
template <typename Call>
absl::Status RunGuarded(absl::string_view what, Call call) {
  try {
    call();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    const std::string message = e.what();
    const bool timed_out = message.find("imed out") != std::string::npos ||
                           message.find("not set within") != std::string::npos;
    const std::string text = absl::StrCat(what, ": ", message);
    absl::Status status = message.find("was cancelled") != std::string::npos
                              ? absl::CancelledError(text)
                              : (timed_out ? absl::DeadlineExceededError(text)
                                           : absl::UnavailableError(text));
    MarkCollectiveFailure(status);
    return status;
  } catch (const std::exception& e) {
    absl::Status status =
        absl::InternalError(absl::StrCat(what, ": ", e.what()));
    MarkCollectiveFailure(status);
    return status;
  }
}

// RunGuarded, recorded in /metrics as a collective over `bytes`.
template <typename Call>
absl::Status Guard(absl::string_view what, size_t bytes, Call call) {
  const metrics::Stopwatch timer;
  absl::Status status = RunGuarded(what, call);
  RecordCollective("gloo", what, bytes, timer.Seconds(), status);
  return status;
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context,
                   std::chrono::milliseconds timeout,
                   size_t ring_all_reduce_min_bytes)
      : context_(std::move(context)),
        timeout_(timeout),
        ring_all_reduce_min_bytes_(ring_all_reduce_min_bytes) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  // The ring reduce-scatters' chunks (two, or up to four of them handing
  // pieces on: 4 MiB at most, whatever the model) and
  // ReduceScatterSegments' partial sums (blocks of the caller's bucket)
  // too.
  int64_t kept_bytes() const override {
    return Communicator::kept_bytes() +
           static_cast<int64_t>(
               (ring_scratch_.capacity() + partial_sums_.capacity()) *
               sizeof(float));
  }
  void SetTimeout(absl::Duration timeout) override {
    timeout_ = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
  }

  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override {
    if (ring_all_reduce_min_bytes_ > 0 && size() > 1 &&
        values.size() * sizeof(float) >= ring_all_reduce_min_bytes_) {
      return RingAllReduce(values, op);
    }
    absl::Status status =
        Guard("all-reduce", values.size() * sizeof(float), [&] {
          gloo::AllreduceOptions options(context_);
          options.setOutput(values.data(), values.size());
          options.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(
                  &gloo::sum<float>));
          options.setTag(next_tag_++);
          options.setTimeout(timeout_);
          gloo::allreduce(options);
        });
    if (status.ok() && op == ReduceOp::kAverage) {
      const float scale = 1.0f / static_cast<float>(size());
      for (float& value : values) value *= scale;
    }
    return status;
  }

  absl::Status Broadcast(absl::Span<float> values, int root) override {
    return BroadcastOf(values.data(), values.size(), root);
  }

  absl::Status BroadcastBytes(absl::Span<char> bytes, int root) override {
    return BroadcastOf(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size(),
                       root);
  }

  absl::Status GatherBytes(absl::Span<const char> input,
                           absl::Span<char> output, int root) override {
    absl::Status valid = CheckRoot(root);
    if (!valid.ok()) return valid;
    if (rank() == root && output.size() != input.size() * size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output.size(), " bytes; expected ",
                       input.size() * size(), " (size x input)"));
    }
    if (input.empty()) return absl::OkStatus();  // As AllGather.
    return Guard("gather", input.size(), [&] {
      gloo::GatherOptions options(context_);
      options.setInput(
          reinterpret_cast<uint8_t*>(const_cast<char*>(input.data())),
          input.size());
      if (rank() == root) {
        options.setOutput(reinterpret_cast<uint8_t*>(output.data()),
                          output.size());
      }
      options.setRoot(root);
      options.setTag(next_tag_++);
      options.setTimeout(timeout_);
      gloo::gather(options);
    });
  }

  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    if (output.size() != input.size() * size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output.size(), " elements; expected ",
                       input.size() * size(), " (size x input)"));
    }
    // gloo divides by the input's size (SIGFPE on none); every rank passes
    // the same size, so every rank returns here alike.
    if (input.empty()) return absl::OkStatus();
    return Guard("all-gather", output.size() * sizeof(float), [&] {
      gloo::AllgatherOptions options(context_);
      options.setInput(const_cast<float*>(input.data()), input.size());
      options.setOutput(output.data(), output.size());
      options.setTag(next_tag_++);
      options.setTimeout(timeout_);
      gloo::allgather(options);
    });
  }

  absl::Status ReduceScatter(absl::Span<const float> input,
                             absl::Span<float> output, ReduceOp op) override {
    if (input.size() != output.size() * size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input: ", input.size(), " elements; expected ",
                       output.size() * size(), " (size x output)"));
    }
    std::vector<float> blocks(input.begin(), input.end());
    std::vector<size_t> counts(size(), output.size());
    absl::Status status =
        ReduceScatterBlocks(absl::MakeSpan(blocks), counts, op);
    if (!status.ok()) return status;
    std::copy_n(blocks.begin() + rank() * output.size(), output.size(),
                output.begin());
    return absl::OkStatus();
  }

  // A ring: at step s, this rank sends block (rank - s - 1) to the next
  // rank and adds block (rank - s - 2) from the previous one into its own
  // copy; after W - 1 steps its own block holds every rank's sum. Blocks
  // travel in chunks, and a chunk is added while the next one arrives (as
  // gloo's chunked ring all-reduce does), so the additions hide behind the
  // transfer. Scratch: two chunks, kept between calls.
  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size(), values.size(), "values");
    if (!offsets.ok()) return offsets.status();
    const int w = size();
    const int r = rank();
    if (w > 1) {
      const float scale = 1.0f / static_cast<float>(w);
      const size_t largest = *std::max_element(counts.begin(), counts.end());
      const size_t chunk = std::max<size_t>(kRingChunkBytes / sizeof(float),
                                            (largest >> kChunkBits) + 1);
      GrowExactly(ring_scratch_,
                  2 * std::min(chunk, std::max<size_t>(largest, 1)));
      absl::Status status =
          Guard("reduce-scatter", values.size() * sizeof(float), [&] {
            auto outgoing = context_->createUnboundBuffer(
                values.data(), values.size() * sizeof(float));
            auto received = context_->createUnboundBuffer(
                ring_scratch_.data(), ring_scratch_.size() * sizeof(float));
            const RingSlots slots = NextRingSlots();
            const Deadline deadline(timeout_);
            auto chunks = [&](size_t count) {
              return (count + chunk - 1) / chunk;
            };
            for (int s = 0; s < w - 1; ++s) {
              const int send = Mod(r - s - 1, w);
              const int receive = Mod(r - s - 2, w);
              // The last step's block is this rank's own: averaged as its
              // last sum arrives (the same roundings as a pass after it,
              // without reading the block again).
              const bool average_on_arrival =
                  op == ReduceOp::kAverage && s == w - 2;
              for (size_t c = 0; c < chunks(counts[send]); ++c) {
                const size_t length = std::min(chunk, counts[send] - c * chunk);
                outgoing->send(Mod(r + 1, w), slots.of(s, c),
                               ((*offsets)[send] + c * chunk) * sizeof(float),
                               length * sizeof(float));
              }
              const size_t receiving = chunks(counts[receive]);
              auto post = [&](size_t c) {
                const size_t length =
                    std::min(chunk, counts[receive] - c * chunk);
                received->recv(Mod(r - 1, w), slots.of(s, c),
                               (c % 2) * chunk * sizeof(float),
                               length * sizeof(float));
              };
              for (size_t c = 0; c < std::min<size_t>(2, receiving); ++c)
                post(c);
              for (size_t c = 0; c < receiving; ++c) {
                // Chunks from one peer arrive in order.
                received->waitRecv(deadline.left());
                const size_t length =
                    std::min(chunk, counts[receive] - c * chunk);
                const float* in = ring_scratch_.data() + (c % 2) * chunk;
                float* into = values.data() + (*offsets)[receive] + c * chunk;
                AddArrived(into, into, in, length,
                           average_on_arrival ? scale : 0.0f);
                if (c + 2 < receiving) post(c + 2);
              }
              for (size_t c = 0; c < chunks(counts[send]); ++c) {
                outgoing->waitSend(deadline.left());
              }
            }
          });
      if (!status.ok()) return status;
    }
    // One rank's average is its own values.
    return absl::OkStatus();
  }

  // ReduceScatterBlocks' ring over the inputs where they are: at step 0
  // a block's pieces (its spans, cut in chunks) go out straight from the
  // inputs; at a later step (W > 2) a block's partial sums go out from the
  // scratch they were added into at the step before. Each piece that
  // arrives is added to this rank's input for it: into `output` at the
  // last step (this rank's own block, averaged there as in
  // ReduceScatterBlocks, with the same roundings), into a partial sum
  // before it. Scratch: the two chunks the pieces arrive in (up to four
  // handing them on, below), and for W > 2 two blocks' partial sums; kept
  // between calls.
  absl::Status ReduceScatterSegments(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      absl::Span<float> output, ReduceOp op) override {
    return SegmentRing(inputs, &output, op, nullptr);
  }
  // The same ring, the last step's pieces averaged into the chunk they
  // arrived in and handed to `take` from there, on a thread beside the
  // ring (PieceHandoff): while one piece is taken, the next ones arrive
  // and are added. Up to four chunks, two blocks at most.
  absl::Status ReduceScatterSegmentsPiecewise(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      ReduceOp op, ReducedPieces take) override {
    return SegmentRing(inputs, nullptr, op, &take);
  }

 private:
  // ReduceScatterSegments' ring: this rank's block's reduction goes to
  // `*output` or, without one, piece by piece to `*take`.
  absl::Status SegmentRing(
      const std::vector<std::vector<absl::Span<const float>>>& inputs,
      absl::Span<float>* output, ReduceOp op, ReducedPieces* take) {
    const int w = size();
    const int r = rank();
    if (static_cast<int>(inputs.size()) != w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs: ", inputs.size(), "; expected one per rank (", w, ")"));
    }
    // Every rank cuts the same pieces: the blocks' spans are the same sizes.
    const size_t chunk = kRingChunkBytes / sizeof(float);
    std::vector<std::vector<SegmentPiece>> pieces(w);
    std::vector<size_t> counts(w, 0);
    for (int b = 0; b < w; ++b) {
      for (size_t i = 0; i < inputs[b].size(); ++i) {
        for (size_t from = 0; from < inputs[b][i].size(); from += chunk) {
          const size_t length = std::min(chunk, inputs[b][i].size() - from);
          pieces[b].push_back({i, from, length, counts[b]});
          counts[b] += length;
        }
      }
      if ((pieces[b].size() >> kChunkBits) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs[", b, "]: ", pieces[b].size(),
                         " pieces; expected fewer than ", 1 << kChunkBits));
      }
    }
    if (output != nullptr && output->size() != counts[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("output: ", output->size(), " elements; expected ",
                       counts[r], " (this rank's block)"));
    }
    if (w == 1) {
      // One rank's sum and average are its own values.
      for (const SegmentPiece& piece : pieces[r]) {
        const float* own = inputs[r][piece.segment].data() + piece.from;
        if (output == nullptr) {
          (*take)(piece.at, absl::MakeConstSpan(own, piece.length));
        } else {
          std::copy_n(own, piece.length, output->data() + piece.at);
        }
      }
      return absl::OkStatus();
    }
    const size_t largest = *std::max_element(counts.begin(), counts.end());
    const size_t window = std::min(chunk, std::max<size_t>(largest, 1));
    // Handing pieces on takes more chunks, as long as they hold two blocks
    // at most (what a caller's bucket bounds: its blocks are half of it).
    const size_t ring_chunks =
        take != nullptr
            ? std::clamp<size_t>(2 * largest / window, 2, kHandoffChunks)
            : 2;
    GrowExactly(ring_scratch_, ring_chunks * window);
    if (w > 2) GrowExactly(partial_sums_, 2 * largest);
    const float scale = 1.0f / static_cast<float>(w);
    size_t total = 0;
    for (size_t count : counts) total += count;
    return Guard("reduce-scatter", total * sizeof(float), [&] {
      auto received = context_->createUnboundBuffer(
          ring_scratch_.data(), ring_scratch_.size() * sizeof(float));
      std::unique_ptr<gloo::transport::UnboundBuffer> partial;
      if (w > 2) {
        partial = context_->createUnboundBuffer(
            partial_sums_.data(), partial_sums_.size() * sizeof(float));
      }
      const RingSlots slots = NextRingSlots();
      const Deadline deadline(timeout_);
      for (int s = 0; s < w - 1; ++s) {
        const int send = Mod(r - s - 1, w);
        const int receive = Mod(r - s - 2, w);
        const bool last = s == w - 2;
        // What this step sends from: the inputs' spans (step 0) or the
        // partial sums, with the sends from each.
        std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> spans;
        std::vector<std::pair<gloo::transport::UnboundBuffer*, size_t>> sent;
        for (size_t i = 0; i < pieces[send].size(); ++i) {
          const SegmentPiece& piece = pieces[send][i];
          gloo::transport::UnboundBuffer* from = partial.get();
          size_t offset = ((s + 1) % 2) * largest + piece.at;
          if (s == 0) {
            spans.resize(inputs[send].size());
            auto& span = spans[piece.segment];
            if (span == nullptr) {
              const absl::Span<const float> segment =
                  inputs[send][piece.segment];
              span = context_->createUnboundBuffer(
                  const_cast<float*>(segment.data()),
                  segment.size() * sizeof(float));
            }
            from = span.get();
            offset = piece.from;
          }
          from->send(Mod(r + 1, w), slots.of(s, i), offset * sizeof(float),
                     piece.length * sizeof(float));
          if (sent.empty() || sent.back().first != from) {
            sent.push_back({from, 0});
          }
          ++sent.back().second;
        }
        // Without an output, the last step's pieces are averaged where
        // they arrived (into == in, piece.at ignored), and handed on.
        float* const into = !last ? partial_sums_.data() + (s % 2) * largest
                            : output != nullptr ? output->data()
                                                : nullptr;
        const std::vector<SegmentPiece>& arriving = pieces[receive];
        // Pieces handed on are taken beside the ring (see PieceHandoff),
        // which keeps more chunks busy: one being added, some waiting to
        // be taken.
        std::optional<PieceHandoff> handoff;
        if (last && take != nullptr) handoff.emplace(*take);
        const size_t chunks = handoff ? ring_chunks : 2;
        // Receives are posted in order, each into its piece's chunk once
        // the chunk's last piece is done with.
        size_t posted = 0;
        auto post_before = [&](size_t end) {
          for (; posted < std::min(end, arriving.size()); ++posted) {
            received->recv(Mod(r - 1, w), slots.of(s, posted),
                           (posted % chunks) * window * sizeof(float),
                           arriving[posted].length * sizeof(float));
          }
        };
        post_before(chunks);
        const bool average = last && op == ReduceOp::kAverage;
        for (size_t i = 0; i < arriving.size(); ++i) {
          if (handoff && posted == i) {
            // Its chunk still holds a piece the consumer has not taken.
            handoff->AwaitTaken(i + 1 - chunks);
            post_before(handoff->taken() + chunks);
          }
          // Pieces from one peer arrive in order.
          received->waitRecv(deadline.left());
          const SegmentPiece& piece = arriving[i];
          float* const in = ring_scratch_.data() + (i % chunks) * window;
          const float* own = inputs[receive][piece.segment].data() + piece.from;
          float* const out = into != nullptr ? into + piece.at : in;
          AddArrived(out, own, in, piece.length, average ? scale : 0.0f);
          if (handoff) {
            handoff->Hand(piece.at, absl::MakeConstSpan(out, piece.length));
            post_before(handoff->taken() + chunks);
          } else {
            post_before(i + 1 + chunks);
          }
        }
        for (auto& [buffer, n] : sent) {
          for (size_t i = 0; i < n; ++i) buffer->waitSend(deadline.left());
        }
        // What a take threw, thrown here once the ring's transfers and
        // every piece are done.
        if (handoff) handoff->Finish();
      }
    });
  }

 public:
  // A ring: at step s, this rank sends block (rank - s) to the next rank
  // and receives block (rank - s - 1), in place, from the previous one.
  absl::Status AllGatherBlocks(absl::Span<char> bytes,
                               absl::Span<const size_t> counts) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size(), bytes.size(), "bytes");
    if (!offsets.ok()) return offsets.status();
    const int w = size();
    const int r = rank();
    if (w == 1) return absl::OkStatus();
    return Guard("all-gather", bytes.size(), [&] {
      auto outgoing = context_->createUnboundBuffer(bytes.data(), bytes.size());
      auto received = context_->createUnboundBuffer(bytes.data(), bytes.size());
      const RingSlots slots = NextRingSlots();
      const Deadline deadline(timeout_);
      for (int s = 0; s < w - 1; ++s) {
        const int send = Mod(r - s, w);
        const int receive = Mod(r - s - 1, w);
        if (counts[send] > 0) {
          outgoing->send(Mod(r + 1, w), slots.of(s, 0), (*offsets)[send],
                         counts[send]);
        }
        if (counts[receive] > 0) {
          received->recv(Mod(r - 1, w), slots.of(s, 0), (*offsets)[receive],
                         counts[receive]);
          received->waitRecv(deadline.left());
        }
        if (counts[send] > 0) outgoing->waitSend(deadline.left());
      }
    });
  }

  // AllGatherBlocks' ring over the segments themselves: one buffer per
  // segment, sent from and received into its own memory.
  absl::Status AllGatherSegments(
      const std::vector<std::vector<absl::Span<char>>>& blocks) override {
    const int w = size();
    const int r = rank();
    if (static_cast<int>(blocks.size()) != w) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blocks: ", blocks.size(), "; expected one per rank (", w, ")"));
    }
    if (w == 1) return absl::OkStatus();
    // Many small segments cost more as transfers of their own than as
    // copies into one buffer (measured: 200 parameters of 4 KiB took 7 ms
    // as segments, 4 ms packed): pack them.
    size_t bytes = 0, segments = 0;
    for (const auto& block : blocks) {
      for (absl::Span<char> segment : block) {
        bytes += segment.size();
        segments += segment.empty() ? 0 : 1;
      }
    }
    if (segments > 0 && bytes / segments < kSegmentRingMinAverageBytes) {
      return Communicator::AllGatherSegments(blocks);
    }
    return Guard("all-gather", bytes, [&] {
      std::vector<std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>>
          buffers(w);
      for (int b = 0; b < w; ++b) {
        for (absl::Span<char> segment : blocks[b]) {
          buffers[b].push_back(segment.empty()
                                   ? nullptr
                                   : context_->createUnboundBuffer(
                                         segment.data(), segment.size()));
        }
      }
      const RingSlots slots = NextRingSlots();
      const Deadline deadline(timeout_);
      for (int s = 0; s < w - 1; ++s) {
        auto& outgoing = buffers[Mod(r - s, w)];
        auto& incoming = buffers[Mod(r - s - 1, w)];
        for (size_t i = 0; i < incoming.size(); ++i) {
          if (incoming[i]) incoming[i]->recv(Mod(r - 1, w), slots.of(s, i));
        }
        for (size_t i = 0; i < outgoing.size(); ++i) {
          if (outgoing[i]) outgoing[i]->send(Mod(r + 1, w), slots.of(s, i));
        }
        for (auto& buffer : incoming) {
          if (buffer) buffer->waitRecv(deadline.left());
        }
        for (auto& buffer : outgoing) {
          if (buffer) buffer->waitSend(deadline.left());
        }
      }
    });
  }

  absl::Status Barrier() override {
    return Guard("barrier", 0, [&] {
      gloo::BarrierOptions options(context_);
      options.setTag(next_tag_++);
      options.setTimeout(timeout_);
      gloo::barrier(options);
    });
  }

 private:
  // Equal blocks (the first ones one element longer), each reduced on its
  // rank and then gathered by all: every rank ends with the same bytes.
  absl::Status RingAllReduce(absl::Span<float> values, ReduceOp op) {
    const size_t w = static_cast<size_t>(size());
    std::vector<size_t> counts(w, values.size() / w);
    for (size_t r = 0; r < values.size() % w; ++r) ++counts[r];
    absl::Status status = ReduceScatterBlocks(values, counts, op);
    if (!status.ok()) return status;
    std::vector<size_t> bytes;
    for (size_t count : counts) bytes.push_back(count * sizeof(float));
    return AllGatherBlocks(AsBytes(values), bytes);
  }

  // The slots of one ring collective: a tag per step (so any group size
  // fits), and below it a chunk number.
  struct RingSlots {
    uint32_t first_tag;
    uint64_t of(int step, size_t chunk) const {
      return static_cast<uint64_t>(
                 gloo::Slot::build(kRingSlotPrefix, first_tag + step)) +
             chunk;
    }
  };
  RingSlots NextRingSlots() {
    const RingSlots slots{next_tag_};
    next_tag_ += static_cast<uint32_t>(std::max(1, size() - 1));
    return slots;
  }

  // One collective's time: every wait gets what is left of the call's
  // timeout, not a fresh one.
  class Deadline {
   public:
    explicit Deadline(std::chrono::milliseconds timeout)
        : end_(std::chrono::steady_clock::now() + timeout) {}
    std::chrono::milliseconds left() const {
      return std::max(std::chrono::milliseconds(0),
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          end_ - std::chrono::steady_clock::now()));
    }

   private:
    const std::chrono::steady_clock::time_point end_;
  };

  static int Mod(int value, int modulus) {
    return ((value % modulus) + modulus) % modulus;
  }

  absl::Status CheckRoot(int root) const {
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "root: ", root, "; expected a rank from 0 to ", size() - 1));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status BroadcastOf(T* data, size_t count, int root) {
    absl::Status valid = CheckRoot(root);
    if (!valid.ok()) return valid;
    return Guard("broadcast", count * sizeof(T), [&] {
      gloo::BroadcastOptions options(context_);
      options.setOutput(data, count);
      options.setRoot(root);
      options.setTag(next_tag_++);
      options.setTimeout(timeout_);
      gloo::broadcast(options);
    });
  }

  const std::shared_ptr<gloo::rendezvous::Context> context_;
  std::chrono::milliseconds timeout_;
  // Every rank issues the same collectives in the same order, so the tags
  // match.
  uint32_t next_tag_ = 1;
  const size_t ring_all_reduce_min_bytes_;
  // A piece of a block's span for ReduceScatterSegments: `length` values
  // from `from` in span `segment`, at `at` in the block.
  struct SegmentPiece {
    size_t segment;
    size_t from;
    size_t length;
    size_t at;
  };

  // The reduce-scatters' chunks of incoming values (two, or up to four
  // handing pieces on).
  std::vector<float> ring_scratch_;
  // ReduceScatterSegments' partial sums of two blocks (W > 2).
  std::vector<float> partial_sums_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, RendezvousStore* store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", options.rank, "; expected 0 to ",
                     options.size - 1, " for a group of ", options.size));
  }
  const auto timeout =
      std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  std::shared_ptr<gloo::rendezvous::Context> context;
  absl::Status status = Guard("rendezvous", 0, [&] {
    std::shared_ptr<gloo::transport::Device> device =
        CreateGlooDevice(options.hostname);
    context =
        std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    // gloo waits for each pair to connect with its context's timeout, and
    // nothing ends that wait early: a peer that died after giving its
    // address would hold this rank (and a daemon shutting down) for the
    // whole timeout. A live peer connects within milliseconds of giving it
    // (every lower rank has arrived by then), so the pairs get a short
    // bound; waiting for ranks to arrive, in the store, is cancellable and
    // takes the whole timeout (GlooStoreAdapter).
    context->setTimeout(std::min(
        timeout, std::chrono::milliseconds(absl::ToInt64Milliseconds(
                     kPairConnectTimeout / kGlooConnectTimeoutFactor))));
    GlooStoreAdapter adapter(store, options.prefix, options.timeout,
                             options.cancelled);
    context->connectFullMesh(adapter, device);
    // The pairs keep the short one (gloo copied it into them): every
    // collective here passes its own timeout.
    context->setTimeout(timeout);
  });
  if (!status.ok()) return status;
  return std::unique_ptr<Communicator>(new GlooCommunicator(
      std::move(context), timeout, options.ring_all_reduce_min_bytes));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooSubgroup(
    const GlooOptions& group, const SubgroupOptions& subgroup,
    RendezvousStore* store) {
  const int size = subgroup.subgroup_size;
  if (size < 1 || group.size % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("subgroup_size: ", size,
                     "; expected a divisor of the group size ", group.size));
  }
  const int block = group.rank / size;
  GlooOptions options = group;
  options.rank = group.rank % size;
  options.size = size;
  options.prefix = absl::StrCat(group.prefix, "/subgroup", size, "/", block);
  return CreateGlooCommunicator(options, store);
}

std::string GlooRendezvousKey(const GlooOptions& options) {
  return absl::StrCat(options.prefix, "/", options.rank);
}

}  // namespace distopt
