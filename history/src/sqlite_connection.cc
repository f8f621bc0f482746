#include "sqlite_connection.h"

#include <sys/stat.h>

#include <cmath>
#include <optional>
#include <unordered_map>

#include "fp8scope/pattern/layer_pattern.h"

namespace fp8scope::history {
namespace {

// REGEXP for layer filters: linear-time layer patterns, the compiled ones of a connection cached
// (a few at a time: filters come from queries, not from rows).
using PatternCache = std::unordered_map<std::string, LayerPattern>;

void regexp(sqlite3_context* ctx, int, sqlite3_value** argv) {
  auto* cache = static_cast<PatternCache*>(sqlite3_user_data(ctx));
  const auto* pattern = reinterpret_cast<const char*>(sqlite3_value_text(argv[0]));
  const auto* text = reinterpret_cast<const char*>(sqlite3_value_text(argv[1]));
  if (pattern == nullptr || text == nullptr) return sqlite3_result_int(ctx, 0);
  auto it = cache->find(pattern);
  if (it == cache->end()) {
    std::string error;
    std::optional<LayerPattern> compiled = LayerPattern::compile(pattern, &error);
    if (!compiled) return sqlite3_result_error(ctx, ("layer pattern: " + error).c_str(), -1);
    if (cache->size() >= 16) cache->clear();
    it = cache->emplace(pattern, std::move(*compiled)).first;
  }
  sqlite3_result_int(ctx, it->second.search(text) ? 1 : 0);
}

}  // namespace

Status sql_error(sqlite3* db, const std::string& what) {
  return Status::error(what + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

Status exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string m = message ? message : "unknown error";
    sqlite3_free(message);
    return Status::error("sqlite: " + m);
  }
  return Status();
}

Result<sqlite3*> open_db(const std::string& path, bool read_only) {
  sqlite3* db = nullptr;
  // The daemon writes only a regular file: a link could point its writes anywhere it may write.
  const int mode = read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW;
  struct stat st {};
  if (!read_only && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return Status::error("cannot open " + path + ": a symbolic link; the history must be a regular file (move the "
                         "link away to start)");
  }
  if (sqlite3_open_v2(path.c_str(), &db, mode | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    Status s = sql_error(db, "cannot open " + path);
    sqlite3_close(db);
    return s;
  }
  sqlite3_busy_timeout(db, 5000);
  sqlite3_create_function_v2(db, "regexp", 2, SQLITE_UTF8, new PatternCache, regexp, nullptr, nullptr,
                             [](void* p) { delete static_cast<PatternCache*>(p); });
  return db;
}

Statement::Statement(sqlite3* db, const std::string& sql) {
  ok_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) == SQLITE_OK;
}

bool has_table(sqlite3* db, const char* table) {
  Statement probe(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  if (!probe.ok()) return false;
  probe.text(1, table);
  return sqlite3_step(probe.get()) == SQLITE_ROW;
}

bool has_column(sqlite3* db, const char* table, const std::string& column) {
  Statement probe(db, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?");
  if (!probe.ok()) return false;
  probe.text(1, table);
  probe.text(2, column);
  return sqlite3_step(probe.get()) == SQLITE_ROW;
}

void BoundRow::counts(const std::vector<std::uint64_t>& v) {
  sqlite3_bind_blob(q_.get(), i_++, v.data(), static_cast<int>(v.size() * sizeof(std::uint64_t)), SQLITE_TRANSIENT);
}

double ReadRow::real() const { return null() ? std::nan("") : sqlite3_column_double(q_.get(), col_); }

std::string ReadRow::text() const {
  const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(q_.get(), col_));
  return t ? t : "";
}

std::vector<std::uint64_t> ReadRow::counts() const {
  const auto* blob = static_cast<const std::uint64_t*>(sqlite3_column_blob(q_.get(), col_));
  const int bytes = sqlite3_column_bytes(q_.get(), col_);
  return std::vector<std::uint64_t>(blob, blob + bytes / static_cast<int>(sizeof(std::uint64_t)));
}

const char* sqlite_type(SqlType t) {
  switch (t) {
    case SqlType::kReal: return "REAL";
    case SqlType::kInteger: return "INTEGER";
    case SqlType::kText: return "TEXT";
    case SqlType::kCounts: return "BLOB";
  }
  return "BLOB";
}

}  // namespace fp8scope::history
