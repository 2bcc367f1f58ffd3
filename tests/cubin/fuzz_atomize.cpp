// Fuzz target: the atomizing rewrite on arbitrary bytes. A malformed cubin
// must give an error; a rewritten one must parse back.
#include <cstdint>
#include <cstdlib>

#include "cubin/atomize.hpp"
#include "cubin/elf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const lithos::cubin::ByteView in(data, size);
  auto r = lithos::cubin::atomize_cubin(in);
  if (r) {
    auto back = lithos::cubin::Cubin::parse(r->image);
    if (!back) std::abort();  // the rewrite produced something its own reader refuses
  }
  return 0;
}
