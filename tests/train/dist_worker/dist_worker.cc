// One rank of the data-parallel test (dist_test.cc spawns two): joins the group from the
// torchrun-style flags or environment, takes its part of the shared test batch (split_batch),
// trains one step with the c10d collective and writes parameters, gradients and metrics to --out.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "ajet-engine/dist_flags.h"
#include "train/dist_test_util.h"
#include "model/model_dir.h"
#include "train/dist.h"
#include "train_data/dist_split.h"
#include "model/blas_kernel.h"

int main(int argc, char** argv) {
  ajet::model::pick_blas_kernel(argc, argv);  // first: it may re-execute the process
  using namespace ajet::train;
  CLI::App app{"ajet data-parallel test worker"};
  ajet::train_data::DistOptions dist;
  ajet::engine_cli::add_dist_flags(app, dist);
  std::string model_dir, out, config = "grpo";
  app.add_option("--model", model_dir, "Model directory")->required();
  app.add_option("--out", out, "Result file")->required();
  app.add_option("--config", config, "grpo or reinforce_pp");
  CLI11_PARSE(app, argc, argv);
  try {
    torch::set_num_threads(1);
    const ajet::train_data::DistPlacement placement = ajet::train_data::resolve_placement(dist);
    auto model = ajet::model::load_model_dir(model_dir);
    const ajet::train_data::TrainerOptions options = ajet::train::testing::dist_options(config);
    const ajet::train_data::Batch whole =
        ajet::train::testing::dist_batch(model->config().vocab_size);
    const auto parts =
        ajet::train_data::split_batch(whole, placement.world_size, options.advantage);
    Trainer trainer(model, options);
    trainer.set_collective(make_collective(placement));
    ajet::train::testing::DistResult r =
        ajet::train::testing::train_once(trainer, parts[static_cast<size_t>(placement.rank)]);
    r.rank = placement.rank;
    r.world_size = placement.world_size;
    ajet::train::testing::save_dist_result(r, out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_worker: %s\n", e.what());
    return 1;
  }
}
