#include "server/services/checkpoint_service.h"

#include "common/grpc_status.h"

namespace distopt {
namespace {

grpc::Status NoCheckpointDir() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon keeps no checkpoints: start it with "
                      "--checkpoint_dir");
}

void ListingToProto(const CheckpointListing& listing,
                    v1::CheckpointInfo* proto) {
  proto->set_folder(listing.folder);
  proto->set_whole(listing.whole);
  proto->set_problem(listing.problem);
  if (listing.saved_at != absl::InfinitePast()) {
    proto->set_saved_at_unix_micros(absl::ToUnixMicros(listing.saved_at));
  }
  proto->set_reason(listing.reason);
  proto->set_parameters(static_cast<int64_t>(listing.parameters));
  for (const std::string& section : listing.sections) {
    proto->add_sections(section);
  }
  proto->set_bytes(static_cast<int64_t>(listing.bytes));
}

}  // namespace

grpc::Status CheckpointServiceImpl::Save(grpc::ServerContext* context,
                                         const v1::SaveCheckpointRequest*,
                                         v1::CheckpointInfo* response) {
  if (control_ == nullptr) return NoCheckpointDir();
  absl::StatusOr<SaveReport> report =
      control_->Save("on demand", [context] { return context->IsCancelled(); });
  if (!report.ok()) return ToGrpcStatus(report.status());
  ListingToProto(report->saved, response);
  response->set_snapshot_seconds(absl::ToDoubleSeconds(report->snapshot));
  response->set_write_seconds(absl::ToDoubleSeconds(report->write));
  return grpc::Status::OK;
}

grpc::Status CheckpointServiceImpl::ListCheckpoints(
    grpc::ServerContext*, const v1::ListCheckpointsRequest*,
    v1::ListCheckpointsResponse* response) {
  if (control_ == nullptr) return NoCheckpointDir();
  absl::StatusOr<std::vector<CheckpointListing>> listings = control_->List();
  if (!listings.ok()) return ToGrpcStatus(listings.status());
  for (const CheckpointListing& listing : *listings) {
    ListingToProto(listing, response->add_checkpoints());
  }
  response->set_restore_fell_back(control_->restore_fell_back());
  response->set_last_save_error(control_->last_save_error());
  return grpc::Status::OK;
}

}  // namespace distopt
