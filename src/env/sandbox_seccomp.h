// The code sandbox's system-call filter (sandbox.h says what it denies and why): built once per
// process with libseccomp and exported as a BPF program, which bwrap loads (--seccomp <fd>) for
// every process of a run.
#pragma once

#include <string>

namespace trellis::env {

// The filter as a BPF program (struct sock_filter[]) for bwrap's --seccomp, or why there is none.
struct SeccompProgram {
  std::string bpf;
  std::string error;  // "" when bpf holds the filter
};

// This process's filter, compiled on first use.
const SeccompProgram& seccomp_program();

}  // namespace trellis::env
