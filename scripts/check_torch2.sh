#!/usr/bin/env bash
# Compiles every source that includes libtorch, syntax only, against PyTorch 2's headers (Debian
# trixie's libtorch-dev 2.6), so that what only the GPU build compiles (it uses a PyTorch 2 wheel;
# the CPU build, Debian 12's libtorch 1.13) is checked on a CPU machine before a GPU is lent. It
# caught two of the first GPU build's three errors. About 15 min on 2 cores; not part of CI.
# Usage: scripts/check_torch2.sh [REGEX]   (only the sources whose path matches REGEX)
# Needs build/ configured (scripts/build.sh) and Debian's registry; the headers are kept in
# build/torch2/. Where the CUDA toolkit is (CUDA_HOME, default /usr/local/cuda), the model's
# sources are checked a second time as the CUDA build compiles them (-DTRELLIS_CUDA_KERNELS), and
# nvcc compiles the kernels in src/model/cuda.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD=${BUILD_DIR:-$ROOT/build}
T=$BUILD/torch2
[ -f "$BUILD/compile_commands.json" ] ||
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ ! -d "$T/usr/include/torch" ]; then
  mkdir -p "$T/lists/partial" "$T/debs"
  echo "deb http://deb.debian.org/debian trixie main" >"$T/sources.list"
  apt=(-oDir::Etc::SourceList="$T/sources.list" -oDir::Etc::SourceParts=/dev/null
    -oDir::State::Lists="$T/lists" -oDebug::NoLocking=1)
  apt-get "${apt[@]}" update >/dev/null
  (cd "$T/debs" && apt-get "${apt[@]}" download libtorch-dev 2>&1 | grep -v unsandboxed || true)
  dpkg -x "$T"/debs/libtorch-dev_*.deb "$T"
fi
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cuda_include=
if [ -x "$CUDA_HOME/bin/nvcc" ]; then
  cuda_include=$CUDA_HOME/include
  # Debian's CPU libtorch lacks the header CMake generates for a CUDA build of c10.
  mkdir -p "$T/cuda_stub/c10/cuda/impl"
  echo "#define C10_CUDA_BUILD_SHARED_LIBS" >"$T/cuda_stub/c10/cuda/impl/cuda_cmake_macros.h"
  for cu in "$ROOT"/src/model/cuda/*.cu; do
    [[ $cu =~ ${1:-.} ]] || continue
    "$CUDA_HOME/bin/nvcc" -std=c++17 -arch=sm_90 -I"$ROOT/src" -c "$cu" -o /dev/null ||
      { echo "FAILED $cu (nvcc)"; exit 1; }
  done
fi
python3 - "$BUILD/compile_commands.json" "$T/usr/include" "${1:-.}" "$cuda_include" "$T/cuda_stub" <<'PY'
import concurrent.futures, json, os, re, shlex, subprocess, sys
commands, include, pattern = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
cuda_include, cuda_stub = sys.argv[4], sys.argv[5]
jobs = []
for entry in json.load(open(commands)):
    args = shlex.split(entry["command"])
    if "/usr/include/torch/csrc/api/include" not in args or "cmake_pch" in entry["file"]:
        continue
    if not pattern.search(entry["file"]):
        continue
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT") or (a == "-include" and "cmake_pch" in args[i + 1]):
            skip = True  # the precompiled header holds libtorch 1.13's declarations
        elif a == "/usr/include/torch/csrc/api/include":
            out[-1:] = ["-isystem", include, "-isystem", include + "/torch/csrc/api/include"]
        elif a not in ("-c", "-MD", "-Winvalid-pch"):
            out.append(a)
    jobs.append((entry["file"], out + ["-fsyntax-only", "-w"], entry["directory"]))
    if cuda_include and "/src/model/" in entry["file"]:
        jobs.append((entry["file"] + " (TRELLIS_CUDA_KERNELS)",
                     out + ["-fsyntax-only", "-w", "-DTRELLIS_CUDA_KERNELS", "-isystem", cuda_stub,
                            "-isystem", cuda_include], entry["directory"]))
print(f"check_torch2: {len(jobs)} compiles against {include}", flush=True)
def check(job):
    source, argv, cwd = job
    return source, subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
failed = 0
with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for source, r in pool.map(check, jobs):
        if r.returncode:
            failed += 1
            print(f"FAILED {source}\n{r.stderr[:4000]}", flush=True)
print(f"check_torch2: {len(jobs) - failed} of {len(jobs)} compile against PyTorch 2's headers")
sys.exit(1 if failed else 0)
PY
