#!/usr/bin/env bash
# Issue 22's checks and figures on a GPU machine in one go, sized for one 10-minute call: builds
# build-cuda/, runs the tests that exercise CUDA, checks log-probs against transformers, and
# measures decode, training and cross-device validation, each beside its peer where one exists
# (HF transformers on the same model files, in the same run). Every step has a time limit; a step
# that fails or runs out is marked and the others still run. Needs python3 with a CUDA PyTorch and
# transformers.
#
# Usage: scripts/gpu_checks.sh [OUT_DIR]   (default: $OUT, else gpu-results/)
#        GPU_CHECKS_ONLY=REGEX runs only the steps whose name matches (the build and the models
#        always run), e.g. GPU_CHECKS_ONLY='decode|train' to re-measure after a change
#        ('build-tests|test-paged' for a test step: the test binaries build in their own step).
# Writes OUT_DIR/gpu_checks.log (every step's output) and OUT_DIR/summary.txt (one line a step).
#
# Build: with .gpu/build.sh and .gpu/debs in the checkout (../shared/device/README.md; fetch the
# debs with `.gpu/fetch-debs.sh .gpu/debs libgloo-dev libgloo0 libhiredis-dev libhiredis0.14
# libseccomp-dev libseccomp2`, which the shared list lacks), the offline recipe; else
# scripts/build_cuda.sh (setup.sh's packages installed).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT_DIR=${1:-${OUT:-$ROOT/gpu-results}}
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/gpu_checks.log
SUMMARY=$OUT_DIR/summary.txt
: >"$LOG"
: >"$SUMMARY"
WORK=$(mktemp -d /tmp/trellis-gpu.XXXXXX)
BIN=$ROOT/build-cuda/trellis
T=$ROOT/build-cuda/tests
cd "$ROOT" || exit 1

# The whole script stops starting steps after this many seconds, so that it ends inside a
# 10-minute call with what it measured (GPU_CHECKS_SECONDS overrides).
DEADLINE=${GPU_CHECKS_SECONDS:-570}
ONLY=${GPU_CHECKS_ONLY:-.}

# step NAME SECONDS COMMAND...: runs COMMAND under a time limit (cut to what is left before the
# deadline), its output into the log.
step() {
  local name=$1 limit=$2
  shift 2
  [[ $name =~ ^(build|models)$ || $name =~ $ONLY ]] || return 0
  local left=$((DEADLINE - SECONDS))
  if [ $left -lt 15 ]; then
    printf '%-28s %-22s\n' "$name" "SKIPPED (no time left)" | tee -a "$SUMMARY"
    return 1
  fi
  [ "$limit" -gt $left ] && limit=$left
  local t0=$SECONDS
  echo "===== $name: $*" >>"$LOG"
  # Line-buffered, so a step cut off by its limit still leaves what it printed.
  timeout "$limit" stdbuf -oL -eL "$@" >>"$LOG" 2>&1
  local rc=$?
  local verdict=ok
  [ $rc -eq 124 ] && verdict="TIMEOUT after ${limit} s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && verdict="FAILED rc $rc"
  printf '%-28s %-22s %4d s\n' "$name" "$verdict" $((SECONDS - t0)) | tee -a "$SUMMARY"
  return $rc
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
  git -C "$ROOT" log -1 --oneline 2>/dev/null
} >>"$LOG" 2>&1

# The binary first, then the test binaries: a test that does not build still leaves the figures.
# `-k 0` reports every compile error of a failed build at once.
if [ -f .gpu/build.sh ] && [ -d .gpu/debs ]; then
  export CMAKE_ARGS="-DTRELLIS_CUDA_KERNELS=ON ${CMAKE_ARGS:-}"  # build_cuda.sh sets it itself
  build=(bash .gpu/build.sh .gpu/debs . build-cuda)
  keep_going=(-- -k 0)
  export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
else
  build=(scripts/build_cuda.sh)
  keep_going=()
fi
step build 300 "${build[@]}" trellis "${keep_going[@]}" || exit 1
export PYTHONUNBUFFERED=1

# The models: the small preset, and random weights of Qwen2-0.5B's shape (the issue's targets).
step models 120 bash -c "'$BIN' model init --preset small --out '$WORK/small' &&
  '$BIN' model init --arch qwen2 --preset tiny --out '$WORK/q05' &&
  python3 scripts/hf_peer.py shape '$WORK/q05'"

# The tests first: the fused RMSNorm, SwiGLU, RoPE and token log-prob kernels against ATen ops,
# paged attention on CUDA (the decode kernel) against the CPU's, batched sampling, and decode
# steps replayed from CUDA graphs against op-by-op steps, before any figure is taken.
step build-tests 240 "${build[@]}" model_tests rl_tests engine_tests validator_tests \
  "${keep_going[@]}"
step test-kernels 60 "$T/model/model_tests" --gtest_filter='*ElementwiseTest*:*TokenLogprobs*'
step test-paged 90 "$T/engine/engine_tests" \
  --gtest_filter='*Paged*:*BatchSampler*:*DecodeGraphs*'

# Decode, batch 64 and 1, 128 + 128 tokens: Trellis (decode graphs, then op by op), then
# transformers on the same files.
for b in 64 1; do
  step "decode-b$b" 90 "$BIN" bench generate --model "$WORK/q05" --batch $b --prompt-len 128 \
    --max-tokens 128 --device cuda
  step "decode-b$b-eager" 90 "$BIN" bench generate --model "$WORK/q05" --batch $b \
    --prompt-len 128 --max-tokens 128 --device cuda --eager
  step "hf-decode-b$b" 120 python3 scripts/hf_peer.py generate "$WORK/q05" --batch $b \
    --prompt-len 128 --max-tokens 128
done

# Training: full RL steps (MFU against the same-run matmul); recomputing layers comes last.
step train 120 "$BIN" bench train --model "$WORK/q05" --device cuda --dtype bf16

# Calibration across devices: CUDA workers checked on the CPU and the reverse, on the small model.
step validate-cross-device 240 "$BIN" bench validate --model "$WORK/small" \
  examples/quickstart.toml --set rl.max_tokens=128 --device cuda --devices cpu,cuda \
  --only "b8 t1" --completions 16

# Trellis's fp32 log-probs against transformers' on the GPU, every architecture and rope_scaling.
step hf-logprobs 120 python3 scripts/check_hf_logprobs.py "$BIN" --device cuda

# The other CUDA tests: the fused AdamW against the CPU's, and a CUDA worker's rollouts against a
# CPU validator and the reverse.
step test-optimizer 60 "$T/rl/rl_tests" --gtest_filter='Optimizer.*'
step test-cross-device 120 "$T/validator/validator_tests" \
  --gtest_filter='Calibration.ACudaWorkerPassesACpuValidatorAndTheReverse:Calibration.NoisyWeights*'

step train-checkpointing 120 "$BIN" bench train --model "$WORK/q05" --device cuda --dtype bf16 \
  --activation-checkpointing

rm -rf "$WORK"
echo "log: $LOG" >>"$SUMMARY"
! grep -q "FAILED\|TIMEOUT\|SKIPPED" "$SUMMARY"
