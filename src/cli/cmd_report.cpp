// `trellis report RUN_DIR`: writes RUN_DIR/report.html (run/report.h) and prints its path.
#include <iostream>

#include "cli/commands.h"
#include "run/report.h"

namespace trellis::cli {

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report", "Write RUN_DIR/report.html: config, summary and plots of metrics.jsonl");
  static std::string run_dir;
  cmd->add_option("run_dir", run_dir, "run directory (holds metrics.jsonl and config.toml)")
      ->required();
  cmd->callback([] {
    run::write_report(run_dir);
    std::cout << (std::filesystem::path(run_dir) / "report.html").string() << "\n";
  });
}

}  // namespace trellis::cli
