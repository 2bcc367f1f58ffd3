// The driver loader on machines without a usable driver (CI): always a clear
// kUnavailable, never a crash.
#include "gpu/driver.hpp"

#include <gtest/gtest.h>

#include "gpu/cuda_probe.hpp"

namespace lithos::gpu {
namespace {

TEST(DriverLoader, MissingLibraryIsUnavailable) {
  auto api = load_driver_api_from("/nonexistent/libcuda.so.1");
  ASSERT_FALSE(api.is_ok());
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(api.status().message().find("no CUDA driver"), std::string::npos) << api.status().message();
}

TEST(DriverLoader, StubLibraryIsUnavailable) {
  // The toolkit's link stub exports every symbol but drives no GPU.
  auto api = load_driver_api_from("/usr/local/cuda/lib64/stubs/libcuda.so");
  if (api.is_ok()) GTEST_SKIP() << "the stub loaded as a working driver?";
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable) << api.status().to_string();
}

TEST(DriverLoader, DefaultLoadEitherWorksOrIsUnavailable) {
  auto api = load_driver_api();
  if (api.is_ok()) {
    EXPECT_GE(api->driver_version, 12000);
    EXPECT_NE(api->cuInit, nullptr);
    return;
  }
  EXPECT_EQ(api.status().code(), StatusCode::kUnavailable) << api.status().to_string();
}

TEST(KernelDriverVersion, ParsesProprietaryAndOpenModules) {
  EXPECT_EQ(kernel_driver_version_from("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct 1 2025\n"
                                       "GCC version:  gcc version 12.2.0\n"),
            "580.159.04");
  EXPECT_EQ(
      kernel_driver_version_from(
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U)\n"),
      "580.159.04");
  EXPECT_EQ(kernel_driver_version_from("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64\n1.2.3"), "");
  EXPECT_EQ(kernel_driver_version_from(""), "");
}

TEST(KernelDriverVersion, NeverCrashes) {
  const std::string v = kernel_driver_version();
  for (char c : v) EXPECT_TRUE((c >= '0' && c <= '9') || c == '.') << v;
}

TEST(CalibrateDevice, WithoutADriverIsUnavailable) {
  auto api = load_driver_api();
  if (api.is_ok()) GTEST_SKIP() << "a driver is present; covered by scripts/gpu/calibrate-check.sh";
  CalibrateRunOptions opt;
  opt.cache_dir = "/tmp/lithos-driver-test-cache";
  opt.timeout_s = 20;
  auto r = calibrate_device(opt);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("driver"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace lithos::gpu
