#include "intercept/hook_table.hpp"

namespace lithos::intercept {

std::optional<HookId> find_hook(std::string_view name) noexcept {
  // Every hooked name starts with "cu": reject the rest of a program's dlsym
  // traffic (Python extension modules, ...) with two compares.
  if (name.size() < 3 || name[0] != 'c' || name[1] != 'u') return std::nullopt;
  for (int i = 0; i < kHookCount; ++i) {
    if (name == kHookInfo[i].name) return hook_at(i);
  }
  return std::nullopt;
}

}  // namespace lithos::intercept
