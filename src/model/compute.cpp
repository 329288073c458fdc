#include "model/compute.h"

#include <malloc.h>

#include <thread>

#include "common/error.h"

namespace trellis::model {

std::string Compute::describe() const {
  return std::string(device.is_cuda() ? "cuda" : "cpu") + "/" + (bf16() ? "bf16" : "fp32");
}

void synchronize(const Compute& compute) {
  if (compute.device.is_cuda()) torch::cuda::synchronize();
}

bool cpu_has_native_bf16() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

Compute resolve_compute(const std::string& device, const std::string& dtype) {
  Compute c;
  if (device == "cuda") {
    if (!torch::cuda::is_available()) {
      throw Error("--device cuda requested, but this libtorch has no CUDA or no GPU is visible",
                  "compute.device");
    }
    c.device = torch::Device(torch::kCUDA, 0);
  } else if (device != "cpu") {
    throw Error("unknown device '" + device + "' (use cpu or cuda)", "compute.device");
  }
  bool native_bf16 = c.device.is_cuda() || cpu_has_native_bf16();
  if (dtype == "auto") {
    c.dtype = native_bf16 ? torch::kBFloat16 : torch::kFloat32;
  } else if (dtype == "bf16") {
    if (!native_bf16) {
      throw Error("bf16 requested but this CPU lacks AVX512-BF16/AMX (use fp32 or auto)",
                  "compute.dtype");
    }
    c.dtype = torch::kBFloat16;
  } else if (dtype == "fp32") {
    c.dtype = torch::kFloat32;
  } else {
    throw Error("unknown dtype '" + dtype + "' (use auto, bf16 or fp32)", "compute.dtype");
  }
  return c;
}

void init_compute_runtime(int threads) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's maximum: blocks below 32 MiB come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // and stay there when freed
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
}

}  // namespace trellis::model
