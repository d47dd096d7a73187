//! How the proxy executes a port channel's `atomic_add` request: a 64-bit add at system scope to
//! a registered u64, in stream order after the proxy's earlier requests.
//!
//! Two ways, chosen once per proxy when it starts ([`AtomicAdd::select`]):
//!
//! * [`AtomicAddPath::StreamMemOp`]: the driver's stream memory operation
//!   (`cuStreamBatchMemOp` with `CU_STREAM_MEM_OP_ATOMIC_REDUCTION`, add on an unsigned 64-bit
//!   value), after a system-scope memory barrier in the same batch, so the earlier copies are
//!   visible before the addition; no kernel launch. Used where the device reports
//!   `CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED` (drivers of CUDA 13.1 and later).
//! * [`AtomicAddPath::Kernel`]: a one-thread kernel (`atomic_add.ptx`,
//!   `red.relaxed.sys.global.add.u64`), ordered after the earlier work by the stream; the
//!   fallback everywhere else.
//!
//! `MSCCLPP_RS_PROXY_ATOMIC_ADD` ([`ENV_VAR`]) overrides the choice so that both can be
//! measured (and `ProxyBuilder::atomic_add_kernel` forces the kernel for one proxy): `kernel` forces the kernel, `memop` asks for the memory operation (the kernel is
//! still used, with the reason, where the device lacks it), unset or `auto` chooses. The choice
//! and its reason are printed to standard error once per process (again only if a later proxy
//! chooses differently).

use std::ffi::OsStr;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaFunction, CudaStream};

use crate::driver::{self, StreamMemOp};
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::launch::{Args, LaunchConfig, launch_on};

/// The fallback kernel's PTX.
pub(super) const PTX: &str = include_str!("atomic_add.ptx");
/// The fallback kernel's name in [`PTX`].
const KERNEL: &str = "mscclpp_proxy_atomic_add";
/// The variable that overrides the choice: `kernel`, `memop` or `auto` (the default).
pub const ENV_VAR: &str = "MSCCLPP_RS_PROXY_ATOMIC_ADD";

/// How a proxy executes atomic-add requests (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicAddPath {
    /// The driver's stream memory operation (`CU_STREAM_MEM_OP_ATOMIC_REDUCTION`).
    StreamMemOp,
    /// The one-thread kernel.
    Kernel,
}

impl std::fmt::Display for AtomicAddPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::StreamMemOp => "stream memory operation",
            Self::Kernel => "kernel",
        })
    }
}

/// What the override asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wish {
    Auto,
    Kernel,
    StreamMemOp,
}

fn wish(value: Option<&OsStr>) -> Result<Wish> {
    match value.map(|v| v.to_str().map(str::trim)) {
        None | Some(Some("" | "auto")) => Ok(Wish::Auto),
        Some(Some("kernel")) => Ok(Wish::Kernel),
        Some(Some("memop")) => Ok(Wish::StreamMemOp),
        Some(_) => Err(Error::InvalidArgument(format!(
            "{ENV_VAR}={}: expected kernel, memop or auto",
            value.unwrap_or_default().display()
        ))),
    }
}

/// The path and why, from the override's value (`env`) and what the device supports
/// (`support`: whether it executes the memory operation, or why that is unknown).
pub(crate) fn choose(
    env: Option<&OsStr>,
    support: std::result::Result<bool, String>,
) -> Result<(AtomicAddPath, String)> {
    let wish = wish(env)?;
    Ok(match (wish, support) {
        (Wish::Kernel, _) => (AtomicAddPath::Kernel, format!("{ENV_VAR}=kernel")),
        (_, Ok(true)) => (
            AtomicAddPath::StreamMemOp,
            match wish {
                Wish::StreamMemOp => format!("{ENV_VAR}=memop, and the GPU supports atomic reductions"),
                _ => "the GPU supports atomic reductions in stream memory operations".into(),
            },
        ),
        (_, Ok(false)) => {
            (AtomicAddPath::Kernel, "the GPU does not support atomic reductions in stream memory operations".into())
        }
        (_, Err(why)) => (AtomicAddPath::Kernel, why),
    })
}

/// Whether `gpu` executes `CU_STREAM_MEM_OP_ATOMIC_REDUCTION`, or why that is unknown.
fn support(gpu: &Gpu) -> std::result::Result<bool, String> {
    match driver::device_attribute(gpu.context().cu_device(), driver::CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED) {
        Ok(v) if v != 0 && !driver::stream_batch_mem_op_available() => {
            Err("the driver lacks cuStreamBatchMemOp_v2".into())
        }
        Ok(v) => Ok(v != 0),
        Err(r) => Err(format!(
            "the driver does not know CU_DEVICE_ATTRIBUTE_ATOMIC_REDUCTION_SUPPORTED ({r:?}; it needs CUDA 13.1)"
        )),
    }
}

/// Prints the choice once per process (and again for a different choice).
fn log_once(path: AtomicAddPath, reason: &str) {
    static SEEN: Mutex<Vec<(AtomicAddPath, String)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.iter().any(|(p, r)| *p == path && r == reason) {
        seen.push((path, reason.to_string()));
        eprintln!("mscclpp-host: proxy atomic add: {path} ({reason})");
    }
}

/// The way one proxy executes atomic adds.
pub(super) enum AtomicAdd {
    /// [`AtomicAddPath::StreamMemOp`].
    StreamMemOp,
    /// [`AtomicAddPath::Kernel`], with the kernel loaded (a bad module fails the proxy's start,
    /// not a request).
    Kernel(CudaFunction),
}

impl AtomicAdd {
    /// Chooses for `gpu` (see the module docs; `force_kernel`: as if [`ENV_VAR`] were `kernel`)
    /// and logs the choice once.
    pub(super) fn select(gpu: &Arc<Gpu>, force_kernel: bool) -> Result<Self> {
        let (path, reason) = if force_kernel {
            (AtomicAddPath::Kernel, "ProxyBuilder::atomic_add_kernel".to_string())
        } else {
            choose(std::env::var_os(ENV_VAR).as_deref(), support(gpu))?
        };
        log_once(path, &reason);
        Ok(match path {
            AtomicAddPath::StreamMemOp => Self::StreamMemOp,
            AtomicAddPath::Kernel => Self::Kernel(gpu.function(PTX, KERNEL)?),
        })
    }

    /// The path.
    pub(super) fn path(&self) -> AtomicAddPath {
        match self {
            Self::StreamMemOp => AtomicAddPath::StreamMemOp,
            Self::Kernel(_) => AtomicAddPath::Kernel,
        }
    }

    /// Enqueues `*addr += value` on `stream`, after the work before it.
    ///
    /// # Safety
    /// `stream` is a live stream of `gpu`'s context, current on this thread, and `addr` an
    /// 8-aligned u64 that stays valid until the stream has passed the operation.
    pub(super) unsafe fn enqueue(&self, gpu: &Gpu, stream: &CudaStream, addr: u64, value: u64) -> Result<()> {
        match self {
            Self::StreamMemOp => {
                let mut ops = [StreamMemOp::system_barrier(), StreamMemOp::atomic_add_u64(addr, value)];
                // SAFETY: the caller's contract.
                unsafe { driver::stream_batch_mem_op(stream.cu_stream(), &mut ops) }.map_err(|r| Error::Driver {
                    context: format!("cuStreamBatchMemOp (atomic add at {addr:#x})"),
                    source: cudarc::driver::DriverError(r),
                })
            }
            Self::Kernel(f) => {
                let mut args = Args::new().arg(addr).arg(value);
                // SAFETY: launch contract: (1) the kernel takes (u64 address, u64 value); (2) the
                // address stays valid (caller); (3) the stream and the function are `gpu`'s.
                unsafe { launch_on(gpu, stream, f, LaunchConfig::new(1, 1), &mut args) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_and_reason() {
        let on = || Ok(true);
        let off = || Ok(false);
        let unknown = || Err("the driver does not know the attribute".to_string());
        let kernel = Some(OsStr::new("kernel"));
        let memop = Some(OsStr::new("memop"));
        assert_eq!(choose(None, on()).unwrap().0, AtomicAddPath::StreamMemOp);
        assert_eq!(choose(Some(OsStr::new("auto")), on()).unwrap().0, AtomicAddPath::StreamMemOp);
        assert_eq!(choose(memop, on()).unwrap().0, AtomicAddPath::StreamMemOp);
        // Forced kernel wins even where the memory operation is supported, and says why.
        assert_eq!(choose(kernel, on()).unwrap(), (AtomicAddPath::Kernel, format!("{ENV_VAR}=kernel")));
        // Without support, or without knowing, the kernel, with the reason.
        for (env, support) in [(None, off()), (memop, off()), (None, unknown()), (memop, unknown())] {
            let (path, reason) = choose(env, support.clone()).unwrap();
            assert_eq!(path, AtomicAddPath::Kernel, "{env:?} {support:?}");
            assert!(!reason.is_empty());
        }
        assert_eq!(choose(None, unknown()).unwrap().1, "the driver does not know the attribute");
        // A value it does not know is an error, not a silent default.
        let e = choose(Some(OsStr::new("kernal")), on()).unwrap_err().to_string();
        assert!(e.contains(ENV_VAR) && e.contains("kernal"), "{e}");
    }

    #[test]
    fn the_kernel_is_the_red_instruction_it_claims() {
        assert!(PTX.contains(&format!(".visible .entry {KERNEL}(")));
        assert!(PTX.contains("red.relaxed.sys.global.add.u64"));
    }
}
