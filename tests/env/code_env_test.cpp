// The code environment: extraction of the program from a reply, scoring against stdin/stdout and
// assert tests, hostile programs scored 0, the generator's reference solutions (Python) passing
// the tests its C++ references computed, and validation of dataset tasks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "env/environments/environments.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

namespace fs = std::filesystem;

using test::test_limits;

Task stdin_task(std::vector<std::pair<std::string, std::string>> cases) {
  Task t;
  t.task_id = "code-test";
  t.env = "code";
  Json tests = Json::array();
  for (auto& [in, out] : cases) {
    tests.push_back({{"type", "stdin_stdout"}, {"input", in}, {"output", out}});
  }
  t.verification_info = {{"language", "python"}, {"test_cases", tests}};
  return t;
}

Task assert_task(std::vector<std::string> asserts) {
  Task t;
  t.task_id = "code-test";
  t.env = "code";
  Json tests = Json::array();
  for (auto& code : asserts) tests.push_back({{"type", "assert"}, {"code", code}});
  t.verification_info = {{"language", "python"}, {"test_cases", tests}};
  return t;
}

std::string reply(const std::string& program, const std::string& fence = "```python") {
  return "Here is my solution.\n\n" + fence + "\n" + program + "```\n";
}

const Task kDoubling = stdin_task({{"1\n", "2\n"}, {"5\n", "10\n"}, {"-3\n", "-6\n"}});

TEST(CodeEnvironment, ACorrectProgramPassesEveryTest) {
  const auto env = make_code_environment(test_limits());
  const Score s = env->score(kDoubling, reply("print(int(input()) * 2)\n"));
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_EQ(s.reason, "all 3 tests passed");
}

TEST(CodeEnvironment, AWrongOutputFailsAndNamesTheFirstFailingTest) {
  const auto env = make_code_environment(test_limits());
  // Right for positive numbers only: test 3 fails.
  const Score s = env->score(kDoubling, reply("print(abs(int(input())) * 2)\n"));
  EXPECT_EQ(s.reward, 0.0);
  EXPECT_EQ(s.reason, "test 3/3: expected '-6', got '6'");

  const Task lines = stdin_task({{"3\n", "1\n2\n3\n"}});
  EXPECT_EQ(env->score(lines, reply("print(1)\nprint(5)\nprint(3)\n")).reason,
            "test 1/1: line 2: expected '2', got '5'");
  EXPECT_EQ(env->score(lines, reply("print(1)\nprint(2)\n")).reason,
            "test 1/1: output ends after line 2; expected line 3: '3'");
  EXPECT_EQ(env->score(lines, reply("for i in range(4): print(i + 1)\n")).reason,
            "test 1/1: extra output at line 4: '4'");
}

TEST(CodeEnvironment, TrailingWhitespaceAndBlankLinesDoNotMatterButOtherSpacingDoes) {
  const auto env = make_code_environment(test_limits());
  const Task t = stdin_task({{"", "a b\nc\n"}});
  EXPECT_EQ(env->score(t, reply("print('a b  ')\nprint('c\\t')\nprint()\nprint()\n")).reward, 1);
  EXPECT_EQ(env->score(t, reply("import sys\nsys.stdout.write('a b\\r\\nc')\n")).reward, 1);
  EXPECT_EQ(env->score(t, reply("print(' a b')\nprint('c')\n")).reward, 0);
  EXPECT_EQ(env->score(t, reply("print('a  b')\nprint('c')\n")).reward, 0);
  EXPECT_EQ(env->score(t, reply("print('a b')\nprint()\nprint('c')\n")).reward, 0);
}

TEST(CodeEnvironment, AssertTestsRunAgainstTheProgramsFunctions) {
  const auto env = make_code_environment(test_limits());
  const Task t = assert_task({"assert add(2, 3) == 5", "assert add(-1, 1) == 0"});
  EXPECT_EQ(env->score(t, reply("def add(a, b):\n    return a + b\n")).reward, 1);
  const Score wrong = env->score(t, reply("def add(a, b):\n    return a + b + (a < 0)\n"));
  EXPECT_EQ(wrong.reward, 0);
  EXPECT_EQ(wrong.reason, "test 2/2: assertion failed: 'assert add(-1, 1) == 0'");
  const Score missing = env->score(t, reply("def plus(a, b):\n    return a + b\n"));
  EXPECT_EQ(missing.reward, 0);
  EXPECT_EQ(missing.reason, "test 1/2: exit status 1: NameError: name 'add' is not defined");
}

// Reward hacks that skip the asserts: exiting with status 0 before they run, or swallowing the
// AssertionError in an excepthook that exits 0. `assert add(2, 3) == 5` is compared outside the
// program (no AssertionError to swallow: the excepthook's add just returns a wrong value);
// `assert add(2, 3) == 5 and True` still runs inside it.
TEST(CodeEnvironment, ExitingBeforeTheAssertsDoesNotPass) {
  const auto env = make_code_environment(test_limits());
  for (const char* code : {"assert add(2, 3) == 5", "assert add(2, 3) == 5 and True"}) {
    const Task t = assert_task({code});
    const bool outside = std::string(code).find("and") == std::string::npos;
    for (const char* program :
         {"import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n",
          "import os\ndef add(a, b):\n    return 0\nos._exit(0)\n",
          "import os, sys\ndef add(a, b):\n    return 0\nsys.excepthook = lambda *e: os._exit(0)\n",
          "import sys\ndef add(a, b):\n    return 0\n"
          "print('trellis-asserts-done-0000000000000000')\nsys.exit(0)\n"}) {
      const Score s = env->score(t, reply(program));
      EXPECT_EQ(s.reward, 0) << program;
      const bool hook = std::string(program).find("excepthook") != std::string::npos;
      EXPECT_EQ(s.reason, outside && hook ? fmt::format("test 1/1: assertion failed: '{}'", code)
                                          : "test 1/1: the program exited before its asserts ran")
          << program;
    }
  }
}

TEST(CodeEnvironment, RunsTheLastPythonBlockOfTheReply) {
  const auto env = make_code_environment(test_limits());
  const std::string wrong = "```python\nprint(0)\n```\n";
  const std::string right_body = "print(int(input()) * 2)\n";
  EXPECT_EQ(env->score(kDoubling, wrong + reply(right_body)).reward, 1);
  EXPECT_EQ(env->score(kDoubling, reply(right_body) + wrong).reward, 0);
  EXPECT_EQ(env->score(kDoubling, reply(right_body, "```py")).reward, 1);
  EXPECT_EQ(env->score(kDoubling, reply(right_body, "```")).reward, 1);
  EXPECT_EQ(env->score(kDoubling, "  ````Python3 title\n" + right_body + "````\n").reward, 1);
  // A longer opening fence is closed only by as many backticks.
  EXPECT_EQ(env->score(kDoubling, "````python\n" + right_body + "```\n").reward, 0);
  // Blocks in other languages are not run; neither is an unclosed block.
  EXPECT_EQ(env->score(kDoubling, reply(right_body) + "```bash\necho 0\n```\n").reward, 1);
  EXPECT_EQ(env->score(kDoubling, reply(right_body) + "```python\nprint(0)\n").reward, 1);
  // Reasoning before </think> is ignored.
  EXPECT_EQ(env->score(kDoubling, "<think>" + reply(right_body) + "</think>no code").reason,
            "no ```python block found");
}

TEST(CodeEnvironment, RepliesWithoutAProgramScoreZero) {
  const auto env = make_code_environment(test_limits());
  for (const std::string text :
       {std::string(""), std::string("print(2)"), std::string("```python\nprint(1)"),
        std::string("```cpp\nint main() {}\n```\n"), std::string(5000000, '`'),
        std::string(3000000, '\xff')}) {
    const Score s = env->score(kDoubling, text);
    EXPECT_EQ(s.reward, 0);
    EXPECT_EQ(s.reason, "no ```python block found");
  }
  EXPECT_EQ(env->score(kDoubling, "```python\n\n```").reason, "the ```python block is empty");
  EXPECT_EQ(env->score(kDoubling, reply(std::string(300 * 1024, '#') + "\n")).reason,
            "program longer than 256 KiB");
}

TEST(CodeEnvironment, HostileProgramsAreContainedAndScoreZero) {
  auto limits = test_limits(1, 3);
  limits.memory_mib = 128;
  limits.max_processes = 8;
  limits.max_output_kib = 64;
  const auto env = make_code_environment(limits);

  const fs::path secret =
      fs::temp_directory_path() / fmt::format("trellis_code_secret_{}", ::getpid());
  std::ofstream(secret) << "42";
  const fs::path planted =
      fs::temp_directory_path() / fmt::format("trellis_code_planted_{}", ::getpid());

  // Each program would print the expected "42" if its attack worked.
  const Task t = stdin_task({{"", "42\n"}});
  const std::map<std::string, std::string> programs = {
      {"endless loop", "while True:\n    pass\n"},
      {"sleep", "import time\ntime.sleep(1000)\n"},
      {"fork bomb",
       "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
       "        pass\n"},
      {"memory bomb", "a = []\nwhile True:\n    a.append(bytearray(1 << 22))\n"},
      {"read a host file", fmt::format("print(open('{}').read())\n", secret.string())},
      {"write to the host",
       fmt::format("open('/work/{}', 'w').write('x')\nprint(42)\n", planted.filename().string())},
      {"flood", "import sys\nwhile True:\n    sys.stdout.write('42\\n' * 10000)\n"},
      {"socket",
       "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n"
       "print(42)\n"},
  };
  for (const auto& [what, program] : programs) {
    const Score s = env->score(t, reply(program));
    EXPECT_EQ(s.reward, 0) << what << ": " << s.reason;
    EXPECT_TRUE(s.reason.starts_with("test 1/1: ")) << what << ": " << s.reason;
  }
  fs::remove(secret);
  EXPECT_FALSE(fs::exists("/work/" + planted.filename().string()));
  EXPECT_EQ(env->score(t, reply("print(42)\n")).reward, 1) << "the sandbox still works";
}

TEST(CodeEnvironment, TheReasonNamesTheLimitThatStoppedTheProgram) {
  auto limits = test_limits(1, 60);
  limits.max_output_kib = 1024;
  const auto env = make_code_environment(limits);
  EXPECT_EQ(env->score(kDoubling, reply("while True:\n    pass\n")).reason,
            "test 1/3: killed: CPU time limit (1 s)");
  EXPECT_EQ(env->score(kDoubling, reply("while True:\n    print('x' * 1000)\n")).reason,
            "test 1/3: printed more than 1024 KiB");
}

TEST(CodeEnvironment, GeneratedSolutionsPassTheirTests) {
  const auto env = make_code_environment(test_limits(10, 60));
  std::set<std::string> families;
  for (int difficulty : {1, 2, 4, 6, 8, 10}) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const Task t = env->generate(seed * 7919 + difficulty, difficulty);
      ASSERT_NO_THROW(env->validate(t, t.task_id));
      ASSERT_TRUE(t.solution.has_value());
      const Score s = env->score(t, *t.solution);
      EXPECT_EQ(s.reward, 1) << t.task_id << " (" << t.metadata["family"] << "): " << s.reason;
      families.insert(t.metadata["family"].get<std::string>());
    }
  }
  EXPECT_GE(families.size(), 8u);
}

TEST(CodeEnvironment, EveryFamilysSolutionPassesAtTheHighestDifficulty) {
  // The largest inputs: the references agree with the Python solutions, which run in time.
  const auto env = make_code_environment(test_limits(10, 60));
  std::map<std::string, Task> first_of_family;
  for (uint64_t seed = 0; seed < 400 && first_of_family.size() < 14; ++seed) {
    Task t = env->generate(seed, 10);
    first_of_family.emplace(t.metadata["family"].get<std::string>(), std::move(t));
  }
  EXPECT_EQ(first_of_family.size(), 14u);
  for (const auto& [family, t] : first_of_family) {
    const Score s = env->score(t, *t.solution);
    EXPECT_EQ(s.reward, 1) << family << ": " << s.reason;
  }
}

TEST(CodeEnvironment, GenerationIsDeterministicAndDifficultyMatters) {
  const auto env = make_code_environment(test_limits());
  const Task a = env->generate(12345, 5);
  const Task b = env->generate(12345, 5);
  EXPECT_EQ(a.prompt, b.prompt);
  EXPECT_EQ(a.verification_info, b.verification_info);
  EXPECT_EQ(a.solution, b.solution);
  EXPECT_NE(env->generate(12346, 5).verification_info, a.verification_info);
  // More and bigger tests at higher difficulty.
  size_t easy_tests = 0, hard_tests = 0, easy_bytes = 0, hard_bytes = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Task easy = env->generate(seed, 1), hard = env->generate(seed, 10);
    easy_tests += easy.verification_info["test_cases"].size();
    hard_tests += hard.verification_info["test_cases"].size();
    easy_bytes += easy.verification_info.dump().size();
    hard_bytes += hard.verification_info.dump().size();
  }
  EXPECT_EQ(easy_tests, 20u * 3);
  EXPECT_EQ(hard_tests, 20u * 6);
  EXPECT_GT(hard_bytes, 20 * easy_bytes);
}

std::string validation_error(const Json& info) {
  return test::validation_error(*make_code_environment(test_limits()), info, "tasks.jsonl:7");
}

TEST(CodeEnvironment, ValidateRejectsBadVerificationInfo) {
  const Json good = kDoubling.verification_info;
  EXPECT_EQ(validation_error(good), "");
  EXPECT_EQ(validation_error({{"test_cases", good["test_cases"]}}), "") << "language is optional";

  auto with = [&](const char* key, Json value) {
    Json j = good;
    j[key] = std::move(value);
    return j;
  };
  auto with_case = [&](Json test) {
    Json j = good;
    j["test_cases"].push_back(std::move(test));
    return j;
  };
  const std::vector<std::pair<Json, std::string>> bad = {
      {Json::array(), "must be an object"},
      {with("language", "cpp"), "language must be \"python\""},
      {Json{{"language", "python"}}, "test_cases must be an array"},
      {with("test_cases", Json::array()), "1..1000 test cases"},
      {with("test_cases", "print(1)"), "test_cases must be an array"},
      {with_case({{"type", "stdin_stdout"}, {"input", "1"}}),
       "missing field 'output' (tasks.jsonl:7: verification_info.test_cases[3])"},
      {with_case({{"type", "stdin_stdout"}, {"input", 1}, {"output", "1"}}),
       "field 'input' has the wrong type (number) (tasks.jsonl:7: "
       "verification_info.test_cases[3])"},
      {with_case({{"type", "assert"}, {"code", "  "}}), "field 'code' is empty"},
      {with_case({{"type", "assert"}}), "missing field 'code'"},
      {with_case({{"type", "function_call"}, {"code", "x"}}),
       "must be \"stdin_stdout\" or \"assert\""},
      {with_case({{"input", "1"}, {"output", "1"}}), "missing field 'type'"},
  };
  for (const auto& [info, expected] : bad) {
    const std::string error = validation_error(info);
    EXPECT_NE(error.find(expected), std::string::npos) << info.dump() << " -> " << error;
    EXPECT_NE(error.find("tasks.jsonl:7"), std::string::npos) << error;
  }
}

TEST(CodeEnvironment, AnUnusableSandboxIsAnErrorNotAZeroReward) {
  auto limits = test_limits();
  limits.python = "/nonexistent/python3";
  const auto env = make_code_environment(limits);
  EXPECT_THROW(env->score(kDoubling, reply("print(1)\n")), Error);
  // A reply without a program needs no sandbox.
  EXPECT_EQ(env->score(kDoubling, "no code").reward, 0);
}

}  // namespace
}  // namespace trellis::env
