// What a history store holds once its writes are committed, for the stage tests that read back
// what a publisher wrote.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "fp8scope/history/history_store.h"

namespace fp8scope::testing {

inline std::vector<history::HistoryRecord> stored_records(history::HistoryStore& store) {
  REQUIRE(store.flush().ok());
  std::vector<history::HistoryRecord> out;
  REQUIRE(store.reader().query({}, [&](const history::HistoryRecord& r) {
    out.push_back(r);
    return true;
  }).ok());
  return out;
}

}  // namespace fp8scope::testing
