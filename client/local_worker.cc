#include "client/local_worker.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace distopt {
namespace {

// What Start writes in the worker's temporary folder.
constexpr char kPortFile[] = "port";
constexpr char kGroupSecretFile[] = "group_secret";

// Removes the worker's temporary folder and what Start wrote in it.
void RemoveTempDir(const std::string& dir) {
  for (const char* name : {kPortFile, kGroupSecretFile}) {
    std::remove(absl::StrCat(dir, "/", name).c_str());
  }
  rmdir(dir.c_str());
}

bool IsExecutable(const std::string& path) {
  struct stat info;
  return !path.empty() && stat(path.c_str(), &info) == 0 &&
         S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string SelfPath() {
  char buffer[4096];
  const ssize_t length = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  return length > 0 ? std::string(buffer, length) : "";
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

}  // namespace

absl::StatusOr<std::string> FindWorkerBinary() {
  const std::string explicit_path = Env("DISTOPT_WORKER_BINARY");
  if (!explicit_path.empty()) {
    if (IsExecutable(explicit_path)) return explicit_path;
    return absl::NotFoundError(absl::StrCat(
        "DISTOPT_WORKER_BINARY=", explicit_path, " is not an executable"));
  }
  const std::string relative = "distopt/server/distopt_worker";
  const std::string self = SelfPath();
  std::vector<std::string> candidates;
  for (const char* variable : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    const std::string root = Env(variable);
    if (!root.empty()) candidates.push_back(root + "/" + relative);
  }
  if (!self.empty()) {
    candidates.push_back(self + ".runfiles/" + relative);
    const std::string dir = self.substr(0, self.rfind('/'));
    candidates.push_back(dir + "/distopt_worker");
    candidates.push_back(dir + "/../server/distopt_worker");
  }
  for (const std::string& candidate : candidates) {
    if (IsExecutable(candidate)) return candidate;
  }
  return absl::NotFoundError(
      "distopt_worker not found: set DISTOPT_WORKER_BINARY, or run through "
      "Bazel with //server:distopt_worker in data");
}

absl::StatusOr<std::unique_ptr<LocalWorker>> LocalWorker::Start(
    const LocalWorkerOptions& options) {
  std::string binary = options.binary;
  if (binary.empty()) {
    absl::StatusOr<std::string> found = FindWorkerBinary();
    if (!found.ok()) return found.status();
    binary = *found;
  }
  std::string temp_template =
      (Env("TEST_TMPDIR").empty() ? std::string("/tmp") : Env("TEST_TMPDIR")) +
      "/distopt_worker.XXXXXX";
  if (mkdtemp(temp_template.data()) == nullptr) {
    return absl::InternalError("cannot create a temporary folder");
  }
  const std::string temp_dir = temp_template;
  // Until a LocalWorker owns the folder, a failure removes it.
  absl::Cleanup remove_temp_dir = [&temp_dir] { RemoveTempDir(temp_dir); };
  const std::string port_file = absl::StrCat(temp_dir, "/", kPortFile);

  std::vector<std::string> arguments = {binary, "--listen=127.0.0.1:0",
                                        "--port_file=" + port_file};
  if (!options.group_secret.empty()) {
    const std::string secret_file =
        absl::StrCat(temp_dir, "/", kGroupSecretFile);
    std::ofstream out(secret_file, std::ios::binary | std::ios::trunc);
    // Private before it holds the secret.
    if (!out.is_open() || chmod(secret_file.c_str(), 0600) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot create ", secret_file,
                       " for its owner only: ", std::strerror(errno)));
    }
    out << options.group_secret;
    out.close();
    if (out.fail()) {
      return absl::InternalError(
          absl::StrCat("cannot write the group secret to ", secret_file));
    }
    arguments.push_back("--group_secret_file=" + secret_file);
  }
  arguments.insert(arguments.end(), options.flags.begin(), options.flags.end());
  arguments.insert(arguments.begin(), options.launcher.begin(),
                   options.launcher.end());
  const std::string program = arguments.front();
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  // The child must not inherit a blocked SIGTERM/SIGINT from its parent.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, program.c_str(), nullptr, &attributes,
                                argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", binary, ": error ", error));
  }
  std::unique_ptr<LocalWorker> worker(new LocalWorker(pid, "", temp_dir));
  std::move(remove_temp_dir).Cancel();

  const absl::Time deadline = absl::Now() + options.start_timeout;
  while (absl::Now() < deadline) {
    std::ifstream in(port_file);
    std::string address;
    if (in >> address) {
      worker->address_ = address;
      return worker;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      worker->exited_ = true;
      worker->exit_code_ = ExitCodeOf(status);
      return absl::FailedPreconditionError(
          absl::StrCat(binary, " exited with code ", worker->exit_code_,
                       " before serving (its stderr says why)"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not report a port within ",
                   absl::FormatDuration(options.start_timeout)));
}

void LocalWorker::Signal(int signal_number) {
  if (!exited_) kill(pid_, signal_number);
}

absl::StatusOr<int> LocalWorker::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!exited_) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exited_ = true;
      exit_code_ = ExitCodeOf(status);
      break;
    }
    if (done < 0) {
      return absl::InternalError(absl::StrCat("waitpid(", pid_, ") failed"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("distopt_worker ", pid_, " still running after ",
                       absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return exit_code_;
}

absl::StatusOr<int> LocalWorker::Stop(absl::Duration timeout) {
  Signal(SIGTERM);
  absl::StatusOr<int> code = Wait(timeout);
  if (code.ok()) return code;
  Signal(SIGKILL);
  Wait(absl::InfiniteDuration()).IgnoreError();
  return code.status();
}

int64_t LocalWorker::ProcStatus(absl::string_view field) const {
  if (exited_) return -1;  // Reaped: the pid may be another process's now.
  std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) ||
        !absl::ConsumePrefix(&rest, ":")) {
      continue;
    }
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    int64_t value = 0;
    return absl::SimpleAtoi(rest, &value) ? value : -1;
  }
  return -1;
}

std::vector<ResidentMapping> LocalWorker::ResidentMappings() const {
  if (exited_) return {};
  std::ifstream smaps(absl::StrCat("/proc/", pid_, "/smaps"));
  std::vector<ResidentMapping> mappings;
  absl::flat_hash_map<std::string, size_t> file_index;
  ResidentMapping* current = nullptr;
  std::string previous_file;  // Base name of the mapping just above.
  uint64_t previous_end = 0;
  std::string line;
  while (std::getline(smaps, line)) {
    // A mapping's header: "start-end perms offset dev inode [path]".
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    const size_t dash =
        fields.empty() ? absl::string_view::npos : fields[0].find('-');
    uint64_t start = 0;
    uint64_t end = 0;
    if (fields.size() >= 5 && dash != absl::string_view::npos &&
        absl::SimpleHexAtoi(fields[0].substr(0, dash), &start) &&
        absl::SimpleHexAtoi(fields[0].substr(dash + 1), &end)) {
      // The rest of the line: a path may hold spaces.
      const std::string path = fields.size() >= 6
                                   ? line.substr(fields[5].data() - line.data())
                                   : std::string();
      std::string name = path;
      if (path.empty()) {
        name = start == previous_end && !previous_file.empty()
                   ? absl::StrCat("[anonymous after ", previous_file, "]")
                   : "[anonymous]";
      }
      if (path.empty() || path[0] == '[') {
        mappings.push_back({name});
        current = &mappings.back();
      } else {
        auto [it, added] = file_index.emplace(path, mappings.size());
        if (added) mappings.push_back({path});
        current = &mappings[it->second];
      }
      ++current->mappings;
      current->size_kb += static_cast<int64_t>((end - start) / 1024);
      if (!path.empty() && path[0] == '/') {
        previous_file = std::string(path.substr(path.rfind('/') + 1));
      } else if (!path.empty()) {
        previous_file.clear();
      }
      previous_end = end;
      continue;
    }
    if (current == nullptr || fields.size() < 2) continue;
    int64_t kb = 0;
    if (!absl::SimpleAtoi(fields[1], &kb)) continue;
    if (fields[0] == "Rss:") current->rss_kb += kb;
    if (fields[0] == "Anonymous:") current->anonymous_kb += kb;
  }
  std::stable_sort(mappings.begin(), mappings.end(),
                   [](const ResidentMapping& a, const ResidentMapping& b) {
                     return a.rss_kb > b.rss_kb;
                   });
  return mappings;
}

bool LocalWorker::ResetPeakMemory() const {
  if (exited_) return false;
  // "5" in clear_refs: the kernel sets VmHWM to the present RSS.
  std::ofstream clear_refs(absl::StrCat("/proc/", pid_, "/clear_refs"));
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

LocalWorker::~LocalWorker() {
  if (!exited_) Stop().IgnoreError();
  RemoveTempDir(temp_dir_);
}

}  // namespace distopt
