// A small mutation fuzzer driving a libFuzzer-style entry point
// (LLVMFuzzerTestOneInput, and LLVMFuzzerInitialize when the target has
// one), so that every fuzz target runs in CI with the project's own compiler
// (g++, under ASan + UBSan in the sanitizer build) for a bounded time. With
// clang the same targets build against libFuzzer (LITHOS_FUZZ, the `fuzz`
// preset) for longer runs: scripts/fuzz.sh, tests/fuzz/README.md.
//
//   fuzz_x [--seconds S] [--runs N] [--seed K] SEED_FILE_OR_FOLDER...
//
// Each seed (a file, or every file of a folder, in name order) runs as is,
// then mutated copies (bit flips, byte overwrites with boundary values,
// inserted/erased/duplicated ranges, truncation, splices of two seeds,
// 16/32-bit little-endian fields set to boundary values) until the time or
// run budget ends. Deterministic for a given --seed. A crash or a sanitizer
// report fails the test; before each input the driver writes it to
// fuzz-last-input.bin in the working directory so that it can be replayed
// (`fuzz_x --runs 0 fuzz-last-input.bin`).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

using Input = std::vector<std::uint8_t>;

Input read_file(const char* path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot read seed %s\n", path);
    std::exit(2);
  }
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A seed file, or every regular file of a seed folder (sorted by name).
void add_seeds(const char* path, std::vector<Input>& seeds) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    seeds.push_back(read_file(path));
    return;
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    if (e.is_regular_file(ec)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) seeds.push_back(read_file(f.c_str()));
}

void save_last(const Input& in) {
  if (std::FILE* f = std::fopen("fuzz-last-input.bin", "wb")) {
    if (!in.empty()) std::fwrite(in.data(), 1, in.size(), f);
    std::fclose(f);
  }
}

void run_one(const Input& in, bool save) {
  if (save) save_last(in);
  LLVMFuzzerTestOneInput(in.empty() ? nullptr : in.data(), in.size());
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::size_t below(std::size_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  void mutate(Input& in, const std::vector<Input>& seeds) {
    const int rounds = 1 + static_cast<int>(below(4));
    for (int r = 0; r < rounds; ++r) one(in, seeds);
  }

 private:
  void one(Input& in, const std::vector<Input>& seeds) {
    static constexpr std::uint32_t kBoundary[] = {0,          1,          2,          0x7f,       0x80,      0xff,
                                                  0x100,      0x7fff,     0x8000,     0xffff,     0x10000,   0x7fffffff,
                                                  0x80000000, 0xfffffffe, 0xffffffff, 0x40000000, 0x0fffffff};
    switch (below(in.empty() ? 3 : 9)) {
      case 0: {  // insert random bytes
        const std::size_t at = below(in.size() + 1), n = 1 + below(16);
        Input add(n);
        for (auto& b : add) b = static_cast<std::uint8_t>(below(256));
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), add.begin(), add.end());
        break;
      }
      case 1: {  // splice a range of another seed
        const Input& other = seeds[below(seeds.size())];
        if (other.empty()) break;
        const std::size_t from = below(other.size()), n = 1 + below(std::min<std::size_t>(other.size() - from, 256));
        const std::size_t at = below(in.size() + 1);
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(at), other.begin() + static_cast<std::ptrdiff_t>(from),
                  other.begin() + static_cast<std::ptrdiff_t>(from + n));
        break;
      }
      case 2:  // truncate
        in.resize(below(in.size() + 1));
        break;
      case 3:  // flip a bit
        in[below(in.size())] ^= static_cast<std::uint8_t>(1u << below(8));
        break;
      case 4:  // overwrite a byte
        in[below(in.size())] = static_cast<std::uint8_t>(kBoundary[below(std::size(kBoundary))]);
        break;
      case 5:    // 16-bit field
      case 6: {  // 32-bit field
        const std::size_t w = below(9) < 5 ? 2 : 4;
        if (in.size() < w) break;
        const std::size_t at = below(in.size() - w + 1);
        std::uint32_t v = kBoundary[below(std::size(kBoundary))];
        if (below(2) != 0) {
          std::uint32_t cur = 0;
          std::memcpy(&cur, &in[at], w);
          v = cur + static_cast<std::uint32_t>(below(33)) - 16u;
        }
        std::memcpy(&in[at], &v, w);
        break;
      }
      case 7: {  // erase a range
        const std::size_t at = below(in.size()), n = 1 + below(std::min<std::size_t>(in.size() - at, 64));
        in.erase(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      default: {  // duplicate a range in place
        const std::size_t at = below(in.size()), n = 1 + below(std::min<std::size_t>(in.size() - at, 64));
        const Input copy(in.begin() + static_cast<std::ptrdiff_t>(at),
                         in.begin() + static_cast<std::ptrdiff_t>(at + n));
        in.insert(in.begin() + static_cast<std::ptrdiff_t>(below(in.size() + 1)), copy.begin(), copy.end());
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 10;
  std::uint64_t runs = UINT64_MAX, seed = 1;  // --runs 0: the seeds only
  std::vector<Input> seeds;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--seconds" || a == "--runs" || a == "--seed") && i + 1 < argc) {
      const char* v = argv[++i];
      if (a == "--seconds") seconds = std::strtod(v, nullptr);
      if (a == "--runs") runs = std::strtoull(v, nullptr, 10);
      if (a == "--seed") seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--seconds S] [--runs N] [--seed K] SEED_FILE_OR_FOLDER...\n", argv[0]);
      return 0;
    } else {
      add_seeds(argv[i], seeds);
    }
  }
  if (seeds.empty()) seeds.emplace_back();
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);

  for (const Input& s : seeds) run_one(s, true);
  Mutator m(seed);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::uint64_t n = 0;
  while (n < runs && std::chrono::steady_clock::now() < deadline) {
    Input in = seeds[m.below(seeds.size())];
    m.mutate(in, seeds);
    // Saving every input costs a write; save every one only while the driver
    // is young, then every 64th (a crash replays from the seed and --seed).
    run_one(in, n < 4096 || (n & 63) == 0);
    ++n;
  }
  std::printf("fuzz: %llu mutated inputs from %zu seeds in %.1f s, no crash\n", static_cast<unsigned long long>(n),
              seeds.size(), seconds);
  return 0;
}
