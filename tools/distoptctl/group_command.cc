// distoptctl group ADDR: GroupService.GetGroup.
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/distoptctl/commands.h"
#include "tools/distoptctl/table.h"

namespace distopt {
namespace distoptctl {
namespace {

// "ready", as distopt_group_state's label says it.
std::string StateName(v1::GroupInfo::State state) {
  return absl::AsciiStrToLower(v1::GroupInfo::State_Name(state));
}

void WriteJson(JsonWriter& json, const v1::GroupInfo& group) {
  json.Field("rank", group.rank())
      .Field("world_size", group.world_size())
      .Field("state", StateName(group.state()))
      .Field("round", group.round())
      .Field("backend", group.backend())
      .Key("peers")
      .BeginArray();
  for (const std::string& peer : group.peers()) json.Value(peer);
  json.EndArray().Field("rendezvous", group.rendezvous()).Key("lost_ranks");
  json.BeginArray();
  for (int rank : group.lost_ranks()) json.Value(rank);
  json.EndArray().Key("replacements").BeginArray();
  for (const v1::RankReplacement& replaced : group.replacements()) {
    json.BeginObject()
        .Field("rank", replaced.rank())
        .Field("previous_address", replaced.previous_address())
        .Field("address", replaced.address())
        .Field("round", replaced.round())
        .EndObject();
  }
  json.EndArray().Field("error", group.error());
}

std::string Render(const v1::GroupInfo& group) {
  Table table;
  table.AddRow(
      {"rank", absl::StrCat(group.rank(), " of ", group.world_size())});
  table.AddRow({"state", StateName(group.state())});
  table.AddRow({"round", absl::StrCat(group.round())});
  if (!group.backend().empty()) table.AddRow({"backend", group.backend()});
  if (!group.rendezvous().empty()) {
    table.AddRow({"rendezvous", group.rendezvous()});
  }
  if (!group.peers().empty()) {
    table.AddRow({"peers", absl::StrJoin(group.peers(), ",")});
  }
  table.AddRow({"lost ranks", group.lost_ranks().empty()
                                  ? "none"
                                  : absl::StrJoin(group.lost_ranks(), ",")});
  for (const v1::RankReplacement& replaced : group.replacements()) {
    table.AddRow(
        {"replaced", absl::StrCat("rank ", replaced.rank(), " in round ",
                                  replaced.round(), ": ", replaced.address(),
                                  " (was ", replaced.previous_address(), ")")});
  }
  if (!group.error().empty()) table.AddRow({"error", group.error()});
  return table.Render();
}

}  // namespace

int GroupCommand(const Invocation& invocation, const std::string& address) {
  return PrintResult(invocation, address, invocation.client->GetGroup(address),
                     WriteJson, Render);
}

}  // namespace distoptctl
}  // namespace distopt
