#!/usr/bin/env bash
# The GPU runs of the executables in .gpu/ (this file is .gpu/run.sh, laid out by
# scripts/gpu-build.sh); logs go to $OUT when set, else /tmp/mscclpp-rs-out; prints a short table
# last and exits non-zero when any run failed.
# Needs: a CUDA driver and GPUs (two for the peer parts; one runs them as two handles of it);
# OpenMPI's mpirun for the mpirun modes; NCCL (libnccl.so.2) for the coll and bench baselines;
# the timeout command. NVLink multicast stays off (the NVLS variables are set below).
#   bash .gpu/run.sh report           the GPU report: it runs the unit tests, the pattern and
#                                     collectives tests (built-in launcher), the benches and
#                                     coll-bench against NCCL itself, and writes $OUT/report/
#                                     (report.md, SVG plots, logs/, bench.jsonl) and $OUT/criterion/
#   bash .gpu/run.sh                  the report, plus mp_patterns under mpirun and with 4 ranks,
#                                     the dead-peer test and the allreduce example (groups: mp
#                                     abort example report)
#   bash .gpu/run.sh threads          mp_patterns, mp_collectives, mp_ep and mp_exec with their ranks as
#                                     threads of one process (--threads N for N in MSCCLPP_RS_THREAD_MODES,
#                                     default "threads2 threads4 threads8"): on one GPU, kernels of every
#                                     rank resident at the same time
#   bash .gpu/run.sh unit mp          only those groups (unit, mp, threads, abort, example, report, bench, coll, win, tcp, ep, exec,
#                                     nccl, netns: unit, bench and coll run those executables on their own; win runs win_bench, the
#                                     window allreduce against the one-shot LL form, with ranks as threads in MSCCLPP_RS_THREAD_MODES)
#   bash .gpu/run.sh unit_bulk        only binaries whose name starts with that
# Environment: MSCCLPP_RS_RUN_TIMEOUT (seconds per binary, default 150; the report gets
# MSCCLPP_RS_REPORT_TIMEOUT, default 3000, and MSCCLPP_RS_STEP_TIMEOUT per step inside it),
# MSCCLPP_RS_MP_MODES (default "mpirun2 launcher2 launcher4"), MSCCLPP_RS_PHASES (comma list of
# mp_patterns phases), MSCCLPP_RS_BENCH_ARGS (extra criterion arguments for the report's benches).
# The tcp group runs with MSCCLPP_RS_TRANSPORT=tcp (port channels over the TCP transport between
# the processes of this machine): mp_patterns' port-channel phases (MSCCLPP_RS_TCP_PHASES, default
# port_all_to_all) and the port-channel example in MSCCLPP_RS_TCP_MODES (default "mpirun2 mpirun4
# launcher2 launcher4": 2 ranks on two GPUs, 4 ranks sharing them), then tcp_bench (GPU memory,
# then host memory).
# MSCCLPP_RS_EP_SHAPES / MSCCLPP_RS_EP_REPS / MSCCLPP_RS_EP_FORMAT / MSCCLPP_RS_EP_BLOCKS / MSCCLPP_RS_EP_RING_ROWS (ep_bench: prefill,decode; timed batches; bf16 or e4m3 rows; the SM budget; the pipelined mode's ring rows).
set -u
here=$(cd "$(dirname "$0")" && pwd)
# scripts/gpu-build.sh packs the executables into bin.tgz; unpack them when only the archive came.
if [ ! -x "$here/bin/report" ] && [ -f "$here/bin.tgz" ]; then
  tar -C "$here" -xzf "$here/bin.tgz" || { echo "run.sh: cannot unpack $here/bin.tgz" >&2; exit 1; }
fi
out=${OUT:-/tmp/mscclpp-rs-out}
mkdir -p "$out"
export MSCCLPP_RS_REQUIRE_GPU=${MSCCLPP_RS_REQUIRE_GPU:-1}  # on one GPU two-sided tests run with both sides on it
export MSCCLPP_RS_BENCH_OUT="$out/bench.jsonl"
export MSCCLPP_RS_SKIP_LOG="$out/skips.log"
# Multicast stays off (host/src/nvls/guard.rs refuses while these are set); keep the variables set.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
unset MSCCLPP_RS_ALLOW_MULTICAST
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(mp threads abort example report)
selected() { # $1 group, $2 name
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; case "$2" in "$w"*) return 0 ;; esac; done
  return 1
}
echo "commit $(cat "$here/commit" 2>/dev/null)"
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu,memory.used --format=csv 2>&1
rows=()
failed=0
run() { # name, command...
  local name=$1; shift
  local t0=$EPOCHREALTIME
  local limit=${MSCCLPP_RS_RUN_TIMEOUT:-150}
  [ "$name" = report ] && limit=${MSCCLPP_RS_REPORT_TIMEOUT:-3000}
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  local dt=$(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t0}")
  local res=$(grep -E '^test result:' "$out/$name.log" | tail -1)
  [ -z "$res" ] && res=$(grep -E 'RESULT|verdict' "$out/$name.log" | tail -1)
  rows+=("$(printf '%-28s rc=%-3s %6ss  %s' "$name" "$rc" "$dt" "$res")")
  if [ $rc -ne 0 ]; then failed=$((failed + 1)); echo "---- $name failed (rc=$rc), last lines:"; tail -n 40 "$out/$name.log"; fi
}
for t in "$here"/bin/unit_*; do
  [ -e "$t" ] || continue; n=$(basename "$t"); selected unit "$n" && run "$n" "$t" --test-threads=1
done
for t in "$here"/bin/mp_*; do
  [ -e "$t" ] || continue; n=$(basename "$t")
  if selected mp "$n"; then
    for mode in ${MSCCLPP_RS_MP_MODES:-mpirun2 launcher2 launcher4}; do
      case $mode in
        mpirun*) run "$n-$mode" mpirun --allow-run-as-root -np "${mode#mpirun}" -x MSCCLPP_RS_REQUIRE_GPU -x MSCCLPP_RS_VERBOSE \
                   -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$t" ;;
        # launcherN with N above the GPU count: ranks share GPUs (CUDA IPC within one device).
        launcher*) run "$n-$mode" "$t" --ranks "${mode#launcher}" ;;
        threads*) run "$n-$mode" "$t" --threads "${mode#threads}" ;;
      esac
    done
  fi
done
# Ranks as threads of one process: every rank its own GPU handle, stream and communicator, the
# ranks of a GPU running their kernels at the same time (not in turns, as processes do).
for t in "$here"/bin/mp_*; do
  [ -e "$t" ] || continue; n=$(basename "$t")
  if selected threads "$n-threads"; then
    for mode in ${MSCCLPP_RS_THREAD_MODES:-threads2 threads4 threads8}; do
      run "$n-$mode" "$t" --threads "${mode#threads}"
    done
  fi
done
# A dead peer: survivors must hold the named error within 1 s (the launcher runs every case, then
# mpirun runs the GPU-wait case with a victim that exits without destructors, as mpirun would tear
# the job down itself on a death by signal, and the case of a victim that abandons the job).
if [ -e "$here/bin/peer_abort" ] && selected abort peer_abort; then
  run peer_abort-launcher "$here/bin/peer_abort"
  run peer_abort-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/peer_abort" \
    --case gpu_wait --death exit
  run peer_abort-abandoned-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/peer_abort" \
    --case abandoned
fi
# The examples are multi-rank programs: each runs under mpirun and under its built-in launcher.
for e in "$here"/bin/example_*; do
  [ -e "$e" ] || continue; n=$(basename "$e")
  if selected example "$n"; then
    run "$n-mpirun2" mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU \
      -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$e"
    run "$n-launcher2" "$e" --ranks 2
  fi
done
# The TCP transport forced between the processes of this machine.
mpi_env=(-x MSCCLPP_RS_REQUIRE_GPU -x MSCCLPP_RS_VERBOSE -x MSCCLPP_RS_TRANSPORT -x MSCCLPP_RS_PHASES
         -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST)
tcp_run() { # name, mode, binary: the binary as a multi-rank run in that mode, TCP forced
  local name=$1 mode=$2 bin=$3
  case $mode in
    mpirun*) run "$name-tcp-$mode" env MSCCLPP_RS_TRANSPORT=tcp mpirun --allow-run-as-root -np "${mode#mpirun}" "${mpi_env[@]}" "$bin" ;;
    launcher*) run "$name-tcp-$mode" env MSCCLPP_RS_TRANSPORT=tcp "$bin" --ranks "${mode#launcher}" ;;
  esac
}
if selected tcp tcp; then
  for mode in ${MSCCLPP_RS_TCP_MODES:-mpirun2 mpirun4 launcher2 launcher4}; do
    [ -e "$here/bin/mp_patterns" ] && MSCCLPP_RS_PHASES=${MSCCLPP_RS_TCP_PHASES:-port_all_to_all} tcp_run mp_patterns "$mode" "$here/bin/mp_patterns"
    [ -e "$here/bin/example_port_channel" ] && tcp_run example_port_channel "$mode" "$here/bin/example_port_channel"
  done
  if [ -e "$here/bin/tcp_bench" ]; then
    MSCCLPP_RS_RUN_TIMEOUT=${MSCCLPP_RS_RUN_TIMEOUT:-300} run tcp_bench "$here/bin/tcp_bench"
    MSCCLPP_RS_RUN_TIMEOUT=${MSCCLPP_RS_RUN_TIMEOUT:-300} run tcp_bench-host "$here/bin/tcp_bench" --host-memory --max-mib 1024
  fi
fi
for b in "$here"/bin/bench_*; do
  [ -e "$b" ] || continue; n=$(basename "$b"); selected bench "$n" && run "$n" "$b" --bench
done
# The collectives against NCCL (the same binary under mpirun and the launcher; NCCL from
# MSCCLPP_RS_NCCL, else the system's libnccl.so.2).
if [ -e "$here/bin/coll_bench" ] && selected coll coll_bench; then
  run coll_bench-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU -x MSCCLPP_RS_BENCH_OUT \
    -x MSCCLPP_RS_NCCL -x MSCCLPP_RS_BENCH_SIZES -x MSCCLPP_RS_BENCH_OPS -x MSCCLPP_RS_BENCH_ALGOS \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/coll_bench"
  [ -n "${MSCCLPP_RS_COLL_LAUNCHER:-}" ] && run coll_bench-launcher2 "$here/bin/coll_bench" --ranks 2
fi
# The one-shot allreduce on a window against the one-shot LL form, ranks as threads (one GPU is
# enough: the figure is labelled when ranks share a GPU).
if [ -e "$here/bin/win_bench" ] && selected win win_bench; then
  for mode in ${MSCCLPP_RS_THREAD_MODES:-threads2 threads4 threads8}; do
    run "win_bench-$mode" "$here/bin/win_bench" --threads "${mode#threads}"
  done
fi
# The plan executor against the hand-written collectives running the same algorithms.
if [ -e "$here/bin/exec_bench" ] && selected exec exec_bench; then
  run exec_bench-launcher2 "$here/bin/exec_bench" --ranks 2
fi
# Expert-parallel dispatch and combine against NCCL (grouped send/receive of the same rows).
if [ -e "$here/bin/ep_bench" ] && selected ep ep_bench; then
  run ep_bench-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU -x MSCCLPP_RS_BENCH_OUT \
    -x MSCCLPP_RS_NCCL -x MSCCLPP_RS_EP_SHAPES -x MSCCLPP_RS_EP_REPS -x MSCCLPP_RS_EP_FORMAT -x MSCCLPP_RS_EP_BLOCKS -x MSCCLPP_RS_EP_RING_ROWS \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/ep_bench"
fi
# The NCCL library under NCCL's names, for LD_LIBRARY_PATH (groups netns and nccl).
if [ -e "$here/bin/libmscclpp_nccl.so" ]; then
  mkdir -p "$here/nccl" && ln -sf ../bin/libmscclpp_nccl.so "$here/nccl/libnccl.so" && ln -sf ../bin/libmscclpp_nccl.so "$here/nccl/libnccl.so.2"
fi
# Several machines on one (group netns; as root): machines made of network namespaces with host
# names of their own. netns_procs runs the multi-machine paths (bootstrap with a token, the TCP
# transport, faults, hostile hosts; GPU memory between machines here), and cudarc's NCCL client
# runs with each rank on a machine of its own, so the communicator is forwarded to the real NCCL.
# Without iproute2 here, the bundle's `ip` and `tc` run through the loader with its libraries (no
# LD_LIBRARY_PATH, which the ranks it starts would inherit).
if selected netns netns; then
  mkdir -p "$here/iproute-wrap"
  for tool in ip tc; do
    if ! command -v "$tool" >/dev/null 2>&1 && [ -x "$here/bin/iproute/$tool" ]; then
      printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path "%s" "%s" "$@"\n' \
        "$here/bin/iproute/lib" "$here/bin/iproute/$tool" > "$here/iproute-wrap/$tool"
      chmod +x "$here/iproute-wrap/$tool"
    fi
  done
  export PATH="$here/iproute-wrap:$PATH"
  [ -e "$here/bin/netns_procs" ] && run netns_procs env MSCCLPP_RS_REQUIRE_NETNS=1 "$here/bin/netns_procs"
  [ -e "$here/bin/cudarc_nccl" ] && run nccl-netns2 env LD_LIBRARY_PATH="$here/nccl" MSCCLPP_RS_REQUIRE_NETNS=1 \
    "$here/bin/cudarc_nccl" --ranks 2 --netns
fi
# NCCL's interface (group nccl): cudarc's NCCL API on libmscclpp_nccl.so (2 ranks, processes),
# the C interface test (a world of one on the GPU), and PyTorch through torchrun with the library
# in LD_PRELOAD at 2 ranks (sharing the GPU of a one-GPU machine) and at 1 (MSCCLPP_RS_TORCHRUN:
# torchrun to use, default the first of /opt/torch/.venv/bin/torchrun and PATH's). Carry
# .gpu/nccl-extra (the header, the C test's sources, the PyTorch script) with the bundle.
if [ -e "$here/bin/libmscclpp_nccl.so" ] && selected nccl nccl; then
  [ -e "$here/bin/cudarc_nccl" ] && run nccl-cudarc2 env LD_LIBRARY_PATH="$here/nccl" "$here/bin/cudarc_nccl" --ranks 2
  [ -e "$here/bin/gpu_nccl" ] && run nccl-matrix2 "$here/bin/gpu_nccl" --ranks 2
  [ -e "$here/bin/nccl_abi" ] && run nccl-abi env MSCCLPP_RS_NCCL_INCLUDE="$here/nccl-extra/include" \
    MSCCLPP_RS_NCCL_C="$here/nccl-extra/c" "$here/bin/nccl_abi" --test-threads=1
  trun=${MSCCLPP_RS_TORCHRUN:-$( [ -x /opt/torch/.venv/bin/torchrun ] && echo /opt/torch/.venv/bin/torchrun || command -v torchrun)}
  if [ -n "$trun" ] && [ -e "$here/nccl-extra/torch_nccl.py" ]; then
    for np in 2 1; do
      run "nccl-torch$np" env LD_PRELOAD="$here/bin/libmscclpp_nccl.so" MSCCLPP_RS_NCCL_STATS=1 \
        "$trun" --standalone --nproc_per_node="$np" "$here/nccl-extra/torch_nccl.py"
    done
  fi
fi
# The report: it runs the test and bench executables beside it (its own progress and summary are
# in report.log; the children's logs in report/logs/). Its bench rows go to report/bench.jsonl.
selected report report && run report env -u MSCCLPP_RS_BENCH_OUT MSCCLPP_RS_REPORT_DIR="$out/report" "$here/bin/report"
echo
for b in "$out"/coll_bench-*.log "$out"/win_bench-*.log "$out"/ep_bench-*.log; do [ -e "$b" ] && { echo "== $(basename "$b" .log)"; grep -v 'RESULT' "$b"; }; done
for b in "$out"/bench_*.log; do [ -e "$b" ] && sed -n '/^== /,/^$/p' "$b"; done
[ -e "$out/report.log" ] && { echo "== report"; sed -n '/^Correctness/,$p' "$out/report.log"; }
for b in "$out"/tcp_bench*.log; do [ -e "$b" ] && { echo "== $(basename "$b" .log)"; grep -E 'tcp_bench:|== tcp|variant|put/|rtt' "$b"; }; done
for b in "$out"/nccl-*.log; do [ -e "$b" ] && { echo "== $(basename "$b" .log)"; grep -E 'torch_nccl:|cudarc_nccl:|RESULT|test result' "$b" | head -8; }; done
[ -e "$out/netns_procs.log" ] && { echo "== netns_procs"; grep -vE '^\[rank|^\[stranger' "$out/netns_procs.log" | head -c 8000; }
for b in "$out"/*-tcp-*.log; do [ -e "$b" ] && grep -E 'port channels toward|port_all_to_all|: ok:' "$b" | head -4; done
[ -s "$out/skips.log" ] && { echo "skipped:"; cat "$out/skips.log"; }
echo "== summary =="
printf '%s\n' "${rows[@]}"
# With OUT set, the output folder is kept small: everything goes into two archives (criterion's
# HTML report apart, it is the largest), and the report's Markdown stays beside them to read at
# once.
if [ -n "${OUT:-}" ]; then
  tmp=$(mktemp -d)
  [ -d "$out/criterion" ] && tar -czf "$tmp/criterion.tar.gz" -C "$out" criterion && rm -rf "$out/criterion"
  tar -czf "$tmp/results.tar.gz" -C "$out" .
  find "$out" -mindepth 1 -maxdepth 1 ! -name report -exec rm -rf {} +
  [ -d "$out/report" ] && find "$out/report" -mindepth 1 ! -name report.md -exec rm -rf {} +
  mv "$tmp"/*.tar.gz "$out/" && rmdir "$tmp"
  echo "files in \$OUT: $(cd "$out" && find . -type f | sort | tr '\n' ' ')"
fi
# Non-zero when anything failed, so a caller cannot mistake a failed run for a pass.
[ $failed -eq 0 ] || { echo "$failed run(s) failed"; exit 1; }
