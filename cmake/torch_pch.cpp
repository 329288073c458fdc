// The translation unit that builds trellis_torch_pch's precompiled <torch/torch.h>
// (see CMakeLists.txt).
