// The exported lithos_* C API (lithos.h) and the statistics report at exit.
#include "intercept/lithos.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "intercept/library.hpp"

#ifndef LITHOS_VERSION
#define LITHOS_VERSION "0"
#endif

#define LITHOS_API extern "C" __attribute__((visibility("default")))

namespace {

using lithos::intercept::Library;
using lithos::intercept::Runtime;

// The C API's entry points reach the library, its one owner (library.hpp).
Runtime& runtime() noexcept { return Library::get().runtime(); }

static_assert(LITHOS_OK == lithos::intercept::kApiOk && LITHOS_EINVAL == lithos::intercept::kApiInvalid &&
              LITHOS_ENOSLOTMAP == lithos::intercept::kApiNoSlotMap &&
              LITHOS_EUNSUPPORTED == lithos::intercept::kApiUnsupported &&
              LITHOS_EINTERNAL == lithos::intercept::kApiInternal);

lithos::sched::TpcSet set_of(const uint64_t words[2]) { return lithos::sched::TpcSet::from_words(words[0], words[1]); }

// Runs at exit (after the program's atexit handlers: liblithos.so is loaded
// before them). Prints the statistics if asked for; a process that loaded the
// driver without any hook call still gets its (loud) report.
__attribute__((destructor)) void report_at_exit() {
  Library& lib = Library::get();
  Runtime* rt = lib.runtime_if_made();
  if (rt == nullptr) {
    if (!lib.real_driver().driver_in_process()) return;
    rt = &lib.runtime();
  }
  rt->report_at_exit();
}

}  // namespace

LITHOS_API int lithos_set_enabled(int enabled) {
  const bool was = !lithos::intercept::lithos_disabled();
  lithos::intercept::lithos_set_disabled(enabled == 0);
  return was ? 1 : 0;
}

LITHOS_API int lithos_stream_set_tpcs(struct CUstream_st* stream, const uint64_t words[2]) {
  if (words == nullptr) return LITHOS_EINVAL;
  return runtime().set_stream_tpcs(stream, set_of(words));
}

LITHOS_API int lithos_stream_clear_tpcs(struct CUstream_st* stream) { return runtime().clear_stream_tpcs(stream); }

LITHOS_API int lithos_set_process_tpcs(const uint64_t words[2]) {
  if (words == nullptr) return runtime().set_process_tpcs(nullptr);
  const lithos::sched::TpcSet s = set_of(words);
  return runtime().set_process_tpcs(&s);
}

LITHOS_API int lithos_live_tpcs(uint64_t words[2]) {
  if (words == nullptr) return LITHOS_EINVAL;
  lithos::sched::TpcSet s;
  const int n = runtime().live_tpcs(&s);
  if (n >= 0) {
    words[0] = s.word(0);
    words[1] = s.word(1);
  }
  return n;
}

LITHOS_API int lithos_stats_json(char* buffer, size_t size) {
  try {
    Runtime& rt = runtime();
    const std::string json = lithos::intercept::stats_json(rt.stats_header(), rt.counters().snapshot());
    if (buffer != nullptr && size > 0) {
      const std::size_t n = json.size() < size - 1 ? json.size() : size - 1;
      std::memcpy(buffer, json.data(), n);
      buffer[n] = '\0';
    }
    return static_cast<int>(json.size());
  } catch (...) {
    return LITHOS_EINTERNAL;
  }
}

LITHOS_API int lithos_report_now(void) {
  report_at_exit();
  return 0;
}

LITHOS_API int lithos_atom_report(const char* path) {
  try {
    Library& lib = Library::get();
    lib.runtime();  // configures the atomizer
    return lib.atomizer().report(path, true) == 0 ? 0 : LITHOS_EINVAL;
  } catch (...) {
    return LITHOS_EINTERNAL;
  }
}

LITHOS_API int lithos_atom_configure(unsigned forced_atoms, double atom_us) {
  try {
    Library& lib = Library::get();
    lib.runtime();  // configures the atomizer
    auto& az = lib.atomizer();
    if (!az.active() || forced_atoms > 4096) return LITHOS_EINVAL;
    az.set_rule(forced_atoms, atom_us);
    return 0;
  } catch (...) {
    return LITHOS_EINTERNAL;
  }
}

LITHOS_API const char* lithos_backend(void) { return runtime().masking().name(); }

LITHOS_API const char* lithos_version(void) { return "lithos " LITHOS_VERSION; }
