// How the vocabulary's tables are read. Every enum of the domain is declared once, as an X-macro
// list of rows (the way LLVM's .def files declare opcodes): the enumerators and the table both
// expand from it, so an enumerator cannot lack its row. Rows sit in enum order (row i describes
// the enumerator of value i), and each has at least a name (as fp8scope prints and stores it)
// and a wire number (fp8scope.v1's value; proto/wire.cc converts through it, never by casting).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8scope::vocabulary {

// Rows in enum order, names and wire numbers each unique and wire numbers above 0 (protobuf's
// UNSPECIFIED): checked by a static_assert beside every table.
template <class Row, std::size_t N>
constexpr bool well_formed(const Row (&rows)[N]) {
  for (std::size_t i = 0; i < N; ++i) {
    if (static_cast<std::size_t>(rows[i].value) != i || rows[i].wire == 0) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (rows[j].wire == rows[i].wire || std::string_view(rows[j].name) == rows[i].name) return false;
    }
  }
  return true;
}

template <class Row, std::size_t N>
constexpr const Row* row_of(const Row (&rows)[N], decltype(Row::value) value) {
  const auto i = static_cast<std::size_t>(value);
  return i < N ? &rows[i] : nullptr;
}

template <class Row, std::size_t N>
constexpr const Row* row_named(const Row (&rows)[N], std::string_view name) {
  for (const Row& r : rows) {
    if (name == r.name) return &r;
  }
  return nullptr;
}

template <class Row, std::size_t N>
constexpr const Row* row_on_wire(const Row (&rows)[N], std::uint32_t wire) {
  for (const Row& r : rows) {
    if (r.wire == wire) return &r;
  }
  return nullptr;
}

// A number from outside (a shared-memory ring, a file) as a value, if a row has it.
template <class Row, std::size_t N>
constexpr std::optional<decltype(Row::value)> value_numbered(const Row (&rows)[N], std::uint64_t number) {
  return number < N ? std::optional(rows[number].value) : std::nullopt;
}

// The name of a value, or "invalid" for a number no row has.
template <class Row, std::size_t N>
constexpr const char* name_of(const Row (&rows)[N], decltype(Row::value) value) {
  const Row* r = row_of(rows, value);
  return r ? r->name : "invalid";
}

template <class Row, std::size_t N>
constexpr std::optional<decltype(Row::value)> value_named(const Row (&rows)[N], std::string_view name) {
  const Row* r = row_named(rows, name);
  return r ? std::optional(r->value) : std::nullopt;
}

// The largest wire number a table knows: proto/wire.cc checks it against the generated enum's
// largest value, so a value added to the proto without a row (or the reverse) fails the build.
template <class Row, std::size_t N>
constexpr std::uint32_t max_wire(const Row (&rows)[N]) {
  std::uint32_t m = 0;
  for (const Row& r : rows) m = r.wire > m ? r.wire : m;
  return m;
}

}  // namespace fp8scope::vocabulary

// Expands a row list into enumerators k<id>, whatever else its rows hold.
#define FP8SCOPE_VOCABULARY_ENUMERATOR(id, ...) k##id,
