// Hardening of the code sandbox and of the code verifier against programs that attack them: no
// nested user namespaces (the way to mount, pivot_root and regain capabilities), a seccomp filter
// over the system calls a test program never needs (ptrace, keys, bpf, perf, io_uring, ...), and
// assert tests whose values are compared outside the program (an object whose __eq__ always
// answers True, or a program that forges the harness's success line, scores 0).
//
// Only Sandbox::run(program) and the code environment's score() are used here, so that the same
// file also builds against the sandbox before these defences and shows each test failing there.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "env/environments/environments.h"
#include "env/sandbox.h"
#include "env_test_util.h"

namespace trellis::env {
namespace {

using test::test_limits;

TEST(SandboxHardening, NestedUserNamespacesAreRefused) {
  const Sandbox sandbox(test_limits());
  // unshare(CLONE_NEWUSER) through libc, the unshare(1) tool, and the classic path to mount:
  // a nested user namespace in which the program is root and may mount.
  const auto r = sandbox.run(R"PY(import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:  # in a child: a process in a new user namespace could not try the tools below
    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)
ok = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
print('unshare(CLONE_NEWUSER)', 'ok' if ok else 'refused')
for cmd in (['unshare', '-U', 'true'], ['unshare', '-Urm', 'mount', '-t', 'tmpfs', 'none', '/tmp']):
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(cmd[1], 'ok' if p.returncode == 0 else 'refused')
)PY");
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.out, "unshare(CLONE_NEWUSER) refused\n-U refused\n-Urm refused\n");
}

TEST(SandboxHardening, PtraceAndMountAreBlocked) {
  const Sandbox sandbox(test_limits());
  const auto r = sandbox.run(R"PY(import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def result(rc):
    return 'ok' if rc == 0 else os.strerror(ctypes.get_errno())
print('ptrace', result(libc.ptrace(0, 0, None, None)))  # PTRACE_TRACEME
print('mount', result(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)))
print('umount', result(libc.umount2(b'/tmp', 0)))
print('chroot', result(libc.chroot(b'/tmp')))
)PY");
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.out,
            "ptrace Operation not permitted\nmount Operation not permitted\n"
            "umount Operation not permitted\nchroot Operation not permitted\n");
}

#if defined(__x86_64__)
TEST(SandboxHardening, SystemCallsATestNeverNeedsAnswerEperm) {
  const Sandbox sandbox(test_limits());
  // Each call has arguments the kernel would reject with another error (EINVAL, EFAULT, EBADF)
  // or accept; the filter answers EPERM before the kernel looks. x86_64 numbers.
  const auto r = sandbox.run(R"PY(import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {'keyctl': (250, 9999), 'add_key': (248, 0, 0, 0, 0, 0), 'request_key': (249, 0, 0, 0, 0),
         'bpf': (321, 9999, 0, 0), 'perf_event_open': (298, 0, 0, -1, -1, 0),
         'io_uring_setup': (425, 0, 0), 'userfaultfd': (323, 0xffff),
         'process_vm_readv': (310, os.getpid(), 0, 1, 0, 1, 0), 'setns': (308, -1, 0),
         'personality': (135, 0x0040000), 'kexec_load': (246, 0, 0, 0, 0),
         'init_module': (175, 0, 0, 0), 'open_by_handle_at': (304, -1, 0, 0),
         'pivot_root': (155, 0, 0), 'swapon': (167, 0, 0), 'acct': (163, 0),
         'clock_settime': (227, 0, 0), 'reboot': (169, 0, 0, 0, 0)}
denied = []
for name, (nr, *args) in calls.items():
    if libc.syscall(nr, *args) == -1 and ctypes.get_errno() == 1:
        denied.append(name)
print('not denied:', sorted(set(calls) - set(denied)))
rc = libc.syscall(435, 0, 0)  # clone3: ENOSYS, so that libc falls back to clone
print('clone3', os.strerror(ctypes.get_errno()) if rc == -1 else 'ok')
mode = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')]
print('seccomp mode', mode)
# What programs do need still works: threads, processes, subprocesses.
t = threading.Thread(target=lambda: None)
t.start()
t.join()
pid = os.fork()
if pid == 0:
    os._exit(3)
print('fork', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
print(subprocess.run(['echo', 'spawned'], capture_output=True, text=True).stdout.strip())
)PY");
  ASSERT_TRUE(r.passed()) << r.failure << r.err;
  EXPECT_EQ(r.out,
            "not denied: []\nclone3 Function not implemented\nseccomp mode ['2']\nfork 3\n"
            "spawned\n");
}
#endif

Task assert_task(std::vector<std::string> asserts) {
  Task t;
  t.task_id = "code-hardening";
  t.env = "code";
  Json tests = Json::array();
  for (auto& code : asserts) tests.push_back({{"type", "assert"}, {"code", code}});
  t.verification_info = {{"language", "python"}, {"test_cases", tests}};
  return t;
}

std::string reply(const std::string& program) {
  return "My solution:\n\n```python\n" + program + "```\n";
}

TEST(CodeHardening, AnObjectThatEqualsEverythingScoresZero) {
  const auto env = make_code_environment(test_limits());
  const Task t = assert_task(
      {"assert two_sum([2, 7, 11], 9) == (0, 1)", "assert (-1, -1) == two_sum([1, 2], 10)"});
  const std::map<std::string, std::string> hacks = {
      {"__eq__ always True",
       "class Anything:\n    def __eq__(self, other):\n        return True\n"
       "def two_sum(nums, target):\n    return Anything()\n"},
      {"a tuple subclass",
       "class T(tuple):\n    def __eq__(self, other):\n        return True\n"
       "    __hash__ = tuple.__hash__\n"
       "def two_sum(nums, target):\n    return T()\n"},
      {"an int subclass in a tuple",
       "class I(int):\n    def __eq__(self, other):\n        return True\n"
       "    __hash__ = int.__hash__\n"
       "def two_sum(nums, target):\n    return (I(5), I(5))\n"},
      {"a forged __class__",
       "class Fake:\n    __class__ = tuple\n    def __eq__(self, other):\n        return True\n"
       "def two_sum(nums, target):\n    return Fake()\n"},
  };
  for (const auto& [what, program] : hacks) {
    const Score s = env->score(t, reply(program));
    EXPECT_EQ(s.reward, 0) << what << ": " << s.reason;
  }
  // An honest solution (a list is not a tuple in Python either, so it must return tuples).
  const Score honest = env->score(
      t, reply("def two_sum(nums, target):\n    for i in range(len(nums)):\n"
               "        for j in range(i + 1, len(nums)):\n"
               "            if nums[i] + nums[j] == target:\n                return (i, j)\n"
               "    return (-1, -1)\n"));
  EXPECT_EQ(honest.reward, 1) << honest.reason;
}

TEST(CodeHardening, APrintedOrForgedResultDoesNotPass) {
  const auto env = make_code_environment(test_limits());
  const Task t = assert_task({"assert add(2, 3) == 5"});
  for (const char* program : {
           // Reads the harness's success marker from its own source, prints it, and leaves
           // before any test runs.
           "import os, re\ndef add(a, b):\n    return 0\n"
           "marks = re.findall(r'trellis-asserts-done-[0-9a-f]+', open(__file__).read())\n"
           "print(marks[-1] if marks else 'no marker', flush=True)\nos._exit(0)\n",
           // Prints result-like lines on stdout, then returns a wrong value.
           "print('{\"int\": \"5\"}')\nprint('5')\nprint('True')\n"
           "def add(a, b):\n    return 0\n",
           // Writes a guess to every fd the harness could use, then leaves.
           "import os\ndef add(a, b):\n    return 0\nfor fd in range(3, 10):\n    try:\n"
           "        os.write(fd, b'{\"int\": \"0\"}')\n    except OSError:\n        pass\n"
           "os._exit(0)\n",
       }) {
    const Score s = env->score(t, reply(program));
    EXPECT_EQ(s.reward, 0) << program << "\n-> " << s.reason;
  }
  EXPECT_EQ(env->score(t, reply("print('noise')\ndef add(a, b):\n    return a + b\n")).reward, 1);
}

TEST(CodeHardening, PlainValuesCompareAsPythonDoes) {
  const auto env = make_code_environment(test_limits());
  const Task t =
      assert_task({"assert f(0) == 3", "assert f(1) == [1, 'a', None]",
                   "assert f(2) == {'k': (1, 2.5)}", "assert f(3) == {1, 2}",
                   "assert f(4) == 1267650600228229401496703205376", "assert f(5) == True"});
  // 3.0 == 3, True == 1, frozenset == set, dict order, and big ints, as in Python.
  const Score s = env->score(
      t, reply("def f(i):\n    return [3.0, [1, 'a', None], {'k': (1, 2.5)}, frozenset([2, 1]),"
               " 2 ** 100, 1][i]\n"));
  EXPECT_EQ(s.reward, 1) << s.reason;
  const Score list_for_tuple =
      env->score(assert_task({"assert f() == (1, 2)"}), reply("def f():\n    return [1, 2]\n"));
  EXPECT_EQ(list_for_tuple.reward, 0);
  EXPECT_EQ(list_for_tuple.reason, "test 1/1: assertion failed: 'assert f() == (1, 2)'");
}

}  // namespace
}  // namespace trellis::env
