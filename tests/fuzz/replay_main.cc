// The main of a fuzz target built without libFuzzer (g++, `bazel test`):
// replays every file under the folders or files given as arguments through
// LLVMFuzzerTestOneInput, then kMutationsPerSeed deterministic mutations of
// each (bytes flipped, cut, repeated, inserted; a fixed seed, so a failure
// reproduces). A crash or sanitizer report fails the test; the input that
// caused it is printed first.
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr int kMutationsPerSeed = 200;

std::vector<std::string> InputFiles(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry :
           std::filesystem::recursive_directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path().string());
      }
    } else if (std::filesystem::exists(path)) {
      files.push_back(path.string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()),
                         input.size());
}

// One random edit of `input`.
std::string Mutate(std::string input, std::mt19937_64& random) {
  const int edits = 1 + static_cast<int>(random() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = input.empty() ? 0 : random() % input.size();
    switch (random() % 5) {
      case 0:  // Flip a bit.
        if (!input.empty()) input[at] ^= static_cast<char>(1 << (random() % 8));
        break;
      case 1:  // Set a byte to an edge value.
        if (!input.empty()) {
          static const unsigned char kEdges[] = {0x00, 0x01, 0x7f, 0x80, 0xff};
          input[at] = static_cast<char>(kEdges[random() % 5]);
        }
        break;
      case 2:  // Cut the tail.
        input.resize(at);
        break;
      case 3:  // Insert random bytes.
        input.insert(at, std::string(1 + random() % 8,
                                     static_cast<char>(random() & 0xff)));
        break;
      case 4:  // Repeat a span.
        if (!input.empty()) {
          const size_t length = 1 + random() % (input.size() - at);
          input.insert(at, input.substr(at, length));
        }
        break;
    }
  }
  return input;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> files = InputFiles(argc, argv);
  std::mt19937_64 random(20261130);
  long long runs = 0;
  Run("");
  ++runs;
  for (const std::string& file : files) {
    const std::string seed = ReadFile(file);
    std::fprintf(stderr, "replaying %s\n", file.c_str());
    Run(seed);
    ++runs;
    for (int m = 0; m < kMutationsPerSeed; ++m) {
      Run(Mutate(seed, random));
      ++runs;
    }
  }
  std::printf("%zu seed inputs, %lld runs, no crash\n", files.size(), runs);
  if (files.empty()) {
    std::fprintf(stderr, "no seed inputs: give a corpus folder\n");
    return 1;
  }
  return 0;
}
