// Compute: where and in which dtype the model's math runs.
//
// Master weights and optimizer state are always fp32; the compute dtype is what matmuls and
// activations use. "auto" picks bf16 where the hardware runs it natively (CPUs with
// AVX512-BF16/AMX, any CUDA GPU with bf16) and fp32 otherwise.
#pragma once

#include <string>

#include <torch/torch.h>

namespace trellis::model {

struct Compute {
  torch::Device device = torch::kCPU;
  torch::ScalarType dtype = torch::kFloat32;

  bool bf16() const { return dtype == torch::kBFloat16; }
  std::string describe() const;  // e.g. "cpu/bf16"
  bool operator==(const Compute&) const = default;
};

// Resolves --device (cpu|cuda) and --dtype (auto|bf16|fp32). Errors when cuda is asked for but
// this libtorch has no CUDA, or bf16 is asked for on a CPU without native bf16.
Compute resolve_compute(const std::string& device, const std::string& dtype);

// Waits until the device has run the work queued on it (CUDA kernels run asynchronously; a no-op
// on the CPU), so a timer read next counts that work.
void synchronize(const Compute& compute);

// True when this CPU executes bf16 matmuls natively (AVX512-BF16 or AMX-BF16).
bool cpu_has_native_bf16();

// Process-wide setup every entry point that runs the model calls once:
// - uses `threads` threads for tensor math (0 = every core); libtorch's OpenMP default can be 1
//   inside containers;
// - keeps freed activation-sized blocks in the heap instead of returning them to the kernel, so
//   each training step does not page-fault and zero-fill its activations afresh.
void init_compute_runtime(int threads);

}  // namespace trellis::model
