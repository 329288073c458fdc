// What a node agent measures about its machine (specs/protocol.md §3) and checks against a pool's
// requirements before it publishes itself: CPU model and usable cores, memory, free disk where the
// weights cache lives, and GPUs (from nvidia-smi when the machine has one).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "discovery/node_metadata.h"

namespace trellis::node {

// The machine this process runs on; `disk` is where the node keeps its data (free space counts).
discovery::Hardware measure_hardware(const std::filesystem::path& disk);

// The parsers measure_hardware uses, on the text of /proc/cpuinfo, /proc/meminfo and
// `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`.
std::string cpu_model_of(std::string_view cpuinfo);
int64_t memory_mib_of(std::string_view meminfo);  // MemTotal; 0 when absent
std::vector<discovery::Gpu> gpus_of(std::string_view nvidia_smi_csv);

}  // namespace trellis::node
