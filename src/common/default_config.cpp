// The embedded defaults: every configurable key, with a value that works and a comment saying
// what it does. docs/configuration.md is generated from the same text by `trellis config show`.
#include "common/config.h"

namespace trellis {

std::string_view default_config_toml() {
  return R"toml(
[run]
name = "trellis"        # run name; the run directory is runs/<name>-<UTC timestamp>/
dir = ""                # explicit run directory (overrides the default above)
seed = 0                # master seed for initialisation and sampling
workers = 2             # `trellis run`: inference workers to start
validators = 1          # `trellis run`: validators to start (with orchestrator.validation)

[compute]
device = "cpu"          # cpu | cuda
dtype = "auto"          # auto | bf16 | fp32: compute dtype; auto = bf16 where the hardware has it
threads = 0             # CPU threads for tensor math; 0 = every core

[network]
source_address = ""     # local IP address this process's outgoing connections come from (the address the orchestrator registers and relays allow); "" = the system's choice. `trellis run` gives each node agent its own (127.0.0.N)

[log]
level = "info"          # trace | debug | info | warn | error

[model]
path = ""               # Hugging Face model directory (config.json, *.safetensors, tokenizer.json)

[env]
name = "math"           # environment (`trellis env list`): math | code | countdown | arithmetic | ...
tasks = ""              # JSONL dataset of tasks; "" = tasks from the environment's generator
difficulty = 3          # generator difficulty, 1 (easiest) .. 10
system_prompt = ""      # "" = the environment's own (each has one that states the answer format)

[env.length]            # L1-style length reward: R = R_task - alpha * |T - length|
targets = []            # token targets T, one drawn per prompt, e.g. [512, 1024, 2048]; [] = off
alpha = 0.0003          # penalty per token of distance from the target

[env.code]              # the sandbox that runs model-written Python (bubblewrap + rlimits)
python = "/usr/bin/python3"  # interpreter inside the sandbox
cpu_seconds = 5         # CPU time per test run
wall_seconds = 10       # wall-clock time per test run (catches sleeping and blocked programs)
memory_mib = 512        # address space per process
max_processes = 16      # processes/threads the program may have at once (fork bombs)
max_output_kib = 1024   # stdout + stderr kept per run; a program that prints more fails

[trainer]               # the optimiser and batching shared by `trellis sft` and `trellis rl`
lr = 3e-5               # AdamW peak learning rate (RL); [sft] has its own
warmup_steps = 5        # optimizer steps of linear warm-up from 0 to lr, then constant
weight_decay = 0.01     # AdamW decoupled weight decay
beta1 = 0.9             # AdamW first-moment decay
beta2 = 0.999           # AdamW second-moment decay
eps = 1e-8              # AdamW denominator epsilon
max_grad_norm = 1.0     # global-norm gradient clipping; 0 = off (INTELLECT-2 used 0.1)
micro_batch_tokens = 4096  # tokens per packed forward/backward (first-fit-decreasing packing)
activation_checkpointing = false  # keep only each layer's input, recompute it in the backward pass (less memory, ~1/3 more compute)
optimizer_steps = 1     # optimizer steps per rollout step, each on 1/n of the batch
checkpoint_every = 10   # steps between checkpoints (and one at the end); 0 = only at the end
keep_checkpoints = 3    # newest checkpoints kept in <run>/checkpoints; 0 = all
nproc = 1               # trainer ranks on this machine (--nproc); > 1 shards the optimizer (ZeRO-2) over c10d/Gloo
nnodes = 1              # machines the trainer's ranks span (--nnodes); each starts `trellis trainer --node-rank K`
node_rank = 0           # this machine's index (--node-rank); machine 0 holds rank 0, the leader
rdzv = ""               # HOST:PORT of rank 0's rendezvous store (--rdzv; a private network); "" = one machine, a private file
local_rank = 0          # set by the launcher for the ranks it starts; leave at 0
collective_timeout_s = 900  # the longest a collective waits for a stuck rank before failing the run
rendezvous_timeout_s = 300  # the longest the ranks wait for each other to start (machines launched by hand); the ranks missing then are named

[loss]                  # GRPO-family objective (specs/rl.md §3)
clip_eps = 0.2          # ε: the ratio is clipped to [1 - ε, 1 + ε]
clip_delta = 4.0        # δ: two-sided clipping bounds the ratio of negative-advantage tokens; inf = off
mismatch = "icepop"     # trainer/inference mismatch correction: icepop | tis | none
icepop_low = 0.5        # IcePop α: tokens with π_old/π_behav below this are masked
icepop_high = 5.0       # IcePop β: ... and above this
tis_cap = 2.0           # TIS C: importance weight min(π_old/π_behav, C)
kl_coef = 0.0           # k3 KL to the frozen initial model (> 0 loads a second copy)
entropy_coef = 0.0      # entropy bonus weight
norm = "token"          # token (DAPO) | sequence | constant (batch x rl.max_tokens)

[rl]                    # `trellis rl`: generate, score, filter, train in one process
steps = 50              # rollout steps (one trainer update each)
batch_size = 64         # samples per step, all from groups with signal (online filtering)
group_size = 8          # G: completions per prompt
async_level = 2         # k: step s trains on rollouts sampled by the policy of step s - k
max_tokens = 256        # new tokens per completion at most
temperature = 1.0       # sampling temperature (the trainer scores with the same)
normalize_std = true    # advantages (R - mean) / (std + 1e-6); false = Dr. GRPO (R - mean)
zero_truncated = true   # completions cut at max_tokens score 0, so the policy keeps ending answers
max_rounds = 8          # generation rounds per step to fill the batch with groups that have signal
precision = "bf16"      # bf16 (the compute dtype everywhere) | fp8-rollout (engine in FP8, trainer not: off-policy) | fp8 (Jet-RL: the trainer runs the engine's FP8 graph); docs/fp8.md
behaviour_temperature = 0.0  # experiments only: the engine samples at this temperature while the
                            # trainer scores at `temperature` (a real mismatch); 0 = the same

[orchestrator]          # `trellis orchestrator`: step counter, uploads, submissions (specs/protocol.md)
host = "127.0.0.1"      # address to listen on
port = 8400             # 0 = any free port (written to <data_dir>/orchestrator.url once listening)
url = ""                # where the trainer and workers reach it; "" = http://<host>:<port>
data_dir = ""           # orchestrator.sqlite, rollouts/, validating/, rejected/; "" = the run directory
url_ttl_s = 600         # lifetime of a signed upload URL, seconds
max_upload_mib = 256    # larger uploads are refused
max_concurrent_uploads = 4  # uploads received and checked at once; more are answered 503 busy before their body is read (workers retry)
secrets_dir = ""        # trainer.token and validator.token (mode 0600, created on first start; or TRELLIS_TRAINER_TOKEN / TRELLIS_VALIDATOR_TOKEN); "" = <data_dir>/secrets
key_file = ""           # the orchestrator's Ed25519 key (mode 0600, created on first start): it keeps the ledger (`trellis ledger verify`); "" = <data_dir>/keys/orchestrator.key
signature_window_s = 60  # a node's signed request is refused when its timestamp is further than this from the orchestrator's clock
validation = true       # uploads that pass the orchestrator's checks wait for a validator's verdict (`trellis validate`); false = accepted at once (no validators)
validation_lease_s = 120  # a claimed submission goes back to the queue when no verdict comes within this
evict_on_reject = true  # a node whose submission a validator rejects is evicted
join = "open"           # who may register: "open" (any key), "stake" (a node needs `stake` work units deposited on the ledger: `trellis orchestrator stake`) or "approval" (`trellis orchestrator approve`); see docs/security.md
stake = 0               # work units a node must hold staked to join under join = "stake"
slash = 0               # work units a rejected submission takes from its node's stake; 0 = all of it
max_nodes_per_ip = 32   # live nodes (registered, not evicted, dead or stale) one IP may hold, whatever `join` says; an IPv6 address counts by its /64; more are refused (403 ip_full); 0 = no limit
heartbeat_s = 5.0       # nodes that send heartbeats (node agents) send one this often
unhealthy_after = 3     # missed heartbeats before a node is Unhealthy
dead_after = 6          # missed heartbeats before it is Dead: off the allowlist, refused until it registers again
registration_ttl_s = 600  # a node without heartbeats (a worker or validator started without a node agent registers again every 60 s) is Stale once its newest registration is this old: off the allowlist, its IP's slot free, refused until it registers again
work_lease_s = 600      # work handed to a worker holds its step's quota this long (admission control)
max_backlog_steps = 2.0  # no new work while samples waiting for a verdict or being generated reach this many steps' worth
trusted_proxies = []    # reverse proxies whose X-Real-IP names the client (nginx in front: `trellis orchestrator nginx-config`), e.g. ["127.0.0.1"]
discovery_url = ""      # a `trellis discovery` service to invite nodes from (its discovery.readers must list this orchestrator's address, `trellis orchestrator`'s first log line); "" = no invites: nodes register themselves
invite_sweep_s = 5.0    # seconds between sweeps of discovery for nodes to invite
invite_ttl_s = 60       # an invite not used by then expires (the node is invited again)
invite_private_addresses = false  # invite nodes at loopback, private (10/8, 192.168/16, fd00::/8, ...) and link-local addresses too: for a pool on a private network (`trellis run` sets it); otherwise a stranger's endpoint cannot aim the orchestrator's POST at the services behind it
domain = ""             # what the pool trains, named in its invites; "" = env.name

[orchestrator.requirements]  # what an invited node's measured hardware (published to discovery) must have
cpu_cores = 0
memory_mib = 0
disk_mib = 0            # free, where the node keeps its data and weights cache
gpus = 0                # GPUs with at least gpu_memory_mib each
gpu_memory_mib = 0

[discovery]             # `trellis discovery`: where nodes publish their metadata and the orchestrator finds them (docs/discovery.md)
host = "127.0.0.1"      # address to listen on
port = 8300             # 0 = any free port (written to <data_dir>/discovery.url once listening)
data_dir = ""           # discovery.sqlite; "" = the run directory
readers = []            # addresses (the orchestrator's public key) whose signed GET /nodes is answered: node endpoints are for no one else
max_nodes_per_ip = 8    # live node addresses one IP may publish
max_nodes = 10000       # live node addresses in all
ttl_s = 300             # a node that stops publishing is forgotten after this many seconds
trusted_proxies = []    # reverse proxies whose X-Real-IP names the client, e.g. ["127.0.0.1"]
backend = "sqlite"      # where published nodes are kept: "sqlite" (<data_dir>/discovery.sqlite) or "redis" (production)
redis = "127.0.0.1:6379"  # HOST:PORT of redis-server when backend = "redis"
redis_prefix = "trellis:discovery:"  # prefix of every Redis key the service writes
redis_user = ""         # the Redis ACL user to log in as; "" = Redis's default user
redis_password_file = ""  # file (mode 0600) holding Redis's password (requirepass or the user's), sent with AUTH on every connection; TRELLIS_REDIS_PASSWORD wins over it; "" and no variable = no AUTH

[node]                  # `trellis node`: the agent on each machine; it runs the tasks a pool gives it (docs/protocol.md)
name = "node"           # in logs; its folder is <run dir>/nodes/<name> unless data_dir is set
data_dir = ""           # its key, weights cache, tasks and their logs; "" = <run dir>/nodes/<name>
key_file = ""           # the node's Ed25519 key (mode 0600), also its tasks' key; "" = <data_dir>/node.key
host = "127.0.0.1"      # address its agent listens on for invites
port = 0                # 0 = any free port (written to <data_dir>/node.url once listening)
endpoint = ""           # the URL published to discovery (what the orchestrator posts invites to); "" = http://<host>:<port>
discovery_url = ""      # the discovery service it publishes itself to (required)
pools = []              # orchestrator addresses whose invites it accepts (a pool's first log line names it)
restart_backoff_s = 1.0  # a task process that fails is restarted after this, doubling up to 60 s while it keeps failing within 30 s

[infer]                 # `trellis infer`: an untrusted inference worker
key_file = ""           # Ed25519 key (mode 0600), created on first start; "" = <run dir>/keys/<name>.key
name = "worker"         # this worker's name in logs and its key file
groups_per_submission = 4  # prompt groups (of rl.group_size completions) per uploaded file
dataset_size = 1000000  # with generated tasks: prompts are drawn from task indices [0, this)
poll_s = 0.5            # seconds between polls of the step counter while waiting
partial_rollouts = false  # C3PO++ (specs/rl.md §6): keep completions in flight across versions
inflight_completions = 0  # Ω: completions in flight; 0 = groups_per_submission x rl.group_size
token_budget = 256      # Φ: finished tokens per iteration; then new weights, refill, uploads
max_retention = 0       # σ: purge completions spanning more policy versions; 0 = rl.async_level + 1
decode_graphs = true    # on a GPU: replay steps of decodes alone from CUDA graphs; false = op by op

[toploc]                # TOPLOC proofs of inference (specs/toploc.md)
proofs = true           # workers: commit to every completion's hidden states while decoding

[validator]             # `trellis validate`: a trusted validator (specs/toploc.md, docs/validation.md)
name = "validator"      # in logs; also its key file and policy folder
key_file = ""           # Ed25519 key (mode 0600), created on first start; "" = <run dir>/keys/<name>.key
poll_s = 0.5            # seconds between polls of the orchestrator's queue while it is empty
sample_fraction = 0.25  # completions of each file checked by prefill (TOPLOC, sampling, termination)
min_samples = 4         # ... at least this many (every completion of a smaller file)
toploc_exp_mismatches = 38  # a proof chunk fails above this many exponent mismatches (of k = 128)
toploc_mant_err_mean = 10.0  # ... or above this mean mantissa error
toploc_mant_err_median = 8.0  # ... or above this median mantissa error
toploc_file_mant_err_mean = 1.2  # ... and a file fails when its checked chunks average above this
sampling_tolerance = 0.1  # a token's u may lie this far outside its interval, beyond the logits' rounding slack
max_sampling_misses = 0  # tokens per completion allowed beyond that tolerance
max_logprob_error = 0.05  # mean |behaviour log-prob - the policy's| per completion token
eos_min_prob = 0.0      # > 0: a completion may end on a stop token only where its probability is above
                        # this (spec: 0.1); 0 = off: verifiable sampling already checks the stop token
                        # exactly, and a floor rejects honest samples of an unlikely stop (docs/validation.md)
max_file_seconds = 100.0  # a file whose checks take longer is rejected ("time budget"; policy downloads not counted); 0 = no limit
max_file_rows = 4096    # a file with more rows is rejected (an honest one holds infer.groups_per_submission x rl.group_size)
max_reward_checks = 64  # completions per file whose reward the verifier recomputes: a random sample the worker cannot predict

[validator.fp8]         # the numerical thresholds above, in runs that roll out in FP8 (rl.precision = fp8-rollout | fp8): FP8 rounding turns the last-bit differences between honest machines into whole FP8 steps; calibrated with `trellis bench validate --set rl.precision=fp8` (docs/validation.md#fp8)
toploc_exp_mismatches = 38
toploc_mant_err_mean = 10.0
toploc_mant_err_median = 8.0
toploc_file_mant_err_mean = 2.5
sampling_tolerance = 0.2
max_sampling_misses = 0
max_logprob_error = 0.1
precision_ratio = 0.6   # a file whose rows match the policy computed without FP8 this much better (error below this times the error in FP8) was not rolled out in FP8: rejected

[shardcast]             # checkpoint broadcast: trainer (origin) -> relays -> workers (specs/shardcast.md)
relays = 1              # `trellis run`: relays to start; 0 = workers fetch from the trainer's origin
tree = "star"           # `trellis run`: star (every relay pulls from the origin) | chain (each from the one before)
relay_urls = []         # workers: relays to fetch from; [] = the origin (`trellis run` passes its relays)
origin_host = "127.0.0.1"  # trainer: address of the origin server relays pull from
origin_port = 0         # trainer: its port; 0 = any free port (written to <origin_dir>/origin.url)
origin_dir = ""         # trainer: where versions are published; "" = <run dir>/shardcast/origin
trainer_key_file = ""   # trainer: Ed25519 key signing the manifests; "" = <run dir>/keys/trainer.key
shard_size_mib = 50.0   # shard size (the last shard of a version is shorter)
keep = 5                # versions kept by the origin and every relay (older ones are deleted)
deltas = true           # trainer: publish each version's changed elements against the one before (docs/shardcast.md)
parallel = 8            # client: shards downloading at once, from relays drawn by weight
attempts_per_shard = 6  # client: failed downloads of one shard before its version is given up
version_timeout_s = 600  # client and relays: a version not complete by then is given up
stall_s = 10            # a transfer moving under 1 KiB/s for this long is abandoned
relay_choice = "weighted"  # weighted: random, weight success x bandwidth (spec) | fastest (comparison)

[relay]                 # `trellis relay`: pulls versions from upstream, serves them (specs/shardcast.md §3)
name = "relay"          # in logs; also its folder under <run dir>/shardcast/
data_dir = ""           # manifest.json, v<N>/shard_*.bin, probe.bin; "" = <run dir>/shardcast/<name>
host = "127.0.0.1"      # address to listen on
port = 8500             # 0 = any free port (written to <data_dir>/relay.url once listening)
upstreams = []          # origin or relay URLs to pull from; [] = serve data_dir as it is
poll_s = 0.5            # seconds between polls of the upstream manifests
pull_parallel = 4       # shards pulled at once
threads = 32            # transfers served at once
requests_per_s = 0      # per client IP; excess requests get 429; 0 = unlimited
burst = 0               # requests a client may make at once; 0 = max(1, requests_per_s)
bandwidth_mib_s = 0     # per client IP; 0 = unlimited
allow = []              # IPs / IPv4 networks always allowed; with allow = [] and no allowlist_url, anyone
allowlist_url = ""      # orchestrator URL: only the active nodes it lists (GET /allowlist, with its relay token: secrets/relay.token or TRELLIS_RELAY_TOKEN) may download
allowlist_poll_s = 1.0  # seconds between polls of that list (an evicted node is cut off by the next)
nginx_allowlist = ""    # production: also write the list here as an nginx include (see nginx-config)
nginx_reload = ""       # ... and run this command after each change, e.g. "nginx -s reload -p DIR"

[sft]                   # `trellis sft`: supervised warm start on (prompt, completion) pairs
data = ""               # JSONL of {"prompt", "completion"}; "" = the environment's generated tasks
steps = 200             # optimizer steps
batch_size = 32         # examples per optimizer step
lr = 1e-3               # AdamW peak learning rate
warmup_steps = 20       # linear warm-up steps
eval_every = 50         # steps between evaluations on held-out tasks; 0 = only at the end
eval_tasks = 64         # held-out generated tasks per evaluation (greedy, rl.max_tokens)
out = ""                # also write the final model here (a Hugging Face directory)
)toml";
}

}  // namespace trellis
