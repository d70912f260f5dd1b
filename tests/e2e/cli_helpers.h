// Helpers shared by the end-to-end tests that drive the built `trainsim` (TRAINSIM_CLI).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace trainsim_e2e {

/// Runs `ENV trainsim ARGS > LOG 2>&1` through the shell; the exit status, or -1 when the
/// process did not exit normally.
inline int run(const std::string& args, const std::string& log, const std::string& env = "") {
  const std::string cmd = env + " " + std::string(TRAINSIM_CLI) + " " + args + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The whole file, byte for byte ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace trainsim_e2e
