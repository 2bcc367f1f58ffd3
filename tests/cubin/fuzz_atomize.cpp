// Fuzz target: the atomizing rewrite on arbitrary bytes. A malformed cubin
// must give an error; a rewritten one must parse back, and writing what
// parses must give the rewritten bytes again (the writer's output is a
// fixed point, for edited cubins too: the rewrite grows text sections and
// adds constants, which moves every section behind them).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cubin/atomize.hpp"
#include "cubin/elf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const lithos::cubin::ByteView in(data, size);
  auto r = lithos::cubin::atomize_cubin(in);
  if (r) {
    auto back = lithos::cubin::Cubin::parse(r->image);
    if (!back) {
      std::fprintf(stderr, "fuzz_atomize: the rewrite does not parse: %s\n", back.status().to_string().c_str());
      std::abort();
    }
    auto again = back->write();
    if (!again || *again != r->image) {
      std::fprintf(stderr, "fuzz_atomize: writing the parsed rewrite gives other bytes\n");
      std::abort();
    }
  }
  return 0;
}
