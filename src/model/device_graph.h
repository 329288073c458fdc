// A step of device work recorded once and replayed as one launch: a CUDA graph. A decode step of
// a 24-layer model is about a thousand small kernels, and on a GPU their launches, paid on the
// host one by one, cost far more than the kernels run (a 0.5B model's decode step took 20-27 ms
// on an H200 at batch 1 and 64 alike, while its weights stream in 0.2 ms). A replay pays that
// once, at capture.
//
// A replay runs the recorded kernels on the recorded addresses, so the work must
// - read its inputs from tensors that stay put between replays (the caller copies each step's
//   inputs into them) and write its results into such tensors too;
// - never wait on the host: no .item(), no copies between host and device, no tensor built from
//   host values, no shape that depends on the values of the inputs;
// - read only tensors that outlive the graph at the same address (weights, caches, tables).
//
// Where graphs cannot be recorded (the CPU; a build without TRELLIS_CUDA_KERNELS), replay() runs
// the work again, so callers have one code path and the CPU tests run it.
#pragma once

#include <functional>
#include <memory>

#include <torch/torch.h>

namespace trellis::model {

class DeviceGraph {
 public:
  using Work = std::function<void()>;

  // Whether graphs are recorded on `device` in this build (CUDA with TRELLIS_CUDA_KERNELS).
  static bool records(torch::Device device);

  // Runs `work` once (which warms up libraries that allocate on first use) and records it.
  // Graphs passed as `share_memory_with` lend their memory pool: graphs that are never replayed
  // at once may share it, and only the largest one's temporaries are then held. Error naming the
  // cause when recording fails (an operation in `work` that a graph cannot hold); the device
  // then works as before.
  DeviceGraph(torch::Device device, Work work, const DeviceGraph* share_memory_with = nullptr);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Queues the recorded work on the device's current stream (or runs `work` again).
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::model
