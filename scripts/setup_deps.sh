# Sourced by build.sh and test.sh: installs the build and test dependencies when missing.
APT_PACKAGES=(cmake ninja-build g++ ccache nlohmann-json3-dev libgtest-dev libonig-dev pkg-config
  pybind11-dev python3-dev libcurl4-openssl-dev libssl-dev)

ensure_build_deps() {
  # DEEPINFER_SKIP_DEPS=1: trust that the tools and libraries are already there (offline machines).
  [[ "${DEEPINFER_SKIP_DEPS:-0}" == 1 ]] && return 0
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: apt-get install ${missing[*]}"
    local sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

ensure_test_deps() {
  local stamp=.deps/python-test.stamp
  if [[ ! -f $stamp || requirements-test.txt -nt $stamp ]]; then
    echo "setup: pip install -r requirements-test.txt"
    python3 -m pip install -q -r requirements-test.txt
    mkdir -p .deps && touch "$stamp"
  fi
}
