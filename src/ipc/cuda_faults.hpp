// Which CUDA results mean that a process's CUDA context is lost: a fatal
// GPU fault (an illegal address, a device-side assert, an uncorrectable
// ECC error, ...). The driver returns the same code from nearly every call
// of that context afterwards, and only a new process gets a working one.
// Under MPS (Volta and later) the fault reaches every client of the GPU, and
// the MPS server takes no new client until all of them have exited
// (measured on the H100: docs/daemon.md, "GPU faults").
//
// Shared by the client (liblithos.so, which reports the first such result it
// sees in ChannelHeader::client_fault) and lithosd (which names it). Numbers
// only: no CUDA header.
#pragma once

#include <cstdint>
#include <string>

namespace lithos::ipc {

// True for the CUresult values documented as leaving the context unusable
// ("the process must be terminated and relaunched").
constexpr bool is_sticky_cuda_error(std::uint32_t code) {
  switch (code) {
    case 214:  // CUDA_ERROR_ECC_UNCORRECTABLE
    case 220:  // CUDA_ERROR_NVLINK_UNCORRECTABLE
    case 226:  // CUDA_ERROR_CONTAINED
    case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
    case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
    case 710:  // CUDA_ERROR_ASSERT
    case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
    case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
    case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
    case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
    case 718:  // CUDA_ERROR_INVALID_PC
    case 719:  // CUDA_ERROR_LAUNCH_FAILED
    case 810:  // CUDA_ERROR_MPS_CLIENT_TERMINATED
    case 911:  // CUDA_ERROR_EXTERNAL_DEVICE
      return true;
    default: return false;
  }
}

// "CUDA_ERROR_ILLEGAL_ADDRESS" for the codes above (and the MPS ones a
// client meets around a fault), else "CUresult <n>".
inline std::string cuda_error_name(std::uint32_t code) {
  switch (code) {
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 220: return "CUDA_ERROR_NVLINK_UNCORRECTABLE";
    case 226: return "CUDA_ERROR_CONTAINED";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 710: return "CUDA_ERROR_ASSERT";
    case 714: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 717: return "CUDA_ERROR_INVALID_ADDRESS_SPACE";
    case 718: return "CUDA_ERROR_INVALID_PC";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 807: return "CUDA_ERROR_MPS_SERVER_NOT_READY";
    case 810: return "CUDA_ERROR_MPS_CLIENT_TERMINATED";
    case 911: return "CUDA_ERROR_EXTERNAL_DEVICE";
    default: return "CUresult " + std::to_string(code);
  }
}

}  // namespace lithos::ipc
