#include "env/sandbox_seccomp.h"

#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include <fmt/format.h>

namespace trellis::env {
namespace {

// System calls that a test program never needs and that widen the kernel surface an escape could
// use; each answers EPERM. Names this architecture lacks are skipped.
constexpr const char* kDeniedSyscalls[] = {
    // other processes' memory and execution
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    // file systems and namespaces
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns", "open_by_handle_at",
    "name_to_handle_at",
    // keys, BPF, perf, io_uring, userfaultfd
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "userfaultfd", "fanotify_init",
    // the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "stime", "syslog", "vhangup",
    "iopl", "ioperm", "uselib", "lookup_dcookie", "nfsservctl", "sethostname", "setdomainname"};

// clone() flags that make a new namespace (CLONE_NEWTIME overlaps clone()'s signal byte).
constexpr uint64_t kNamespaceFlags[] = {CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,   CLONE_NEWNET,
                                        CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP};

SeccompProgram compile_seccomp() {
  SeccompProgram program;
  // Default: allow. Calls of a foreign architecture (int 0x80, x32) hit the bad-arch action,
  // which seccomp_init sets to kill.
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return {"", "seccomp_init failed"};
  auto add = [&](uint32_t action, int nr, std::initializer_list<scmp_arg_cmp> args,
                 const char* name) {
    if (!program.error.empty()) return;
    const int rc = seccomp_rule_add_array(ctx, action, nr, static_cast<unsigned>(args.size()),
                                          args.size() ? args.begin() : nullptr);
    if (rc < 0) program.error = fmt::format("seccomp rule for {}: {}", name, std::strerror(-rc));
  };
  auto number = [](const char* name) { return seccomp_syscall_resolve_name(name); };
  for (const char* name : kDeniedSyscalls) {
    const int nr = number(name);
    if (nr == __NR_SCMP_ERROR || nr < 0) continue;  // not a system call of this architecture
    add(SCMP_ACT_ERRNO(EPERM), nr, {}, name);
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc use clone().
  if (const int nr = number("clone3"); nr >= 0) add(SCMP_ACT_ERRNO(ENOSYS), nr, {}, "clone3");
  for (const uint64_t flag : kNamespaceFlags) {
    add(SCMP_ACT_ERRNO(EPERM), number("clone"), {{0, SCMP_CMP_MASKED_EQ, flag, flag}}, "clone");
  }
  // personality(): only the query (0xffffffff) is allowed, not ADDR_NO_RANDOMIZE and the like.
  add(SCMP_ACT_ERRNO(EPERM), number("personality"), {{0, SCMP_CMP_NE, 0xffffffffULL, 0}},
      "personality");
  if (program.error.empty()) {
    const int fd = memfd_create("trellis-seccomp-export", MFD_CLOEXEC);
    if (fd < 0) {
      program.error = fmt::format("memfd_create failed: {}", std::strerror(errno));
    } else {
      if (const int rc = seccomp_export_bpf(ctx, fd); rc < 0) {
        program.error = fmt::format("seccomp_export_bpf failed: {}", std::strerror(-rc));
      } else {
        lseek(fd, 0, SEEK_SET);
        char buffer[4096];
        ssize_t n;
        while ((n = read(fd, buffer, sizeof buffer)) > 0) program.bpf.append(buffer, n);
        if (program.bpf.empty()) program.error = "seccomp_export_bpf wrote nothing";
      }
      close(fd);
    }
  }
  seccomp_release(ctx);
  if (!program.error.empty()) program.bpf.clear();
  return program;
}

}  // namespace

const SeccompProgram& seccomp_program() {
  static const SeccompProgram program = compile_seccomp();
  return program;
}

}  // namespace trellis::env
