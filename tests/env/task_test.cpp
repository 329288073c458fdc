// Task schema, JSONL datasets, prompt building and the length reward.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/config.h"
#include "env/length_reward.h"
#include "env/registry.h"
#include "env/task.h"
#include "error_of.h"

namespace trellis::env {
namespace {

std::filesystem::path temp_file(const std::string& name, const std::string& text) {
  auto p = std::filesystem::temp_directory_path() /
           ("trellis_task_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p) << text;
  return p;
}

using test::error_of;

TEST(Task, RoundTripsTextAndChatPrompts) {
  Task text = task_from_json(parse_json(R"({"task_id": "a", "env": "math", "prompt": "1+1?",
      "verification_info": {"ground_truth": "2"}, "solution": "2", "metadata": {"k": 1}})",
                                        "t"),
                             "t");
  EXPECT_EQ(text.prompt, "1+1?");
  EXPECT_TRUE(text.messages.empty());
  EXPECT_EQ(text.verification_info["ground_truth"], "2");
  EXPECT_EQ(*text.solution, "2");
  EXPECT_EQ(task_to_json(task_from_json(task_to_json(text), "again")), task_to_json(text));

  Task chat = task_from_json(
      parse_json(R"({"task_id": "b", "env": "math", "prompt": [{"role": "system", "content": "S"},
      {"role": "user", "content": "U"}], "verification_info": "{\"ground_truth\": \"3\"}"})",
                 "t"),
      "t");
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[1].content, "U");
  EXPECT_EQ(chat.verification_info["ground_truth"], "3");  // a JSON string is parsed
  EXPECT_FALSE(chat.solution);
  EXPECT_EQ(task_to_json(task_from_json(task_to_json(chat), "again")), task_to_json(chat));
}

TEST(Task, MalformedLinesNameFileAndLine) {
  auto path = temp_file("bad.jsonl",
                        "{\"task_id\": \"a\", \"env\": \"math\", \"prompt\": \"x\"}\n\n"
                        "{\"task_id\": \"b\", \"env\": \"math\"}\n");
  std::string e = error_of([&] { load_tasks(path); });
  EXPECT_NE(e.find("missing field 'prompt'"), std::string::npos) << e;
  EXPECT_NE(e.find(path.string() + ":3"), std::string::npos) << e;

  auto syntax = temp_file("syntax.jsonl", "{\"task_id\": \"a\",\n");
  e = error_of([&] { load_tasks(syntax); });
  EXPECT_NE(e.find(syntax.string() + ":1"), std::string::npos) << e;

  auto role = temp_file(
      "role.jsonl", R"({"task_id": "a", "env": "m", "prompt": [{"role": "bot", "content": ""}]})"
                    "\n");
  e = error_of([&] { load_tasks(role); });
  EXPECT_NE(e.find("role 'bot'"), std::string::npos) << e;
  EXPECT_NE(e.find(":1: prompt[0]"), std::string::npos) << e;

  EXPECT_NE(error_of([&] { load_tasks(temp_file("empty.jsonl", "\n\n")); }).find("no tasks"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_tasks("/nonexistent/tasks.jsonl"); }).find("cannot open"),
            std::string::npos);
}

TEST(Task, WriteThenLoadKeepsEveryTask) {
  std::vector<Task> tasks(3);
  for (int i = 0; i < 3; ++i) {
    tasks[i].task_id = "t" + std::to_string(i);
    tasks[i].env = "sort";
    tasks[i].prompt = "line\nbreak \"quoted\" " + std::to_string(i);
  }
  auto path = std::filesystem::temp_directory_path() / "trellis_task_roundtrip.jsonl";
  write_tasks(path, tasks);
  auto back = load_tasks(path);
  ASSERT_EQ(back.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(task_to_json(back[i]), task_to_json(tasks[i]));
}

TEST(LengthReward, DrawsFromTargetsAndPenalisesDistance) {
  Config c = Config::resolve({}, {"env.length.targets=[100, 200, 400]", "env.length.alpha=0.001"});
  auto lr = LengthReward::from_config(c);
  ASSERT_TRUE(lr.enabled());
  std::map<int64_t, int> seen;
  for (uint64_t s = 0; s < 300; ++s) {
    int64_t t = lr.draw_target(s);
    EXPECT_EQ(t, lr.draw_target(s));  // deterministic
    ++seen[t];
  }
  EXPECT_EQ(seen.size(), 3u);
  for (auto [t, count] : seen) EXPECT_GT(count, 60) << t;  // roughly uniform
  EXPECT_DOUBLE_EQ(lr.apply(1.0, 200, 150), 1.0 - 0.001 * 50);
  EXPECT_DOUBLE_EQ(lr.apply(1.0, 200, 260), 1.0 - 0.001 * 60);
  EXPECT_DOUBLE_EQ(lr.apply(0.5, 0, 5000), 0.5);  // no target: unchanged
  EXPECT_EQ(length_sentence(512), "Think for 512 tokens before giving a response.");

  EXPECT_FALSE(LengthReward::from_config(Config::defaults()).enabled());
  EXPECT_NE(error_of([] {
              LengthReward::from_config(Config::resolve({}, {"env.length.targets=[100, -1]"}));
            }).find("positive"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              LengthReward::from_config(Config::resolve({}, {"env.length.targets=[\"a\"]"}));
            }).find("element 0"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::env
