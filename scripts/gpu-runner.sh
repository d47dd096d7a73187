#!/usr/bin/env bash
# Runs on the GPU machine (copied to .gpu/run.sh by scripts/gpu-build.sh): the single-GPU and
# two-GPU unit tests, the multi-rank pattern tests and the examples under mpirun and under the
# built-in launcher, the report and the benches; prints a short table last. Logs go to $OUT (the
# GPU machine's output folder) when set.
#   bash .gpu/run.sh                  everything
#   bash .gpu/run.sh unit mp          only those groups (unit, mp, abort, example, report, bench, coll, ep)
#   bash .gpu/run.sh unit_bulk        only binaries whose name starts with that
# Environment: MSCCLPP_RS_RUN_TIMEOUT (seconds per binary, default 150), MSCCLPP_RS_MP_MODES
# (default "mpirun2 launcher2 launcher4"), MSCCLPP_RS_PHASES (comma list of mp_patterns phases),
# MSCCLPP_RS_EP_SHAPES / MSCCLPP_RS_EP_REPS (ep_bench: prefill,decode; timed batches).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/mscclpp-rs-out}
mkdir -p "$out"
export MSCCLPP_RS_REQUIRE_GPU=${MSCCLPP_RS_REQUIRE_GPU:-1}  # 0 on a one-GPU machine: two-GPU tests skip
export MSCCLPP_RS_BENCH_OUT="$out/bench.jsonl"
export MSCCLPP_RS_SKIP_LOG="$out/skips.log"
# Multicast stays off (host/src/nvls.rs refuses while these are set); keep the variables set.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
unset MSCCLPP_RS_ALLOW_MULTICAST
want=("$@")
[ ${#want[@]} -eq 0 ] && want=(unit mp abort example report bench coll ep)
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
  timeout "${MSCCLPP_RS_RUN_TIMEOUT:-150}" "$@" >"$out/$name.log" 2>&1
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
      esac
    done
  fi
done
# A dead peer: survivors must hold the named error within 1 s (the launcher runs every case, then
# mpirun runs the GPU-wait case with a victim that exits without destructors, as mpirun would tear
# the job down itself on a death by signal).
if [ -e "$here/bin/peer_abort" ] && selected abort peer_abort; then
  run peer_abort-launcher "$here/bin/peer_abort"
  run peer_abort-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/peer_abort" \
    --case gpu_wait --death exit
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
# Expert-parallel dispatch and combine against NCCL (grouped send/receive of the same rows).
if [ -e "$here/bin/ep_bench" ] && selected ep ep_bench; then
  run ep_bench-mpirun2 mpirun --allow-run-as-root -np 2 -x MSCCLPP_RS_REQUIRE_GPU -x MSCCLPP_RS_BENCH_OUT \
    -x MSCCLPP_RS_NCCL -x MSCCLPP_RS_EP_SHAPES -x MSCCLPP_RS_EP_REPS \
    -x NCCL_NVLS_ENABLE -x NVSHMEM_DISABLE_NVLS -x TORCH_SYMM_MEM_DISABLE_MULTICAST "$here/bin/ep_bench"
fi
# The report last: it renders the collectives' results that coll_bench just wrote.
selected report report && run report "$here/bin/report"
echo
for b in "$out"/coll_bench-*.log "$out"/ep_bench-*.log; do [ -e "$b" ] && { echo "== $(basename "$b" .log)"; grep -v 'RESULT' "$b"; }; done
for b in "$out"/bench_*.log; do [ -e "$b" ] && sed -n '/^== /,/^$/p' "$b"; done
[ -s "$out/skips.log" ] && { echo "skipped:"; cat "$out/skips.log"; }
echo "== summary =="
printf '%s\n' "${rows[@]}"
# Non-zero when anything failed, so a caller cannot mistake a failed run for a pass.
[ $failed -eq 0 ] || { echo "$failed run(s) failed"; exit 1; }
