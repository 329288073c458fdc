// Task: one unit of work for an environment, in the GENESYS schema that INTELLECT-2's datasets use:
//
//   {"task_id": "math-00017", "env": "math",
//    "prompt": "What is 1/2 + 1/3?"              (text)  or
//    "prompt": [{"role": "user", "content": ...}] (chat messages),
//    "verification_info": {...},                  (what the environment's verifier needs)
//    "solution": "...",                           (optional: a reference answer, for SFT)
//    "metadata": {...}}                           (optional: free-form, copied through)
//
// Datasets are JSONL, one task per line; a bad line is an Error naming the file and line.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/json.h"

namespace trellis::env {

struct Message {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct Task {
  std::string task_id;
  std::string env;
  std::string prompt;             // a text prompt (the user's message), or
  std::vector<Message> messages;  // a chat prompt (then `prompt` is empty)
  Json verification_info = Json::object();
  std::optional<std::string> solution;
  Json metadata = Json::object();
};

// One task from its JSON object; Error naming `where` and the field at fault.
Task task_from_json(const Json& j, const std::string& where);
Json task_to_json(const Task& task);

// Every task of a JSONL file (blank lines skipped), each passed to `check` (when given) with its
// "file:line". Errors name "file:line".
using TaskCheck = std::function<void(const Task& task, const std::string& where)>;
std::vector<Task> load_tasks(const std::filesystem::path& path, const TaskCheck& check = {});
// Writes tasks as JSONL, atomically.
void write_tasks(const std::filesystem::path& path, const std::vector<Task>& tasks);

}  // namespace trellis::env
