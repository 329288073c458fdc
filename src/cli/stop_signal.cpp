#include "cli/stop_signal.h"

#include <csignal>

namespace trellis::cli {
namespace {

std::atomic<bool> g_stop{false};

void set_stop_flag(int) { g_stop = true; }

}  // namespace

const std::atomic<bool>& stop_requested() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = set_stop_flag;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    return true;
  }();
  (void)installed;
  return g_stop;
}

}  // namespace trellis::cli
