#!/usr/bin/env bash
# Installs every build and test dependency of packserve from Debian's packages.
# Idempotent; uses sudo when not run as root. CUDA (nvcc) is optional: when
# /usr/local/cuda/bin/nvcc exists the CUDA code is compiled too.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libxxhash-dev libpcre2-dev libopenblas-dev libcpp-httplib-dev pybind11-dev
  libicu-dev nodejs
)
# Debian's nodejs ships npm as a separate package; NodeSource's nodejs bundles it (and
# conflicts with Debian's npm), so npm is only added when the command is missing.
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
