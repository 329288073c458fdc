#!/usr/bin/env bash
# SHARDCAST checkpoint broadcast on emulated links (docs/benchmarks.md, "Checkpoint broadcast:
# SHARDCAST through relays"; specs/shardcast.md §5). Run as root: it creates network namespaces.
#
# Topology: a Linux bridge in the root namespace and one namespace per node, each joined to the
# bridge by a veth pair, addresses in 10.77.0.0/24: the origin (10.77.0.1, serving the published
# versions with `trellis relay` and no upstream), RELAYS relays (10.77.0.11, .12, ...) pulling from
# the origin, CLIENTS clients (10.77.0.101, ...) running `trellis shardcast fetch`. What each relay
# sends (egress of its namespace) is shaped with tc tbf to RELAY_MBIT; the origin's and the
# clients' links are not shaped, so the relays' uplinks are the bottleneck.
#
# Phase 1, for each CHOICES (weighted, fastest; a choice ending in -no-endgame, e.g.
# weighted-no-endgame, fetches with --no-endgame), REPEATS times: the relays already hold the version;
#   all clients start at once; time until the last client holds the verified file, aggregate
#   throughput CLIENTS x size / time as a fraction of RELAYS x RELAY_MBIT, bytes served per relay.
#   Before it, a reference: curl with the same parallelism fetching the same shards in a fixed
#   round-robin split over the relays, without hashing (what the links give to plain HTTP).
# Phase 2 (PIPELINED=1), same choices and repeats: a new version is published to the origin while
#   the relays poll (relay.poll_s = POLL_S) and the clients wait for it to be listed; time from the
#   start of publishing until every client holds the verified version.
#
# Weight deltas (DELTA_FRACTION, e.g. 0.01): the checkpoint is a safetensors file of one bf16
# tensor instead of random bytes, and each new version moves that fraction of its elements by one
# ulp, as an RL step does. The origin publishes a delta against the version before (DELTAS=1,
# the default; DELTAS=0 publishes with --no-delta, for the comparison), the relays make the full
# version from it, and in phase 2 every client holds the version before (`shardcast fetch --base`).
#
#   sudo scripts/bench/shardcast_netns.sh
#   sudo RELAY_MBIT=100 REPEATS=5 scripts/bench/shardcast_netns.sh
#
# Environment (default): TRELLIS (build/trellis; copied before use, so a rebuild cannot change it
# mid-run), RELAYS (2), CLIENTS (4), RELAY_MBIT (200), SIZE_MIB (256), SHARD_MIB (8), PARALLEL (8),
# REPEATS (3), CHOICES ("weighted fastest"), POLL_S (0.2), PIPELINED (1), REFERENCE (1),
# DELTA_FRACTION ("": random bytes, no deltas), DELTAS (1),
# WORK_ROOT (/dev/shm: a tmpfs, so the clients' fsyncs measure no disk), KEEP_WORK (0; 1 keeps the
# work directory with every log and stats file).
set -euo pipefail
# TRELLIS may be relative to the caller's directory; the default is relative to the repository.
if [[ -n ${TRELLIS:-} ]]; then TRELLIS=$(realpath -e "$TRELLIS"); fi
cd "$(dirname "$0")/../.."

RELAYS=${RELAYS:-2}
CLIENTS=${CLIENTS:-4}
RELAY_MBIT=${RELAY_MBIT:-200}
SIZE_MIB=${SIZE_MIB:-256}
SHARD_MIB=${SHARD_MIB:-8}
PARALLEL=${PARALLEL:-8}
REPEATS=${REPEATS:-3}
CHOICES=${CHOICES:-weighted fastest}
POLL_S=${POLL_S:-0.2}
PIPELINED=${PIPELINED:-1}
REFERENCE=${REFERENCE:-1}
WORK_ROOT=${WORK_ROOT:-/dev/shm}
KEEP_WORK=${KEEP_WORK:-0}
DELTA_FRACTION=${DELTA_FRACTION:-}
DELTAS=${DELTAS:-1}
TRELLIS=${TRELLIS:-$PWD/build/trellis}
PORT=8500

die() {
  echo "shardcast_netns: $*" >&2
  exit 1
}
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
now() { date +%s.%N; }

[[ $EUID -eq 0 ]] || die "run as root (it creates network namespaces, veth pairs and a bridge)"
for tool in ip tc curl jq python3 sha256sum /usr/bin/time; do
  command -v "$tool" >/dev/null || die "needs $tool"
done
[[ -x $TRELLIS ]] || die "no trellis binary at $TRELLIS (build it, or set TRELLIS=path)"
((RELAYS >= 1 && RELAYS <= 80)) || die "RELAYS must be in 1..80"
((CLIENTS >= 1 && CLIENTS <= 150)) || die "CLIENTS must be in 1..150"

tag="tsc$(($$ % 100000))"  # unique per run: names of namespaces, links and the work directory
bridge=""
namespaces=()
host_links=()
pids=()
sampler=""
work=$(mktemp -d "$WORK_ROOT/$tag.XXXXXX")

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  for pid in "${pids[@]}" $sampler; do kill "$pid" 2>/dev/null; done
  # Whatever still runs inside our namespaces (clients of an interrupted run) was started here.
  local ns pid left
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null; done
  done
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left=""
    for ns in "${namespaces[@]}"; do left+=$(ip netns pids "$ns" 2>/dev/null); done
    [[ -z $left ]] && break
    sleep 0.2
  done
  for ns in "${namespaces[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  wait 2>/dev/null
  # Deleting the host end removes the pair at once (a namespace's links go asynchronously).
  for link in "${host_links[@]}"; do ip link del "$link" 2>/dev/null; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  [[ -n $bridge ]] && ip link del "$bridge" 2>/dev/null
  if [[ $KEEP_WORK == 1 ]]; then
    echo "work directory kept: $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bin="$work/trellis"
cp "$TRELLIS" "$bin"
"$bin" shardcast fetch --help >/dev/null 2>&1 || die "$TRELLIS has no 'shardcast fetch' command"
mkdir -p "$work/logs" "$work/results"

# ---- network -------------------------------------------------------------------------------
ip link add "${tag}br" type bridge
bridge="${tag}br"  # only now: cleanup must not delete a bridge it did not create
ip link set "$bridge" up

# add_node NAME IP [MBIT]: a namespace joined to the bridge; MBIT shapes what it sends.
add_node() {
  local name=$1 addr=$2 mbit=${3:-}
  local ns="$tag-$name" link="$tag$name"
  ip netns add "$ns"
  namespaces+=("$ns")
  ip link add "$link" type veth peer name "${link}p"
  host_links+=("$link")
  ip link set "${link}p" netns "$ns"
  ip -n "$ns" link set "${link}p" name eth0
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip link set "$link" master "$bridge" up
  if [[ -n $mbit ]]; then
    # Bucket: one timer tick (4 ms) of tokens, at least 64 KiB; queue: 50 ms at the rate.
    local burst=$((mbit * 1000000 / 8 / 250))
    ((burst < 65536)) && burst=65536
    tc -n "$ns" qdisc add dev eth0 root tbf rate "${mbit}mbit" burst "$burst" latency 50ms
  fi
}

add_node o 10.77.0.1
relay_urls=()
for r in $(seq 1 "$RELAYS"); do
  add_node "r$r" "10.77.0.$((10 + r))" "$RELAY_MBIT"
  relay_urls+=("http://10.77.0.$((10 + r)):$PORT")
done
for c in $(seq 1 "$CLIENTS"); do add_node "c$c" "10.77.0.$((100 + c))"; done
relays_csv=$(
  IFS=,
  echo "${relay_urls[*]}"
)

# ---- origin and relays ---------------------------------------------------------------------
file="$work/checkpoint.bin"
# weights_step: the next version of a bf16 safetensors checkpoint, DELTA_FRACTION of its elements
# one ulp up or down; the one before is kept as base.bin (what the clients hold).
weights_step() {
  cp "$file" "$work/base.bin"
  python3 - "$file" "$DELTA_FRACTION" <<'PY'
import random, struct, sys
path, fraction = sys.argv[1], float(sys.argv[2])
with open(path, "r+b") as f:
    data = bytearray(f.read())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    n = (len(data) - start) // 2
    for i in random.sample(range(n), int(n * fraction)):
        at = start + 2 * i
        v = (int.from_bytes(data[at:at + 2], "little") + random.choice((1, 0xFFFF))) & 0xFFFF
        data[at:at + 2] = v.to_bytes(2, "little")
    f.seek(0)
    f.write(data)
PY
}
if [[ -n $DELTA_FRACTION ]]; then
  say "writing a bf16 safetensors checkpoint of $SIZE_MIB MiB"
  python3 - "$file" "$((SIZE_MIB << 20))" <<'PY'
import json, os, sys
path, size = sys.argv[1], int(sys.argv[2])
n = (size - 4096) // 2
header = json.dumps({"weight": {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}})
header += " " * (-len(header) % 8)
with open(path, "wb") as f:
    f.write(len(header).to_bytes(8, "little") + header.encode())
    # Weights of magnitude ~0.01 to 1 (random sign, exponents 120..127, random mantissa): the
    # high byte keeps its sign and low 2 bits, the rest of the exponent fixed.
    high = bytes((b & 0x83) | 0x3C for b in range(256))
    chunk = 1 << 20
    for at in range(0, n, chunk):
        m = min(chunk, n - at)
        raw = bytearray(os.urandom(2 * m))
        raw[1::2] = raw[1::2].translate(high)
        f.write(raw)
PY
else
  say "writing $SIZE_MIB MiB of random bytes"
  head -c "$((SIZE_MIB << 20))" /dev/urandom >"$file"
fi
file_sha=$(sha256sum "$file" | cut -d' ' -f1)
delta_flag=()
[[ $DELTAS == 1 ]] || delta_flag=(--no-delta)

publish() {  # publish VERSION LOG (and its CPU time in LOG.cpu)
  /usr/bin/time -f '%U %S' -o "$2.cpu" \
    "$bin" shardcast publish "$file" --data-dir "$work/data-origin" --version "$1" \
    --shard-size-mib "$SHARD_MIB" --keep 2 --key "$work/trainer.key" "${delta_flag[@]}" >"$2" 2>&1
}
publish 1 "$work/logs/publish-v1.log" || die "publish failed: $(cat "$work/logs/publish-v1.log")"
key=$(awk '/^trainer key:/ {k = $3} END {print k}' "$work/logs/publish-v1.log")
[[ -n $key ]] || die "no 'trainer key:' line from publish: $(cat "$work/logs/publish-v1.log")"
shards=$(jq '.versions[] | select(.version == 1) | .shards | length' \
  "$work/data-origin/manifest.json")
say "published version 1: $shards shards, trainer key $key"

# serve NS NAME IP UPSTREAMS(TOML list): a `trellis relay` in the background.
serve() {
  ip netns exec "$tag-$1" "$bin" relay --run-dir "$work/run" \
    --set relay.name="$2" --set relay.host="$3" --set relay.port="$PORT" \
    --set relay.data_dir="$work/data-$2" --set "relay.upstreams=$4" \
    --set relay.poll_s="$POLL_S" --set shardcast.keep=2 >"$work/logs/$2.log" 2>&1 &
  pids+=($!)
}
# The origin serves the directory `publish` writes to.
serve o origin 10.77.0.1 '[]'
for r in $(seq 1 "$RELAYS"); do
  serve "r$r" "r$r" "10.77.0.$((10 + r))" "[\"http://10.77.0.1:$PORT\"]"
done

# relay_complete URL VERSION: whether the server at URL lists VERSION complete (asked from the
# origin's namespace, whose link is not shaped).
relay_complete() {
  # shellcheck disable=SC2016  # $v is jq's
  ip netns exec "$tag-o" curl -sf --max-time 2 "$1/manifest.json" 2>/dev/null |
    jq -e --argjson v "$2" 'any(.versions[]; .version == $v and .complete == true)' >/dev/null 2>&1
}
servers_alive() {
  local pid
  for pid in "${pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || die "a relay exited: $(tail -n 5 "$work"/logs/*.log)"
  done
}
wait_complete() {  # wait_complete VERSION: every relay lists it complete
  local url deadline=$((SECONDS + 300))
  for url in "${relay_urls[@]}"; do
    until relay_complete "$url" "$1"; do
      ((SECONDS < deadline)) ||
        die "$url does not list version $1 complete after 300 s (logs: $work/logs)"
      servers_alive
      sleep 0.2
    done
  done
}
say "waiting for the relays to pull version 1"
wait_complete 1

# ---- measurement ---------------------------------------------------------------------------
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $5 + $6}' /proc/stat; }  # busy idle
server_cpu_ticks() {  # the origin and the relays
  local pid sum=0
  for pid in "${pids[@]}"; do
    sum=$((sum + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$sum"
}

read -r b0 i0 < <(cpu_ticks)
sleep 2
read -r b1 i1 < <(cpu_ticks)
if ((100 * (b1 - b0) > 10 * (b1 - b0 + i1 - i0))); then
  say "WARNING: the machine is busy ($((100 * (b1 - b0) / (b1 - b0 + i1 - i0)))% of all cores):" \
    "the figures will be low; benchmark on an idle machine"
fi

# sample_links FILE: every 0.25 s a line "time bytes-sent-by-r1 bytes-sent-by-r2 ...", read from
# the relays' tbf qdiscs: how busy each bottleneck link was, and until when.
sample_links() {
  local line r
  while :; do
    line=$(now)
    for r in $(seq 1 "$RELAYS"); do
      line+=" $(tc -n "$tag-r$r" -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}')"
    done
    echo "$line"
    sleep 0.25
  done >"$1"
}
start_run() {  # start_run DIR: the clock, the CPU counters and the link sampler
  mkdir -p "$1"
  sample_links "$1/links" &
  sampler=$!
  read -r cpu0_busy cpu0_idle < <(cpu_ticks)
  server0=$(server_cpu_ticks)
  now >"$1/start"
}
stop_sampler() {
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sampler=""
}
record_cpu() {  # record_cpu DIR: "busy idle server-ticks ticks-per-second" since start_run
  read -r busy idle < <(cpu_ticks)
  echo "$((busy - cpu0_busy)) $((idle - cpu0_idle)) $(($(server_cpu_ticks) - server0))" \
    "$(getconf CLK_TCK)" >"$1/cpu"
}

# fetch_all DIR VERSION CHOICE [BASE]: every client starts fetching VERSION at once (holding
# VERSION - 1 in BASE, when given).
client_pids=()
fetch_all() {
  local dir=$1 version=$2 choice=${3%-no-endgame} endgame=() base=() c
  [[ $3 == *-no-endgame ]] && endgame=(--no-endgame)
  [[ -n ${4:-} ]] && base=(--base "$4" --base-version $((version - 1)))
  client_pids=()
  for c in $(seq 1 "$CLIENTS"); do
    (
      rc=0
      ip netns exec "$tag-c$c" /usr/bin/time -f '%U %S' -o "$dir/client$c.cpu" \
        "$bin" shardcast fetch --relays "$relays_csv" --version "$version" \
        --out "$dir/out$c.bin" --cache-dir "$dir/cache$c" --trainer-key "$key" \
        --parallel "$PARALLEL" --choice "$choice" "${endgame[@]}" "${base[@]}" \
        --stats-json "$dir/client$c.json" \
        >"$dir/client$c.log" 2>&1 || rc=$?
      now >"$dir/client$c.end"
      echo "$rc" >"$dir/client$c.rc"
    ) &
    client_pids+=($!)
  done
}

# finish_run DIR: wait for the clients, check every output against the original, free the space.
failures=0
finish_run() {
  local dir=$1 c got
  for pid in "${client_pids[@]}"; do wait "$pid" || true; done
  stop_sampler
  record_cpu "$dir"
  for c in $(seq 1 "$CLIENTS"); do
    got=$(sha256sum "$dir/out$c.bin" 2>/dev/null | cut -d' ' -f1 || true)
    if [[ $got == "$file_sha" && $(cat "$dir/client$c.rc") == 0 ]]; then
      echo ok >"$dir/client$c.sha"
    else
      echo "bad ${got:-missing}" >"$dir/client$c.sha"
      failures=$((failures + 1))
      say "client $c failed (exit $(cat "$dir/client$c.rc"), sha256 ${got:-missing}):"
      tail -5 "$dir/client$c.log" >&2
    fi
    rm -rf "$dir/out$c.bin" "$dir/cache$c"
  done
}
if [[ $REFERENCE == 1 ]]; then
  for rep in $(seq 1 "$REPEATS"); do
    dir="$work/results/reference/curl/$rep"
    say "reference: curl, fixed round-robin split, run $rep"
    start_run "$dir"
    client_pids=()
    for c in $(seq 1 "$CLIENTS"); do
      for i in $(seq 0 $((shards - 1))); do
        printf 'url = "%s/v1/shard_%05d.bin"\noutput = "/dev/null"\n' \
          "${relay_urls[$(((i + c) % RELAYS))]}" $((i + 1))
      done >"$dir/client$c.curl"
      (
        rc=0
        ip netns exec "$tag-c$c" /usr/bin/time -f '%U %S' -o "$dir/client$c.cpu" \
          curl --silent --show-error --fail --parallel \
          --parallel-max "$PARALLEL" --config "$dir/client$c.curl" >"$dir/client$c.log" 2>&1 ||
          rc=$?
        now >"$dir/client$c.end"
        echo "$rc" >"$dir/client$c.rc"
      ) &
      client_pids+=($!)
    done
    for pid in "${client_pids[@]}"; do wait "$pid" || true; done
    stop_sampler
    record_cpu "$dir"
  done
fi

for choice in $CHOICES; do
  for rep in $(seq 1 "$REPEATS"); do
    dir="$work/results/held/$choice/$rep"
    say "relays hold the version: --choice $choice, run $rep"
    start_run "$dir"
    fetch_all "$dir" 1 "$choice"
    finish_run "$dir"
  done
done

any_relay_lists() {  # any_relay_lists VERSION
  local r
  for r in $(seq 1 "$RELAYS"); do
    # shellcheck disable=SC2016  # $v is jq's
    jq -e --argjson v "$1" 'any(.versions[]; .version == $v)' "$work/data-r$r/manifest.json" \
      >/dev/null 2>&1 && return 0
  done
  return 1
}
version=1
if [[ $PIPELINED == 1 ]]; then
  for choice in $CHOICES; do
    for rep in $(seq 1 "$REPEATS"); do
      version=$((version + 1))
      dir="$work/results/pipelined/$choice/$rep"
      say "pipelined: publish version $version while relays poll, --choice $choice, run $rep"
      base=""
      if [[ -n $DELTA_FRACTION ]]; then  # the trainer's step, before the clock starts
        weights_step
        file_sha=$(sha256sum "$file" | cut -d' ' -f1)
        base="$work/base.bin"
      fi
      start_run "$dir"
      echo "$version" >"$dir/version"
      (
        publish "$version" "$dir/publish.log" && now >"$dir/publish.end"
      ) &
      publisher=$!
      # As a worker polls for a new policy: the clients start once a relay lists the version
      # (read from the relays' manifest.json on disk, the file they serve, to spare the CPU).
      deadline=$((SECONDS + 300))
      until any_relay_lists "$version"; do
        ((SECONDS < deadline)) ||
          die "no relay lists version $version after 300 s (logs: $work/logs)"
        servers_alive
        sleep 0.05
      done
      now >"$dir/listed"
      fetch_all "$dir" "$version" "$choice" "$base"
      wait "$publisher" || die "publish failed: $(cat "$dir/publish.log")"
      finish_run "$dir"
      wait_complete "$version"
    done
  done
fi

# ---- report --------------------------------------------------------------------------------
python3 - "$work" "$RELAYS" "$CLIENTS" "$RELAY_MBIT" "$SIZE_MIB" "$SHARD_MIB" "$shards" \
  "$PARALLEL" "$REPEATS" "$POLL_S" "$CHOICES" <<'PY'
import datetime, json, math, pathlib, re, statistics, sys

work = pathlib.Path(sys.argv[1])
relays, clients, mbit = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
size_mib, shard_mib, shards = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
parallel, repeats, poll_s, order = sys.argv[8], sys.argv[9], sys.argv[10], sys.argv[11].split()
size = int(size_mib * (1 << 20))
capacity = relays * mbit * 1e6  # bits/s
relay_names = [f"r{r + 1}" for r in range(relays)]
url_name = {f"http://10.77.0.{11 + r}:8500": f"r{r + 1}" for r in range(relays)}


def read(path, default=None):
    return path.read_text().strip() if path.exists() else default


def cpu_seconds(path):  # /usr/bin/time -f '%U %S' output (after a status line on failure)
    text = read(path)
    return sum(float(x) for x in text.split()[-2:]) if text else 0.0


def relay_log_times(version, start):  # seconds from start until each relay logged it complete
    day = datetime.datetime.fromtimestamp(start)
    midnight = day.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    done = []
    for n in relay_names:
        for line in (work / "logs" / f"{n}.log").read_text().splitlines():
            m = re.match(r"\[(\d+):(\d+):(\d+\.\d+)\].*version (\d+) complete", line)
            if m and int(m.group(4)) == version:
                t = midnight + int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
                done.append(t - start + (86400 if t < start - 60 else 0))
    return max(done) if len(done) == relays else math.nan


def links(dir, start, wall):
    """Per relay: its link's utilisation from the start until the last client finished (bytes on
    the wire, headers included, over rate x time), and until when it carried traffic."""
    rows = [[float(x) for x in line.split()] for line in read(dir / "links", "").splitlines()]
    rows = [row for row in rows if len(row) == relays + 1]
    util, until = [], []
    if len(rows) < 2:
        return [math.nan] * relays, [math.nan] * relays
    first = min(rows, key=lambda row: abs(row[0] - start))
    last = min(rows, key=lambda row: abs(row[0] - start - wall))
    for i in range(1, relays + 1):
        util.append((last[i] - first[i]) * 8 / max(1e-9, last[0] - first[0]) / (mbit * 1e6))
        busy = [b[0] - start for a, b in zip(rows, rows[1:]) if b[i] - a[i] > 64 << 10]
        until.append(max(busy, default=math.nan))
    return util, until


def run(dir):
    start = float(read(dir / "start"))
    cs = range(1, clients + 1)
    ends = [float(read(dir / f"client{c}.end")) - start for c in cs]
    ok = all(read(dir / f"client{c}.rc") == "0" and read(dir / f"client{c}.sha", "ok") == "ok"
             for c in cs)
    served = {n: 0 for n in relay_names}
    failed = corrupt = splits = 0
    fetch_s = []  # each client's own time (manifests to verified file), without process start
    for c in cs:
        stats = dir / f"client{c}.json"
        if stats.exists():
            s = json.loads(stats.read_text())
            failed += s["failed_attempts"]
            corrupt += s["corrupt_shards"]
            splits += s.get("splits", 0)
            fetch_s.append(s["seconds"])
            for r in s["relays"]:
                served[url_name.get(r["url"].rstrip("/"), r["url"])] += r["bytes"]
    busy, idle, server_ticks, hz = (int(x) for x in read(dir / "cpu").split())
    wall = max(ends)
    client_cpu = sum(cpu_seconds(dir / f"client{c}.cpu") for c in cs)
    server_cpu = server_ticks / hz
    publish_cpu = cpu_seconds(dir / "publish.log.cpu")
    # CPU of everything else on the machine (another job would make the run meaningless).
    other = (busy / hz - client_cpu - server_cpu - publish_cpu) / wall
    r = dict(dir=dir, ends=ends, last=wall, fetch=max(fetch_s, default=math.nan), ok=ok,
             served=served, failed=failed, corrupt=corrupt, splits=splits, busy=busy / max(1, busy + idle),
             client_cpu=client_cpu, server_cpu=server_cpu, other=other,
             frac=clients * size * 8 / wall / capacity)
    r["util"], r["until"] = links(dir, start, wall)
    r["idle_tail"] = wall - min(r["until"])  # the last client waits on one link, others idle
    if (dir / "version").exists():  # pipelined
        r["version"] = int(read(dir / "version"))
        r["publish"] = float(read(dir / "publish.end")) - start
        r["listed"] = float(read(dir / "listed")) - start
        r["relays_done"] = relay_log_times(r["version"], start)
    return r


def runs(phase, choice):
    base = work / "results" / phase / choice
    return [run(d) for d in sorted(base.iterdir(), key=lambda p: int(p.name))]


def med(rs, key, fmt="{:.2f}"):  # "median (min-max)"
    v = [r[key] for r in rs]
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})"


def pct(x):
    return f"{100 * x:.1f}%"


def spread(rs):
    total = {n: sum(r["served"][n] for r in rs) for n in relay_names}
    all_bytes = max(1, sum(total.values()))
    return " / ".join(f"{n} {100 * total[n] / all_bytes:.0f}%" for n in relay_names)


def failed(rs):
    bad = sum(not r["ok"] for r in rs)
    return (f"{sum(r['failed'] for r in rs)} ({sum(r['corrupt'] for r in rs)} corrupt)"
            + (f", **{bad} runs FAILED**" if bad else ""))


def label(choice):  # the client's options
    if choice.endswith("-no-endgame"):
        return f"`--choice {choice[:-len('-no-endgame')]} --no-endgame`"
    return f"`--choice {choice}`"


def cpu(rs):
    return (f"{100 * statistics.median(r['busy'] for r in rs):.0f}% / "
            f"{statistics.median(r['other'] for r in rs):.2f}")


phases = {}
for p in (work / "results").iterdir():
    phases[p.name] = sorted((c.name for c in p.iterdir()),
                            key=lambda n: order.index(n) if n in order else -1)
print(f"\nSHARDCAST broadcast: {relays} relays x {mbit:g} Mbit/s (tbf), {clients} clients, "
      f"{size_mib:g} MiB file in {shards} shards of {shard_mib:g} MiB, --parallel {parallel}, "
      f"relay.poll_s {poll_s}; median (min-max) of {repeats} runs")
print(f"link capacity {relays} x {mbit:g} Mbit/s = {capacity / 1e6:g} Mbit/s; every client "
      f"receives {size_mib:g} MiB, so the ideal time is {clients * size * 8 / capacity:.1f} s")
print("CPU: busy share of all cores / cores used by anything but the benchmark's processes: the "
      "kernel's network path (about 0.1-0.25 on an idle machine) and other jobs")

def links_cell(rs):  # median utilisation per link, and the median idle tail
    util = " / ".join(f"{n} {100 * statistics.median(r['util'][i] for r in rs):.0f}%"
                      for i, n in enumerate(relay_names))
    return f"{util} | {statistics.median(r['idle_tail'] for r in rs):.1f} s"


print("\nRelays already hold the version; every client starts at once:\n")
print("| client | last client verified | of link capacity | without process start | link "
      "utilisation | a link quiet until the end | bytes served (all runs) | failed attempts "
      "| CPU |")
print("|---|---|---|---|---|---|---|---|---|")
for phase, choice in [("reference", c) for c in phases.get("reference", [])] + [
        ("held", c) for c in phases.get("held", [])]:
    rs = runs(phase, choice)
    frac = (f"**{pct(statistics.median(r['frac'] for r in rs))}** "
            f"({pct(min(r['frac'] for r in rs))}-{pct(max(r['frac'] for r in rs))})")
    if phase == "reference":
        print(f"| curl, fixed round-robin split, no hashing | {med(rs, 'last')} s | {frac} | — | "
              f"{links_cell(rs)} | 1/{relays} each | — | {cpu(rs)} |")
        continue
    fetch = statistics.median(r["fetch"] for r in rs)
    print(f"| {label(choice)} | {med(rs, 'last')} s | {frac} | "
          f"{fetch:.2f} s = {pct(clients * size * 8 / fetch / capacity)} | {links_cell(rs)} | "
          f"{spread(rs)} | {failed(rs)} | {cpu(rs)} |")

if "pipelined" in phases:
    print("\nPipelined: a new version is published while the relays poll; the clients start when a "
          "relay lists it (seconds from the start of publishing):\n")
    print("| client | publish done | listed by a relay | relays complete | last client verified | "
          "of link capacity | link utilisation | a link quiet until the end | "
          "bytes served (all runs) "
          "| failed attempts | CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for choice in phases["pipelined"]:
        rs = runs("pipelined", choice)
        print(f"| {label(choice)} | {statistics.median(r['publish'] for r in rs):.2f} s | "
              f"{statistics.median(r['listed'] for r in rs):.2f} s | "
              f"{statistics.median(r['relays_done'] for r in rs):.2f} s | {med(rs, 'last')} s | "
              f"{pct(statistics.median(r['frac'] for r in rs))} | {links_cell(rs)} | {spread(rs)} "
              f"| {failed(rs)} | {cpu(rs)} |")

print("\nEvery run: seconds until the last client held the verified file (its share of link "
      "capacity), the slowest client's own fetch time, each client's finish, MiB per relay, each "
      "link's utilisation and the last moment it carried traffic, CPU:")
worst = 0.0
for phase in ["reference", "held", "pipelined"]:
    for choice in phases.get(phase, []):
        for r in runs(phase, choice):
            worst = max(worst, r["other"])
            line = (f"  {phase:9} {choice:19} run {r['dir'].name}: {r['last']:6.2f} s "
                    f"({pct(r['frac'])})")
            if phase != "reference":
                line += f", fetch {r['fetch']:.2f}"
            line += ", clients " + " ".join(f"{e:.2f}" for e in r["ends"])
            if "publish" in r:
                line += (f", publish {r['publish']:.2f} listed {r['listed']:.2f} "
                         f"relays {r['relays_done']:.2f}")
            if phase != "reference":
                line += ", served " + " ".join(f"{n} {r['served'][n] / (1 << 20):.0f}"
                                               for n in relay_names)
                line += f", failed {r['failed']}, end-game splits {r['splits']}"
            line += ", links " + " ".join(f"{100 * u:.0f}% until {t:.1f}"
                                          for u, t in zip(r["util"], r["until"]))
            line += (f", CPU s clients {r['client_cpu']:.1f} servers {r['server_cpu']:.1f}, "
                     f"busy {100 * r['busy']:.0f}% other {r['other']:.2f}")
            print(line + ("" if r["ok"] else "  FAILED"))
if worst > 0.3:
    print(f"\nWARNING: other processes used up to {worst:.2f} cores during a run: "
          "the machine was not idle, these figures understate SHARDCAST")
PY

((failures == 0)) || die "$failures client fetches failed or gave wrong bytes (see above)"
