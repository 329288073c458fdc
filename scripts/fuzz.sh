#!/usr/bin/env bash
# Fuzzes the rollout-file reader (fuzz/rollout_reader_fuzz.cpp) with libFuzzer, ASan and UBSan.
#
#   scripts/fuzz.sh [SECONDS]     (default 60)
#
# Builds build-fuzz/rollout_reader_fuzz with clang++ (clang and libclang-rt-14-dev, installed by
# scripts/setup.sh) from the sources of src/rollout and the src/common files they need, then runs
# it on a copy of the seed corpus fuzz/corpus/rollout_reader/ (new inputs go to
# build-fuzz/corpus, crashes to build-fuzz/crash-*). Exits non-zero if the fuzzer finds a crash.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT/obj" "$OUT/corpus"

CXX="${CXX_FUZZ:-}"
if [ -z "$CXX" ]; then
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then CXX="$c"; break; fi
  done
fi
[ -n "$CXX" ] || { echo "fuzz.sh: clang++ not found; run scripts/setup.sh" >&2; exit 1; }

FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT/src" $(pkg-config --cflags thrift libzstd))
SOURCES=("$ROOT"/src/rollout/parquet/*.cpp "$ROOT/src/rollout/rollout_file.cpp"
         "$ROOT/src/rollout/rollout_record.cpp" "$ROOT/src/common/files.cpp")

# Compile each source once (in parallel), then link with the fuzzer's main.
objects=()
pids=()
for src in "${SOURCES[@]}" "$ROOT/fuzz/rollout_reader_fuzz.cpp"; do
  obj="$OUT/obj/$(basename "${src%.cpp}").o"
  objects+=("$obj")
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find "$ROOT/src/rollout" "$ROOT/src/common" -name '*.h' -newer "$obj" -print -quit)" ]; then
    "$CXX" "${FLAGS[@]}" -c "$src" -o "$obj" &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
"$CXX" -fsanitize=fuzzer,address,undefined "${objects[@]}" -o "$OUT/rollout_reader_fuzz" \
  $(pkg-config --libs thrift libzstd) -lfmt

echo "fuzz.sh: running for ${SECONDS_TO_RUN}s"
cd "$OUT"
./rollout_reader_fuzz -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=4096 \
  -timeout=20 -print_final_stats=1 corpus "$ROOT/fuzz/corpus/rollout_reader"
