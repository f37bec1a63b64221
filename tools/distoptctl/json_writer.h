// JsonWriter: builds one JSON document, for distoptctl's --json output.
//
// Calls nest as the document does: Key then a value inside an object,
// values alone inside an array; the writer puts the commas. Strings are
// escaped by common/json_string.h, so any name or message a daemon returns
// keeps the document valid. Numbers that are not finite are written as
// null (JSON has no NaN). Not thread-safe.
#ifndef DISTOPT_TOOLS_DISTOPTCTL_JSON_WRITER_H_
#define DISTOPT_TOOLS_DISTOPTCTL_JSON_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace distopt {
namespace distoptctl {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  // The key of the next value, inside an object.
  JsonWriter& Key(absl::string_view key);

  JsonWriter& Value(absl::string_view text);
  JsonWriter& Value(const std::string& text) {
    return Value(absl::string_view(text));
  }
  JsonWriter& Value(const char* text) { return Value(absl::string_view(text)); }
  JsonWriter& Value(bool flag);
  JsonWriter& Value(int number) { return Value(int64_t{number}); }
  JsonWriter& Value(int64_t number);
  JsonWriter& Value(uint64_t number);
  JsonWriter& Value(double number);
  // null when absent.
  JsonWriter& Value(std::optional<double> number);
  JsonWriter& Null();

  // Key and value at once.
  template <typename T>
  JsonWriter& Field(absl::string_view key, const T& value) {
    Key(key);
    return Value(value);
  }

  // The document so far.
  const std::string& text() const { return text_; }

 private:
  // Puts the comma before a value or key that is not its container's first.
  void Separate();

  std::string text_;
  // Per open container: whether it has an element yet.
  std::vector<bool> has_element_;
  bool after_key_ = false;
};

}  // namespace distoptctl
}  // namespace distopt

#endif  // DISTOPT_TOOLS_DISTOPTCTL_JSON_WRITER_H_
