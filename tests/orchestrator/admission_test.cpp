// Admission control's rule (orchestrator/admission.h) on its own: which step a worker gets, how
// many groups, and why it waits, from snapshots written out by hand.
#include <gtest/gtest.h>

#include "orchestrator/admission.h"

namespace trellis::orchestrator {
namespace {

// 10 steps of 128 signal samples in groups of 8, async level 2, room for 2 steps' worth.
AdmissionRules rules() { return {10, 128, 8, 2, 256}; }

WorkRequest holding(int64_t version, int64_t max_groups = 4) { return {version, max_groups}; }

TEST(Admission, ExpectedSignalCountsOpenWorkAtTheSignalRatio) {
  EXPECT_DOUBLE_EQ(expected_signal({10, 20, 3}, 8, 0.5), 10 + 20 + 3 * 8 * 0.5);
  EXPECT_DOUBLE_EQ(expected_signal({}, 8, 1), 0);
}

TEST(Admission, TheLowestShortStepGetsGroupsForItsShortfall) {
  AdmissionSnapshot s;
  const Admission a = admit(rules(), s, holding(0));
  ASSERT_TRUE(a.step);
  EXPECT_EQ(*a.step, 0);
  EXPECT_EQ(a.groups, 4);  // 16 groups short: as many as the worker takes
  EXPECT_TRUE(a.wait_reason.empty());

  // Step 0 is 20 signal samples short: 3 groups of 8 at a ratio of 1.
  s.steps[0] = {100, 8, 0};
  EXPECT_EQ(admit(rules(), s, holding(0)).groups, 3);
  // ... 6 groups at a ratio of 0.5, of which the worker takes 4.
  s.signal_ratio = 0.5;
  EXPECT_EQ(admit(rules(), s, holding(0)).groups, 4);
  EXPECT_EQ(admit(rules(), s, holding(0, 10)).groups, 5);  // 20 / (8 x 0.5)
  // Open work counts at the ratio: 4 groups expected to bring 16 leave 4 short: one group.
  s.steps[0].open_groups = 4;
  EXPECT_EQ(admit(rules(), s, holding(0, 10)).groups, 1);
  // A ratio near 0 asks for as much as the worker takes, not for ever more.
  s.signal_ratio = 0;
  s.steps[0] = {100, 0, 0};
  AdmissionRules unbounded = rules();
  unbounded.max_backlog_samples = INT64_MAX;
  EXPECT_EQ(admit(unbounded, s, holding(0, 1000)).groups, 70);  // 28 / (8 x 0.05)
  EXPECT_EQ(admit(rules(), s, holding(0, 1000)).groups, 32);    // the backlog bound's room
}

// A group brings its G samples as signal or none: open work expected to come within half a
// group of the need covers a step, and work is the nearest whole number of groups.
TEST(Admission, OpenWorkWithinHalfAGroupOfTheNeedCoversAStep) {
  AdmissionSnapshot s;
  s.signal_ratio = 0.9;  // a group is expected to bring 7.2 signal samples
  // 8 short: one group, not two.
  s.steps[0] = {120, 0, 0};
  Admission a = admit(rules(), s, holding(0));
  ASSERT_TRUE(a.step);
  EXPECT_EQ(*a.step, 0);
  EXPECT_EQ(a.groups, 1);
  // Once it is out (0.8 short of the need), the step is covered.
  s.steps[0].open_groups = 1;
  EXPECT_EQ(*admit(rules(), s, holding(0)).step, 1);
  // 8.8 short with work out: one more group.
  s.steps[0] = {112, 0, 1};
  a = admit(rules(), s, holding(0));
  EXPECT_EQ(*a.step, 0);
  EXPECT_EQ(a.groups, 1);
  // With nothing out, any shortfall gets a group: the last share is never left behind.
  s.steps[0] = {127, 0, 0};
  a = admit(rules(), s, holding(0));
  EXPECT_EQ(*a.step, 0);
  EXPECT_EQ(a.groups, 1);
  // 20 short: 2.8 groups' worth, 3 groups.
  s.steps[0] = {108, 0, 0};
  EXPECT_EQ(admit(rules(), s, holding(0)).groups, 3);
}

TEST(Admission, CoveredStepsAreSkippedWithinTheVersionWindow) {
  AdmissionSnapshot s;
  s.counter = 3;
  s.policy_version = 2;
  s.steps[3] = {128, 0, 0};  // full (the counter is a snapshot; the trainer takes it next)
  s.steps[4] = {0, 64, 8};   // 64 validating + 8 groups x 8 expected = 128: covered
  // Steps up to 2 + async level 2 = 4 are open, and covered: wait for the next version.
  Admission a = admit(rules(), s, holding(2));
  EXPECT_FALSE(a.step);
  EXPECT_EQ(a.wait_reason,
            "steps up to 4 have their samples (accepted, validating or being generated); step 5 "
            "opens when the trainer publishes policy version 3");
  EXPECT_FALSE(a.backlog_full);
  // A worker behind the published version is told to fetch it.
  a = admit(rules(), s, holding(1));
  EXPECT_FALSE(a.step);
  EXPECT_NE(a.wait_reason.find("step 4 needs policy version 2 (published: fetch it)"),
            std::string::npos)
      << a.wait_reason;
  // One group short at step 4.
  s.steps[4].open_groups = 7;
  a = admit(rules(), s, holding(2));
  ASSERT_TRUE(a.step);
  EXPECT_EQ(*a.step, 4);
  EXPECT_EQ(a.groups, 1);
  // A worker never gets a step beyond what the newest published version allows, whatever it
  // claims to hold.
  s.steps[4].open_groups = 8;
  EXPECT_FALSE(admit(rules(), s, holding(7)).step);
}

TEST(Admission, SaysWhyAWorkerWaits) {
  AdmissionSnapshot s;
  s.counter = 3;
  s.policy_version = 3;
  EXPECT_EQ(admit(rules(), s, holding(-1)).wait_reason,
            "hold a policy version first (fetch one through the relays)");
  EXPECT_EQ(admit(rules(), s, holding(0)).wait_reason,
            "policy version 0 is too old: step 3 (the step counter) takes versions from 1 (step - "
            "rl.async_level); fetch a newer one");
  EXPECT_TRUE(admit(rules(), s, holding(1)).step);
  s.counter = 10;
  EXPECT_EQ(admit(rules(), s, holding(9)).wait_reason,
            "every step has its samples: the run is done");
  // The last step covered: nothing opens after it.
  s.counter = 9;
  s.policy_version = 9;
  s.steps[9] = {0, 128, 0};
  EXPECT_EQ(admit(rules(), s, holding(9)).wait_reason,
            "steps up to 9 have their samples (accepted, validating or being generated)");
}

TEST(Admission, TheBacklogBoundHoldsWorkBack) {
  AdmissionSnapshot s;
  s.steps[0] = {0, 0, 0};
  // 200 samples wait for a verdict, 7 groups (56) are being generated: 256, the bound.
  s.validating_samples = 200;
  s.open_groups = 7;
  Admission a = admit(rules(), s, holding(0));
  EXPECT_FALSE(a.step);
  EXPECT_EQ(a.wait_reason,
            "the validation backlog is full: 200 samples wait for a verdict and 56 are being "
            "generated (at most 256: orchestrator.max_backlog_steps x rl.batch_size)");
  EXPECT_TRUE(a.backlog_full) << "a whole step's worth waits for validators";
  // Mostly work in flight: the bound holds, but validators are not the ones behind.
  s.validating_samples = 100;
  s.open_groups = 20;
  a = admit(rules(), s, holding(0));
  EXPECT_FALSE(a.step);
  EXPECT_FALSE(a.backlog_full);
  // Room for 2 groups: the work is cut to fit.
  s.validating_samples = 200;
  s.open_groups = 5;
  a = admit(rules(), s, holding(0));
  ASSERT_TRUE(a.step);
  EXPECT_EQ(a.groups, 2);
  // Without validators there is no bound.
  s.validating_samples = 0;
  s.open_groups = 1000;
  AdmissionRules open = rules();
  open.max_backlog_samples = INT64_MAX;
  EXPECT_EQ(admit(open, s, holding(0)).groups, 4);
}

}  // namespace
}  // namespace trellis::orchestrator
