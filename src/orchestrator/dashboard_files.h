// The dashboard page's files (src/orchestrator/dashboard/: index.html, app.js, style.css),
// compiled into the binary by cmake/embed_dashboard.cmake, so that the orchestrator serves them
// with no files to install and nothing fetched from elsewhere.
#pragma once

#include <optional>
#include <string_view>

namespace trellis::orchestrator {

struct DashboardFile {
  std::string_view content_type;
  std::string_view body;
};

// The file called `name` ("index.html", "app.js" or "style.css"); nothing for any other name.
std::optional<DashboardFile> dashboard_file(std::string_view name);

}  // namespace trellis::orchestrator
