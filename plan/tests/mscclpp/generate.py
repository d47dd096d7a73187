#!/usr/bin/env python3
"""Regenerates the MSCCL++ execution plans in this folder from MSCCL++'s own DSL.

Usage: generate.py MSCCLPP_GIT_DIR

MSCCLPP_GIT_DIR is a clone of https://github.com/microsoft/mscclpp (its `.git` folder, or a bare
repository). The DSL (`python/mscclpp/language/`) is taken from the pinned commit below with
`git archive`, placed under an empty `mscclpp/__init__.py` (the real one loads compiled
extensions that the DSL does not use), and every single-node and unit test program in its
`tests/` folder is run with python3: once, or at 2, 4 and 8 GPUs for a program that takes
`--num_gpus`. Each plan is the program's standard output, unedited, written as
`<program>[_<gpus>].json`. The DSL needs `sortedcontainers` (PyPI) and no GPU.

This script is not run by CI: CI reads the JSON it wrote (plan/tests/mscclpp_plans.rs).
"""

import os
import pathlib
import subprocess
import sys
import tempfile

COMMIT = "1f5f065d7b13ab02df32c22568f38785d1eeec01"
GPU_COUNTS = (2, 4, 8)
HERE = pathlib.Path(__file__).resolve().parent


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    git_dir = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "--git-dir", git_dir, "archive", COMMIT, "python/mscclpp/language"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        root = pathlib.Path(tmp) / "python"
        (root / "mscclpp" / "__init__.py").write_text("")
        tests = root / "mscclpp" / "language" / "tests"
        programs = sorted(
            p for sub in ("single_node", "unit_tests") for p in (tests / sub).rglob("*.py")
        )
        env = dict(os.environ, PYTHONPATH=str(root))
        written, failed = 0, []
        for prog in programs:
            sized = "--num_gpus" in prog.read_text()
            for gpus in GPU_COUNTS if sized else (None,):
                stem = prog.stem if gpus is None else f"{prog.stem}_{gpus}"
                args = [sys.executable, str(prog), "--name", stem]
                if "--name" not in prog.read_text():
                    args = args[:2]
                if gpus is not None:
                    args += ["--num_gpus", str(gpus)]
                run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
                if run.returncode != 0:
                    last = (run.stderr.strip().splitlines() or ["?"])[-1]
                    failed.append(f"{stem}: {last}")
                    continue
                (HERE / f"{stem}.json").write_text(run.stdout)
                written += 1
        print(f"{written} plans written to {HERE}")
        for f in failed:
            print(f"not generated: {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
