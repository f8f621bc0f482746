#include "history_location.h"

#include <filesystem>

#include "url_redaction.h"

namespace fp8scope::history {

Result<HistoryLocation> parse_history_location(const std::string& location) {
  if (location.empty()) return Status::error("--history: empty; expected a PostgreSQL URL, a SQLite file or a data dir");
  if (location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0) {
    return HistoryLocation{HistoryLocation::Kind::kPostgres, location};
  }
  std::string path = location;
  if (path.rfind("sqlite://", 0) == 0) {
    path = path.substr(9);
    if (path.empty()) return Status::error("--history " + location + ": no file after sqlite://");
    return HistoryLocation{HistoryLocation::Kind::kSqlite, path};
  }
  if (const std::size_t scheme = path.find("://"); scheme != std::string::npos) {
    return Status::error("--history " + redact_url(location) + ": unknown scheme '" + path.substr(0, scheme) +
                         "'; expected postgresql://user@host:port/database, sqlite:///path/history.sqlite, a SQLite "
                         "file, or fp8scoped's --data-dir");
  }
  const std::filesystem::path p(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(p, ec) && (p.extension() == ".sqlite" || p.extension() == ".db")) {
    return HistoryLocation{HistoryLocation::Kind::kSqlite, path};
  }
  return HistoryLocation{HistoryLocation::Kind::kSqlite, (p / "history.sqlite").string()};
}

}  // namespace fp8scope::history
