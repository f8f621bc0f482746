// The shipper's cores: FP8SCOPE_SHIPPER_CPUS is read as taskset and cpuset write lists, refused
// with the text it got when it is anything else, and applied to the process.
#include <sched.h>

#include <catch2/catch.hpp>

#include "fp8scope/shipper/cpu_list.h"

using fp8scope::shipper::parse_cpu_list;
using fp8scope::shipper::run_on_cpus;

TEST_CASE("a CPU list names single cores and ranges, ascending and once each") {
  CHECK(parse_cpu_list("3").value() == std::vector<int>{3});
  CHECK(parse_cpu_list("0,2").value() == std::vector<int>{0, 2});
  CHECK(parse_cpu_list("4-7,12").value() == std::vector<int>{4, 5, 6, 7, 12});
  CHECK(parse_cpu_list("6-7,2,7,0-1").value() == std::vector<int>{0, 1, 2, 6, 7});
  CHECK(parse_cpu_list("5-5").value() == std::vector<int>{5});
}

TEST_CASE("anything else is refused, quoting what was given") {
  for (const char* bad : {"", ",", "1,", ",1", "a", "1-", "-1", "3-1", "1 2", "1;2", "0x1", "1-2-3", "99999", "1024"}) {
    INFO(bad);
    const auto r = parse_cpu_list(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.message(), Catch::Contains(std::string("got '") + bad + "'"));
  }
}

TEST_CASE("the process runs on the cores it is given, and a core it may not use is an error") {
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  int allowed = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE && allowed < 0; ++cpu) {
    if (CPU_ISSET(cpu, &before)) allowed = cpu;
  }
  REQUIRE(allowed >= 0);
  REQUIRE(run_on_cpus({allowed}).ok());
  cpu_set_t now;
  REQUIRE(sched_getaffinity(0, sizeof now, &now) == 0);
  CHECK(CPU_COUNT(&now) == 1);
  CHECK(CPU_ISSET(allowed, &now));

  const auto refused = run_on_cpus({CPU_SETSIZE - 1});  // no machine here has 1,024 cores
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.message(), Catch::Contains("cannot run on CPUs 1023"));
  REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
}
