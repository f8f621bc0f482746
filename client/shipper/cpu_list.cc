#include "fp8scope/shipper/cpu_list.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace fp8scope::shipper {
namespace {

bool parse_cpu(const std::string& text, int& out) {
  if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoi(text);
  return out < CPU_SETSIZE;
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(const std::string& text) {
  const auto bad = [&] {
    return Status::error("expected a CPU list such as 3, 0,2 or 4-7 (cores below " + std::to_string(CPU_SETSIZE) +
                         "), got '" + text + "'");
  };
  std::vector<int> cpus;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t dash = item.find('-');
    int first = 0, last = 0;
    if (!parse_cpu(item.substr(0, dash), first)) return bad();
    last = first;
    if (dash != std::string::npos && (!parse_cpu(item.substr(dash + 1), last) || last < first)) return bad();
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    at = end + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

Status run_on_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::string list;
    for (int cpu : cpus) list += (list.empty() ? "" : ",") + std::to_string(cpu);
    return Status::error("cannot run on CPUs " + list + ": " + std::strerror(errno) +
                         " (outside the cores this job may use?)");
  }
  return Status();
}

}  // namespace fp8scope::shipper
