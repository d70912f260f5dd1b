// Multi-process launch (hw_backend/launch.h): the worker environment of torchrun, srun and
// trainsim's own launcher, per-rank output paths, and the local launcher itself: it re-runs
// this test binary as N workers (they see TRAINSIM_LAUNCH_TEST_MODE and act as workers), which
// record their environment, or fail, so the parent can check what they got. No GPU needed.
#include "hw_backend/launch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "models/input/scenario.h"

using trainsim::InputError;
using trainsim::hw::ProcessEnv;

namespace {

ProcessEnv env_of(const std::map<std::string, std::string>& vars) {
  return trainsim::hw::process_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchEnv, NoLauncherMeansOneProcess) {
  const ProcessEnv e = env_of({{"TRAINSIM_NCCL_DIR", "/tmp/x"}});
  EXPECT_FALSE(e.worker);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.nccl_dir, "/tmp/x");
  EXPECT_DOUBLE_EQ(e.timeout_s, 300.0);
}

TEST(LaunchEnv, TorchrunVariables) {
  const ProcessEnv e = env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"},
                               {"TORCHELASTIC_RUN_ID", "job:42/x"}, {"TRAINSIM_NCCL_TIMEOUT_S", "7.5"}});
  EXPECT_TRUE(e.worker);
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.run_id, "job_42_x");  // only file-name characters
  EXPECT_DOUBLE_EQ(e.timeout_s, 7.5);
  // LOCAL_RANK defaults to RANK (one node).
  EXPECT_EQ(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}).local_rank, 2);
  EXPECT_EQ(env_of({{"RANK", "2"}, {"WORLD_SIZE", "4"}}).run_id, "run");
}

TEST(LaunchEnv, SrunVariablesInsideAJobStep) {
  const ProcessEnv e = env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                               {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_ID", "123"}});
  EXPECT_TRUE(e.worker);
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.run_id, "slurm-123.0");
  // An allocation without a step (salloc's shell) is not a worker; WORLD_SIZE wins over srun.
  EXPECT_FALSE(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}).worker);
  EXPECT_EQ(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_ID", "0"},
                    {"RANK", "1"}, {"WORLD_SIZE", "2"}}).rank, 1);
}

TEST(LaunchEnv, MalformedValuesNameTheVariable) {
  auto message = [](const std::map<std::string, std::string>& vars) {
    try {
      env_of(vars);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(message({{"WORLD_SIZE", "2"}}).find("RANK is not"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0"), std::string::npos);
  EXPECT_NE(message({{"TRAINSIM_NCCL_TIMEOUT_S", "-1"}}).find("TRAINSIM_NCCL_TIMEOUT_S"),
            std::string::npos);
}

TEST(LaunchEnv, PerRankPaths) {
  using trainsim::hw::per_rank_path;
  EXPECT_EQ(per_rank_path("out/trace.json", 1), "out/trace.rank1.json");
  EXPECT_EQ(per_rank_path("trace", 2), "trace.rank2");
  EXPECT_EQ(per_rank_path("a.b/trace", 3), "a.b/trace.rank3");
  EXPECT_EQ(per_rank_path("dir/.hidden", 1), "dir/.hidden.rank1");
}

// ---- the local launcher, with this binary as its workers
std::string temp_dir() {
  char templ[] = "/tmp/trainsim-launch-test-XXXXXX";
  return ::mkdtemp(templ) ? templ : "";
}

/// Worker side: runs in the re-executed binary (the first test it reaches), never returns.
void act_as_worker_if_launched() {
  const char* mode = std::getenv("TRAINSIM_LAUNCH_TEST_MODE");
  if (!mode) return;
  const std::string out = std::getenv("TRAINSIM_LAUNCH_TEST_OUT");
  const ProcessEnv e = trainsim::hw::process_env();
  {
    std::ofstream f(out + "/worker." + std::to_string(e.rank));
    struct stat st {};
    f << e.worker << " " << e.launcher << " " << e.rank << " " << e.world_size << " "
      << e.local_rank << " " << e.run_id << " " << e.nccl_dir << " "
      << (::stat(e.nccl_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) << "\n";
  }
  if (std::string(mode) == "fail" && e.rank == 1) std::_Exit(3);
  if (std::string(mode) == "fail") {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    // Only a worker that was not stopped gets here.
    std::ofstream(out + "/worker." + std::to_string(e.rank) + ".done") << "slept\n";
  }
  std::_Exit(0);
}

int launch_with(const std::string& mode, const std::string& out, int n) {
  ::setenv("TRAINSIM_LAUNCH_TEST_MODE", mode.c_str(), 1);
  ::setenv("TRAINSIM_LAUNCH_TEST_OUT", out.c_str(), 1);
  const int rc = trainsim::hw::launch_local_workers(n);
  ::unsetenv("TRAINSIM_LAUNCH_TEST_MODE");
  ::unsetenv("TRAINSIM_LAUNCH_TEST_OUT");
  return rc;
}

TEST(LaunchLocal, WorkersGetRankWorldSizeAndASharedRendezvousDirectory) {
  act_as_worker_if_launched();
  const std::string out = temp_dir();
  ASSERT_FALSE(out.empty());
  ASSERT_EQ(launch_with("record", out, 3), 0);
  std::string dir, run_id;
  for (int r = 0; r < 3; ++r) {
    std::ifstream f(out + "/worker." + std::to_string(r));
    ASSERT_TRUE(f) << "worker " << r << " did not run";
    int worker = 0, rank = -1, world = 0, local = -1, dir_existed = 0;
    std::string launcher, id, d;
    f >> worker >> launcher >> rank >> world >> local >> id >> d >> dir_existed;
    EXPECT_EQ(worker, 1);
    EXPECT_EQ(launcher, "trainsim");
    EXPECT_EQ(rank, r);
    EXPECT_EQ(world, 3);
    EXPECT_EQ(local, r);
    EXPECT_EQ(dir_existed, 1) << d;
    if (r == 0) dir = d, run_id = id;
    EXPECT_EQ(d, dir);  // one directory and run id for the whole job
    EXPECT_EQ(id, run_id);
    std::remove((out + "/worker." + std::to_string(r)).c_str());
  }
  struct stat st {};
  EXPECT_NE(::stat(dir.c_str(), &st), 0) << "the launcher left " << dir << " behind";
  ::rmdir(out.c_str());
}

TEST(LaunchLocal, OneFailingWorkerStopsTheOthers) {
  act_as_worker_if_launched();
  const std::string out = temp_dir();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(launch_with("fail", out, 3), 1);
  // The sleeping workers (60 s) were stopped, not waited for: none finished its sleep (a
  // marker it writes after the sleep; no clock is read, so a slow machine cannot fail this).
  for (int r = 0; r < 3; ++r) {
    const std::string done = out + "/worker." + std::to_string(r) + ".done";
    struct stat st {};
    EXPECT_NE(::stat(done.c_str(), &st), 0) << "worker " << r << " was waited for";
    std::remove(done.c_str());
    std::remove((out + "/worker." + std::to_string(r)).c_str());
  }
  ::rmdir(out.c_str());
}

}  // namespace
