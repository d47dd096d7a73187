//! The project's set-up and task runner: `cargo xtask <command>` (or `./x <command>`, which first
//! installs the pinned toolchain when it is missing).
//!
//! Every command starts with the set-up: the components named in `rust-toolchain.toml`
//! (`rustup toolchain install`, a no-op when they are there) and the CUDA assembler tools `ptxas`,
//! `cuobjdump` and `nvdisasm`. Tools already found (`PTXAS`, `CUOBJDUMP`, `NVDISASM`, `PATH`, or
//! `.venv-tools/`) are used as they are; otherwise they are installed once from PyPI (packages
//! `nvidia-cuda-nvcc`, `nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm`) into a virtualenv in
//! `.venv-tools/`, where the build scripts and the PTX/SASS checks find them. Cargo build scripts
//! never download anything; only this set-up does.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The tools the PTX/SASS checks use, and the PyPI package of each.
const TOOLS: [(&str, &str); 3] =
    [("ptxas", "nvidia-cuda-nvcc"), ("cuobjdump", "nvidia-cuda-cuobjdump"), ("nvdisasm", "nvidia-cuda-nvdisasm")];

/// Where the tools are installed, relative to the repository root.
const VENV: &str = ".venv-tools";

/// The quickstart example: the files of the README's "Using the crates from your own project",
/// relative to `examples/quickstart/`.
const QUICKSTART_FILES: [&str; 5] =
    ["Cargo.toml", "build.rs", "src/main.rs", "kernels/Cargo.toml", "kernels/src/lib.rs"];

const USAGE: &str = "\
usage: cargo xtask <command> [args]   (or ./x <command> [args])

  report [args]      set-up, then the main job: cargo run --release [args]
                     (builds the kernels, assembles them, prints the report; with GPUs it
                     also runs the GPU tests and benches; `./x report -- --help`)
  test [args]        set-up, then every test: cargo test --workspace --all-targets [args],
                     the doc tests, and the loom model checks of the FIFO
  gpu-bundle         set-up, then scripts/gpu-build.sh (executables for a GPU machine in .gpu/)
  quickstart         checks that examples/quickstart/ is the README's code, builds it as the
                     README says next to this checkout, and runs it (it skips without a GPU)
  mutants [NAME..]   mutation testing (cargo-mutants, installed when missing) of the modules
                     that guard security and correctness, or of those named; `--list` lists
                     them; prints and writes target/mutants/summary.md (slow: not in CI;
                     `--summary` only prints the summary of the results there)
  setup              only the set-up: the pinned toolchain's components and ptxas, cuobjdump
                     and nvdisasm (from PyPI into .venv-tools/ when they are missing), and
                     NCCL 2.28's nccl.h (from PyPI's nvidia-nccl-cu13, for the C interface test)
  nccl               set-up, then builds libmscclpp_nccl.so (release) and lays it out in
                     target/nccl/ under the names programs load NCCL by (libnccl.so.2, libnccl.so)
  help               this text
";

type Result<T> = std::result::Result<T, String>;

mod mutants;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::FAILURE;
    };
    let root = root();
    let result = match cmd.as_str() {
        "setup" => setup(&root),
        "report" => setup(&root).and_then(|()| cargo(&root, &["run", "--release"], rest, &[])),
        "test" => setup(&root).and_then(|()| test(&root, rest)),
        "gpu-bundle" => {
            setup(&root).and_then(|()| run(Command::new("bash").arg("scripts/gpu-build.sh").current_dir(&root)))
        }
        "quickstart" => quickstart(&root),
        "nccl" => setup(&root).and_then(|()| nccl_lib(&root)),
        "mutants" => mutants::mutants(&root, rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {cmd}: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The repository root (the parent of this crate).
fn root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    dir.parent().unwrap_or(dir).to_path_buf()
}

fn say(msg: impl AsRef<str>) {
    println!("xtask: {}", msg.as_ref());
}

/// Runs a command, inheriting the terminal; fails with the command line when it fails.
fn run(cmd: &mut Command) -> Result<()> {
    // Variables that `cargo run` set for this program; they describe the xtask crate, not the
    // packages the command builds.
    for v in
        ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_PRIMARY_PACKAGE", "CARGO_CRATE_NAME", "CARGO_BIN_NAME"]
    {
        cmd.env_remove(v);
    }
    let status = cmd.status().map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed ({status})")) }
}

/// The cargo that runs this program (the pinned toolchain's).
fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// `cargo <args> <extra>` in `dir`, with the given environment.
fn cargo(dir: &Path, args: &[&str], extra: &[String], env: &[(&str, &str)]) -> Result<()> {
    let mut cmd = Command::new(cargo_bin());
    cmd.args(args).args(extra).current_dir(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut shown = format!("cargo {}", args.join(" "));
    for e in extra {
        let _ = write!(shown, " {e}");
    }
    say(format!("running {shown}"));
    run(&mut cmd)
}

/// The test command (also `scripts/test.sh`).
fn test(root: &Path, extra: &[String]) -> Result<()> {
    // The NCCL interface's tests load libmscclpp_nccl.so, which `cargo test` does not build (it
    // builds the library's rlib only): build the cdylib first, in the profile the tests use.
    let release = extra.iter().any(|a| a == "--release");
    let lib: &[&str] = if release {
        &["build", "--release", "-p", "mscclpp-nccl", "--lib"]
    } else {
        &["build", "-p", "mscclpp-nccl", "--lib"]
    };
    cargo(root, lib, &[], &[])?;
    cargo(root, &["test", "--workspace", "--all-targets"], extra, &[])?;
    cargo(root, &["test", "--workspace", "--doc"], &[], &[])?;
    // Model checks of the FIFO protocol under loom, in a target directory of their own: `--cfg
    // loom` changes every crate.
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let loom = target.join("loom");
    let loom = loom.to_string_lossy();
    cargo(
        root,
        &["test", "-p", "mscclpp-device", "--test", "fifo_model", "--release", "--target-dir", &loom],
        &[],
        &[("RUSTFLAGS", "--cfg loom")],
    )
}

/// The set-up: toolchain components, then the CUDA assembler tools.
fn setup(root: &Path) -> Result<()> {
    toolchain(root)?;
    tools(root)?;
    nccl_header(root)
}

/// The NCCL release whose `nccl.h` the C interface test compiles against.
const NCCL_PACKAGE: &str = "nvidia-nccl-cu13==2.28.9";

/// Where the set-up puts that `nccl.h`, relative to the repository root.
const NCCL_INCLUDE: &str = ".venv-tools/nccl-2.28.9/include";

/// Installs NCCL's official `nccl.h` into `NCCL_INCLUDE` (only the header is kept from the
/// PyPI package) unless it is there.
fn nccl_header(root: &Path) -> Result<()> {
    let include = root.join(NCCL_INCLUDE);
    if include.join("nccl.h").exists() {
        say(format!("nccl.h: {NCCL_INCLUDE}/nccl.h"));
        return Ok(());
    }
    let python = root.join(VENV).join("bin").join("python");
    let python = if python.exists() { python } else { PathBuf::from("python3") };
    say(format!("nccl.h not found: taking it from PyPI's {NCCL_PACKAGE} into {NCCL_INCLUDE}/ (first run only)"));
    let tmp = root.join("target").join("nccl-wheel");
    std::fs::create_dir_all(&tmp).map_err(|e| format!("mkdir {}: {e}", tmp.display()))?;
    run(Command::new(&python)
        .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d"])
        .arg(&tmp)
        .arg(NCCL_PACKAGE))
    .map_err(|e| format!("{e}\n(pip needs to reach PyPI)"))?;
    let script = "import sys, zipfile, glob, os\n\
w = glob.glob(os.path.join(sys.argv[1], 'nvidia_nccl_cu13-2.28.9-*.whl'))[0]\n\
z = zipfile.ZipFile(w)\n\
os.makedirs(sys.argv[2], exist_ok=True)\n\
open(os.path.join(sys.argv[2], 'nccl.h'), 'wb').write(z.read('nvidia/nccl/include/nccl.h'))\n";
    run(Command::new(&python).args(["-c", script]).arg(&tmp).arg(&include))?;
    let _ = std::fs::remove_dir_all(&tmp);
    say(format!("nccl.h: {NCCL_INCLUDE}/nccl.h"));
    Ok(())
}

/// Builds `libmscclpp_nccl.so` and lays it out in `target/nccl/` as `libnccl.so.2` and
/// `libnccl.so` too (links to it), for `LD_PRELOAD`, `LD_LIBRARY_PATH` and `-lnccl`.
fn nccl_lib(root: &Path) -> Result<()> {
    cargo(root, &["build", "--release", "-p", "mscclpp-nccl", "--lib"], &[], &[])?;
    let dir = root.join("target").join("nccl");
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let lib = "libmscclpp_nccl.so";
    std::fs::copy(root.join("target/release").join(lib), dir.join(lib)).map_err(|e| format!("copying {lib}: {e}"))?;
    for name in ["libnccl.so.2", "libnccl.so"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(lib, &link).map_err(|e| format!("linking {name}: {e}"))?;
    }
    say(format!(
        "NCCL in place: {0}/{lib} (also as libnccl.so.2 and libnccl.so)\n  \
         LD_PRELOAD={0}/{lib} python3 train.py      # PyTorch\n  \
         LD_LIBRARY_PATH={0} ./my-cudarc-program    # cudarc / candle (libnccl.so by name)\n  \
         cc app.c -I<nccl include> -L{0} -lnccl     # C, C++",
        dir.display()
    ));
    Ok(())
}

/// `rustup toolchain install` reads `rust-toolchain.toml` and adds whatever is missing (the
/// toolchain itself is there: it runs this program). Quiet unless it fails.
fn toolchain(root: &Path) -> Result<()> {
    let channel = std::fs::read_to_string(root.join("rust-toolchain.toml"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let v = l.trim().strip_prefix("channel")?.trim_start().strip_prefix('=')?;
                Some(v.trim().trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| "(rust-toolchain.toml)".into());
    match Command::new("rustup").arg("toolchain").arg("install").current_dir(root).output() {
        Ok(out) if out.status.success() => {
            say(format!("toolchain {channel} with rust-src, rustfmt, clippy (rust-toolchain.toml): ready"));
            Ok(())
        }
        Ok(out) => Err(format!(
            "`rustup toolchain install` failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        // Without rustup the toolchain came from elsewhere; the build says if it lacks something.
        Err(_) => {
            say(format!("rustup not found; using the toolchain that runs cargo (the project pins {channel})"));
            Ok(())
        }
    }
}

/// Finds ptxas, cuobjdump and nvdisasm, installing them from PyPI into `.venv-tools/` when one
/// is missing.
fn tools(root: &Path) -> Result<()> {
    // find_tool also looks in the .venv-tools of the current directory and its ancestors.
    std::env::set_current_dir(root).map_err(|e| format!("cd {}: {e}", root.display()))?;
    let missing: Vec<&str> =
        TOOLS.iter().filter(|(t, _)| nvptx_builder::find_tool(t).is_none()).map(|(t, _)| *t).collect();
    if !missing.is_empty() {
        install_tools(root, &missing)?;
    }
    for (t, _) in TOOLS {
        let Some(p) = nvptx_builder::find_tool(t) else {
            return Err(format!("{t} still not found after installing it into {VENV}/"));
        };
        let shown = p.strip_prefix(root).unwrap_or(&p).display().to_string();
        if t == "ptxas" {
            let version = Command::new(&p)
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout).lines().find(|l| l.contains("release")).map(str::to_string)
                })
                .unwrap_or_default();
            say(format!("{t}: {shown} ({version})"));
        } else {
            say(format!("{t}: {shown}"));
        }
    }
    Ok(())
}

fn install_tools(root: &Path, missing: &[&str]) -> Result<()> {
    let packages: Vec<&str> = TOOLS.iter().map(|(_, p)| *p).collect();
    say(format!(
        "{} not found: installing {} from PyPI into {VENV}/ (first run only; about 150 MB)",
        missing.join(", "),
        packages.join(", ")
    ));
    let venv = root.join(VENV);
    let pip = venv.join("bin").join("pip");
    if !venv.join("bin").join("python").exists() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        say(format!("creating the virtualenv: {python} -m venv {VENV}"));
        run(Command::new(&python).args(["-m", "venv"]).arg(&venv)).map_err(|e| {
            format!(
                "{e}\n(python3 with the venv module is needed, or set PTXAS, CUOBJDUMP and NVDISASM to installed tools)"
            )
        })?;
    }
    say("installing with pip (quiet)");
    run(Command::new(&pip).args(["install", "--quiet", "--upgrade", "pip"]))?;
    run(Command::new(&pip).args(["install", "--quiet"]).args(&packages))
        .map_err(|e| format!("{e}\n(pip needs to reach PyPI; or set PTXAS, CUOBJDUMP and NVDISASM to installed tools)"))
}

/// The quickstart example: compares it with the README, lays it out as the README says (the
/// project next to a checkout named `mscclpp-rs`), builds it and runs it.
fn quickstart(root: &Path) -> Result<()> {
    let example = root.join("examples").join("quickstart");
    let readme = std::fs::read_to_string(root.join("README.md")).map_err(|e| format!("reading README.md: {e}"))?;
    let blocks = readme_blocks(&readme);
    for f in QUICKSTART_FILES {
        let file =
            std::fs::read_to_string(example.join(f)).map_err(|e| format!("reading examples/quickstart/{f}: {e}"))?;
        match blocks.iter().find(|(name, _)| name == f) {
            None => return Err(format!("the README shows no block for {f} (its first line names the file)")),
            Some((_, text)) if *text != file => {
                return Err(format!("examples/quickstart/{f} differs from the README's block for it; keep them equal"));
            }
            Some(_) => {}
        }
    }
    say("examples/quickstart/ is the README's code");

    // target/quickstart/{mscclpp-rs -> this checkout, my-project/ = examples/quickstart/}
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    let base = root.join("target").join("quickstart");
    let project = base.join("my-project");
    let _ = std::fs::remove_dir_all(&project);
    std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
    let link = base.join("mscclpp-rs");
    if std::fs::symlink_metadata(&link).is_err() {
        std::os::unix::fs::symlink(root, &link).map_err(|e| format!("linking {}: {e}", link.display()))?;
    }
    for f in QUICKSTART_FILES.iter().chain(&["rust-toolchain.toml"]) {
        let dst = project.join(f);
        if let Some(d) = dst.parent() {
            std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        let src = if *f == "rust-toolchain.toml" { root.join(f) } else { example.join(f) };
        std::fs::copy(&src, &dst).map_err(|e| format!("copying {}: {e}", src.display()))?;
    }
    // This workspace's lock file as a start, so that both builds resolve the versions tested
    // here without asking the registry.
    for dir in [&project, &project.join("kernels")] {
        let _ = std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"));
    }
    // The kernel crate's build runs with --locked once it has a lock file (nvptx-builder), so its
    // copy is trimmed to its own packages first, keeping their versions, still without the registry.
    cargo(&project.join("kernels"), &["update", "--workspace", "--offline"], &[], &[])?;
    // A target directory next to the workspace's, kept between runs.
    let qt = target.join("quickstart-target");
    let qt = qt.to_string_lossy();
    say(format!("building the README's project in {}", project.strip_prefix(root).unwrap_or(&project).display()));
    cargo(&project, &["build", "--target-dir", &qt], &[], &[])?;
    cargo(&project, &["run", "--target-dir", &qt], &[], &[])
}

/// The fenced code blocks of a Markdown text whose first line is a comment naming a file of the
/// quickstart example (`// src/main.rs`, `# kernels/Cargo.toml`), as (file, whole text).
fn readme_blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("```") || line.len() == 3 {
            continue;
        }
        let mut body: Vec<&str> = Vec::new();
        for l in lines.by_ref() {
            if l.starts_with("```") {
                break;
            }
            body.push(l);
        }
        let Some(first) = body.first() else { continue };
        let name = first.strip_prefix("// ").or_else(|| first.strip_prefix("# "));
        if let Some(name) = name.and_then(|n| n.split_whitespace().next())
            && QUICKSTART_FILES.contains(&name)
        {
            let mut text = body.join("\n");
            text.push('\n');
            out.push((name.to_string(), text));
        }
    }
    out
}

#[cfg(test)]
mod blocks;

#[cfg(test)]
mod tests {
    use super::*;

    /// The Markdown files whose Rust code blocks must be compiled code ([`MIRRORS`]).
    const READMES: [&str; 5] =
        ["README.md", "host/README.md", "device/README.md", "nvptx-builder/README.md", "collectives/README.md"];

    /// Files the build compiles that hold the Rust code blocks of [`READMES`]: the quickstart (built
    /// by `./x quickstart`), the allreduce example's kernels (built with the example), the window
    /// kernels of the GPU tests (`ptx-tests/src/window.rs`, run by mp_patterns' window phase) and
    /// the harness's `tests/readme.rs` (the host-side fragments, wrapped in functions).
    const MIRRORS: [&str; 6] = [
        "examples/quickstart/build.rs",
        "examples/quickstart/src/main.rs",
        "examples/quickstart/kernels/src/lib.rs",
        "examples/allreduce/kernels/src/lib.rs",
        "ptx-tests/src/window.rs",
        "tests/readme.rs",
    ];

    /// The fenced code blocks of a Markdown text whose info string starts with `rust`, as (line of
    /// the opening fence, 1-based; the block's lines).
    fn rust_blocks(md: &str) -> Vec<(usize, Vec<&str>)> {
        let mut out = Vec::new();
        let mut lines = md.lines().enumerate();
        while let Some((i, line)) = lines.next() {
            let Some(info) = line.trim_start().strip_prefix("```") else { continue };
            let body: Vec<&str> =
                lines.by_ref().map(|(_, l)| l).take_while(|l| !l.trim_start().starts_with("```")).collect();
            if info.starts_with("rust") {
                out.push((i + 1, body));
            }
        }
        out
    }

    use blocks::contains_block;

    #[test]
    fn block_matching() {
        let file = "fn f() {\n    let a = 1;  // one\n\n    let b = 2;\n    let c = 3;\n}\n";
        assert!(contains_block(file, &["let a = 1; // one", "let b = 2;"]));
        assert!(contains_block(file, &["let a = 1; // one", "// ... then c", "let c = 3;", "}"]));
        assert!(contains_block(file, &["let b = 2;", "// ... the rest"]));
        assert!(!contains_block(file, &["let a = 1; // one", "let c = 3;"]));
        assert!(!contains_block(file, &["let c = 3;", "// ...", "let a = 1; // one"]));
        assert!(!contains_block(file, &["let a = 1;"]));
        let md = "text\n```rust,no_run\nfn main() {}\n```\n```sh\nls\n```\n  ```rust\n  x\n  ```\n";
        assert_eq!(rust_blocks(md), vec![(2, vec!["fn main() {}"]), (8, vec!["  x"])]);
    }

    /// Every Rust block of the READMEs is compiled: it appears in one of [`MIRRORS`]. When this
    /// fails, change the README and its mirror together.
    #[test]
    fn readme_rust_blocks_are_compiled() {
        let root = root();
        let mirrors: Vec<(&str, String)> =
            MIRRORS.iter().map(|m| (*m, std::fs::read_to_string(root.join(m)).unwrap())).collect();
        let mut missing = Vec::new();
        for readme in READMES {
            let md = std::fs::read_to_string(root.join(readme)).unwrap();
            for (line, block) in rust_blocks(&md) {
                if !mirrors.iter().any(|(_, text)| contains_block(text, &block)) {
                    missing.push(format!("{readme}:{line} ({})", block.first().copied().unwrap_or_default()));
                }
            }
        }
        assert!(missing.is_empty(), "Rust blocks not found in any of {MIRRORS:?} (so not compiled): {missing:#?}");
    }

    #[test]
    fn finds_named_blocks() {
        let md = "x\n```toml\n# kernels/Cargo.toml (the kernel crate)\n[package]\n```\n```rust\n// src/main.rs\nfn main() {}\n```\n```sh\nls\n```\n";
        assert_eq!(
            readme_blocks(md),
            vec![
                ("kernels/Cargo.toml".into(), "# kernels/Cargo.toml (the kernel crate)\n[package]\n".into()),
                ("src/main.rs".into(), "// src/main.rs\nfn main() {}\n".into())
            ]
        );
    }

    #[test]
    fn readme_matches_the_quickstart_example() {
        let root = root();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let blocks = readme_blocks(&readme);
        for f in QUICKSTART_FILES {
            let file = std::fs::read_to_string(root.join("examples/quickstart").join(f)).unwrap();
            let block = blocks.iter().find(|(n, _)| n == f).map(|(_, t)| t.as_str());
            assert_eq!(block, Some(file.as_str()), "README block for {f}");
        }
    }
}
