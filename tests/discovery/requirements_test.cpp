// What a pool asks of a node's hardware: each unmet requirement says what is needed and what the
// node has; the requirements are read from a config section and refuse negative amounts.
#include "discovery/requirements.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace trellis::discovery {
namespace {

TEST(Requirements, UnmetRequirementsSayWhatIsNeededAndWhatThereIs) {
  Hardware hw;
  hw.cpu_cores = 2;
  hw.memory_mib = 24000;
  hw.disk_mib = 5000;
  hw.gpus = {{"A", 16000}, {"B", 81559}};
  EXPECT_TRUE(unmet(hw, {2, 16000, 1000, 1, 80000}).empty());
  const auto why = unmet(hw, {16, 65536, 10000, 2, 80000});
  ASSERT_EQ(why.size(), 4u);
  EXPECT_EQ(why[0], "16 CPU cores are needed, the node has 2");
  EXPECT_EQ(why[1], "65536 MiB of memory are needed, the node has 24000");
  EXPECT_EQ(why[2], "10000 MiB of free disk are needed, there are 5000");
  EXPECT_EQ(why[3], "2 GPUs with at least 80000 MiB each are needed, the node has 1");
}

TEST(Requirements, AreReadFromTheOrchestratorsConfig) {
  Config c = Config::defaults();
  EXPECT_TRUE(unmet(Hardware{}, requirements(c, "orchestrator.requirements")).empty());
  c.apply_override("orchestrator.requirements.gpus=2");
  c.apply_override("orchestrator.requirements.gpu_memory_mib=40000");
  const Requirements r = requirements(c, "orchestrator.requirements");
  EXPECT_EQ(r.gpus, 2);
  EXPECT_EQ(r.gpu_memory_mib, 40000);
  c.apply_override("orchestrator.requirements.memory_mib=-1");
  EXPECT_NE(test::error_of([&] {
              requirements(c, "orchestrator.requirements");
            }).find("orchestrator.requirements.memory_mib"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::discovery
