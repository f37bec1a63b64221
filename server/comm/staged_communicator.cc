#include "server/comm/staged_communicator.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device_buffer.h"
#include "server/comm/block_offsets.h"

namespace distopt {
namespace {

// One chunk's work: `stage_in` fills the staging buffer from the device,
// `collective` runs the host collective on it, `stage_out` writes the
// result back. Any may be empty.
struct ChunkSteps {
  std::function<absl::Status(size_t chunk, char* staging)> stage_in;
  std::function<absl::Status(size_t chunk, char* staging)> collective;
  std::function<absl::Status(size_t chunk, char* staging)> stage_out;
};

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(Communicator* host, std::shared_ptr<Backend> device,
                     size_t chunk_bytes)
      : host_(host),
        device_(device),
        // The gathers and the reduce-scatter stage one value per rank and
        // one more per chunk at least.
        chunk_bytes_(
            std::max(chunk_bytes,
                     sizeof(float) * (static_cast<size_t>(host->size()) + 1))),
        staging_{DeviceBuffer(device, DeviceBuffer::Kind::kStaging),
                 DeviceBuffer(device, DeviceBuffer::Kind::kStaging)} {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const override { return device_->device(); }
  void SetTimeout(absl::Duration timeout) override {
    host_->SetTimeout(timeout);
  }
  // The two page-locked chunks, the device packing of AllGatherSegments
  // and ReduceScatterSegments, and what the host communicator keeps for
  // the collectives staged through it.
  int64_t kept_bytes() const override {
    return Communicator::kept_bytes() + host_->kept_bytes() +
           static_cast<int64_t>(staging_[0].capacity() +
                                staging_[1].capacity());
  }

  absl::Status AllReduce(absl::Span<float> values, ReduceOp op) override {
    return Elementwise(AsBytes(values), sizeof(float), /*stage_in=*/true,
                       /*stage_out=*/true, [&](absl::Span<char> chunk) {
                         return host_->AllReduce(AsFloats(chunk), op);
                       });
  }

  absl::Status Broadcast(absl::Span<float> values, int root) override {
    const bool root_here = rank() == root;
    return Elementwise(AsBytes(values), sizeof(float), root_here, !root_here,
                       [&](absl::Span<char> chunk) {
                         return host_->Broadcast(AsFloats(chunk), root);
                       });
  }

  absl::Status BroadcastBytes(absl::Span<char> bytes, int root) override {
    const bool root_here = rank() == root;
    return Elementwise(bytes, 1, root_here, !root_here,
                       [&](absl::Span<char> chunk) {
                         return host_->BroadcastBytes(chunk, root);
                       });
  }

  absl::Status AllGather(absl::Span<const float> input,
                         absl::Span<float> output) override {
    if (output.size() != input.size() * size()) {
      return absl::InvalidArgumentError(absl::StrCat("output: ", output.size(),
                                                     " values; expected ",
                                                     input.size() * size()));
    }
    return Gathered(
        absl::Span<const char>(reinterpret_cast<const char*>(input.data()),
                               input.size() * sizeof(float)),
        AsBytes(output), sizeof(float), /*all=*/true,
        [&](absl::Span<const char> in, absl::Span<char> out) {
          return host_->AllGather(
              absl::Span<const float>(reinterpret_cast<const float*>(in.data()),
                                      in.size() / sizeof(float)),
              AsFloats(out));
        });
  }

  absl::Status GatherBytes(absl::Span<const char> input,
                           absl::Span<char> output, int root) override {
    const bool root_here = rank() == root;
    if (root_here && output.size() != input.size() * size()) {
      return absl::InvalidArgumentError(absl::StrCat("output: ", output.size(),
                                                     " bytes; expected ",
                                                     input.size() * size()));
    }
    return Gathered(input, output, 1, root_here,
                    [&](absl::Span<const char> in, absl::Span<char> out) {
                      return host_->GatherBytes(
                          in, root_here ? out : absl::Span<char>(), root);
                    });
  }

  absl::Status ReduceScatter(absl::Span<const float> input,
                             absl::Span<float> output, ReduceOp op) override {
    const size_t n = output.size();
    const size_t w = size();
    if (input.size() != n * w) {
      return absl::InvalidArgumentError(
          absl::StrCat("input: ", input.size(), " values; expected ", n * w));
    }
    // Per chunk of c outputs: every rank's c inputs, then the c outputs.
    const size_t per_chunk =
        std::max<size_t>(1, chunk_bytes_ / sizeof(float) / (w + 1));
    const size_t chunks = (n + per_chunk - 1) / per_chunk;
    auto count = [&](size_t k) {
      return std::min(per_chunk, n - k * per_chunk);
    };
    ChunkSteps steps;
    steps.stage_in = [&](size_t k, char* staging) -> absl::Status {
      float* in = reinterpret_cast<float*>(staging);
      for (size_t r = 0; r < w; ++r) {
        absl::Status status = device_->CopyToHost(
            in + r * count(k), input.data() + r * n + k * per_chunk,
            count(k) * sizeof(float));
        if (!status.ok()) return status;
      }
      return absl::OkStatus();
    };
    steps.collective = [&](size_t k, char* staging) {
      float* in = reinterpret_cast<float*>(staging);
      return host_->ReduceScatter(absl::MakeConstSpan(in, w * count(k)),
                                  absl::MakeSpan(in + w * count(k), count(k)),
                                  op);
    };
    steps.stage_out = [&](size_t k, char* staging) {
      const float* out = reinterpret_cast<float*>(staging) + w * count(k);
      return device_->CopyFromHost(output.data() + k * per_chunk, out,
                                   count(k) * sizeof(float));
    };
    return RunChunks(chunks, steps);
  }

  absl::Status ReduceScatterBlocks(absl::Span<float> values,
                                   absl::Span<const size_t> counts,
                                   ReduceOp op) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size(), values.size(), "values");
    if (!offsets.ok()) return offsets.status();
    const int me = rank();
    return InRounds(
        counts, *offsets, sizeof(float),
        [&](absl::Span<const size_t> piece, absl::Span<const size_t> at, size_t,
            char* staging) -> absl::Status {
          float* packed = reinterpret_cast<float*>(staging);
          for (size_t r = 0, p = 0; r < piece.size(); p += piece[r], ++r) {
            absl::Status status = device_->CopyToHost(
                packed + p, values.data() + at[r], piece[r] * sizeof(float));
            if (!status.ok()) return status;
          }
          return absl::OkStatus();
        },
        [&](absl::Span<const size_t> piece, size_t total, char* staging) {
          return host_->ReduceScatterBlocks(
              absl::MakeSpan(reinterpret_cast<float*>(staging), total), piece,
              op);
        },
        [&](absl::Span<const size_t> piece, absl::Span<const size_t> at, size_t,
            char* staging) {
          return device_->CopyFromHost(
              values.data() + at[me],
              reinterpret_cast<float*>(staging) + PackedOffset(piece, me),
              piece[me] * sizeof(float));
        });
  }

  absl::Status AllGatherBlocks(absl::Span<char> bytes,
                               absl::Span<const size_t> counts) override {
    absl::StatusOr<std::vector<size_t>> offsets =
        BlockOffsets(counts, size(), bytes.size(), "bytes");
    if (!offsets.ok()) return offsets.status();
    const int me = rank();
    return InRounds(
        counts, *offsets, 1,
        [&](absl::Span<const size_t> piece, absl::Span<const size_t> at, size_t,
            char* staging) {
          return device_->CopyToHost(staging + PackedOffset(piece, me),
                                     bytes.data() + at[me], piece[me]);
        },
        [&](absl::Span<const size_t> piece, size_t total, char* staging) {
          return host_->AllGatherBlocks(absl::MakeSpan(staging, total), piece);
        },
        [&](absl::Span<const size_t> piece, absl::Span<const size_t> at, size_t,
            char* staging) -> absl::Status {
          for (int r = 0; r < size(); ++r) {
            if (r == me) continue;
            absl::Status status = device_->CopyFromHost(
                bytes.data() + at[r], staging + PackedOffset(piece, r),
                piece[r]);
            if (!status.ok()) return status;
          }
          return absl::OkStatus();
        });
  }

  absl::Status Barrier() override { return host_->Barrier(); }

 private:
  // Where rank `of`'s piece starts in a round's staging (pieces packed in
  // rank order), in units of the collective.
  static size_t PackedOffset(absl::Span<const size_t> piece, int of) {
    size_t offset = 0;
    for (int r = 0; r < of; ++r) offset += piece[r];
    return offset;
  }

  static absl::Span<float> AsFloats(absl::Span<char> bytes) {
    return absl::Span<float>(reinterpret_cast<float*>(bytes.data()),
                             bytes.size() / sizeof(float));
  }

  // A collective whose chunk k is the same bytes in and out: `device`'s
  // bytes [k * c, (k + 1) * c), c a multiple of `unit`.
  absl::Status Elementwise(
      absl::Span<char> device, size_t unit, bool stage_in, bool stage_out,
      const std::function<absl::Status(absl::Span<char>)>& collective) {
    const size_t per_chunk = std::max(unit, chunk_bytes_ / unit * unit);
    const size_t chunks = (device.size() + per_chunk - 1) / per_chunk;
    auto piece = [&](size_t k) {
      return std::min(per_chunk, device.size() - k * per_chunk);
    };
    ChunkSteps steps;
    if (stage_in) {
      steps.stage_in = [&](size_t k, char* staging) {
        return device_->CopyToHost(staging, device.data() + k * per_chunk,
                                   piece(k));
      };
    }
    steps.collective = [&](size_t k, char* staging) {
      return collective(absl::MakeSpan(staging, piece(k)));
    };
    if (stage_out) {
      steps.stage_out = [&](size_t k, char* staging) {
        return device_->CopyFromHost(device.data() + k * per_chunk, staging,
                                     piece(k));
      };
    }
    return RunChunks(chunks, steps);
  }

  // A collective from `input` (chunk k: bytes [k * c, (k + 1) * c)) to
  // `output` (size() x input.size(): rank r's chunk k at r * n + k * c),
  // written on this rank when `receives`.
  absl::Status Gathered(
      absl::Span<const char> input, absl::Span<char> output, size_t unit,
      bool receives,
      const std::function<absl::Status(absl::Span<const char>,
                                       absl::Span<char>)>& collective) {
    const size_t n = input.size();
    const size_t w = size();
    const size_t per_chunk =
        std::max(unit, chunk_bytes_ / (w + 1) / unit * unit);
    const size_t chunks = (n + per_chunk - 1) / per_chunk;
    auto piece = [&](size_t k) {
      return std::min(per_chunk, n - k * per_chunk);
    };
    ChunkSteps steps;
    steps.stage_in = [&](size_t k, char* staging) {
      return device_->CopyToHost(staging, input.data() + k * per_chunk,
                                 piece(k));
    };
    steps.collective = [&](size_t k, char* staging) {
      return collective(absl::MakeConstSpan(staging, piece(k)),
                        absl::MakeSpan(staging + piece(k), w * piece(k)));
    };
    if (receives) {
      steps.stage_out = [&](size_t k, char* staging) -> absl::Status {
        for (size_t r = 0; r < w; ++r) {
          absl::Status status = device_->CopyFromHost(
              output.data() + r * n + k * per_chunk,
              staging + piece(k) + r * piece(k), piece(k));
          if (!status.ok()) return status;
        }
        return absl::OkStatus();
      };
    }
    return RunChunks(chunks, steps);
  }

  // The block collectives, round by round: round j takes from each block r
  // its piece [j * p, (j + 1) * p) (p = a chunk's share per rank, in
  // `unit`s), packed in rank order. Every rank has the same counts, so the
  // same rounds.
  using RoundCopy = std::function<absl::Status(absl::Span<const size_t> piece,
                                               absl::Span<const size_t> at,
                                               size_t total, char* staging)>;
  absl::Status InRounds(
      absl::Span<const size_t> counts, const std::vector<size_t>& offsets,
      size_t unit, const RoundCopy& stage_in,
      const std::function<absl::Status(absl::Span<const size_t> piece,
                                       size_t total, char* staging)>&
          collective,
      const RoundCopy& stage_out) {
    const size_t w = counts.size();
    const size_t p = std::max<size_t>(1, chunk_bytes_ / unit / w);
    const size_t largest = *std::max_element(counts.begin(), counts.end());
    const size_t rounds = (largest + p - 1) / p;
    // Round j's pieces (elements) and where they start (elements).
    std::vector<std::vector<size_t>> pieces(rounds), starts(rounds);
    std::vector<size_t> totals(rounds, 0);
    for (size_t j = 0; j < rounds; ++j) {
      for (size_t r = 0; r < w; ++r) {
        const size_t begin = std::min(counts[r], j * p);
        const size_t end = std::min(counts[r], begin + p);
        pieces[j].push_back(end - begin);
        starts[j].push_back(offsets[r] + begin);
        totals[j] += end - begin;
      }
    }
    ChunkSteps steps;
    steps.stage_in = [&](size_t j, char* staging) {
      return stage_in(pieces[j], starts[j], totals[j], staging);
    };
    steps.collective = [&](size_t j, char* staging) {
      return collective(pieces[j], totals[j], staging);
    };
    steps.stage_out = [&](size_t j, char* staging) {
      return stage_out(pieces[j], starts[j], totals[j], staging);
    };
    return RunChunks(rounds, steps);
  }

  // Chunk k's collective runs on staging buffer k % 2 while a helper thread
  // copies chunk k - 1 out of the other one and then chunk k + 1 into it.
  absl::Status RunChunks(size_t chunks, const ChunkSteps& steps) {
    if (chunks == 0) return absl::OkStatus();
    char* buffers[2] = {nullptr, nullptr};
    for (int b = 0; b < 2 && b < static_cast<int>(chunks); ++b) {
      absl::StatusOr<char*> reserved = staging_[b].Reserve(chunk_bytes_);
      // Nothing is sent yet: every rank fails alike only if all lack the
      // memory; one that lacks it alone leaves its peers to their timeout.
      if (!reserved.ok()) return reserved.status();
      buffers[b] = *reserved;
    }
    absl::Status copies;
    auto copy = [&](const std::function<absl::Status(size_t, char*)>& step,
                    size_t k) {
      if (!step) return;
      if (copies.ok()) copies = step(k, buffers[k % 2]);
      // A chunk this rank could not stage goes out as zeros, not as what
      // the buffer held before.
      if (!copies.ok() && &step == &steps.stage_in) {
        std::memset(buffers[k % 2], 0, chunk_bytes_);
      }
    };
    copy(steps.stage_in, 0);
    for (size_t k = 0; k < chunks; ++k) {
      std::thread helper;
      if (k > 0 || k + 1 < chunks) {
        helper = std::thread([&] {
          if (k > 0) copy(steps.stage_out, k - 1);
          if (k + 1 < chunks) copy(steps.stage_in, k + 1);
        });
      }
      absl::Status status = steps.collective(k, buffers[k % 2]);
      if (helper.joinable()) helper.join();
      if (!status.ok()) return status;
    }
    copy(steps.stage_out, chunks - 1);
    // This rank's part of the collective is lost (its peers summed zeros,
    // or it did not write back what it received): a failure of the
    // collective, as a lost peer's is, so that the caller's round is
    // marked broken rather than going on as if only this rank erred.
    if (!copies.ok()) MarkCollectiveFailure(copies);
    return copies;
  }

  Communicator* const host_;
  const std::shared_ptr<Backend> device_;
  const size_t chunk_bytes_;
  DeviceBuffer staging_[2];
};

}  // namespace

std::unique_ptr<Communicator> CreateStagedCommunicator(
    Communicator* host, std::shared_ptr<Backend> device, size_t chunk_bytes) {
  return std::make_unique<StagedCommunicator>(host, std::move(device),
                                              chunk_bytes);
}

}  // namespace distopt
