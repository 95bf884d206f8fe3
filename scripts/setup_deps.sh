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
  [[ "${DEEPINFER_SKIP_DEPS:-0}" == 1 ]] || pip_install_once requirements-test.txt
  ensure_schema_suite_remotes
}

# The JSON-Schema-Test-Suite's remotes/ (the documents its remote $refs name, served as
# http://localhost:1234/...), which the repository does not hold: the jsonschema sdist on PyPI ships the
# suite under json/. Downloaded once (pip, the pinned version, its sha256 checked) and extracted into
# .deps/; exports DEEPINFER_SCHEMA_SUITE_REMOTES for tests/structured/test_structured_suite.py, which
# without it leaves the remote cases out and says so. Nothing of it is committed.
SCHEMA_SUITE_SDIST=jsonschema==4.26.0
SCHEMA_SUITE_SDIST_SHA256=0c26707e2efad8aa1bfc5b7ce170f3fccc2e4918ff85989ba9ffa9facb2be326
ensure_schema_suite_remotes() {
  [[ -n "${DEEPINFER_SCHEMA_SUITE_REMOTES:-}" ]] && return 0  # given by the caller
  local dest="$PWD/.deps/json-schema-suite-remotes/${SCHEMA_SUITE_SDIST#*==}"
  if [[ ! -d $dest && "${DEEPINFER_SKIP_DEPS:-0}" != 1 ]]; then
    echo "setup: pip download $SCHEMA_SUITE_SDIST (sdist) for the JSON-Schema-Test-Suite remotes"
    local tmp sdist; tmp=$(mktemp -d); sdist="$tmp/jsonschema-${SCHEMA_SUITE_SDIST#*==}.tar.gz"
    if python3 -m pip download -q --no-deps --no-binary jsonschema "$SCHEMA_SUITE_SDIST" -d "$tmp" &&
        echo "$SCHEMA_SUITE_SDIST_SHA256  $sdist" | sha256sum -c --quiet; then
      python3 - "$sdist" "$dest" <<'PY'
import pathlib, shutil, sys, tarfile
sdist, dest = sys.argv[1], pathlib.Path(sys.argv[2])
part = dest.with_name(dest.name + ".part")
shutil.rmtree(part, ignore_errors=True)
with tarfile.open(sdist) as tar:
    root = tar.getmembers()[0].name.split("/")[0]
    prefix = f"{root}/json/remotes/"
    for m in tar.getmembers():
        if m.isfile() and m.name.startswith(prefix) and ".." not in m.name.split("/"):
            out = part / m.name[len(prefix):]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(m).read())
part.rename(dest)
PY
    else
      echo "setup: could not download $SCHEMA_SUITE_SDIST: the suite's remote cases will be left out"
    fi
    rm -rf "$tmp"
  fi
  [[ -d $dest ]] && export DEEPINFER_SCHEMA_SUITE_REMOTES="$dest"
  return 0
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
