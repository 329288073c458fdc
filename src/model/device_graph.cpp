#include "model/device_graph.h"

#include "common/error.h"

#ifdef TRELLIS_CUDA_KERNELS
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trellis::model {

struct DeviceGraph::Impl {
  torch::Device device = torch::kCPU;
  Work work;
#ifdef TRELLIS_CUDA_KERNELS
  std::unique_ptr<at::cuda::CUDAGraph> graph;  // null: replay() runs `work`
#endif
};

bool DeviceGraph::records(torch::Device device) {
#ifdef TRELLIS_CUDA_KERNELS
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

DeviceGraph::DeviceGraph(torch::Device device, Work work, const DeviceGraph* share_memory_with)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->work = std::move(work);
  if (!records(device)) {
    impl_->work();
    return;
  }
#ifdef TRELLIS_CUDA_KERNELS
  const c10::cuda::CUDAGuard on_device(device);
  const auto current = c10::cuda::getCurrentCUDAStream();
  // CUDA records a graph from a stream other than the default one; it starts after what is queued.
  const auto side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    // A run first: libraries that set up on first use (cuBLAS handles and workspaces) must not
    // do it while recording.
    impl_->work();
    c10::cuda::MempoolId_t pool{0, 0};
    if (share_memory_with && share_memory_with->impl_->graph) {
      pool = share_memory_with->impl_->graph->pool();
    }
    // Thread-local: other threads of the process (a trainer on the same GPU) keep working.
    graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    try {
      impl_->work();
    } catch (const std::exception& e) {
      try {
        graph->capture_end();  // ends the stream's capture, which the error left open
      } catch (const std::exception&) {
      }
      (void)cudaGetLastError();  // so that the next kernel launch's check does not report it
      throw Error(std::string("recording a CUDA graph failed: ") + e.what(), "device graph");
    }
    graph->capture_end();
  }
  at::cuda::CUDAEvent recorded;  // the warm-up run's writes come before what is queued next
  recorded.record(side);
  recorded.block(current);
  impl_->graph = std::move(graph);
#endif
}

DeviceGraph::~DeviceGraph() = default;

void DeviceGraph::replay() {
#ifdef TRELLIS_CUDA_KERNELS
  if (impl_->graph) {
    const c10::cuda::CUDAGuard on_device(impl_->device);
    impl_->graph->replay();
    return;
  }
#endif
  impl_->work();
}

}  // namespace trellis::model
