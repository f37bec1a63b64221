#include "tools/distoptctl/json_writer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"

namespace distopt {
namespace distoptctl {

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (has_element_.empty()) return;
  if (has_element_.back()) text_.push_back(',');
  has_element_.back() = true;
}

JsonWriter& JsonWriter::BeginObject() {
  Separate();
  text_.push_back('{');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  text_.push_back('}');
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  Separate();
  text_.push_back('[');
  has_element_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  text_.push_back(']');
  has_element_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(absl::string_view key) {
  Separate();
  AppendJsonString(key, &text_);
  text_.push_back(':');
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::Value(absl::string_view text) {
  Separate();
  AppendJsonString(text, &text_);
  return *this;
}

JsonWriter& JsonWriter::Value(bool flag) {
  Separate();
  text_.append(flag ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::Value(int64_t number) {
  Separate();
  absl::StrAppend(&text_, number);
  return *this;
}

JsonWriter& JsonWriter::Value(uint64_t number) {
  Separate();
  absl::StrAppend(&text_, number);
  return *this;
}

JsonWriter& JsonWriter::Value(double number) {
  if (!std::isfinite(number)) return Null();
  Separate();
  // 15 significant digits: what a double carries in decimal (times since
  // the epoch to microseconds), without 0.1 turning into
  // 0.10000000000000001.
  absl::StrAppendFormat(&text_, "%.15g", number);
  return *this;
}

JsonWriter& JsonWriter::Value(std::optional<double> number) {
  return number.has_value() ? Value(*number) : Null();
}

JsonWriter& JsonWriter::Null() {
  Separate();
  text_.append("null");
  return *this;
}

}  // namespace distoptctl
}  // namespace distopt
