// What the CUDA kernels of src/model/cuda share: their element types (fp32 and bf16 tensors) as
// floats and back (they compute in fp32 and round results to the element type to nearest-even,
// as the CPU does), and the check after a launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace trellis::model::cuda {

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// An fp32 value as the element type would hold it (HF rounds weights and angles so).
template <typename T>
__device__ inline float rounded(float x) {
  return to_float(from_float<T>(x));
}

// After a launch: nullptr, or the text of the error it raised (a bad configuration, say).
inline const char* launch_error() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

// Calls launch(T{}) for the element type (bf16 when `bf16`, else fp32) and returns launch_error().
template <typename Launch>
const char* launch_as(bool bf16, Launch&& launch) {
  if (bf16) {
    launch(__nv_bfloat16{});
  } else {
    launch(float{});
  }
  return launch_error();
}

}  // namespace trellis::model::cuda
