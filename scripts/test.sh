#!/usr/bin/env bash
# The test command, now `./x test`: the set-up (pinned toolchain, CUDA assembler tools), then every
# test of the workspace, the doc tests and the loom model checks. Extra arguments go to
# `cargo test --workspace --all-targets`. On a machine without a GPU the GPU tests skip with a
# printed reason (GPU-SKIP lines); with GPUs they run.
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./x test "$@"
