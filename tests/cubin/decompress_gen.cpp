// Build-time helper for the decompressor tests (decompress.cmake):
//
//   cubin_decompress_gen inputs DIR        writes the uncompressed inputs
//   cubin_decompress_gen cat OUT IN...     concatenates files
//   cubin_decompress_gen lz4seed OUT IN.lz4 ORIGINAL
//                                          writes a fuzz seed for the LZ4
//                                          block decoder: the first
//                                          compressed block of the frame
//                                          behind its 4-byte decompressed size
//
// The inputs are deterministic (a fixed pseudo-random generator), except
// elf.bin, which is this program's own executable: a real compiled binary.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "decompress_lz4frame.hpp"

namespace {

using Data = std::vector<std::uint8_t>;

constexpr std::size_t kKiB = 1024;

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t s_;
};

bool write_file(const std::string& path, const Data& d) {
  std::ofstream f(path, std::ios::binary);
  if (!d.empty()) f.write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size()));
  return static_cast<bool>(f);
}

bool read_file(const std::string& path, Data* d) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return false;
  const std::streamoff size = f.tellg();
  if (size < 0) return false;
  d->resize(static_cast<std::size_t>(size));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(d->data()), static_cast<std::streamsize>(d->size()));
  return static_cast<bool>(f);
}

void append(Data& d, const std::string& s) { d.insert(d.end(), s.begin(), s.end()); }

// Word-salad text with a skewed word distribution: compressible both by
// matches and by Huffman coding of the literals.
Data text(std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::string> words;
  for (int i = 0; i < 600; ++i) {
    std::string w;
    const std::size_t len = 2 + rng.below(9);
    for (std::size_t j = 0; j < len; ++j) w += static_cast<char>('a' + rng.below(26));
    words.push_back(w);
  }
  Data d;
  while (d.size() < size) {
    // Skewed: the square of a uniform index favours the first words.
    const std::size_t u = rng.below(1000);
    append(d, words[u * u / 1000 * words.size() / 1000]);
    const std::size_t p = rng.below(20);
    append(d, p == 0 ? ".\n" : p == 1 ? ", " : " ");
  }
  d.resize(size);
  return d;
}

Data random_bytes(std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  Data d(size);
  for (auto& b : d) b = static_cast<std::uint8_t>(rng.next() >> 56);
  return d;
}

// Long runs and near-copies of one block: very high ratios, long matches,
// RLE blocks, repeat offsets.
Data repetitive(std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  const Data unit = text(1024, seed + 1);
  Data d;
  while (d.size() < size) {
    switch (rng.below(4)) {
      case 0: d.insert(d.end(), 1000 + rng.below(200000), static_cast<std::uint8_t>(rng.below(3))); break;
      case 1: {
        Data u = unit;
        u[rng.below(u.size())] ^= 0x20;
        for (int i = 0; i < 50; ++i) d.insert(d.end(), u.begin(), u.end());
        break;
      }
      case 2: append(d, std::string(3000, 'a') + "b"); break;
      default: {
        const std::size_t period = 2 + rng.below(7);
        for (std::size_t i = 0; i < 5000; ++i) d.push_back(static_cast<std::uint8_t>('0' + i % period));
        break;
      }
    }
  }
  d.resize(size);
  return d;
}

// Little-endian 32-bit integers that grow slowly: structured binary data.
Data integers(std::size_t count, std::uint64_t seed) {
  Rng rng(seed);
  Data d;
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < count; ++i) {
    v += static_cast<std::uint32_t>(rng.below(300));
    for (int b = 0; b < 4; ++b) d.push_back(static_cast<std::uint8_t>(v >> (8 * b)));
  }
  return d;
}

// Chunks of the kinds above, some repeated from far back.
Data mixed(std::size_t size, std::uint64_t seed) {
  Rng rng(seed);
  Data d;
  while (d.size() < size) {
    const std::size_t n = 4096 + rng.below(40000);
    switch (rng.below(5)) {
      case 0: {
        const Data r = random_bytes(n, rng.next());
        d.insert(d.end(), r.begin(), r.end());
        break;
      }
      case 1: {
        const Data t = text(n, rng.next());
        d.insert(d.end(), t.begin(), t.end());
        break;
      }
      case 2: d.insert(d.end(), n, 0); break;
      default: {
        if (d.size() < n) break;
        const std::size_t from = rng.below(d.size() - n + 1);
        const Data copy(d.begin() + static_cast<std::ptrdiff_t>(from),
                        d.begin() + static_cast<std::ptrdiff_t>(from + n));
        d.insert(d.end(), copy.begin(), copy.end());
        break;
      }
    }
  }
  d.resize(size);
  return d;
}

int inputs(const std::string& dir) {
  struct Item {
    const char* name;
    Data data;
  };
  Data long_data = random_bytes(3072 * kKiB, 7);
  long_data.insert(long_data.end(), long_data.begin(), long_data.end());  // a repeat 3 MiB back
  Data self;
  if (!read_file("/proc/self/exe", &self)) {
    std::fprintf(stderr, "cubin_decompress_gen: cannot read /proc/self/exe\n");
    return 1;
  }
  // A skippable frame (magic 0x184D2A53) with a 7-byte payload.
  Data skip = {0x53, 0x2A, 0x4D, 0x18, 7, 0, 0, 0};
  append(skip, "lithos!");
  Data tiny;
  append(tiny, "hello hello hello hello\n");
  const Item items[] = {
      {"empty.bin", {}},
      {"one.bin", {'x'}},
      {"tiny.bin", tiny},
      {"text.bin", text(1536 * kKiB, 1)},
      {"repeat.bin", repetitive(3072 * kKiB, 2)},
      {"random.bin", random_bytes(300 * kKiB, 3)},
      {"ints.bin", integers(128 * kKiB, 4)},
      {"mixed.bin", mixed(700 * kKiB, 5)},
      {"long.bin", long_data},
      {"elf.bin", self},
      {"skip.bin", skip},
      // Small inputs for fuzz seeds.
      {"small.bin", text(8 * kKiB, 11)},
      {"smallrep.bin", repetitive(20 * kKiB, 12)},
      {"smallrand.bin", random_bytes(kKiB, 13)},
      {"medium.bin", mixed(200 * kKiB, 14)},
  };
  for (const Item& it : items) {
    if (!write_file(dir + "/" + it.name, it.data)) {
      std::fprintf(stderr, "cubin_decompress_gen: cannot write %s/%s\n", dir.c_str(), it.name);
      return 1;
    }
  }
  return 0;
}

int cat(int argc, char** argv) {
  Data out;
  for (int i = 3; i < argc; ++i) {
    Data d;
    if (!read_file(argv[i], &d)) {
      std::fprintf(stderr, "cubin_decompress_gen: cannot read %s\n", argv[i]);
      return 1;
    }
    out.insert(out.end(), d.begin(), d.end());
  }
  return write_file(argv[2], out) ? 0 : 1;
}

int lz4seed(const char* out, const char* frame_path, const char* original_path) {
  Data frame, original;
  if (!read_file(frame_path, &frame) || !read_file(original_path, &original)) return 1;
  const auto frames = lithos::cubin::testing::parse_lz4_frames(frame);
  if (!frames || frames->size() != 1) return 1;
  std::size_t offset = 0;
  for (const auto& b : frames->front().blocks) {
    const std::size_t size = std::min(frames->front().block_max, original.size() - offset);
    if (b.compressed) {
      Data seed;
      for (int i = 0; i < 4; ++i) seed.push_back(static_cast<std::uint8_t>(size >> (8 * i)));
      seed.insert(seed.end(), b.data.begin(), b.data.end());
      return write_file(out, seed) ? 0 : 1;
    }
    offset += size;
  }
  std::fprintf(stderr, "cubin_decompress_gen: no compressed block in %s\n", frame_path);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "inputs" && argc == 3) return inputs(argv[2]);
  if (cmd == "cat" && argc >= 3) return cat(argc, argv);
  if (cmd == "lz4seed" && argc == 5) return lz4seed(argv[2], argv[3], argv[4]);
  std::fprintf(stderr, "usage: %s inputs DIR | cat OUT IN... | lz4seed OUT IN.lz4 ORIGINAL\n", argv[0]);
  return 2;
}
