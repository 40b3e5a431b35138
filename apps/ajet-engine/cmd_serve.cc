// `ajet-engine serve`: the engine process. Loads a model directory, starts the inference engine and
// serves the engine RPC (generate, status, abort, train_step, save_checkpoint, load_checkpoint) on
// a Unix socket or TCP until SIGINT / SIGTERM, then stops gracefully: in-flight requests finish
// with `abort`, the socket file is removed. Clients authenticate with a shared secret
// (--token-file or AJET_ENGINE_TOKEN), which TCP requires. --resume loads a trainer checkpoint
// before serving. Supervisors wait for the single line "ajet-engine: ready on ADDRESS" on stdout
// (or on --ready-fd). Data parallel: the torchrun-style flags (--nnodes, --nproc-per-node,
// --local-rank, --master-addr, ...; dist_flags.h) or torchrun's variables make it one rank of a
// c10d group; every train_step then all-reduces gradients with the other ranks. One rank (the
// default) has no group at all. --elastic: the front forms and re-forms the group over the RPC
// (open_group, join_group) as replicas die and join.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "command.h"
#include "common/error.h"
#include "common/log.h"
#include "dist_flags.h"
#include "engine/runtime.h"
#include "engine/service.h"
#include "engine/train_methods.h"
#include "engine_flags.h"
#include "infer/engine.h"
#include "rpc/address.h"
#include "rpc/server.h"
#include "rpc/token.h"
#include "train/dist.h"

namespace ajet::engine_cli {
namespace {

struct ServeArgs {
  EngineFlags engine;
  std::string listen;
  std::string
      resume;  // checkpoint dir, a base dir (its latest), or "auto" (checkpoint_base_dir if any)
  int ready_fd = -1;
  size_t max_connections = 16;
  std::string token_file;
  bool insecure_no_token = false;
  bool elastic = false;
  train_data::DistOptions dist;
};

void write_ready_fd(int fd, const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(fd, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      log().warn("--ready-fd {}: write failed: {}", fd, std::strerror(errno));
      break;
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}

// Whether `base` has a global_step_* directory (what --resume auto looks for).
bool holds_checkpoint(const std::filesystem::path& base) {
  std::error_code ec;
  if (!std::filesystem::is_directory(base, ec)) return false;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    if (entry.path().filename().string().rfind("global_step_", 0) == 0) return true;
  }
  return false;
}

void run_serve(const ServeArgs& args) {
  // A bad address, token file or a TCP listener without a token fails before the model is loaded.
  const rpc::Address listen = rpc::parse_address(args.listen);
  rpc::ServerOptions server_options;
  server_options.max_connections = args.max_connections;
  server_options.token = rpc::resolve_token(args.token_file);
  server_options.insecure_no_token = args.insecure_no_token;
  rpc::check_listen_auth(listen, !server_options.token.empty(), args.insecure_no_token);
  if (args.ready_fd >= 0 && ::fcntl(args.ready_fd, F_GETFD) < 0) {
    invalid_argument("--ready-fd " + std::to_string(args.ready_fd) +
                     " is not an open file descriptor");
  }
  // SIGINT / SIGTERM are blocked in every thread started from here on; this thread waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE,
           SIG_IGN);  // a vanished peer is an error on that connection, not the process's end

  engine::EngineOptions options = args.engine.resolve();
  engine::TrainingOptions training =
      engine::training_options(options);  // config errors before the model loads
  // Flag and variable errors before the model loads; then every rank meets the others (blocks until
  // all joined, or fails naming the rank and master address) before loading, so they load together.
  const train_data::DistPlacement placement = train_data::resolve_placement(args.dist);
  training.elastic = args.elastic;
  if (args.elastic && placement.world_size > 1) {
    invalid_argument(
        "--elastic: the front forms this engine's group; drop the placement flags (--nnodes, "
        "--nproc-per-node, ...) and torchrun's RANK / WORLD_SIZE");
  }
  if (placement.world_size > 1) {
    log().info(
        "data parallel: rank {} of {} (local rank {}), joining the group at {} (backend {}, "
        "timeout {} s)",
        placement.rank, placement.world_size, placement.local_rank, placement.master(),
        placement.backend, placement.timeout.count() / 1000.0);
    training.collective = train::make_collective(placement);
    options.local_rank = placement.local_rank;  // `cuda` means this rank's own GPU
  }
  engine::EngineRuntime runtime = engine::start_engine(options);
  engine::EngineService service(*runtime.engine, runtime.model, runtime.compute);
  engine::TrainMethods train(service, runtime.model, training);
  if (!args.resume.empty()) {
    // Before the socket exists, so nothing is generated on the weights the checkpoint replaces.
    const std::filesystem::path dir =
        args.resume == "auto" ? training.checkpoint_base_dir : std::filesystem::path(args.resume);
    if (args.resume == "auto" && !holds_checkpoint(dir)) {
      log().info("--resume auto: no checkpoint under {}; starting fresh", dir.string());
    } else {
      train.load_checkpoint(dir);
    }
  }
  rpc::Server server(service.router(), server_options);
  server.listen(args.listen);
  const std::string address = server.address();
  service.set_address(address);
  log().info("engine RPC serving on {} (policy version {})", address,
             runtime.engine->policy_version());
  std::cout << "ajet-engine: ready on " << address << std::endl;
  if (args.ready_fd >= 0) write_ready_fd(args.ready_fd, address + "\n");

  int received = 0;
  while (::sigwait(&stop_signals, &received) != 0) {
  }
  log().info("{} received: stopping (in-flight requests end with 'abort')",
             received == SIGINT ? "SIGINT" : "SIGTERM");
  // Order matters: no new control calls, then the engine finishes every request through its sinks
  // (queued before the server's close frame), then the connections close and the socket goes.
  service.stop();
  runtime.engine->stop();
  server.stop();
  std::cout << "ajet-engine: stopped" << std::endl;
}

const CommandRegistration kServe("serve", [](CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over the engine RPC (unix socket or TCP)");
  args->engine.add_to(cmd);
  cmd->add_option("--listen", args->listen,
                  "unix:/path/to.sock or tcp:HOST:PORT (port 0: any free port). TCP needs a token "
                  "(--token-file or AJET_ENGINE_TOKEN)")
      ->required();
  cmd->add_option("--token-file", args->token_file,
                  "File holding the shared secret every RPC client must send first (mode 0600; "
                  "make one with `head -c 32 /dev/urandom | base64 > engine.token; chmod 600 "
                  "engine.token`). Default: the AJET_ENGINE_TOKEN variable, if set. Required for "
                  "TCP; honoured on a unix socket too");
  cmd->add_flag("--insecure-no-token", args->insecure_no_token,
                "Serve TCP without a token: loopback addresses only (anyone on this host can "
                "then drive the engine)");
  cmd->add_option("--ready-fd", args->ready_fd,
                  "Also write the bound address and a newline to this file descriptor when ready, "
                  "then close it");
  cmd->add_option(
      "--resume", args->resume,
      "Load a trainer checkpoint before serving: a global_step_* directory, a base directory (its "
      "latest), or 'auto' (ajet.trainer_common.checkpoint_base_dir when it holds one)");
  cmd->add_flag("--elastic", args->elastic,
                "Be a replica of a front's elastic group (ajet-swarm start --engine-at): no group "
                "at start; the front forms it, and re-forms it when a replica dies or joins, and "
                "every member then holds the same weights and trainer state");
  cmd->add_option("--max-connections", args->max_connections, "RPC peers at once")
      ->capture_default_str();
  // Without these flags the torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, ...) place the rank.
  add_dist_flags(*cmd, args->dist);
  cmd->callback([args] { run_serve(*args); });
});

}  // namespace
}  // namespace ajet::engine_cli
