#!/usr/bin/env bash
# Builds everything the GPU runs need (release test, pattern-test and bench executables with the
# PTX embedded, coll-bench, the allreduce example and the report) into the git-ignored .gpu/,
# with the runner as .gpu/run.sh, and prints the command that runs them. Running .gpu/ needs no
# Rust toolchain, only what .gpu/run.sh lists (a CUDA driver and GPUs; OpenMPI's mpirun and NCCL
# for some groups). The report (.gpu/bin/report) finds the test and bench executables beside it
# and runs them; .gpu/cpu-report/ holds this build's PTX/SASS verdict of the same PTX, which the
# report shows where no ptxas is installed.
#
#   scripts/gpu-build.sh            then, with two GPUs:  bash .gpu/run.sh report
#   bash .gpu/run.sh [unit] [mp] [threads] [abort] [example] [report] [bench] [coll] [win] [tcp] [ep] [exec]  (default:
#                                                      mp threads abort example report; filters by binary name prefix too)
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
cargo test --release --no-run -p mscclpp-rs -p mscclpp-collectives -p mscclpp-ep -p mscclpp-executor
collect test --release --no-run -p mscclpp-rs -p mscclpp-collectives -p mscclpp-ep -p mscclpp-executor | while read -r name kind path; do
  case "$name" in unit_*|mp_*|peer_abort) cp "$path" ".gpu/bin/$name" ;; esac
done
cargo bench --no-run
collect bench --no-run | while read -r name kind path; do
  case "$kind" in bench) cp "$path" ".gpu/bin/bench_$name" ;; esac
done
cargo build --release -p example-allreduce
cp target/release/example-allreduce .gpu/bin/example_allreduce
cargo build --release -p mscclpp-collectives --bin coll-bench --bin win-bench
cp target/release/coll-bench .gpu/bin/coll_bench
cp target/release/win-bench .gpu/bin/win_bench
# Port channels over any transport, and the TCP transport against raw TCP.
cargo build --release -p mscclpp-rs --example port_channel
cp target/release/examples/port_channel .gpu/bin/example_port_channel
cargo build --release -p mscclpp-host --example tcp_bench
cp target/release/examples/tcp_bench .gpu/bin/tcp_bench
cargo build --release -p mscclpp-ep --bin ep_bench
cp target/release/ep_bench .gpu/bin/ep_bench
# The plan executor against the hand-written collectives.
cargo build --release -p mscclpp-executor --example exec_bench
cp target/release/examples/exec_bench .gpu/bin/exec_bench
# NCCL's interface: the library, the cudarc client, the C interface test (with the official
# header), and the PyTorch script.
cargo build --release -p mscclpp-nccl --lib
cp target/release/libmscclpp_nccl.so .gpu/bin/libmscclpp_nccl.so
collect test --release --no-run -p mscclpp-nccl | while read -r name kind path; do
  case "$name" in cudarc_nccl) cp "$path" .gpu/bin/cudarc_nccl ;; abi) cp "$path" .gpu/bin/nccl_abi ;; gpu_nccl) cp "$path" .gpu/bin/gpu_nccl ;; esac
done
# Several machines on one: the namespace tests (GPU memory between machines), and iproute2's `ip`
# and `tc` with the libraries they need beside them, for a GPU machine without iproute2 (the
# runner uses them only then).
cargo test --release --no-run -p mscclpp-host --test netns_procs
collect test --release --no-run -p mscclpp-host --test netns_procs | while read -r name kind path; do
  cp "$path" .gpu/bin/netns_procs
done
for tool in ip tc; do
  path=$(command -v "$tool") || continue
  mkdir -p .gpu/bin/iproute/lib
  cp "$path" ".gpu/bin/iproute/$tool"
  ldd "$path" | awk '$3 ~ /^\// { print $3 }' | grep -v -E '/(libc|libm)\.so|/ld-linux' | xargs -r cp -t .gpu/bin/iproute/lib
done
mkdir -p .gpu/nccl-extra/include
cp .venv-tools/nccl-2.28.9/include/nccl.h .gpu/nccl-extra/include/
cp -r nccl/tests/c .gpu/nccl-extra/c
cp nccl/tests/torch_nccl.py .gpu/nccl-extra/torch_nccl.py
strip --strip-debug .gpu/bin/* 2>/dev/null || true
# Everything the report runs must be in the bundle.
for n in report unit_bulk unit_sync unit_memchan unit_transport mp_patterns mp_collectives mp_ep mp_exec bench_bulk bench_sync bench_memchan coll_bench win_bench; do
  [ -x ".gpu/bin/$n" ] || { echo "gpu-build: .gpu/bin/$n is missing" >&2; exit 1; }
done
# The PTX/SASS verdict of the embedded PTX, made here where ptxas is (the GPU machine may lack it).
env -u MSCCLPP_RS_BENCH_OUT MSCCLPP_RS_REPORT_DIR=.gpu/cpu-report .gpu/bin/report --cpu > .gpu/cpu-report.log 2>&1 \
  || { cat .gpu/cpu-report.log; echo "gpu-build: the CPU report failed" >&2; exit 1; }
rm -f .gpu/cpu-report/*.svg
cp scripts/gpu-runner.sh .gpu/run.sh
# The executables travel packed (the embedded PTX compresses about 4x); run.sh unpacks them.
tar -C .gpu -czf .gpu/bin.tgz bin
git rev-parse --short HEAD > .gpu/commit 2>/dev/null || echo unknown > .gpu/commit
echo
ls -la .gpu/bin
du -sh .gpu/bin .gpu/bin.tgz
echo
echo 'on a machine with two GPUs (copy .gpu there, or only .gpu/run.sh, .gpu/bin.tgz, .gpu/cpu-report):  bash .gpu/run.sh report    (the full GPU report, into $OUT/report/)'
echo '                                           bash .gpu/run.sh           (also mpirun, 4 ranks, threads and the example)'
echo 'on a machine with one GPU:                  bash .gpu/run.sh threads unit report   (ranks as threads at 2, 4, 8; two-sided tests with both sides on the GPU)'
