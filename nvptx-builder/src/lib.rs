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
//! nightly toolchain with `rust-src`.

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target triple kernels are built for.
pub const TARGET: &str = "nvptx64-nvidia-cuda";

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
}

impl Builder {
    /// A builder for the kernel crate in `crate_dir` (relative paths are taken from the build
    /// script's `CARGO_MANIFEST_DIR`, or the current directory outside a build script).
    /// Defaults: target cpu `sm_90`, PTX ISA 8.6, profile `release`.
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

    /// The nested build's target directory. Default: `<outer target dir>/nvptx` inside a build
    /// script, else `<crate>/target`.
    pub fn target_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.target_dir = Some(dir.into());
        self
    }

    /// Whether to print `cargo:rerun-if-changed` lines (default: when run from a build script).
    pub fn rerun_if_changed(mut self, on: bool) -> Self {
        self.rerun_if_changed = on;
        self
    }

    fn resolved_target_dir(&self) -> PathBuf {
        if let Some(d) = &self.target_dir {
            return d.clone();
        }
        // OUT_DIR is <target>[/<triple>]/<profile>/build/<pkg>-<hash>/out.
        if let Some(out) = std::env::var_os("OUT_DIR")
            && let Some(t) = Path::new(&out).ancestors().nth(4)
        {
            return t.join("nvptx");
        }
        self.crate_dir.join("target")
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

        self.run_cargo(&target_dir, &ptx_path, None)?;
        if !ptx_path.exists() {
            // Cargo considered the crate fresh but the PTX was deleted: force one rebuild by
            // changing the final crate's flags.
            self.run_cargo(&target_dir, &ptx_path, Some("nvptx_builder_rebuild"))?;
        }
        if !ptx_path.exists() {
            return Err(Error::NoPtx(ptx_path));
        }

        if self.rerun_if_changed {
            self.emit_rerun(&target_dir, &name);
        }
        Ok(Ptx { path: ptx_path, crate_name: name })
    }

    fn run_cargo(&self, target_dir: &Path, ptx_path: &Path, extra_cfg: Option<&str>) -> Result<(), Error> {
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
            .args(["--config", &format!("profile.{p}.panic=\"abort\"")]);
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
        if !out.status.success() {
            return Err(Error::Cargo { command: shown, stderr: String::from_utf8_lossy(&out.stderr).into_owned() });
        }
        Ok(())
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
    fn variant_tags_differ_by_features_and_cpu() {
        let a = Builder::new("/k").variant_tag("k-k");
        let b = Builder::new("/k").feature("checks").variant_tag("k-k");
        let c = Builder::new("/k").target_cpu("sm_100a").variant_tag("k-k");
        assert!(a.starts_with("k_k-sm_90-"));
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
