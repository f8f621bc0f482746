// Library code reports failure as a value; only main() decides to exit. A Status is ok or carries
// one human-readable line ("expected X, got Y", naming the input).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace fp8scope {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}          // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T value() && { return std::get<T>(std::move(v_)); }  // by value: safe in a range-for over a temporary
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  const std::string& message() const {
    static const std::string kEmpty;
    return ok() ? kEmpty : std::get<Status>(v_).message();
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fp8scope
