//! Build-script helper that turns a `#![no_std]` Rust kernel crate into PTX for
//! `nvptx64-nvidia-cuda`, and assembles PTX with `ptxas` when it is installed.
//!
//! ```no_run
//! // build.rs of a host crate whose kernels live in ./kernels
//! let ptx = nvptx_builder::Builder::new("kernels").build().expect("kernel build failed");
//! println!("cargo:rustc-env=KERNELS_PTX={}", ptx.path.display());
//! // in the host crate: const PTX: &str = include_str!(env!("KERNELS_PTX"));
//! ```
//!
//! What [`Builder::build`] runs, in the kernel crate's folder and with its own target directory
//! (a nested cargo on the outer target directory would wait on the outer build's lock):
//!
//! ```text
//! cargo rustc --lib --profile release --target nvptx64-nvidia-cuda -Zbuild-std=core
//!     --config 'target.nvptx64-nvidia-cuda.rustflags=["-Ctarget-cpu=sm_90","-Ctarget-feature=+ptx86"]'
//!     --config profile.release.{lto="fat",codegen-units=1,panic="abort"}
//!     -- --emit=asm=<out>.ptx -C linker=true
//! ```
//!
//! Fat LTO makes the one `.ptx` self-contained (functions from `core` and from dependencies are
//! defined in it); the no-op linker stands in for `llvm-bitcode-linker`, which is not needed since
//! the PTX comes from `--emit=asm`. The kernel crate must be `crate-type = ["cdylib"]` and needs a
//! nightly toolchain with `rust-src`. The nested cargo also gets `--color never`, and `--locked`
//! when the kernel crate has a `Cargo.lock` next to its manifest (see [`Builder::locked`]).
//!
//! # Where the PTX lands
//!
//! In `<nested>/ptx/<crate>-<cpu>-<hash>.ptx`: `<crate>` is the kernel crate's package name with
//! `-` written `_`, `<cpu>` the target cpu, and `<hash>` 16 hex digits of a hash of what changes
//! the code (cpu, PTX ISA, features, default features, profile), so each variant has its own file.
//! `<nested>` is the nested build's target directory, where its own outputs
//! (`nvptx64-nvidia-cuda/<profile>/...`) go as well:
//!
//! - [`Builder::target_dir`], when set;
//! - in a build script, `nvptx/` in the folder that holds the outer build's profile folder, found
//!   from `OUT_DIR` (`<dir>/<profile>/build/<pkg>-<hash>/out`, or
//!   `<dir>/<profile>/build/<pkg>/<hash>/out` in cargo's newer build-directory layout): that is
//!   `<target>/nvptx` for a plain build and `<target>/<triple>/nvptx` for a build with
//!   `--target <triple>` (`<target>` being the build directory when `build.build-dir` moves it).
//!   The outer debug and release builds share it; an `OUT_DIR` of neither shape gives
//!   `<OUT_DIR>/nvptx`;
//! - outside a build script, `<crate>/target`.
//!
//! Use [`Ptx::path`] rather than building the name: the hash is not a stable format.
//!
//! # Warnings
//!
//! A successful nested build prints nothing, so [`Builder::build`] returns the warnings it reported
//! ([`Ptx::warnings`], one per warning with the place it points at) and, in a build script,
//! forwards the first [`MAX_FORWARDED_WARNINGS`] of them as `cargo:warning=` lines, then one line
//! saying how many more there were. Cargo's `generated N warnings` summaries are left out.

use std::collections::hash_map::DefaultHasher;
use std::ffi::OsStr;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target triple kernels are built for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

/// Most warnings of the kernel build forwarded as `cargo:warning=` lines (one more line counts the
/// rest), so that a crate with hundreds of warnings does not flood the outer build's output.
pub const MAX_FORWARDED_WARNINGS: usize = 20;

/// Variables the outer build sets for its own compilations that must not leak into the nested
/// kernel build (they would apply host flags or wrappers such as clippy-driver to nvptx code).
const SCRUBBED_ENV: &[&str] = &[
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_BUILD_TARGET",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "RUSTDOCFLAGS",
];

/// Everything that can go wrong.
#[derive(Debug)]
pub enum Error {
    /// A file or process could not be read, written or started.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The nested cargo build failed; `stderr` is cargo's own output.
    Cargo {
        /// The command line that failed.
        command: String,
        /// Cargo's standard error.
        stderr: String,
    },
    /// The build succeeded but produced no PTX file.
    NoPtx(PathBuf),
    /// A CUDA tool (ptxas, cuobjdump) was not found.
    ToolNotFound(&'static str),
    /// A CUDA tool ran and failed.
    Tool {
        /// The command line that failed.
        command: String,
        /// Its standard error.
        stderr: String,
    },
    /// The kernel crate's manifest could not be understood.
    Manifest(String),
    /// The nested build ran with `--locked` and the kernel crate's `Cargo.lock` does not match its
    /// manifest (see [`Builder::locked`]).
    LockOutdated {
        /// The lock file.
        lock: PathBuf,
        /// The command line that failed.
        command: String,
        /// Cargo's standard error.
        stderr: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Cargo { command, stderr } => write!(f, "kernel build failed: {command}\n{stderr}"),
            Error::NoPtx(p) => write!(f, "kernel build produced no PTX at {}", p.display()),
            Error::ToolNotFound(t) => write!(
                f,
                "{t} not found: set {} or PATH, or install nvidia-cuda-nvcc/nvidia-cuda-cuobjdump into .venv-tools",
                t.to_uppercase()
            ),
            Error::Tool { command, stderr } => write!(f, "{command} failed:\n{stderr}"),
            Error::Manifest(m) => write!(f, "kernel crate manifest: {m}"),
            Error::LockOutdated { lock, command, stderr } => {
                let dir = lock.parent().unwrap_or(Path::new("."));
                write!(
                    f,
                    "kernel build failed: {} does not match the kernel crate's manifest and the build runs with \
                     --locked; update it (`cargo update --workspace` in {}) and commit it, or build with \
                     Builder::locked(false): {command}\n{stderr}",
                    lock.display(),
                    dir.display()
                )
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

/// A PTX module produced by [`Builder::build`].
#[derive(Clone, Debug)]
pub struct Ptx {
    /// Where the PTX file is.
    pub path: PathBuf,
    /// The kernel crate's package name.
    pub crate_name: String,
    /// The warnings the nested build reported, one line each (the message and the place it
    /// points at), all of them: only the first [`MAX_FORWARDED_WARNINGS`] are forwarded.
    pub warnings: Vec<String>,
}

impl Ptx {
    /// The PTX text.
    pub fn read(&self) -> Result<String, Error> {
        std::fs::read_to_string(&self.path).map_err(io(format!("reading {}", self.path.display())))
    }
}

/// Configures and runs the build of one kernel crate.
#[derive(Clone, Debug)]
pub struct Builder {
    crate_dir: PathBuf,
    target_cpu: String,
    ptx_isa: (u32, u32),
    features: Vec<String>,
    no_default_features: bool,
    profile: String,
    target_dir: Option<PathBuf>,
    rerun_if_changed: bool,
    locked: bool,
    forward_warnings: bool,
}

impl Builder {
    /// A builder for the kernel crate in `crate_dir` (relative paths are taken from the build
    /// script's `CARGO_MANIFEST_DIR`, or the current directory outside a build script).
    /// Defaults: target cpu `sm_90`, PTX ISA 8.6, profile `release`, `--locked` when the crate
    /// has a lock file, warnings forwarded from a build script.
    pub fn new(crate_dir: impl AsRef<Path>) -> Self {
        let dir = crate_dir.as_ref();
        let crate_dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            std::env::var_os("CARGO_MANIFEST_DIR")
                .map(PathBuf::from)
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_default()
                .join(dir)
        };
        Self {
            crate_dir,
            target_cpu: "sm_90".into(),
            ptx_isa: (8, 6),
            features: Vec::new(),
            no_default_features: false,
            profile: "release".into(),
            target_dir: None,
            rerun_if_changed: std::env::var_os("OUT_DIR").is_some(),
            locked: true,
            forward_warnings: std::env::var_os("OUT_DIR").is_some(),
        }
    }

    /// The GPU architecture (`-Ctarget-cpu`), e.g. `sm_90` or `sm_100a`.
    pub fn target_cpu(mut self, cpu: impl Into<String>) -> Self {
        self.target_cpu = cpu.into();
        self
    }

    /// The PTX ISA version (`-Ctarget-feature=+ptxMN`), e.g. `(8, 6)`.
    pub fn ptx_isa(mut self, major: u32, minor: u32) -> Self {
        self.ptx_isa = (major, minor);
        self
    }

    /// Enables a cargo feature of the kernel crate.
    pub fn feature(mut self, feature: impl Into<String>) -> Self {
        self.features.push(feature.into());
        self
    }

    /// Disables the kernel crate's default features.
    pub fn no_default_features(mut self) -> Self {
        self.no_default_features = true;
        self
    }

    /// The cargo profile (default `release`). LTO, one codegen unit and `panic = "abort"` are
    /// forced for it.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = profile.into();
        self
    }

    /// The nested build's target directory. Default: `<target>/nvptx` (`<target>/<triple>/nvptx`
    /// with `--target`) inside a build script, else `<crate>/target`; see the crate docs, "Where
    /// the PTX lands".
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed` lines (default: when run from a build script).
    pub fn rerun_if_changed(mut self, on: bool) -> Self {
        self.rerun_if_changed = on;
        self
    }

    /// Whether the nested build runs with `--locked` when the kernel crate has a `Cargo.lock`
    /// next to its manifest (default: yes). With it, a lock file that no longer matches the
    /// manifest fails the build ([`Error::LockOutdated`]) instead of being rewritten, as the host
    /// crate's own lock is under `cargo build --locked`; a kernel crate without a lock file is built
    /// without `--locked` (cargo would refuse to create one), and writes one.
    pub fn locked(mut self, on: bool) -> Self {
        self.locked = on;
        self
    }

    /// Whether to print the nested build's warnings as `cargo:warning=` lines (default: when run
    /// from a build script); they are in [`Ptx::warnings`] either way.
    pub fn forward_warnings(mut self, on: bool) -> Self {
        self.forward_warnings = on;
        self
    }

    fn resolved_target_dir(&self) -> PathBuf {
        nested_target_dir(self.target_dir.as_deref(), std::env::var_os("OUT_DIR").as_deref(), &self.crate_dir)
    }

    /// The PTX file name stem: the crate name plus a hash of everything that changes the code.
    fn variant_tag(&self, name: &str) -> String {
        let mut h = DefaultHasher::new();
        (&self.target_cpu, self.ptx_isa, &self.features, self.no_default_features, &self.profile).hash(&mut h);
        format!("{}-{}-{:016x}", name.replace('-', "_"), self.target_cpu, h.finish())
    }

    /// Builds the kernel crate and returns its PTX.
    pub fn build(&self) -> Result<Ptx, Error> {
        let manifest = self.crate_dir.join("Cargo.toml");
        let name = package_name(&manifest)?;
        let target_dir = self.resolved_target_dir();
        let out_dir = target_dir.join("ptx");
        std::fs::create_dir_all(&out_dir).map_err(io(format!("creating {}", out_dir.display())))?;
        let ptx_path = out_dir.join(format!("{}.ptx", self.variant_tag(&name)));

        let mut warnings = self.run_cargo(&target_dir, &ptx_path, None)?;
        if !ptx_path.exists() {
            // Cargo considered the crate fresh but the PTX was deleted: force one rebuild by
            // changing the final crate's flags.
            warnings = self.run_cargo(&target_dir, &ptx_path, Some("nvptx_builder_rebuild"))?;
        }
        if !ptx_path.exists() {
            return Err(Error::NoPtx(ptx_path));
        }

        if self.rerun_if_changed {
            self.emit_rerun(&target_dir, &name);
        }
        if self.forward_warnings {
            for line in forwarded_warnings(&name, &self.crate_dir, &warnings) {
                println!("cargo:warning={line}");
            }
        }
        Ok(Ptx { path: ptx_path, crate_name: name, warnings })
    }

    /// Runs the nested cargo; returns the warnings it reported.
    fn run_cargo(&self, target_dir: &Path, ptx_path: &Path, extra_cfg: Option<&str>) -> Result<Vec<String>, Error> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let (maj, min) = self.ptx_isa;
        let rustflags = format!(
            "target.{TARGET}.rustflags=[\"-Ctarget-cpu={}\",\"-Ctarget-feature=+ptx{maj}{min}\"]",
            self.target_cpu
        );
        let p = &self.profile;
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&self.crate_dir)
            .args(["rustc", "--lib", "--profile", p, "--target", TARGET, "-Zbuild-std=core"])
            .arg("--target-dir")
            .arg(target_dir)
            .args(["--config", &rustflags])
            .args(["--config", &format!("profile.{p}.lto=\"fat\"")])
            .args(["--config", &format!("profile.{p}.codegen-units=1")])
            .args(["--config", &format!("profile.{p}.panic=\"abort\"")])
            .args(["--color", "never"]);
        let lock = self.crate_dir.join("Cargo.lock");
        let locked = self.locked && lock.is_file();
        if locked {
            cmd.arg("--locked");
        }
        if !self.features.is_empty() {
            cmd.arg("--features").arg(self.features.join(","));
        }
        if self.no_default_features {
            cmd.arg("--no-default-features");
        }
        cmd.arg("--").arg(format!("--emit=asm={}", ptx_path.display())).args(["-C", "linker=true"]);
        if let Some(c) = extra_cfg {
            cmd.args(["--cfg", c]);
        }
        for v in SCRUBBED_ENV {
            cmd.env_remove(v);
        }
        let shown = format!("{cmd:?}");
        let out = cmd.output().map_err(io(format!("running {}", Path::new(&cargo).display())))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            // "cannot update the lock file ... because --locked was passed" (older cargo: "the lock
            // file ... needs to be updated but --locked was passed").
            if locked && stderr.contains("lock file") && stderr.contains("--locked was passed") {
                return Err(Error::LockOutdated { lock, command: shown, stderr });
            }
            return Err(Error::Cargo { command: shown, stderr });
        }
        Ok(warning_lines(&stderr))
    }

    fn emit_rerun(&self, target_dir: &Path, name: &str) {
        println!("cargo:rerun-if-changed={}", self.crate_dir.display());
        for env in ["PTXAS", "CUOBJDUMP"] {
            println!("cargo:rerun-if-env-changed={env}");
        }
        let profile_dir = match self.profile.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        };
        let dep_info = target_dir.join(TARGET).join(profile_dir).join(format!("{}.d", name.replace('-', "_")));
        if let Ok(text) = std::fs::read_to_string(&dep_info) {
            for file in dep_info_files(&text) {
                // Sources of the toolchain and of registry crates never change under us.
                if !file.contains("/.rustup/") && !file.contains("/registry/src/") {
                    println!("cargo:rerun-if-changed={file}");
                }
            }
        }
    }
}

/// The nested build's target directory: `explicit` when given; else, in a build script (its
/// `OUT_DIR` given), `nvptx/` in the folder holding the outer build's profile folder (or in
/// `OUT_DIR` itself if it has neither known shape); else `<crate_dir>/target`.
fn nested_target_dir(explicit: Option<&Path>, out_dir: Option<&OsStr>, crate_dir: &Path) -> PathBuf {
    if let Some(d) = explicit {
        return d.to_path_buf();
    }
    match out_dir.map(Path::new) {
        Some(out) => outer_build_dir(out).unwrap_or(out).join("nvptx"),
        None => crate_dir.join("target"),
    }
}

/// `<dir>` of a build script's `OUT_DIR`, `<dir>/<profile>/build/<pkg>-<hash>/out` (cargo's
/// classic layout) or `<dir>/<profile>/build/<pkg>/<hash>/out` (its newer build-directory layout,
/// told apart by a unit folder named by the hash alone).
fn outer_build_dir(out: &Path) -> Option<&Path> {
    if out.file_name()? != "out" {
        return None;
    }
    let unit = out.parent()?;
    let unit_name = unit.file_name()?.to_str()?;
    let hash_only = !unit_name.is_empty() && unit_name.bytes().all(|b| b.is_ascii_hexdigit());
    let build = if hash_only { unit.parent()?.parent()? } else { unit.parent()? };
    if build.file_name()? != "build" {
        return None;
    }
    let dir = build.parent()?.parent()?;
    (!dir.as_os_str().is_empty()).then_some(dir)
}

/// The warnings in a cargo build's standard error (rendered without color), one line each:
/// the headline (`unused variable: `x``, `[E0170] ...` for a warning with a code) and, when the
/// diagnostic points somewhere, ` (at <file>:<line>:<column>)`. Cargo's `` `pkg` (lib) generated
/// N warnings`` summaries and rustc's `N warnings emitted` counts are left out.
fn warning_lines(stderr: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("warning") else { continue };
        let text = if let Some(m) = rest.strip_prefix(": ") {
            m.trim().to_string()
        } else if let Some((code, m)) = rest.strip_prefix('[').and_then(|r| r.split_once("]: ")) {
            format!("[{code}] {}", m.trim())
        } else {
            continue;
        };
        if is_warning_summary(&text) || text.is_empty() {
            continue;
        }
        // The place: a `--> file:line:col` line of the same diagnostic (it ends at a blank line
        // or at the next headline).
        let place = lines[i + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty() && !l.starts_with("warning") && !l.starts_with("error"))
            .find_map(|l| l.trim_start().strip_prefix("--> "));
        found.push(match place {
            Some(p) => format!("{text} (at {})", p.trim()),
            None => text,
        });
    }
    found
}

/// Cargo's per-crate count (`` `k` (lib) generated 2 warnings (run `cargo fix` ...)``) or
/// rustc's (`2 warnings emitted`).
fn is_warning_summary(text: &str) -> bool {
    let counts = |s: &str| s.contains(" warning") && s.split_whitespace().any(|w| w.parse::<usize>().is_ok());
    (text.starts_with('`') && text.contains(") generated ") && counts(text))
        || ((text.ends_with(" warning emitted") || text.ends_with(" warnings emitted")) && counts(text))
}

/// The `cargo:warning=` texts for `warnings` of kernel crate `name`: the first
/// [`MAX_FORWARDED_WARNINGS`], then one line counting the others. Places are as cargo printed
/// them, relative to the kernel crate's workspace root (its own folder for a crate with its own
/// `[workspace]`).
fn forwarded_warnings(name: &str, crate_dir: &Path, warnings: &[String]) -> Vec<String> {
    let mut out: Vec<String> = warnings
        .iter()
        .take(MAX_FORWARDED_WARNINGS)
        .map(|w| format!("kernel crate {name}: {}", w.replace(['\r', '\n'], " ")))
        .collect();
    if warnings.len() > MAX_FORWARDED_WARNINGS {
        out.push(format!(
            "kernel crate {name}: {} more warnings not shown (build it with cargo in {} to see them all)",
            warnings.len() - MAX_FORWARDED_WARNINGS,
            crate_dir.display()
        ));
    }
    out
}

/// The files listed on the right of the first rule of a Makefile-style dep-info file.
fn dep_info_files(text: &str) -> Vec<String> {
    let Some(line) = text.lines().next() else { return Vec::new() };
    let Some((_, deps)) = line.split_once(": ") else { return Vec::new() };
    let mut files = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                cur.push(' ');
                chars.next();
            }
            ' ' => {
                if !cur.is_empty() {
                    files.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        files.push(cur);
    }
    files
}

/// The `name` of the `[package]` table of a Cargo manifest.
fn package_name(manifest: &Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(manifest).map_err(io(format!("reading {}", manifest.display())))?;
    let mut in_package = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            in_package = l == "[package]";
            continue;
        }
        if in_package
            && let Some(rest) = l.strip_prefix("name")
            && let Some(v) = rest.trim_start().strip_prefix('=')
        {
            let v = v.trim().trim_matches('"');
            if !v.is_empty() {
                return Ok(v.to_string());
            }
        }
    }
    Err(Error::Manifest(format!("no [package] name in {}", manifest.display())))
}

/// Finds a CUDA tool (`ptxas`, `cuobjdump`, `nvdisasm`): the environment variable named like the
/// tool in upper case, then `PATH`, then a `.venv-tools` virtualenv (pip's `nvidia-cuda-*`
/// packages) in the current directory, the build script's package or any of their ancestors.
pub fn find_tool(name: &'static str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(name.to_uppercase()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("CARGO_MANIFEST_DIR") {
        roots.push(d.into());
    }
    if let Ok(d) = std::env::current_dir() {
        roots.push(d);
    }
    for root in roots {
        for dir in root.ancestors() {
            if let Some(p) = venv_tool(&dir.join(".venv-tools"), name) {
                return Some(p);
            }
        }
    }
    None
}

/// `<venv>/lib/python*/site-packages/nvidia/*/bin/<name>` (where pip puts the CUDA wheels' tools).
fn venv_tool(venv: &Path, name: &str) -> Option<PathBuf> {
    let lib = std::fs::read_dir(venv.join("lib")).ok()?;
    for py in lib.flatten() {
        let nvidia = py.path().join("site-packages").join("nvidia");
        if let Ok(kits) = std::fs::read_dir(&nvidia) {
            for kit in kits.flatten() {
                let p = kit.path().join("bin").join(name);
                if p.is_file() {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// A cubin assembled from PTX, with its disassembly.
#[derive(Clone, Debug)]
pub struct Assembled {
    /// The cubin file (next to the PTX, named after the architecture).
    pub cubin: PathBuf,
    /// `cuobjdump -sass` of the cubin.
    pub sass: String,
}

/// Assembles `ptx` with `ptxas -arch=<arch>` and disassembles the result with `cuobjdump -sass`.
pub fn assemble(ptx: &Path, arch: &str) -> Result<Assembled, Error> {
    let ptxas = find_tool("ptxas").ok_or(Error::ToolNotFound("ptxas"))?;
    let cuobjdump = find_tool("cuobjdump").ok_or(Error::ToolNotFound("cuobjdump"))?;
    let cubin = ptx.with_extension(format!("{arch}.cubin"));
    run_tool(Command::new(&ptxas).arg(format!("-arch={arch}")).arg(ptx).arg("-o").arg(&cubin))?;
    let sass = run_tool(Command::new(&cuobjdump).arg("-sass").arg(&cubin))?;
    Ok(Assembled { cubin, sass })
}

fn run_tool(cmd: &mut Command) -> Result<String, Error> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(io(format!("running {shown}")))?;
    if !out.status.success() {
        let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        stderr.push_str(&String::from_utf8_lossy(&out.stdout));
        return Err(Error::Tool { command: shown, stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dep_info() {
        let d = "/t/k.ptx: /a/src/lib.rs /b/my\\ dir/x.rs /c/y.rs\n\n/a/src/lib.rs:\n";
        assert_eq!(dep_info_files(d), vec!["/a/src/lib.rs", "/b/my dir/x.rs", "/c/y.rs"]);
        assert!(dep_info_files("").is_empty());
    }

    #[test]
    fn reads_package_name() {
        let dir = std::env::temp_dir().join(format!("nvptx-builder-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = dir.join("Cargo.toml");
        std::fs::write(
            &m,
            "[workspace]\n\n[package]\nversion = \"0.1.0\"\nname = \"my-kernels\"\n[lib]\nname = \"x\"\n",
        )
        .unwrap();
        assert_eq!(package_name(&m).unwrap(), "my-kernels");
        std::fs::write(&m, "[lib]\nname = \"x\"\n").unwrap();
        assert!(matches!(package_name(&m), Err(Error::Manifest(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nested_target_dir_follows_out_dir() {
        let t = |explicit: Option<&str>, out: Option<&str>| {
            nested_target_dir(explicit.map(Path::new), out.map(OsStr::new), Path::new("/k"))
        };
        // Cargo's classic layout: <target>/<profile>/build/<pkg>-<hash>/out.
        assert_eq!(t(None, Some("/w/target/debug/build/host-0123abcd/out")), Path::new("/w/target/nvptx"));
        assert_eq!(t(None, Some("/w/target/release/build/host-0123abcd/out")), Path::new("/w/target/nvptx"));
        // ... with --target: <target>/<triple>/<profile>/build/<pkg>-<hash>/out.
        assert_eq!(
            t(None, Some("/w/target/x86_64-unknown-linux-gnu/debug/build/host-0123abcd/out")),
            Path::new("/w/target/x86_64-unknown-linux-gnu/nvptx")
        );
        // The newer build-directory layout: <dir>/<profile>/build/<pkg>/<hash>/out, also for a
        // package named like the folders.
        assert_eq!(t(None, Some("/w/target/debug/build/host/3d3d23611cf4896e/out")), Path::new("/w/target/nvptx"));
        assert_eq!(t(None, Some("/w/target/debug/build/build/3d3d23611cf4896e/out")), Path::new("/w/target/nvptx"));
        assert_eq!(
            t(None, Some("/w/t/aarch64-unknown-linux-gnu/bench/build/out/3d3d23611cf4896e/out")),
            Path::new("/w/t/aarch64-unknown-linux-gnu/nvptx")
        );
        // Neither shape: inside OUT_DIR itself, never above it.
        assert_eq!(t(None, Some("/somewhere/else/out")), Path::new("/somewhere/else/out/nvptx"));
        assert_eq!(t(None, Some("/w/target/debug/out")), Path::new("/w/target/debug/out/nvptx"));
        assert_eq!(t(None, Some("/out")), Path::new("/out/nvptx"));
        assert_eq!(t(None, Some("build/host-1/out")), Path::new("build/host-1/out/nvptx"));
        // No build script: the kernel crate's own target/; an explicit directory wins.
        assert_eq!(t(None, None), Path::new("/k/target"));
        assert_eq!(t(Some("/mine"), Some("/w/target/debug/build/host-0123abcd/out")), Path::new("/mine"));
        assert_eq!(t(Some("/mine"), None), Path::new("/mine"));
    }

    /// What cargo prints for a kernel crate with two warnings (one with a code), then its summary.
    const WARNINGS: &str = "   Compiling warn-kernels v0.1.0 (/k)
warning: unused variable: `unused`
  --> src/lib.rs:10:9
   |
10 |     let unused = 3;
   |         ^^^^^^ help: if this is intentional, prefix it with an underscore: `_unused`
   |
   = note: `#[warn(unused_variables)]` (part of `#[warn(unused)]`) on by default

warning[E0170]: pattern binding `A` is named the same as one of the variants
 --> /dep/src/x.rs:3:5
  |
3 |     A => 1,
  |     ^

warning: unused manifest key: package.colour
warning: `warn-kernels` (lib) generated 2 warnings (run `cargo fix --lib -p warn-kernels` to apply 1 suggestion)
warning: 1 warning emitted
warning: `dep` (lib) generated 1 warning
    Finished `release` profile [optimized] target(s) in 0.58s
";

    #[test]
    fn warning_lines_are_the_headlines_with_their_places() {
        assert_eq!(
            warning_lines(WARNINGS),
            vec![
                "unused variable: `unused` (at src/lib.rs:10:9)",
                "[E0170] pattern binding `A` is named the same as one of the variants (at /dep/src/x.rs:3:5)",
                "unused manifest key: package.colour",
            ]
        );
        assert!(warning_lines("   Compiling k\n    Finished `release` profile\n").is_empty());
        assert!(warning_lines("").is_empty());
        // A warning text that merely mentions counts is kept.
        assert_eq!(warning_lines("warning: 2 warnings in the docs are wrong\n"), ["2 warnings in the docs are wrong"]);
    }

    #[test]
    fn forwarded_warnings_are_capped() {
        let few: Vec<String> = vec!["a (at src/lib.rs:1:1)".into(), "b\nc".into()];
        assert_eq!(
            forwarded_warnings("k", Path::new("/k"), &few),
            ["kernel crate k: a (at src/lib.rs:1:1)", "kernel crate k: b c"]
        );
        let many: Vec<String> = (0..MAX_FORWARDED_WARNINGS + 5).map(|i| format!("w{i}")).collect();
        let out = forwarded_warnings("k", Path::new("/k"), &many);
        assert_eq!(out.len(), MAX_FORWARDED_WARNINGS + 1);
        assert_eq!(out[MAX_FORWARDED_WARNINGS - 1], format!("kernel crate k: w{}", MAX_FORWARDED_WARNINGS - 1));
        assert_eq!(
            out[MAX_FORWARDED_WARNINGS],
            "kernel crate k: 5 more warnings not shown (build it with cargo in /k to see them all)"
        );
        let exact: Vec<String> = (0..MAX_FORWARDED_WARNINGS).map(|i| format!("w{i}")).collect();
        assert_eq!(forwarded_warnings("k", Path::new("/k"), &exact).len(), MAX_FORWARDED_WARNINGS);
    }

    #[test]
    fn variant_tags_differ_by_features_and_cpu() {
        let a = Builder::new("/k").variant_tag("k-k");
        let b = Builder::new("/k").feature("checks").variant_tag("k-k");
        let c = Builder::new("/k").target_cpu("sm_100a").variant_tag("k-k");
        assert!(a.starts_with("k_k-sm_90-"));
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
