// Every hook of hook_list.def exists in cuda.h under its ABI name with exactly
// the listed signature: checked at compile time, so a wrong line in the list
// breaks the build here (and in hooks.cpp) rather than a host program.
#include "intercept/cuda_abi.hpp"  // first: every ABI variant declared

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "intercept/hook_table.hpp"

#define LITHOS_HOOK(name, ret, params, args, kind, stream, ptsz, path)                \
  static_assert(std::is_same_v<decltype(&::name), ret(*) params>,                     \
                "hook_list.def: " #name " does not match its declaration in cuda.h"); \
  static_assert(std::is_same_v<ret, CUresult>, #name ": every hooked entry point returns CUresult");
#include "intercept/hook_list.def"
#undef LITHOS_HOOK

namespace lithos::intercept {
namespace {

TEST(HookTable, NamesAreUniqueAndFindable) {
  std::set<std::string> seen;
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHookInfo[i];
    EXPECT_TRUE(seen.insert(h.name).second) << h.name << " listed twice";
    const auto found = find_hook(h.name);
    ASSERT_TRUE(found.has_value()) << h.name;
    EXPECT_EQ(hook_index(*found), i);
  }
  EXPECT_FALSE(find_hook("cuMemAlloc_v2").has_value());
  EXPECT_FALSE(find_hook("").has_value());
  EXPECT_FALSE(find_hook("PyInit_torch").has_value());
}

TEST(HookTable, PerThreadVariantsAreMarked) {
  for (int i = 0; i < kHookCount; ++i) {
    const std::string name = kHookInfo[i].name;
    const bool suffix = name.size() > 5 && name.compare(name.size() - 5, 5, "_ptsz") == 0;
    EXPECT_EQ(kHookInfo[i].ptsz, suffix) << name;
  }
}

TEST(HookTable, EveryLaunchPathOfTheIssueIsHooked) {
  for (const char* name :
       {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
        "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz",
        "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams", "cuLibraryGetKernel", "cuKernelGetFunction",
        "cuModuleGetFunction", "cuGetProcAddress", "cuGetProcAddress_v2"}) {
    EXPECT_TRUE(find_hook(name).has_value()) << name;
  }
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchGrid"}) {
    EXPECT_TRUE(is_kernel_launch(hook_info(*find_hook(name)).kind)) << name;
  }
  EXPECT_FALSE(is_kernel_launch(hook_info(*find_hook("cuGraphLaunch")).kind));
}

}  // namespace
}  // namespace lithos::intercept
