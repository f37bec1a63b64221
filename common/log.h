// Structured logs: one event a line on stderr, with a time, a level, a
// message and key=value fields.
//
//   text (default): logfmt, values quoted with escapes where they need it
//     time=2026-12-01T05:40:00.123Z level=info msg="serving" address=...
//   json: one object a line, strings escaped as JSON (control characters,
//     and bytes that are not UTF-8 as U+FFFD), numbers as numbers
//     {"time":"2026-12-01T05:40:00.123Z","level":"info","msg":"serving",...}
//
// A line is written with one write(2) under a lock, so lines of concurrent
// events never interleave. Events that clients can cause at will go
// through a RateLimiter first.
#ifndef DISTOPT_COMMON_LOG_H_
#define DISTOPT_COMMON_LOG_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace distopt {
namespace log {

enum class Level { kInfo, kWarning, kError };
enum class Format { kText, kJson };

// "text" or "json"; INVALID_ARGUMENT naming --log_format otherwise.
absl::StatusOr<Format> ParseFormat(absl::string_view text);
void SetFormat(Format format);

// One key=value of an event. Numbers stay numbers in JSON.
struct Field {
  Field(absl::string_view key, absl::string_view value)
      : key(key), value(value) {}
  Field(absl::string_view key, const std::string& value)
      : key(key), value(value) {}
  Field(absl::string_view key, const char* value) : key(key), value(value) {}
  Field(absl::string_view key, int64_t value);
  Field(absl::string_view key, uint64_t value);
  Field(absl::string_view key, int value) : Field(key, int64_t{value}) {}
  Field(absl::string_view key, double value);

  std::string key;
  std::string value;
  bool number = false;
};

// Writes one event to stderr in the format set.
void Event(Level level, absl::string_view message,
           absl::Span<const Field> fields = {});
inline void Info(absl::string_view message,
                 absl::Span<const Field> fields = {}) {
  Event(Level::kInfo, message, fields);
}
inline void Warning(absl::string_view message,
                    absl::Span<const Field> fields = {}) {
  Event(Level::kWarning, message, fields);
}
inline void Error(absl::string_view message,
                  absl::Span<const Field> fields = {}) {
  Event(Level::kError, message, fields);
}

// The line Event writes, with its newline.
std::string Render(Format format, absl::Time time, Level level,
                   absl::string_view message, absl::Span<const Field> fields);

// Lets through `per_second` events a second on average, `burst` at once;
// Allow returns false for the others and counts them, and the next event
// it lets through learns how many were dropped since the last one.
class RateLimiter {
 public:
  RateLimiter(double per_second, double burst)
      : per_second_(per_second), burst_(burst), tokens_(burst) {}

  // `dropped`: events refused since the last one allowed.
  bool Allow(absl::Time now, int64_t* dropped);

 private:
  const double per_second_;
  const double burst_;
  absl::Mutex mutex_;
  double tokens_ ABSL_GUARDED_BY(mutex_);
  absl::Time last_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  int64_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace log
}  // namespace distopt

#endif  // DISTOPT_COMMON_LOG_H_
