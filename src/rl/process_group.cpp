// Gloo's process group is compiled only with this macro (libtorch's own build defines it).
#define USE_C10D_GLOO 1

#include "rl/process_group.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/ip_address.h"

namespace trellis::rl {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

const std::string kFailedKey = "trellis/failed";

// Gloo moves host memory: a tensor on another device (a GPU) travels through a host copy, which
// copy_back returns to it after an in-place collective. A CPU tensor is used as it is.
torch::Tensor on_host(const torch::Tensor& t) { return t.is_cpu() ? t : t.to(torch::kCPU); }
void copy_back(torch::Tensor& t, const torch::Tensor& host) {
  if (!t.is_cpu()) t.copy_(host);
}

// The address of this machine's interface towards host:port (a UDP "connection" sends nothing):
// what the other machines' ranks can reach this one at. Error naming the host if none.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    fail("trainer.rdzv", "cannot resolve '{}'", host);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  freeaddrinfo(found);
  if (fd >= 0) ::close(fd);
  char text[INET_ADDRSTRLEN] = {};
  if (!ok || !inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
    fail("trainer.rdzv", "no route from this machine to '{}'", host);
  return text;
}

}  // namespace

DistributedOptions DistributedOptions::from_config(const Config& c) {
  DistributedOptions o;
  o.nproc = static_cast<int>(c.get_at_least<int64_t>("trainer.nproc", 1));
  o.nnodes = static_cast<int>(c.get_at_least<int64_t>("trainer.nnodes", 1));
  o.node_rank = static_cast<int>(c.get_at_least<int64_t>("trainer.node_rank", 0));
  if (o.nproc > 1024) fail("trainer.nproc", "at most 1024 ranks per machine, got {}", o.nproc);
  if (o.nnodes > 4096) fail("trainer.nnodes", "at most 4096 machines, got {}", o.nnodes);
  if (o.node_rank >= o.nnodes) {
    fail("trainer.node_rank", "must be below trainer.nnodes ({}), got {}", o.nnodes, o.node_rank);
  }
  o.local_rank = static_cast<int>(c.get_at_least<int64_t>("trainer.local_rank", 0));
  if (o.local_rank >= o.nproc) {
    fail("trainer.local_rank", "must be below trainer.nproc ({}), got {}", o.nproc, o.local_rank);
  }
  o.timeout_s = c.get<double>("trainer.collective_timeout_s");
  if (!(o.timeout_s > 0)) fail("trainer.collective_timeout_s", "must be positive");
  o.rendezvous_timeout_s = c.get<double>("trainer.rendezvous_timeout_s");
  if (!(o.rendezvous_timeout_s > 0)) fail("trainer.rendezvous_timeout_s", "must be positive");
  const std::string rdzv = c.get<std::string>("trainer.rdzv");
  if (rdzv.starts_with("file:")) {
    o.store_file = rdzv.substr(5);
    if (o.store_file.empty() || o.nnodes > 1)
      fail("trainer.rdzv", "'{}': file:PATH names a store file for ranks on one machine", rdzv);
  } else if (!rdzv.empty()) {
    const HostPort store = parse_host_port(rdzv, "trainer.rdzv");
    o.rdzv_host = store.host;
    o.rdzv_port = store.port;
  } else if (o.nnodes > 1) {
    fail("trainer.rdzv",
         "ranks on {} machines need a rendezvous: set --rdzv HOST:PORT (rank 0's "
         "machine and a free port on it)",
         o.nnodes);
  }
  return o;
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
};

ProcessGroup::ProcessGroup() = default;

ProcessGroup::ProcessGroup(const DistributedOptions& o)
    : impl_(std::make_unique<Impl>()), rank_(o.rank()), world_(o.world()) {
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  const auto join_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(o.rendezvous_timeout_s * 1000));
  const std::string where = fmt::format(
      "rank {} of {}, rendezvous {}", rank_, world_,
      o.store_file.empty() ? fmt::format("{}:{}", o.rdzv_host, o.rdzv_port) : o.store_file);
  if (o.store_file.empty() && o.rdzv_port == 0) fail(where, "no rendezvous to meet at");
  try {
    c10::intrusive_ptr<c10d::Store> store;
    if (!o.store_file.empty()) {
      store = c10::make_intrusive<c10d::FileStore>(o.store_file, world_);
    } else {
      c10d::TCPStoreOptions so;
      so.port = static_cast<uint16_t>(o.rdzv_port);
      so.isServer = rank_ == 0;
      so.numWorkers = world_;
      so.waitWorkers = false;     // wait_for_every_rank() below names the ranks that do not come
      so.timeout = join_timeout;  // how long a rank retries to reach rank 0's store
      store = c10::make_intrusive<c10d::TCPStore>(o.rdzv_host, so);
    }
    store->setTimeout(timeout);
    impl_->store = c10::make_intrusive<c10d::PrefixStore>("trellis", store);
    wait_for_every_rank(join_timeout, where);
    auto options = c10d::ProcessGroupGloo::Options::create();
    // Loopback on one machine; across machines, the address this machine reaches the store from.
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(
        o.nnodes == 1 ? "127.0.0.1" : local_address_towards(o.rdzv_host, o.rdzv_port)));
    options->timeout = timeout;
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank_, world_, options);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(where, "cannot join the trainer's ranks: {}", message_of(e));
  }
}

void ProcessGroup::wait_for_every_rank(std::chrono::milliseconds timeout,
                                       const std::string& where) {
  const auto key = [](int rank) { return fmt::format("joined/{}", rank); };
  impl_->store->set(key(rank_), bytes_of("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < world_; ++r) keys.push_back(key(r));
  try {
    impl_->store->wait(keys, timeout);
    return;
  } catch (const std::exception&) {  // c10d's time-out: which ranks are missing?
  }
  std::vector<int> missing;
  for (int r = 0; r < world_; ++r)
    if (!impl_->store->check({key(r)})) missing.push_back(r);
  if (missing.empty()) return;  // the last one came just then
  fail(where,
       "rank{} {} of {} did not join within {:g} s (trainer.rendezvous_timeout_s): start the "
       "trainer on every machine with --nnodes N --node-rank K and the same --rdzv HOST:PORT, or "
       "see the log of a missing rank this machine started (rank-N.log in the run directory)",
       missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), world_,
       static_cast<double>(timeout.count()) / 1000);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::peer_failed(const char* what, const std::string& detail) {
  std::string who;
  try {
    if (impl_->store->check({kFailedKey})) who = string_of(impl_->store->get(kFailedKey));
  } catch (const std::exception&) {  // the store went with rank 0
  }
  if (!who.empty()) fail("trainer ranks", "{}: {}", what, who);
  fail("trainer ranks", "{} failed on rank {}: {}", what, rank_, detail);
}

template <typename Fn>
void ProcessGroup::collective(const char* what, Fn&& fn) {
  if (world_ == 1) return;
  const double t0 = monotonic_seconds();
  try {
    fn(*impl_->gloo);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    comm_seconds_ += monotonic_seconds() - t0;
    peer_failed(what, message_of(e));
  }
  comm_seconds_ += monotonic_seconds() - t0;
}

void ProcessGroup::all_reduce_sum(torch::Tensor& t) {
  collective("all-reduce", [&](c10d::ProcessGroupGloo& g) {
    std::vector<at::Tensor> ts{on_host(t)};
    g.allreduce(ts)->wait();
    copy_back(t, ts[0]);
  });
}

torch::Tensor ProcessGroup::reduce_scatter_sum(const torch::Tensor& flat) {
  if (flat.numel() % world_ != 0) {
    fail("reduce-scatter", "{} elements do not split into {} ranks", flat.numel(), world_);
  }
  if (world_ == 1) return flat.clone();
  const int64_t shard = flat.numel() / world_;
  // Gloo in libtorch 1.13 has no reduce-scatter: an all-to-all sends each rank its chunk of
  // every rank's tensor (the same bytes a ring reduce-scatter moves), summed here in rank order.
  torch::Tensor in = on_host(flat).contiguous();
  torch::Tensor received = torch::empty_like(in);
  collective("reduce-scatter", [&](c10d::ProcessGroupGloo& g) {
    std::vector<int64_t> equal_splits;
    g.alltoall_base(received, in, equal_splits, equal_splits)->wait();
  });
  return received.view({world_, shard}).sum(0).to(flat.device());
}

void ProcessGroup::all_gather(const torch::Tensor& shard, torch::Tensor& flat) {
  if (flat.numel() != shard.numel() * world_) {
    fail("all-gather", "{} elements cannot hold {} shards of {}", flat.numel(), world_,
         shard.numel());
  }
  if (world_ == 1) {
    flat.copy_(shard);
    return;
  }
  collective("all-gather", [&](c10d::ProcessGroupGloo& g) {
    torch::Tensor host = on_host(flat);
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < world_; ++r)
      out[0].push_back(host.narrow(0, r * shard.numel(), shard.numel()));
    std::vector<at::Tensor> in{on_host(shard).contiguous()};
    g.allgather(out, in)->wait();
    copy_back(flat, host);
  });
}

void ProcessGroup::broadcast(torch::Tensor& t, int root) {
  collective("broadcast", [&](c10d::ProcessGroupGloo& g) {
    std::vector<at::Tensor> ts{on_host(t)};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    g.broadcast(ts, opts)->wait();
    copy_back(t, ts[0]);
  });
}

void ProcessGroup::send(const torch::Tensor& t, int to) {
  collective("send", [&](c10d::ProcessGroupGloo& g) {
    std::vector<at::Tensor> ts{on_host(t).contiguous()};
    g.send(ts, to, 0)->wait();
  });
}

void ProcessGroup::recv(torch::Tensor& t, int from) {
  collective("receive", [&](c10d::ProcessGroupGloo& g) {
    std::vector<at::Tensor> ts{on_host(t)};
    g.recv(ts, from, 0)->wait();
    copy_back(t, ts[0]);
  });
}

std::string ProcessGroup::broadcast_from_leader(const std::string& message) {
  if (world_ == 1) return message;
  const std::string key = "message/" + std::to_string(messages_++);
  int64_t size = 0;
  try {
    if (leader()) {
      size = static_cast<int64_t>(message.size());
      impl_->store->set(key, bytes_of(std::to_string(size)));
    } else {
      const double t0 = monotonic_seconds();
      while (!impl_->store->check({key})) {
        if (impl_->store->check({kFailedKey})) peer_failed("waiting for the leader", "");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      comm_seconds_ += monotonic_seconds() - t0;
      size = std::stoll(string_of(impl_->store->get(key)));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the store closed: rank 0 is gone
    peer_failed("waiting for the leader", message_of(e));
  }
  torch::Tensor bytes = torch::empty({size}, torch::kUInt8);
  if (leader()) std::memcpy(bytes.data_ptr(), message.data(), message.size());
  broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(size));
}

void ProcessGroup::report_failure(const std::string& what) noexcept {
  if (world_ == 1) return;
  try {
    const std::string text = fmt::format("rank {} failed: {}", rank_, what);
    // The first failure is the cause; later ones are usually its echoes.
    impl_->store->compareSet(kFailedKey, {}, bytes_of(text));
  } catch (const std::exception&) {
  }
}

}  // namespace trellis::rl
