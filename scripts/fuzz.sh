#!/usr/bin/env bash
# libFuzzer runs of the fuzz targets (tests/fuzz/) under ASan + UBSan, built with clang in build-fuzz.
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET...]   (targets: fuzz_config, fuzz_chat, ...)
#   FUZZ_CPU_SECONDS=N   also stop each target after N CPU-seconds (on a shared machine)
# Installs clang and libFuzzer when missing (Debian: clang-14, libclang-rt-14-dev). Inputs that reach
# new coverage are kept in build-fuzz/corpus/<target> (seeded from tests/fuzz/corpus); a crash stops
# the run and leaves its input in build-fuzz/crashes/. Prints executions and CPU seconds per target at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
all=(fuzz_safetensors fuzz_config fuzz_tokenizer_json fuzz_tokenizer_text fuzz_json_schema fuzz_regex fuzz_ebnf fuzz_chat
     fuzz_image fuzz_request fuzz_hub)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")

have_libfuzzer() {
  command -v clang++ >/dev/null 2>&1 && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1
}
if ! have_libfuzzer; then
  sudo=(); [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  echo "fuzz.sh: apt-get install clang-14 libclang-rt-14-dev"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-14 libclang-rt-14-dev >/dev/null
fi
cxx=$(command -v clang++ || command -v clang++-14)
cc=$(command -v clang || command -v clang-14)

dir=build-fuzz
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -gline-tables-only: fuzz_request links the whole engine (about 100 files), which compiles much
# faster than at -O2 -g on the shared cores; line tables keep the reports readable.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDEEPINFER_CUDA=OFF -DDEEPINFER_FUZZ=ON \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$dir" -j "${DEEPINFER_BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"

mkdir -p "$dir/crashes"
# FUZZ_CPU_SECONDS=N stops each target after N CPU-seconds (user + system) too, whichever comes first:
# on the shared machine wall time says little about how much fuzzing was done. The stop is libFuzzer's
# SIGINT, which prints its final stats and exits with 72.
cpu_budget=${FUZZ_CPU_SECONDS:-0}
hz=$(getconf CLK_TCK)
fuzz_one() {  # target, corpus name, log
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1 \
    "$dir/tests/fuzz/$1" -max_total_time="$seconds" -rss_limit_mb=3072 -timeout=60 -max_len=16384 \
    -artifact_prefix="$dir/crashes/$1-" -print_final_stats=1 "$dir/corpus/$2" "tests/fuzz/corpus/$2" >"$3" 2>&1 &
  local pid=$! ticks
  while ((cpu_budget)) && kill -0 "$pid" 2>/dev/null; do
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
    ((ticks < cpu_budget * hz)) || { kill -INT "$pid"; break; }
    sleep 2
  done
  wait "$pid"
}
summary=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  mkdir -p "$dir/corpus/$name"
  log="$dir/$t.log"
  echo "fuzz.sh: $t for ${seconds}s$( ((cpu_budget)) && echo " or $cpu_budget CPU-s")"
  # -timeout is wall time: 60 s, since the corpus's slowest input (request/regex_near_dfa_cap, 2.4 CPU-s
  # under ASan) took over 20 s of wall time on the shared cores at load 7-10 and stopped the run.
  # CPU seconds (user + system) beside the wall seconds: on the shared machine they differ by the load.
  rc=0 start=$SECONDS
  { TIMEFORMAT='%U %S'; time fuzz_one "$t" "$name" "$log"; } 2>"$dir/$t.cpu" || rc=$?
  cpu=$(awk '{printf "%.0f", $1 + $2}' "$dir/$t.cpu")
  ((rc == 72)) && grep -q 'libFuzzer: run interrupted' "$log" && rc=0  # the CPU budget's stop
  ((rc == 0)) || { echo "fuzz.sh: $t FAILED after $cpu CPU-s, see $log and $dir/crashes/"; tail -40 "$log"; exit 1; }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  summary+=("$t: $runs executions in $((SECONDS - start)) s ($cpu CPU-s), 0 crashes, corpus $(ls "$dir/corpus/$name" | wc -l) inputs")
done
printf '%s\n' "${summary[@]}"
