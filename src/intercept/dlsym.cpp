// dlsym interposition: programs that dlopen("libcuda.so.1") and look entry
// points up by name (PyTorch, Triton, the CUDA runtime's first step) get
// lithos's hooks for hooked names and the driver's answer for the rest.
//
// Which handles are mapped:
//  - RTLD_NEXT and RTLD_DEFAULT: the answer depends on who calls (the next
//    object after the caller; the caller's namespace and local scope). On
//    x86-64 the exported dlsym is a small assembly trampoline that jumps to
//    the C library's dlsym for these two handles with the caller's return
//    address untouched, so the C library sees the real caller and answers
//    exactly as without lithos. RTLD_DEFAULT needs no mapping: liblithos.so
//    is preloaded, so its hooks already come first in the global scope.
//    (Other architectures: a C++ definition forwards them; RTLD_NEXT then
//    means "after liblithos.so", an approximation, documented.)
//  - Any real handle (libcuda's, or a library that depends on it): the C
//    library answers, and when the answer is the real driver's function of a
//    hooked name, the hook is returned instead.
// lithos itself never calls this dlsym for its own needs: it uses the C
// library's (real_dlsym()), so nothing here recurses.
#include <dlfcn.h>

#include <cstdint>

#include "intercept/hook_table.hpp"
#include "intercept/library.hpp"

namespace lithos::intercept {

namespace {

void* map_dlsym_answer(const char* symbol, void* answer) noexcept {
  if (lithos_disabled()) return answer;
  const auto id = find_hook(symbol);
  if (!id) return answer;
  if (thread_frame().internal) return answer;  // lithos's own lookups get the real function
  // Only the driver's own function is replaced: a library that happens to
  // export the same name keeps its answer.
  Library& lib = Library::get();
  if (lib.real_driver().hook_of_real(answer) != id) return answer;
  Runtime& rt = lib.runtime();
  rt.counters().bump(rt.counters().dlsym_hooked);
  return hook_address(*id);
}

}  // namespace

}  // namespace lithos::intercept

extern "C" {

// The handle-based half of dlsym (hidden; the exported entry is below).
__attribute__((visibility("hidden"))) void* lithos_dlsym_impl(void* handle, const char* symbol) noexcept {
  const lithos::intercept::DlsymFn real = lithos::intercept::real_dlsym();
  if (real == nullptr) return nullptr;  // a C library without dlvsym versions we know: cannot happen on glibc
  void* answer = real(handle, symbol);
  if (answer == nullptr || symbol == nullptr || symbol[0] != 'c' || symbol[1] != 'u') return answer;
  return lithos::intercept::map_dlsym_answer(symbol, answer);
}

// The C library's dlsym, for the trampoline's caller-dependent handles.
__attribute__((visibility("hidden"))) void* lithos_dlsym_real_for_trampoline() noexcept {
  return reinterpret_cast<void*>(lithos::intercept::real_dlsym());
}

}  // extern "C"

#if defined(__x86_64__)
// dlsym(handle, symbol):
//   handle == RTLD_NEXT (-1) or RTLD_DEFAULT (0): tail-jump to the C library's
//     dlsym, stack and return address exactly as the caller left them;
//   otherwise: tail-jump to lithos_dlsym_impl.
// The stack is realigned around the one call made here (entry: rsp = 8 mod
// 16; two pushes and 8 bytes keep the call site 16-byte aligned).
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  endbr64
  cmpq $-1, %rdi
  je 1f
  testq %rdi, %rdi
  je 1f
  jmp lithos_dlsym_impl
1:
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call lithos_dlsym_real_for_trampoline
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  je 2f
  jmp *%rax
2:
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
extern "C" __attribute__((visibility("default"))) void* dlsym(void* __restrict handle,
                                                              const char* __restrict symbol) noexcept {
  if (handle == RTLD_NEXT || handle == RTLD_DEFAULT) {
    const lithos::intercept::DlsymFn real = lithos::intercept::real_dlsym();
    return real != nullptr ? real(handle, symbol) : nullptr;
  }
  return lithos_dlsym_impl(handle, symbol);
}
#endif
