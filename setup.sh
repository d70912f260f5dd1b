#!/usr/bin/env bash
# Installs the Debian packages trainsim needs (only those missing), then configures and builds
# it in ./build. Safe to run again: it installs nothing twice and rebuilds incrementally.
# CUDA (nvcc), when present on PATH or in /usr/local/cuda, builds the GPU kernels too.
set -euo pipefail
cd "$(dirname "$0")"

packages=(g++ cmake make pkg-config python3
          libsimgrid-dev libboost-graph-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
          libgtest-dev libgmock-dev libbenchmark-dev libtorch-dev
          python3-jsonschema python3-dev pybind11-dev python3-pybind11 python3-matplotlib)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
cmake --build build -j"$jobs" >&2

# The Python module (docs/python.md): build/python on the path of the python3 it was built for,
# through a .pth file in that Python's user site-packages (its site-packages in a virtual
# environment). Remove trainsim-build.pth to undo.
if compgen -G "build/python/trainsim*.so" >/dev/null; then
  site=$(python3 -c 'import site, sys, sysconfig
print(site.getusersitepackages() if site.ENABLE_USER_SITE and sys.prefix == sys.base_prefix
      else sysconfig.get_paths()["purelib"])')
  mkdir -p "$site" && echo "$PWD/build/python" > "$site/trainsim-build.pth" &&
    echo "setup: python3 imports trainsim from $PWD/build/python ($site/trainsim-build.pth)" >&2
fi
