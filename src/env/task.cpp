// Task parsing and JSONL datasets (see task.h).
#include "env/task.h"

#include <fstream>

#include "common/error.h"
#include "common/files.h"

namespace trellis::env {

Task task_from_json(const Json& j, const std::string& where) {
  if (!j.is_object()) throw Error("a task must be a JSON object", where);
  Task t;
  t.task_id = json_required<std::string>(j, "task_id", where);
  if (t.task_id.empty()) throw Error("field 'task_id' is empty", where);
  t.env = json_required<std::string>(j, "env", where);
  if (!j.contains("prompt")) throw Error("missing field 'prompt'", where);
  const Json& prompt = j["prompt"];
  if (prompt.is_string()) {
    t.prompt = prompt.get<std::string>();
  } else if (prompt.is_array()) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const std::string at = fmt::format("{}: prompt[{}]", where, i);
      Message m{json_required<std::string>(prompt[i], "role", at),
                json_required<std::string>(prompt[i], "content", at)};
      if (m.role != "system" && m.role != "user" && m.role != "assistant") {
        fail(at, "role '{}' is not system, user or assistant", m.role);
      }
      t.messages.push_back(std::move(m));
    }
    if (t.messages.empty()) throw Error("field 'prompt' is an empty list of messages", where);
  } else {
    throw Error("field 'prompt' must be a string or a list of {role, content} messages", where);
  }
  if (t.prompt.empty() && t.messages.empty()) throw Error("field 'prompt' is empty", where);
  t.verification_info = j.value("verification_info", Json::object());
  // Some datasets store verification_info as a JSON string; accept both.
  if (t.verification_info.is_string()) {
    t.verification_info =
        parse_json(t.verification_info.get<std::string>(), where + ": verification_info");
  }
  if (!t.verification_info.is_object()) {
    throw Error("field 'verification_info' must be a JSON object", where);
  }
  if (j.contains("solution") && !j["solution"].is_null()) {
    t.solution = json_required<std::string>(j, "solution", where);
  }
  t.metadata = j.value("metadata", Json::object());
  if (t.metadata.is_null()) t.metadata = Json::object();
  return t;
}

Json task_to_json(const Task& task) {
  Json j{{"task_id", task.task_id}, {"env", task.env}};
  if (task.messages.empty()) {
    j["prompt"] = task.prompt;
  } else {
    j["prompt"] = Json::array();
    for (const auto& m : task.messages) {
      j["prompt"].push_back({{"role", m.role}, {"content", m.content}});
    }
  }
  j["verification_info"] = task.verification_info;
  if (task.solution) j["solution"] = *task.solution;
  j["metadata"] = task.metadata;
  return j;
}

std::vector<Task> load_tasks(const std::filesystem::path& path, const TaskCheck& check) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open the task file", path.string());
  std::vector<Task> tasks;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), number);
    tasks.push_back(task_from_json(parse_json(line, where), where));
    if (check) check(tasks.back(), where);
  }
  if (tasks.empty()) throw Error("no tasks in the file", path.string());
  return tasks;
}

void write_tasks(const std::filesystem::path& path, const std::vector<Task>& tasks) {
  std::string text;
  for (const auto& t : tasks) text += json_text(task_to_json(t)) + "\n";
  write_file_atomic(path, text);
}

}  // namespace trellis::env
