// `lithos atomize IN OUT`: the kernel atomizer's load-time rewrite, offline.
// Reads a cubin, fatbin (plain, LZ4 or Zstandard entries) or fatbin-holding
// file, picks the entry the driver would load on --sm, rewrites it as
// liblithos.so does at load time (docs/atomizer.md) and writes the cubin, so
// that it can be disassembled (nvdisasm, cuobjdump -sass) and checked.
// Prints one line per kernel (or --json). Exit 0: written; 1: nothing could
// be rewritten; 2: bad input.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "cubin/atomize.hpp"

namespace lithos::cli {
namespace {

struct AtomizeArgs {
  std::string in;
  std::string out;
  int sm = 90;
  bool json = false;
};

int run_atomize(const AtomizeArgs& a) {
  std::ifstream f(a.in, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "lithos atomize: cannot read %s\n", a.in.c_str());
    return 2;
  }
  cubin::Bytes bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  bytes.push_back(0);  // PTX files are text: the image must end in a NUL
  std::string ptx;
  auto r = cubin::atomize_image(bytes.data(), a.sm, &ptx);
  if (!r) {
    std::fprintf(stderr, "lithos atomize: %s: %s%s\n", a.in.c_str(), r.status().message().c_str(),
                 ptx.empty() ? "" : " (liblithos.so compiles such PTX with the driver first)");
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::ofstream o(a.out, std::ios::binary);
  o.write(reinterpret_cast<const char*>(r->cubin.image.data()), static_cast<std::streamsize>(r->cubin.image.size()));
  if (!o) {
    std::fprintf(stderr, "lithos atomize: cannot write %s\n", a.out.c_str());
    return 1;
  }
  if (a.json) {
    nlohmann::json j = {{"input", a.in}, {"output", a.out}, {"sm", a.sm}, {"compressed", r->from_compressed}};
    j["kernels"] = nlohmann::json::array();
    for (const auto& k : r->cubin.kernels) {
      j["kernels"].push_back({{"name", k.name},
                              {"status", cubin::patch_status_name(k.status)},
                              {"params", k.param_count},
                              {"param_bytes", k.param_bytes},
                              {"bounds_offset", k.bounds_offset}});
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    for (const auto& k : r->cubin.kernels) {
      std::printf("%-20s %s (%u params, %u bytes; bounds at +%u)\n", cubin::patch_status_name(k.status), k.name.c_str(),
                  k.param_count, k.param_bytes, k.bounds_offset);
    }
    std::printf("%zu of %zu kernels rewritten -> %s\n", r->cubin.patched_count(), r->cubin.kernels.size(),
                a.out.c_str());
  }
  return 0;
}

}  // namespace

CommandRunner add_atomize_command(CLI::App& app) {
  auto args = std::make_shared<AtomizeArgs>();
  auto* sub = app.add_subcommand(
      "atomize",
      "Rewrite a cubin or fatbin the way liblithos.so does at load time (kernel atomizer) and write the cubin");
  sub->footer(
      "Each sm_90 kernel gets an 8-byte parameter (lo, hi) appended and a range check at its entry; thread\n"
      "blocks outside [lo, hi) exit (docs/atomizer.md). Use nvdisasm or cuobjdump -sass on OUT to inspect it.\n"
      "Example: lithos atomize kernels.fatbin kernels.atomized.cubin --json");
  sub->add_option("input", args->in, "cubin, fatbin or PTX file")->required()->check(CLI::ExistingFile);
  sub->add_option("output", args->out, "where the rewritten cubin goes")->required();
  sub->add_option("--sm", args->sm, "compute capability the entry is chosen for (default 90)")
      ->check(CLI::Range(10, 200));
  sub->add_flag("--json", args->json, "one JSON object instead of lines");
  return [args] { return run_atomize(*args); };
}

}  // namespace lithos::cli
