// The node agent's hardware inventory: the parsers on known text (/proc/cpuinfo, /proc/meminfo,
// nvidia-smi's CSV), the measurement of this machine against independent sources (nproc, sysconf,
// df), and that what is measured is what discovery accepts.
#include "node/hardware.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

namespace trellis::node {
namespace {

std::string output_of(const std::string& command) {
  FILE* p = ::popen(command.c_str(), "r");
  std::string out;
  char buf[256];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(Hardware, ParsesTheKernelsAndNvidiaSmisText) {
  EXPECT_EQ(cpu_model_of("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC "
                         "9454 48-Core Processor\nprocessor\t: 1\nmodel name\t: other\n"),
            "AMD EPYC 9454 48-Core Processor");
  EXPECT_EQ(cpu_model_of("processor : 0\n"), "unknown");
  EXPECT_EQ(memory_mib_of("MemTotal:       24576000 kB\nMemFree:        1000 kB\n"), 24000);
  EXPECT_EQ(memory_mib_of("garbage"), 0);
  const auto gpus = gpus_of("NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[0].memory_mib, 81559);
  EXPECT_TRUE(gpus_of("").empty());
  EXPECT_TRUE(gpus_of("NVIDIA-SMI has failed because it couldn't communicate\n").empty());
}

TEST(Hardware, MeasuresThisMachineAsOtherToolsDo) {
  const auto dir = std::filesystem::temp_directory_path();
  const discovery::Hardware hw = measure_hardware(dir);
  EXPECT_EQ(hw.cpu_cores, std::stoll(output_of("nproc")));  // usable cores, as nproc counts
  const int64_t mib = ::sysconf(_SC_PHYS_PAGES) * ::sysconf(_SC_PAGE_SIZE) / (1024 * 1024);
  EXPECT_NEAR(static_cast<double>(hw.memory_mib), static_cast<double>(mib), 2.0);
  const int64_t df = std::stoll(output_of("df -m --output=avail " + dir.string() + " | tail -1"));
  EXPECT_NEAR(static_cast<double>(hw.disk_mib), static_cast<double>(df), 64.0);
  EXPECT_FALSE(hw.cpu_model.empty());
  // What the agent would publish passes discovery's checks.
  discovery::NodeMetadata m{std::string(64, 'a'), "http://127.0.0.1:9000", hw, "0.1.0"};
  const auto back = discovery::parse_node_metadata(discovery::to_json(m), m.address, "test");
  EXPECT_EQ(back.hardware.cpu_cores, hw.cpu_cores);
  EXPECT_EQ(back.hardware.gpus.size(), hw.gpus.size());
}

}  // namespace
}  // namespace trellis::node
