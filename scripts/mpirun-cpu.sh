#!/usr/bin/env bash
# The multi-rank programs under a real OpenMPI mpirun on a machine without GPUs: ranks find each
# other through OpenMPI's variables (the rendezvous port derived from the job id), the bootstrap
# phases run, and GPU phases skip with a reason. Installs OpenMPI (Debian's openmpi-bin) when no
# OpenMPI mpirun is found and this runs as root (or sudo needs no password); otherwise says why it
# cannot run and fails. The GPUs are hidden from the ranks (CUDA_VISIBLE_DEVICES=""), so the
# checks hold on a machine with GPUs too.
set -euo pipefail
cd "$(dirname "$0")/.."

# OpenMPI's mpirun: Debian's alternatives name it mpirun.openmpi; a plain mpirun may be MPICH's.
is_openmpi() { "$1" --version 2>/dev/null | grep -q 'Open MPI'; }
find_mpirun() {
  for m in mpirun.openmpi mpirun; do
    if command -v "$m" >/dev/null && is_openmpi "$m"; then echo "$m"; return 0; fi
  done
  return 1
}
if ! mpirun=$(find_mpirun); then
  sudo=()
  [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null && sudo -n true 2>/dev/null && sudo=(sudo -n); }
  if { [ "$(id -u)" = 0 ] || [ ${#sudo[@]} -gt 0 ]; } && command -v apt-get >/dev/null; then
    echo "mpirun-cpu: installing openmpi-bin (apt-get)"
    "${sudo[@]}" apt-get update -qq || echo "mpirun-cpu: apt-get update reported errors; trying the install anyway"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin openssh-client >/dev/null
  else
    echo "mpirun-cpu: no OpenMPI mpirun, and cannot install openmpi-bin here (needs root, or sudo without a" \
      "password, and apt-get); install OpenMPI and run this again" >&2
    exit 1
  fi
  mpirun=$(find_mpirun) || { echo "mpirun-cpu: openmpi-bin installed, but no OpenMPI mpirun found" >&2; exit 1; }
fi
"$mpirun" --version | sed -n 1p
# One machine: OpenMPI starts its daemons locally, without ssh.
export OMPI_MCA_plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-false}

# The executable of target $3 ($2 is --test or --bin) of package $1, as cargo's JSON messages name
# it (picked by the target's name: the messages also name every other executable built or fresh).
exe() {
  cargo build -q --message-format=json-render-diagnostics -p "$1" "$2" "$3" | python3 -c '
import json, sys
name = sys.argv[1]
paths = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("executable") and m.get("target", {}).get("name") == name]
print(paths[-1])' "$3"
}
allreduce=$(exe example-allreduce --bin example-allreduce)
patterns=$(exe mscclpp-rs --test mp_patterns)
abort=$(exe mscclpp-rs --test peer_abort)

failed=0
# run NAME CHECKS ARGS...: runs `mpirun ARGS`; passes when it exits 0 and, for each "COUNT:TEXT"
# of CHECKS (separated by ";"), TEXT is on exactly COUNT lines of the output.
run() {
  local name=$1 checks=$2 out rc=0 problems=""
  shift 2
  out=$(timeout -k 30 300 "$mpirun" --allow-run-as-root --oversubscribe -x CUDA_VISIBLE_DEVICES= "$@" 2>&1 </dev/null) ||
    rc=$?
  [ "$rc" = 0 ] || problems="exit status $rc"
  local check count text seen
  IFS=';' read -ra check <<<"$checks"
  for c in "${check[@]}"; do
    count=${c%%:*}; text=${c#*:}
    seen=$(grep -cF -- "$text" <<<"$out" || true)
    [ "$seen" = "$count" ] || problems="$problems; $seen lines, not $count, with \"$text\""
  done
  if [ -z "$problems" ]; then
    echo "mpirun-cpu: $name ... ok"
  else
    echo "mpirun-cpu: $name ... FAILED (${problems#; }):"
    sed 's/^/    /' <<<"$out"
    failed=1
  fi
}
run "allreduce example, 2 ranks" "2:allreduce example skipped: rank 0 has no GPU" -np 2 "$allreduce"
run "mp_patterns, 4 ranks (bootstrap phases; GPU phases skip)" \
  "4:of 4, via OpenMPI), no GPU;4:bootstrap_all_gather ... ok;4:bootstrap_barrier_x100 ... ok;4:: RESULT ok" \
  -np 4 "$patterns"
run "peer_abort bootstrap_step, 3 ranks (a rank exits mid-barrier)" "2:: bootstrap_step ok:;1:rank 2: dying (exit)" \
  -np 3 "$abort" --case bootstrap_step --death exit
[ "$failed" = 0 ] && echo "mpirun-cpu: all ok"
exit "$failed"
