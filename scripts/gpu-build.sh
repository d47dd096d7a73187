#!/usr/bin/env bash
# Builds everything the GPU machine runs (release test, pattern-test and bench executables with the
# PTX embedded, and the report binary), copies them and the runner into the git-ignored .gpu/, and
# prints the device-tool call. The GPU machine has no Rust toolchain: nothing is built there.
#
#   scripts/gpu-build.sh            then: device run  carry=[".gpu"]  command="bash .gpu/run.sh"
#   bash .gpu/run.sh [unit] [mp] [abort] [example] [report] [bench] [coll] [ep]  (default: all; filters by binary name prefix too)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu/bin

collect() { # $1: cargo subcommand args...; prints "name path" for each executable
  cargo "$@" --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except Exception: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        t = m["target"]; kinds = t["kind"]
        print(t["name"], ",".join(kinds), m["executable"])
'
}

cargo build --release --bin mscclpp-rs
cp target/release/mscclpp-rs .gpu/bin/report
cargo test --release --no-run -p mscclpp-rs -p mscclpp-collectives -p mscclpp-ep
collect test --release --no-run -p mscclpp-rs -p mscclpp-collectives -p mscclpp-ep | while read -r name kind path; do
  case "$name" in unit_*|mp_*|peer_abort) cp "$path" ".gpu/bin/$name" ;; esac
done
cargo bench --no-run
collect bench --no-run | while read -r name kind path; do
  case "$kind" in bench) cp "$path" ".gpu/bin/bench_$name" ;; esac
done
cargo build --release -p example-allreduce
cp target/release/example-allreduce .gpu/bin/example_allreduce
cargo build --release -p mscclpp-collectives --bin coll-bench
cp target/release/coll-bench .gpu/bin/coll_bench
cargo build --release -p mscclpp-ep --bin ep_bench
cp target/release/ep_bench .gpu/bin/ep_bench
strip --strip-debug .gpu/bin/* 2>/dev/null || true
cp scripts/gpu-runner.sh .gpu/run.sh
git rev-parse --short HEAD > .gpu/commit 2>/dev/null || echo unknown > .gpu/commit
echo
ls -la .gpu/bin
du -sh .gpu
echo
echo 'device run:  kind="nvidia-h200-x2"  carry=[".gpu"]  command="bash .gpu/run.sh"'
