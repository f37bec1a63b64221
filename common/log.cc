#include "common/log.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_string.h"

namespace distopt {
namespace log {
namespace {

std::atomic<Format> current_format{Format::kText};

absl::string_view LevelName(Level level) {
  switch (level) {
    case Level::kInfo:
      return "info";
    case Level::kWarning:
      return "warning";
    case Level::kError:
      return "error";
  }
  return "info";
}

// logfmt quotes a value that is empty or holds a space, '=', '"', or
// anything that is not printable ASCII.
bool NeedsQuotes(absl::string_view value) {
  if (value.empty()) return true;
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= ' ' || u >= 0x7F || c == '=' || c == '"' || c == '\\') {
      return true;
    }
  }
  return false;
}

// Keys are the program's own; anything but [A-Za-z0-9_.-] becomes '_'.
std::string CleanKey(absl::string_view key) {
  std::string clean(key);
  for (char& c : clean) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) c = '_';
  }
  return clean.empty() ? "_" : clean;
}

}  // namespace

absl::StatusOr<Format> ParseFormat(absl::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--log_format=", text, ": expected text or json"));
}

void SetFormat(Format format) { current_format.store(format); }

Field::Field(absl::string_view key, int64_t value)
    : key(key), value(absl::StrCat(value)), number(true) {}
Field::Field(absl::string_view key, uint64_t value)
    : key(key), value(absl::StrCat(value)), number(true) {}
Field::Field(absl::string_view key, double value) : key(key) {
  // JSON has no NaN or infinities: those stay strings.
  number = std::isfinite(value);
  this->value = absl::StrFormat("%.6g", value);
}

std::string Render(Format format, absl::Time time, Level level,
                   absl::string_view message, absl::Span<const Field> fields) {
  const std::string stamp =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
  std::string line;
  if (format == Format::kJson) {
    absl::StrAppend(&line, "{\"time\":\"", stamp, "\",\"level\":\"",
                    LevelName(level), "\",\"msg\":");
    AppendJsonString(message, &line);
    for (const Field& field : fields) {
      line.push_back(',');
      AppendJsonString(CleanKey(field.key), &line);
      line.push_back(':');
      if (field.number) {
        line.append(field.value);
      } else {
        AppendJsonString(field.value, &line);
      }
    }
    line.append("}\n");
    return line;
  }
  // logfmt's quoted values take JSON's escapes.
  absl::StrAppend(&line, "time=", stamp, " level=", LevelName(level), " msg=");
  AppendJsonString(message, &line);
  for (const Field& field : fields) {
    absl::StrAppend(&line, " ", CleanKey(field.key), "=");
    if (field.number || !NeedsQuotes(field.value)) {
      line.append(field.value);
    } else {
      AppendJsonString(field.value, &line);
    }
  }
  line.push_back('\n');
  return line;
}

void Event(Level level, absl::string_view message,
           absl::Span<const Field> fields) {
  static absl::Mutex* const mutex = new absl::Mutex;
  const std::string line =
      Render(current_format.load(), absl::Now(), level, message, fields);
  absl::MutexLock lock(mutex);
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n =
        write(STDERR_FILENO, line.data() + written, line.size() - written);
    if (n <= 0) break;  // Nowhere to log to; the event is lost.
    written += static_cast<size_t>(n);
  }
}

bool RateLimiter::Allow(absl::Time now, int64_t* dropped) {
  absl::MutexLock lock(&mutex_);
  if (last_ != absl::InfinitePast()) {
    tokens_ = std::min(
        burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * per_second_);
  }
  last_ = now;
  if (tokens_ < 1) {
    ++dropped_;
    return false;
  }
  tokens_ -= 1;
  *dropped = dropped_;
  dropped_ = 0;
  return true;
}

}  // namespace log
}  // namespace distopt
