#!/usr/bin/env bash
# The test command: every test of the workspace. On a machine without a GPU the GPU tests skip
# with a printed reason (GPU-SKIP lines); with GPUs they run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PTXAS:-}" ] && ! command -v ptxas >/dev/null && ! ls .venv-tools/lib/python*/site-packages/nvidia/*/bin/ptxas >/dev/null 2>&1; then
  echo "note: ptxas not found; run .ci/run once (it installs the CUDA assembler tools into .venv-tools)" >&2
fi
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc
# Model checks of the FIFO protocol under loom (its own target dir: --cfg loom changes every crate).
RUSTFLAGS="--cfg loom" cargo test -p mscclpp-device --test fifo_model --release --target-dir target/loom
