#!/usr/bin/env bash
# Builds and runs the libFuzzer targets in fuzz/ (ASan + UBSan), one per parser of untrusted bytes.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 s each; no TARGET = all of them)
#
# Targets: rollout_reader safetensors hf_config tokenizer chat_template manifest delta proof config
# json verifiers requests access (fuzz/<name>_fuzz.cpp, docs/fuzzing.md). Each is linked from just the
# sources it needs; every source is compiled once into build-fuzz/obj/ (with clang++, from clang and
# libclang-rt-14-dev, which scripts/setup.sh installs) and shared between targets. Each target runs
# for SECONDS on its seeds fuzz/corpus/<name>/ plus what earlier runs found
# (build-fuzz/corpus/<name>/); a crash is saved as build-fuzz/crashes/<name>-crash-*. LeakSanitizer
# reads fuzz/lsan_suppressions.txt. Prints the executions of each target; exits non-zero if any
# target crashed (every target still runs).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
shift || true
ALL=(rollout_reader safetensors hf_config tokenizer chat_template manifest delta proof config json
     verifiers requests access)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
OUT="$ROOT/build-fuzz"
mkdir -p "$OUT/obj" "$OUT/corpus" "$OUT/crashes" "$OUT/logs"

CXX="${CXX_FUZZ:-}"
if [ -z "$CXX" ]; then
  for c in clang++ clang++-14; do
    if command -v "$c" >/dev/null 2>&1; then CXX="$c"; break; fi
  done
fi
[ -n "$CXX" ] || { echo "fuzz.sh: clang++ not found; run scripts/setup.sh" >&2; exit 1; }

# toml++ header-only, so that its parser is instrumented too; its internal asserts off, as in the
# Debian library the build links (3.3.0 asserts on `[!`, which the library reports as an error).
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -DTOML_HEADER_ONLY=1 "-DTOML_ASSERT(expr)=((void)0)"
       -I"$ROOT/src"
       $(pkg-config --cflags thrift libzstd libpcre2-8 icu-uc libsodium ginac))

# The sources (under src/) and libraries of each target.
sources_of() {
  case "$1" in
    rollout_reader)
      (cd "$ROOT/src" && ls rollout/parquet/*.cpp)
      echo rollout/rollout_file.cpp rollout/rollout_record.cpp common/files.cpp \
        common/hashing.cpp common/sha256_ni.cpp common/identity.cpp ;;
    safetensors) echo model/safetensors.cpp common/json.cpp common/files.cpp ;;
    hf_config) echo model/hf_config.cpp model/rope_scaling.cpp common/json.cpp common/files.cpp ;;
    tokenizer) echo model/tokenizer.cpp common/json.cpp common/files.cpp ;;
    chat_template) echo model/chat_template.cpp model/tokenizer.cpp common/json.cpp common/files.cpp ;;
    manifest)
      echo shardcast/manifest.cpp common/json.cpp common/files.cpp common/identity.cpp \
        common/hashing.cpp common/sha256_ni.cpp ;;
    delta)
      echo shardcast/weight_delta.cpp shardcast/manifest.cpp common/json.cpp common/files.cpp \
        common/identity.cpp common/hashing.cpp common/sha256_ni.cpp ;;
    proof) echo toploc/proof.cpp toploc/polynomial.cpp toploc/topk.cpp toploc/verify.cpp ;;
    config) echo common/config.cpp common/default_config.cpp common/files.cpp ;;
    json) echo common/json.cpp common/files.cpp ;;
    verifiers)
      (cd "$ROOT/src" && ls env/*.cpp env/environments/*.cpp env/verifiers/*.cpp | grep -v verify_bench)
      echo common/json.cpp common/files.cpp common/rng.cpp common/config.cpp \
        common/default_config.cpp common/logging.cpp ;;
    requests)
      echo engine/openai_protocol.cpp model/tokenizer.cpp model/chat_template.cpp \
        orchestrator/invite.cpp discovery/node_metadata.cpp env/task.cpp common/json.cpp \
        common/files.cpp common/identity.cpp common/hashing.cpp common/sha256_ni.cpp ;;
    access)
      echo common/request_signing.cpp orchestrator/signed_url.cpp common/ip_address.cpp \
        shardcast/access_control.cpp common/identity.cpp common/hashing.cpp common/sha256_ni.cpp \
        common/files.cpp ;;
    *) echo "fuzz.sh: unknown target '$1' (targets: ${ALL[*]})" >&2; return 1 ;;
  esac
}
libs_of() {
  case "$1" in
    rollout_reader) pkg-config --libs thrift libzstd libsodium ;;
    tokenizer | chat_template) pkg-config --libs libpcre2-8 icu-uc ;;
    manifest) pkg-config --libs libsodium ;;
    delta) pkg-config --libs libsodium libzstd ;;
    verifiers) pkg-config --libs ginac libseccomp ;;
    requests) pkg-config --libs libsodium libpcre2-8 icu-uc ;;
    access) pkg-config --libs libsodium ;;
  esac
}

# An object is rebuilt when its source or a header it includes (from its .d file) is newer.
obj_of() { local rel="${1#"$ROOT"/}"; echo "$OUT/obj/${rel//\//_}.o"; }
stale() {
  [ -f "$2" ] && [ -f "$2.d" ] || return 0
  local dep
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$2.d"); do
    [ "$dep" -nt "$2" ] && return 0
  done
  return 1
}

declare -A wanted=()
for t in "${TARGETS[@]}"; do
  srcs=$(sources_of "$t") || exit 1
  for s in $srcs; do wanted["$ROOT/src/$s"]=1; done
  wanted["$ROOT/fuzz/${t}_fuzz.cpp"]=1
done
# Compile in parallel; a failed compile removes its object, so that the link below stops.
jobs_max=$(nproc)
compile_failed=0
for src in "${!wanted[@]}"; do
  obj=$(obj_of "$src")
  if stale "$src" "$obj"; then
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || compile_failed=1; done
    ("$CXX" "${FLAGS[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj" || { rm -f "$obj"; exit 1; }) &
  fi
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || compile_failed=1; done
wait
[ "$compile_failed" -eq 0 ] || { echo "fuzz.sh: compilation failed" >&2; exit 1; }

for t in "${TARGETS[@]}"; do
  objects=("$(obj_of "$ROOT/fuzz/${t}_fuzz.cpp")")
  for s in $(sources_of "$t"); do objects+=("$(obj_of "$ROOT/src/$s")"); done
  "$CXX" -fsanitize=fuzzer,address,undefined "${objects[@]}" -o "$OUT/${t}_fuzz" \
    $(libs_of "$t") -lfmt
done

failed=()
summary=()
for t in "${TARGETS[@]}"; do
  mkdir -p "$OUT/corpus/$t"
  echo "fuzz.sh: running $t for ${SECONDS_TO_RUN}s"
  log="$OUT/logs/$t.log"
  rc=0
  (cd "$OUT" && LSAN_OPTIONS="suppressions=$ROOT/fuzz/lsan_suppressions.txt" \
    "./${t}_fuzz" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 -artifact_prefix="crashes/$t-" \
    "corpus/$t" "$ROOT/fuzz/corpus/$t") >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    grep -E "ERROR: |runtime error|SUMMARY|Test unit written" "$log" | head -8 >&2 || true
    summary+=("$t: FAILED (exit $rc, log $log)")
  else
    summary+=("$t: ${execs:-?} executions, ${rate:-?}/s")
  fi
done
printf 'fuzz.sh: %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  exit 1
fi
