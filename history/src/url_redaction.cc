#include "url_redaction.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace fp8scope::history {
namespace {

constexpr const char* kHidden = "***";
// Pieces of a password shorter than this are left in a message (they would hide common words).
constexpr std::size_t kShortestPiece = 3;

// Where the URL's authority password is: [begin, end) of url; begin == end when it has none.
std::pair<std::size_t, std::size_t> authority_password(const std::string& url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string::npos) return {0, 0};
  const std::size_t start = scheme + 3;
  // The last '@' before any query: a password may hold '@' and '/', a host holds neither.
  const std::size_t query = url.find('?', start);
  const std::size_t end = query == std::string::npos ? url.size() : query;
  const std::size_t at = end > start ? url.rfind('@', end - 1) : std::string::npos;
  if (at == std::string::npos || at < start) return {0, 0};
  const std::size_t colon = url.find(':', start);
  if (colon == std::string::npos || colon > at) return {0, 0};
  return {colon + 1, at};
}

// The values of password=... parameters: [begin, end) pairs.
std::vector<std::pair<std::size_t, std::size_t>> password_parameters(const std::string& url) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t p = url.find("password="); p != std::string::npos; p = url.find("password=", p + 1)) {
    const std::size_t begin = p + 9;
    const std::size_t end = url.find_first_of("& ", begin);
    out.emplace_back(begin, end == std::string::npos ? url.size() : end);
  }
  return out;
}

std::string percent_decoded(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

void replace_all(std::string& text, const std::string& what, const std::string& with) {
  if (what.empty()) return;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + with.size())) {
    text.replace(p, what.size(), with);
  }
}

}  // namespace

std::string redact_url(const std::string& url) {
  std::vector<std::pair<std::size_t, std::size_t>> spans = password_parameters(url);
  if (const auto a = authority_password(url); a.first != a.second) spans.push_back(a);
  std::string out = url;
  // From the end, so that earlier offsets stay where they were.
  std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  std::size_t limit = out.size();
  for (const auto& [begin, end] : spans) {
    if (end > limit || begin >= end) continue;  // overlapping: already hidden
    out.replace(begin, end - begin, kHidden);
    limit = begin;
  }
  return out;
}

std::string redact_message(std::string message, const std::string& url) {
  replace_all(message, url, redact_url(url));
  std::vector<std::pair<std::size_t, std::size_t>> spans = password_parameters(url);
  if (const auto a = authority_password(url); a.first != a.second) spans.push_back(a);
  for (const auto& [begin, end] : spans) {
    const std::string password = url.substr(begin, end - begin);
    for (const std::string& form : {password, percent_decoded(password)}) {
      replace_all(message, form, kHidden);
      // A driver that splits the URL elsewhere (libpq, at the first '@') shows pieces of it.
      for (std::size_t from = 0; from < form.size();) {
        const std::size_t to = std::min(form.find_first_of("@/:", from), form.size());
        if (to - from >= kShortestPiece) replace_all(message, form.substr(from, to - from), kHidden);
        from = to + 1;
      }
    }
  }
  return message;
}

}  // namespace fp8scope::history
