#!/usr/bin/env bash
# Installs every dependency Trellis builds and tests with (Debian packages, then the npm packages
# the interop tests compare against). Idempotent and non-interactive: safe to run again, and in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config clang-format
  libtorch-dev libopenblas0-pthread          # tensors/autograd; OpenBLAS keeps fp32 matmul fast
  libgloo-dev                                 # headers of c10d's Gloo process group (the sharded trainer)
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libicu-dev                     # tokenizer regexes (Unicode classes), NFC
  libcpp-httplib-dev                          # the OpenAI-compatible server and HTTP tests
  libcurl4-openssl-dev                        # SHARDCAST's client: parallel shard downloads
  nginx iproute2                              # production relays (nginx test); netns benchmark
  libginac-dev                                # math answers: symbolic equivalence
  libsodium-dev                               # SHA-256, HMAC, Ed25519 identities and signatures
  libthrift-dev libboost-dev libzstd-dev      # Parquet rollout files: footer metadata, pages
  libsqlite3-dev sqlite3                      # the orchestrator's state and ledger; ledger tests edit it
  redis-server libhiredis-dev                 # discovery's production backend (tests start a redis-server)
  clang libclang-rt-14-dev                    # libFuzzer for the rollout-file reader's fuzz target
  bubblewrap python3 libseccomp-dev           # the code sandbox (bwrap + seccomp) and interpreter
  chromium                                    # the dashboard's browser test (headless)
  libgtest-dev
)
# Node.js runs the reference implementations in tests/interop (HF tokenizers). A node/npm already on
# PATH (e.g. from NodeSource, which bundles npm) is used as is; Debian's packages only if absent.
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The npm packages pinned by each package-lock.json: tests/interop (reference implementations) and
# tests/dashboard (playwright-core, which drives Debian's chromium; it downloads no browser). npm ci
# rewrites node_modules/.package-lock.json on every install, so that file is absent or older than
# package-lock.json exactly when the install is missing, interrupted or stale.
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt 20 ]; then
  echo "setup: warning: Node.js $(node -v) is older than 20, which playwright-core (the dashboard's" \
    "browser test) needs; install Node.js 20 or later (e.g. from NodeSource) and run setup again"
fi
for dir in interop dashboard; do
  PACKAGE="$ROOT/tests/$dir"
  if [ ! -f "$PACKAGE/node_modules/.package-lock.json" ] ||
    [ "$PACKAGE/package-lock.json" -nt "$PACKAGE/node_modules/.package-lock.json" ]; then
    echo "setup: npm ci in tests/$dir"
    npm ci --prefix "$PACKAGE" --no-audit --no-fund --loglevel=error </dev/null
  else
    echo "setup: tests/$dir/node_modules up to date"
  fi
done
echo "setup: done"
