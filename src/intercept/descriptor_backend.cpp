#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/descriptor_backend.hpp"

#include "gpu/descriptor_hook.hpp"
#include "intercept/driver_table.hpp"
#include "intercept/log.hpp"

namespace lithos::intercept {

bool DescriptorBackend::available(const DriverTable& drv) noexcept {
  const auto get_export_table = drv.cuGetExportTable;
  const void* table = nullptr;
  return get_export_table != nullptr && get_export_table(&table, gpu::kDescriptorTableId) == 0 && table != nullptr;
}

bool DescriptorBackend::subscribe(const DriverTable& drv) {
  if (writes_masks()) return true;
  const auto get_export_table = drv.cuGetExportTable;
  const Status st = get_export_table == nullptr ? Status::unavailable("the driver has no cuGetExportTable")
                                                : gpu::install_descriptor_callback(get_export_table, callback_, user_);
  if (st.is_ok()) {
    writes_masks_.store(true, std::memory_order_release);
    return true;
  }
  LITHOS_LOG(LogLevel::kError,
             "launch-descriptor hook unavailable (%s); launches run unmasked (the green-context fallback applies "
             "only when it is chosen before the program creates its context; see docs/interposer.md)",
             st.message().c_str());
  return false;
}

}  // namespace lithos::intercept
