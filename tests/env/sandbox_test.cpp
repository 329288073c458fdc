// The sandbox that runs model-written Python: correct programs run, and hostile ones (endless
// loops, fork and memory bombs, reading or writing host files, sockets, floods of output) are
// stopped by the limit meant for them, without effect on the host.
//
// Limits are set so that each hostile run must end by its own limit: a test asserts *which*
// limit ended it (an output flood must end by the output cap, not by a 60 s wall limit), never how
// long it took.
#include "env/sandbox.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

namespace fs = std::filesystem;

using test::test_limits;

// A host path no other test process uses.
fs::path unique_host_path(const std::string& name) {
  return fs::temp_directory_path() /
         fmt::format("trellis_sandbox_{}_{}_{}", ::getpid(),
                     std::chrono::steady_clock::now().time_since_epoch().count(), name);
}

TEST(Sandbox, RunsAProgramOnItsInput) {
  const Sandbox sandbox(test_limits());
  const auto r =
      sandbox.run("import sys\nfor line in sys.stdin:\n    print(int(line) * 2)\n", "1\n2\n21\n");
  EXPECT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.out, "2\n4\n42\n");
  EXPECT_EQ(r.failure, "");
}

TEST(Sandbox, ReadsAllOfALargeInputToEndOfFile) {
  const Sandbox sandbox(test_limits());
  std::string input;
  for (int i = 0; i < 300000; ++i) input += std::to_string(i % 10);  // 300 KB: more than a pipe
  const auto r = sandbox.run(
      "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), sum(data) - 48 * len(data))\n",
      input);
  ASSERT_TRUE(r.passed()) << r.failure;
  EXPECT_EQ(r.out, "300000 1350000\n");  // 30000 rounds of 0 + 1 + ... + 9 = 45
}

TEST(Sandbox, ReportsTheExitStatusAndTheExceptionOfAFailingProgram) {
  const Sandbox sandbox(test_limits());
  const auto r = sandbox.run("print('partial')\nraise ValueError('boom')\n");
  EXPECT_FALSE(r.passed());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "partial\n");
  EXPECT_EQ(r.failure, "exit status 1: ValueError: boom");

  const auto quiet = sandbox.run("import sys\nsys.exit(3)\n");
  EXPECT_EQ(quiet.exit_code, 3);
  EXPECT_EQ(quiet.failure, "exit status 3");
}

TEST(Sandbox, KeepsOutputThatIsNotUtf8AndDescribesItInAscii) {
  const Sandbox sandbox(test_limits());
  const auto r = sandbox.run(
      "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00ok')\n"
      "sys.stderr.buffer.write(b'\\xc3\\x28 bad\\n')\nsys.exit(2)\n");
  EXPECT_EQ(r.out, std::string("\xff\xfe\0ok", 5));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.failure, "exit status 2: ?( bad");
}

TEST(Sandbox, RunsAsAnUnprivilegedUserInItsOwnNamespaces) {
  const Sandbox sandbox(test_limits());
  const auto r = sandbox.run(
      "import os\nprint(os.getuid(), os.getpid())\n"
      "print(sorted(p for p in os.listdir('/proc') if p.isdigit()))\nprint(os.getcwd())\n");
  ASSERT_TRUE(r.passed()) << r.failure;
  std::istringstream lines(r.out);
  int uid = -1, pid = -1;
  lines >> uid >> pid;
  EXPECT_NE(uid, 0);
  EXPECT_LT(pid, 10) << "a PID namespace of its own numbers its processes from 1";
  std::string rest((std::istreambuf_iterator<char>(lines)), std::istreambuf_iterator<char>());
  EXPECT_NE(rest.find("/tmp"), std::string::npos);
  // The host's processes (this test among them) are not visible.
  EXPECT_EQ(rest.find("'" + std::to_string(::getpid()) + "'"), std::string::npos) << rest;
}

TEST(Sandbox, TheRunEndsWithTheProgramEvenIfItLeavesAProcessBehind) {
  const Sandbox sandbox(test_limits(10, 60));
  // The child keeps stdout open and sleeps: the run must not wait for it.
  const auto r = sandbox.run(
      "import os, time\nif os.fork() == 0:\n    time.sleep(1000)\nprint('parent done')\n");
  EXPECT_TRUE(r.passed()) << r.failure;
  EXPECT_FALSE(r.wall_time_exceeded);
  EXPECT_EQ(r.out, "parent done\n");
}

TEST(Sandbox, AnEndlessLoopIsStoppedByTheCpuLimit) {
  const Sandbox sandbox(test_limits(1, 60));
  const auto r = sandbox.run("while True:\n    pass\n");
  EXPECT_FALSE(r.passed());
  EXPECT_TRUE(r.cpu_time_exceeded);
  EXPECT_FALSE(r.wall_time_exceeded);
  EXPECT_EQ(r.failure, "killed: CPU time limit (1 s)");
}

TEST(Sandbox, IgnoringSigxcpuOnlyDelaysTheCpuLimit) {
  const Sandbox sandbox(test_limits(1, 60));
  const auto r = sandbox.run(
      "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass\n");
  EXPECT_TRUE(r.cpu_time_exceeded) << r.failure;
  EXPECT_FALSE(r.wall_time_exceeded);
  EXPECT_EQ(r.signal, SIGKILL);
}

TEST(Sandbox, SleepingForeverIsStoppedByTheWallLimit) {
  const Sandbox sandbox(test_limits(10, 1.5));
  const auto r = sandbox.run("import time\ntime.sleep(1000)\n");
  EXPECT_TRUE(r.wall_time_exceeded);
  EXPECT_FALSE(r.cpu_time_exceeded);
  EXPECT_EQ(r.failure, "killed: wall time limit (1.5 s)");
}

TEST(Sandbox, AMemoryBombIsStoppedByTheAddressSpaceLimit) {
  auto limits = test_limits(30, 120);
  limits.memory_mib = 128;
  const Sandbox sandbox(limits);
  const auto growing = sandbox.run("a = []\nwhile True:\n    a.append(bytearray(1 << 22))\n");
  EXPECT_FALSE(growing.passed());
  EXPECT_FALSE(growing.timed_out()) << growing.failure;
  EXPECT_EQ(growing.failure, "out of memory (limit 128 MiB)");

  const auto at_once = sandbox.run("x = bytearray(10 ** 10)\nprint('allocated')\n");
  EXPECT_EQ(at_once.failure, "out of memory (limit 128 MiB)");
  EXPECT_EQ(at_once.out, "");
}

TEST(Sandbox, AForkBombIsContainedAndTheHostCanStillFork) {
  auto limits = test_limits(10, 60);
  limits.max_processes = 8;
  const Sandbox sandbox(limits);
  // Forks sleeping children until the kernel refuses: the count shows the limit held.
  const auto counted = sandbox.run(
      "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
      "            time.sleep(60)\n            os._exit(0)\n        n += 1\n"
      "except OSError as e:\n    print(n, e.errno)\n");
  ASSERT_TRUE(counted.passed()) << counted.failure;
  std::istringstream in(counted.out);
  int children = -1, error = -1;
  in >> children >> error;
  EXPECT_GE(children, 1);
  EXPECT_LT(children, limits.max_processes);
  EXPECT_EQ(error, EAGAIN);

  // A real bomb: every process forks forever and ignores failures; the wall limit ends it.
  limits.wall_seconds = 2;
  const Sandbox bomb_sandbox(limits);
  const auto bomb = bomb_sandbox.run(
      "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n");
  EXPECT_FALSE(bomb.passed());
  EXPECT_TRUE(bomb.timed_out()) << bomb.failure;

  // The host is fine: this process can fork, and the sandbox runs programs again.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(7);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_EQ(sandbox.run("print('alive')\n").out, "alive\n");
}

// The cgroup limits apply only where the host delegates a cgroup v2 subtree with the memory and
// pids controllers; elsewhere the rlimits above are what holds, and these tests say why they skip.
TEST(Sandbox, SaysWhichLimitsApply) {
  const Sandbox sandbox(test_limits());
  const std::string line = sandbox.limits_in_force();
  EXPECT_NE(line.find("seccomp filter;"), std::string::npos) << line;
  EXPECT_NE(line.find("no nested user namespaces"), std::string::npos) << line;
  if (sandbox.defences().cgroup) {
    EXPECT_NE(line.find("cgroup v2 limits per run"), std::string::npos) << line;
  } else {
    EXPECT_NE(line.find("rlimits only"), std::string::npos) << line;
    EXPECT_FALSE(sandbox.defences().cgroup_reason.empty());
  }
}

TEST(Sandbox, ACgroupLimitsTheMemoryOfAllTheRunsProcessesTogether) {
  auto limits = test_limits(30, 120);
  limits.memory_mib = 128;
  const Sandbox sandbox(limits);
  if (!sandbox.defences().cgroup) {
    GTEST_SKIP() << "no writable cgroup v2 with memory and pids controllers here: "
                 << sandbox.defences().cgroup_reason;
  }
  // Four processes of 80 MiB each: every one is under RLIMIT_AS, together they pass memory.max.
  const auto r = sandbox.run(
      "import os, time\npids = []\nfor i in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
      "        block = b'x' * (80 << 20)\n        time.sleep(10)\n        os._exit(0)\n"
      "    pids.append(pid)\nfor pid in pids:\n    os.waitpid(pid, 0)\nprint('survived')\n");
  EXPECT_TRUE(r.memory_exceeded) << r.failure;
  EXPECT_EQ(r.failure, "out of memory (limit 128 MiB)");
  EXPECT_EQ(r.out.find("survived"), std::string::npos);
  EXPECT_EQ(sandbox.run("print('alive')\n").out, "alive\n");
}

TEST(Sandbox, EachRunHasACgroupWithItsLimitsRemovedAfterIt) {
  auto limits = test_limits(10, 60);
  limits.max_processes = 8;
  limits.memory_mib = 256;
  const Sandbox sandbox(limits);
  if (!sandbox.defences().cgroup) {
    GTEST_SKIP() << "no writable cgroup v2 with memory and pids controllers here: "
                 << sandbox.defences().cgroup_reason;
  }
  const std::string prefix = fmt::format("trellis-sandbox-{}-", ::getpid());
  auto run_groups = [&] {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(sandbox.defences().cgroup_parent)) {
      if (entry.path().filename().string().starts_with(prefix)) found.push_back(entry.path());
    }
    return found;
  };
  std::thread run([&] { sandbox.run("import time\ntime.sleep(3)\n"); });
  std::vector<fs::path> groups;
  for (int i = 0; i < 200 && groups.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    groups = run_groups();
  }
  ASSERT_EQ(groups.size(), 1u);
  auto read = [](const fs::path& p) {
    std::ifstream in(p);
    std::string v;
    in >> v;
    return v;
  };
  EXPECT_EQ(read(groups[0] / "memory.max"), std::to_string(256 << 20));
  EXPECT_EQ(read(groups[0] / "pids.max"), "10");  // 8, bwrap and its init
  run.join();
  EXPECT_TRUE(run_groups().empty()) << "the run's cgroup was not removed";
}

TEST(Sandbox, HostFilesAreNotVisible) {
  const fs::path secret = unique_host_path("secret");
  std::ofstream(secret) << "top secret";
  const Sandbox sandbox(test_limits());
  const std::string program = fmt::format(
      "import os\nfor path in ['{}', '/work', '/root', '/home', '/etc/shadow', '/etc/passwd', "
      "'/etc/hostname', '{}', '/proc/1/root/etc/passwd']:\n"
      "    try:\n        with open(path) as f:\n            print('READ', path, f.read(20))\n"
      "    except OSError:\n        pass\n    if os.path.exists(path):\n"
      "        print('EXISTS', path)\nprint('done', sorted(os.listdir('/')))\n",
      secret.string(), TRELLIS_SOURCE_DIR);
  const auto r = sandbox.run(program);
  fs::remove(secret);
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.out.find("READ"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("EXISTS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done"), std::string::npos);
  for (const char* top : {"'work'", "'root'", "'home'", "'var'", "'opt'"}) {
    EXPECT_EQ(r.out.find(top), std::string::npos) << top << " is visible: " << r.out;
  }
}

TEST(Sandbox, ProgramsCannotWriteToTheHost) {
  const fs::path in_tmp = unique_host_path("written");
  const std::string in_usr = "/usr/" + in_tmp.filename().string();
  const Sandbox sandbox(test_limits());
  const std::string program = fmt::format(
      "for path in ['{}', '{}', '/sandbox/main.py', '/etc/ld.so.cache']:\n"
      "    try:\n        with open(path, 'w') as f:\n            f.write('pwned')\n"
      "        print('WROTE', path)\n    except OSError as e:\n        print('denied', path)\n",
      in_tmp.string(), in_usr);
  const auto r = sandbox.run(program);
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  // /tmp inside is a private tmpfs: the write succeeds there and never reaches the host.
  EXPECT_NE(r.out.find("WROTE " + in_tmp.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("denied " + in_usr), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("denied /sandbox/main.py"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("denied /etc/ld.so.cache"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(in_tmp));
  EXPECT_FALSE(fs::exists(in_usr));
  // Nor does it stay for the next run.
  const auto next =
      sandbox.run(fmt::format("import os\nprint(os.path.exists('{}'))\n", in_tmp.string()));
  EXPECT_EQ(next.out, "False\n");
}

TEST(Sandbox, ProgramsCannotReachTheNetwork) {
  // A server on the host's loopback: a sandboxed program must not get through to it.
  const int server = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(server, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(server, 4), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(getsockname(server, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);

  const Sandbox sandbox(test_limits(10, 60));
  const auto r = sandbox.run(fmt::format(
      "import socket\nfor host, port in [('127.0.0.1', {}), ('1.1.1.1', 53), ('10.0.0.1', 80)]:\n"
      "    try:\n        socket.create_connection((host, port), timeout=5).close()\n"
      "        print('CONNECTED', host)\n    except OSError as e:\n        print('failed', host)\n"
      "try:\n    socket.getaddrinfo('example.com', 80)\n    print('RESOLVED')\n"
      "except OSError:\n    print('no dns')\n",
      port));
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.out.find("CONNECTED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("RESOLVED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no dns"), std::string::npos) << r.out;
  EXPECT_LT(accept(server, nullptr, nullptr), 0) << "a connection reached the host's server";
  close(server);
}

TEST(Sandbox, PrintingGigabytesIsCutOffAtTheOutputLimit) {
  auto limits = test_limits(60, 60);
  limits.max_output_kib = 64;
  const Sandbox sandbox(limits);
  for (const char* stream : {"stdout", "stderr"}) {
    const auto r = sandbox.run(
        fmt::format("import sys\nwhile True:\n    sys.{}.write('x' * 65536)\n", stream));
    EXPECT_TRUE(r.output_exceeded) << stream;
    EXPECT_FALSE(r.timed_out()) << stream << ": ended by a time limit, not the output cap";
    EXPECT_EQ(r.out.size() + r.err.size(), 64u * 1024) << stream;
    EXPECT_EQ(r.failure, "printed more than 64 KiB");
  }
  // Output up to the limit is fine.
  const auto r = sandbox.run("print('y' * 60000)\n");
  EXPECT_TRUE(r.passed()) << r.failure;
  EXPECT_EQ(r.out.size(), 60001u);
}

// The fields of a /proc/<pid>/stat file after the command name ("S 1 ..."; "" when unreadable).
std::string stat_fields(const fs::path& stat) {
  std::ifstream in(stat);
  std::string line;
  if (!std::getline(in, line)) return "";
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? "" : line.substr(close + 2);
}

// The processes whose parent is `pid`, recursively (read from /proc).
std::set<pid_t> descendants(pid_t pid) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string fields = stat_fields(entry.path() / "stat");
    if (fields.empty()) continue;
    std::istringstream rest(fields);
    char state = 0;
    pid_t parent = 0;
    rest >> state >> parent;
    children.emplace(parent, std::stoi(name));
  }
  std::set<pid_t> found;
  std::vector<pid_t> todo = {pid};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      if (found.insert(it->second).second) todo.push_back(it->second);
    }
  }
  return found;
}

// Alive: exists and is not a zombie (a dead process its new parent has not reaped yet).
bool alive(pid_t pid) {
  const std::string fields = stat_fields(fmt::format("/proc/{}/stat", pid));
  return !fields.empty() && fields[0] != 'Z';
}

TEST(Sandbox, KillingTheCallerLeavesNoProcessesBehind) {
  const pid_t caller = fork();
  ASSERT_GE(caller, 0);
  if (caller == 0) {
    const Sandbox sandbox(test_limits(60, 120));
    sandbox.run("import os, time\nos.fork()\ntime.sleep(100)\n");
    _exit(0);
  }
  // Wait until the sandboxed program and its child run (bwrap, bwrap's init, 2 x python3).
  std::set<pid_t> sandboxed;
  for (int i = 0; i < 400 && sandboxed.size() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sandboxed = descendants(caller);
  }
  ASSERT_GE(sandboxed.size(), 4u) << "the sandboxed program did not start";
  kill(caller, SIGKILL);
  waitpid(caller, nullptr, 0);
  std::set<pid_t> left = sandboxed;
  for (int i = 0; i < 400 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::erase_if(left, [](pid_t p) { return !alive(p); });
  }
  EXPECT_TRUE(left.empty()) << left.size() << " sandboxed processes outlived their caller";
}

TEST(Sandbox, ConcurrentRunsAreIndependent) {
  const Sandbox sandbox(test_limits());
  std::vector<std::string> outputs(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      outputs[i] =
          sandbox.run("import sys\nprint(int(sys.stdin.read()) ** 2)\n", std::to_string(i + 10))
              .out;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i], std::to_string((i + 10) * (i + 10)) + "\n");
  }
}

using test::error_of;

TEST(Sandbox, AMissingInterpreterOrBubblewrapIsAClearError) {
  auto limits = test_limits();
  limits.python = "/nonexistent/python3";
  const std::string no_python = error_of([&] { Sandbox(limits).run("print(1)\n"); });
  EXPECT_NE(no_python.find("'/nonexistent/python3' not found"), std::string::npos) << no_python;
  EXPECT_NE(no_python.find("env.code.python"), std::string::npos) << no_python;

  const std::string no_bwrap =
      error_of([&] { Sandbox(test_limits(), "/nonexistent/bwrap").run("print(1)\n"); });
  EXPECT_NE(no_bwrap.find("bubblewrap not found"), std::string::npos) << no_bwrap;
  EXPECT_NE(no_bwrap.find("apt-get install bubblewrap"), std::string::npos) << no_bwrap;

  // A "bwrap" that cannot sandbox (here: /bin/false) fails the probe: code never runs unsandboxed.
  const std::string broken =
      error_of([&] { Sandbox(test_limits(), "/bin/false").run("print(1)\n"); });
  EXPECT_NE(broken.find("does not work on this machine"), std::string::npos) << broken;
  EXPECT_NE(broken.find("user namespaces"), std::string::npos) << broken;
}

}  // namespace
}  // namespace trellis::env
