#include "node/hardware.h"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace trellis::node {
namespace {

std::string read_text(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Each line of `text`, split at its first `sep` into a trimmed key and value.
template <typename F>
void for_each_field(std::string_view text, char sep, F f) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t at = line.find(sep);
    if (at != std::string_view::npos) f(trim(line.substr(0, at)), trim(line.substr(at + 1)));
  }
}

// The output of `command` (at most 64 KiB), "" when it cannot run.
std::string output_of(const char* command) {
  FILE* p = ::popen(command, "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  for (size_t n; out.size() < (64 << 10) && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) {
    out.append(buf, n);
  }
  ::pclose(p);
  return out;
}

int64_t to_int(std::string_view s) {
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') break;
    if (v > (int64_t{1} << 50)) return v;  // absurd: keep it bounded
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string cpu_model_of(std::string_view cpuinfo) {
  std::string model;
  for_each_field(cpuinfo, ':', [&](std::string_view key, std::string_view value) {
    if (model.empty() && key == "model name") model = std::string(value.substr(0, 128));
  });
  return model.empty() ? "unknown" : model;
}

int64_t memory_mib_of(std::string_view meminfo) {
  int64_t kib = 0;
  for_each_field(meminfo, ':', [&](std::string_view key, std::string_view value) {
    if (key == "MemTotal") kib = to_int(value);  // "24576000 kB"
  });
  return kib / 1024;
}

std::vector<discovery::Gpu> gpus_of(std::string_view csv) {
  std::vector<discovery::Gpu> gpus;
  for_each_field(csv, ',', [&](std::string_view name, std::string_view memory) {
    if (gpus.size() < 64 && !name.empty()) {
      gpus.push_back({std::string(name.substr(0, 128)), to_int(memory)});
    }
  });
  return gpus;
}

discovery::Hardware measure_hardware(const std::filesystem::path& disk) {
  discovery::Hardware hw;
  hw.cpu_model = cpu_model_of(read_text("/proc/cpuinfo"));
  cpu_set_t set;
  hw.cpu_cores = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                               : ::sysconf(_SC_NPROCESSORS_ONLN);
  hw.memory_mib = memory_mib_of(read_text("/proc/meminfo"));
  struct statvfs fs {};
  if (::statvfs(disk.c_str(), &fs) == 0) {
    hw.disk_mib = static_cast<int64_t>(fs.f_bavail * fs.f_frsize / (1024 * 1024));
  }
  if (::access("/usr/bin/nvidia-smi", X_OK) == 0) {
    hw.gpus =
        gpus_of(output_of("timeout 10 /usr/bin/nvidia-smi --query-gpu=name,memory.total "
                          "--format=csv,noheader,nounits 2>/dev/null"));
  }
  return hw;
}

}  // namespace trellis::node
