// distoptctl checkpoint ADDR [--save]: CheckpointService.Save, then
// ListCheckpoints.
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/table.h"
#include "tools/distoptctl/units.h"

namespace distopt {
namespace distoptctl {
namespace {

struct Checkpoints {
  // The one --save made.
  std::optional<v1::CheckpointInfo> saved;
  v1::ListCheckpointsResponse list;
};

absl::StatusOr<Checkpoints> SaveAndList(Client& client,
                                        const std::string& address, bool save) {
  Checkpoints checkpoints;
  if (save) {
    absl::StatusOr<v1::CheckpointInfo> saved = client.SaveCheckpoint(address);
    if (!saved.ok()) return saved.status();
    checkpoints.saved = *std::move(saved);
  }
  absl::StatusOr<v1::ListCheckpointsResponse> list =
      client.ListCheckpoints(address);
  if (!list.ok()) return list.status();
  checkpoints.list = *std::move(list);
  return checkpoints;
}

// "2026-03-01T12:00:05Z" (UTC); "-" when the format did not record it.
std::string SavedAt(const v1::CheckpointInfo& checkpoint) {
  if (checkpoint.saved_at_unix_micros() == 0) return "-";
  return absl::FormatTime(
      "%Y-%m-%dT%H:%M:%SZ",
      absl::FromUnixMicros(checkpoint.saved_at_unix_micros()),
      absl::UTCTimeZone());
}

// The checkpoint's fields, into the object being written.
void WriteCheckpoint(JsonWriter& json, const v1::CheckpointInfo& checkpoint) {
  json.Field("folder", checkpoint.folder())
      .Field("whole", checkpoint.whole())
      .Field("problem", checkpoint.problem())
      .Field("saved_at_unix_micros", checkpoint.saved_at_unix_micros())
      .Field("reason", checkpoint.reason())
      .Field("parameters", checkpoint.parameters())
      .Field("bytes", checkpoint.bytes())
      .Key("sections")
      .BeginArray();
  for (const std::string& section : checkpoint.sections()) json.Value(section);
  json.EndArray();
}

void WriteJson(JsonWriter& json, const Checkpoints& checkpoints) {
  if (checkpoints.saved.has_value()) {
    json.Key("saved").BeginObject();
    WriteCheckpoint(json, *checkpoints.saved);
    json.Field("snapshot_seconds", checkpoints.saved->snapshot_seconds())
        .Field("write_seconds", checkpoints.saved->write_seconds())
        .EndObject();
  }
  json.Key("checkpoints").BeginArray();
  for (const v1::CheckpointInfo& checkpoint : checkpoints.list.checkpoints()) {
    json.BeginObject();
    WriteCheckpoint(json, checkpoint);
    json.EndObject();
  }
  json.EndArray()
      .Field("restore_fell_back", checkpoints.list.restore_fell_back())
      .Field("last_save_error", checkpoints.list.last_save_error());
}

std::string Render(const Checkpoints& checkpoints) {
  std::string text;
  if (checkpoints.saved.has_value()) {
    const v1::CheckpointInfo& saved = *checkpoints.saved;
    absl::StrAppend(&text, "saved a checkpoint in folder ", saved.folder(),
                    ": ", saved.parameters(), " parameters, ",
                    FormatBytes(static_cast<double>(saved.bytes())),
                    ", steps held back ",
                    FormatSeconds(saved.snapshot_seconds()), ", written in ",
                    FormatSeconds(saved.write_seconds()), "\n");
  }
  Table table;
  table.AddRow({"FOLDER", "SAVED", "REASON", "PARAMETERS", "BYTES", "WHOLE"});
  for (const v1::CheckpointInfo& checkpoint : checkpoints.list.checkpoints()) {
    table.AddRow({checkpoint.folder(), SavedAt(checkpoint), checkpoint.reason(),
                  absl::StrCat(checkpoint.parameters()),
                  FormatBytes(static_cast<double>(checkpoint.bytes())),
                  checkpoint.whole()
                      ? "yes"
                      : absl::StrCat("no: ", checkpoint.problem())});
  }
  text.append(table.Render());
  if (!checkpoints.list.restore_fell_back().empty()) {
    absl::StrAppend(&text,
                    "restore fell back: ", checkpoints.list.restore_fell_back(),
                    "\n");
  }
  if (!checkpoints.list.last_save_error().empty()) {
    absl::StrAppend(
        &text, "last save failed: ", checkpoints.list.last_save_error(), "\n");
  }
  return text;
}

}  // namespace

int CheckpointCommand(const Invocation& invocation, const std::string& address,
                      bool save) {
  return PrintResult(invocation, address,
                     SaveAndList(*invocation.client, address, save), WriteJson,
                     Render);
}

}  // namespace distoptctl
}  // namespace distopt
