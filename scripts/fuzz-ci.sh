#!/usr/bin/env bash
# Bounded fuzz run (CI): build the libFuzzer targets in fuzz/, seed each one from the test corpus
# in a temporary directory, run each for FUZZ_SECONDS (default 25 s: 4 targets, about 100 s in
# all), and fail if any target crashes, hangs (-timeout) or runs out of memory (-rss_limit_mb).
# The input that did it is kept in fuzz/artifacts/<target>/ (or $FUZZ_ARTIFACTS) and printed in
# base64; turn it into a regression test (fuzz/README.md).
#
# Works on a stable toolchain: no sanitizer, so no -Z flags and no nightly. The build uses the
# same flags as `cargo fuzz build -O --sanitizer none` (cargo-fuzz 0.13), into the same target
# directory, so `cargo fuzz run` reuses it. Needs a C++ compiler (libfuzzer-sys builds libFuzzer).
#
#   scripts/fuzz-ci.sh                           all targets, 25 s each
#   FUZZ_SECONDS=600 scripts/fuzz-ci.sh          longer
#   FUZZ_TARGETS="quic_datagram" scripts/fuzz-ci.sh
#   FUZZ_KEEP_CORPUS=DIR scripts/fuzz-ci.sh      keep the grown corpora in DIR/<target>
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

SECS=${FUZZ_SECONDS:-25}
read -r -a TARGETS <<<"${FUZZ_TARGETS:-capture_reader decode_frame quic_datagram flow_session}"
ARTIFACTS=${FUZZ_ARTIFACTS:-$ROOT/fuzz/artifacts}

max_len() {
  case $1 in
    capture_reader | flow_session) echo 65536 ;;
    *) echo 8192 ;;
  esac
}

command -v c++ >/dev/null || { echo "fuzz-ci: a C++ compiler is needed to build libFuzzer (apt-get install g++)" >&2; exit 2; }
HOST=$(rustc -vV | sed -n 's/^host: //p')
BIN=$ROOT/fuzz/target/$HOST/release

# The flags of `cargo fuzz build -O --sanitizer none` on Linux (cargo-fuzz 0.13.2,
# src/project.rs). Overflow checks and debug assertions come from fuzz/Cargo.toml's profile.
FLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
FLAGS+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
FLAGS+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
FLAGS+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth"
FLAGS+=" -Ccodegen-units=1"

echo "fuzz-ci: building ${TARGETS[*]} ($HOST)"
bins=()
for t in "${TARGETS[@]}"; do bins+=(--bin "$t"); done
RUSTFLAGS="$FLAGS ${RUSTFLAGS:-}" cargo build --manifest-path fuzz/Cargo.toml --release \
  --config 'profile.release.debug="line-tables-only"' --target "$HOST" "${bins[@]}"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tailscope-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 scripts/fuzz-seeds.py "$WORK/seeds" >/dev/null

failed=()
printf '%-15s %5s %10s %9s %6s %16s\n' target secs execs exec/s cov "corpus start→end"
for t in "${TARGETS[@]}"; do
  corpus=${FUZZ_KEEP_CORPUS:+$FUZZ_KEEP_CORPUS/$t}
  corpus=${corpus:-$WORK/corpus/$t}
  mkdir -p "$corpus" "$ARTIFACTS/$t"
  if [[ -d $WORK/seeds/$t ]]; then cp -n "$WORK/seeds/$t"/* "$corpus"/ 2>/dev/null || true; fi
  start=$(find "$corpus" -type f | wc -l)
  log=$WORK/$t.log
  rc=0
  "$BIN/$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
    -artifact_prefix="$ARTIFACTS/$t/" -print_final_stats=1 "$corpus" >"$log" 2>&1 || rc=$?
  end=$(find "$corpus" -type f | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-15s %5s %10s %9s %6s %16s\n' "$t" "$SECS" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$start→$end"
  if ((rc != 0)); then
    failed+=("$t")
    echo "---- $t failed (exit $rc); end of its log:" >&2
    grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse)' "$log" | tail -40 >&2
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    if [[ -n $artifact && -f $artifact ]]; then
      echo "---- input kept at $artifact (base64 below); reproduce: $BIN/$t $artifact" >&2
      base64 -w 76 "$artifact" >&2
    fi
  fi
done

if ((${#failed[@]})); then
  echo "fuzz-ci: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz-ci: ok (no crash, hang or out-of-memory in ${#TARGETS[@]} targets × ${SECS} s)"
