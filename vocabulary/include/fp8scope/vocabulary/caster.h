// What cast the tensor a record's statistics describe: the job itself (its own codes and scales,
// as the GEMM read them or as TE's cast wrote them), or one of fp8scope's recipes applied to a
// high-precision tensor (a what-if). The history, the wire and the CLI spell the job's own as
// "observed" and a recipe by its name; nothing else turns a Caster into text or back.
#pragma once

#include <compare>
#include <optional>
#include <string_view>

#include "fp8scope/vocabulary/recipe_kind.h"

namespace fp8scope {

class Caster {
 public:
  static constexpr const char* kJobName = "observed";

  static constexpr Caster job() { return Caster(); }
  static constexpr Caster recipe(RecipeKind kind) { return Caster(kind); }
  // "observed" or a recipe's name; nothing for any other text.
  static constexpr std::optional<Caster> from_name(std::string_view name) {
    if (name == kJobName) return job();
    const std::optional<RecipeKind> kind = recipe_kind_from_name(name);
    return kind ? std::optional<Caster>(Caster(*kind)) : std::nullopt;
  }

  constexpr bool is_job() const { return !recipe_; }
  // The recipe of a what-if; nothing for the job's own.
  constexpr std::optional<RecipeKind> recipe_kind() const { return recipe_; }
  constexpr bool is(RecipeKind kind) const { return recipe_ == kind; }
  constexpr const char* name() const { return recipe_ ? recipe_name(*recipe_) : kJobName; }

  // The job's own first, then the recipes in the vocabulary's order.
  constexpr auto operator<=>(const Caster&) const = default;

 private:
  constexpr Caster() = default;
  constexpr explicit Caster(RecipeKind kind) : recipe_(kind) {}
  std::optional<RecipeKind> recipe_;
};

}  // namespace fp8scope
