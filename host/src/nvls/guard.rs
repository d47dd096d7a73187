//! The multicast guard: the environment rules of the module docs, and the permit every driver
//! step takes.

use std::ffi::{OsStr, OsString};

use crate::error::{Error, Result};

/// The opt-in variable: multicast objects are created only when it is exactly `1`.
pub const ALLOW_VAR: &str = "MSCCLPP_RS_ALLOW_MULTICAST";

/// Variables through which other libraries' users (and machines where multicast is disabled)
/// turn NVLS off.
/// Each one, unless it clearly leaves NVLS on, makes [`multicast_allowed_by_env`] refuse.
pub const DISABLE_VARS: [&str; 3] = ["NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"];

/// Proof that the multicast guard passed. Only [`multicast_allowed_by_env`] makes one; every function
/// that reaches the driver takes it.
#[derive(Debug)]
pub struct MulticastPermit {
    _private: (),
}

/// Whether a variable's value clearly says "on".
fn clearly_on(v: &OsStr) -> bool {
    v.to_str().is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Whether a variable's value clearly says "off" / "no".
fn clearly_off(v: &OsStr) -> bool {
    v.to_str().is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off"))
}

/// The multicast guard over an environment snapshot (`env(name)` is the value of variable
/// `name`, if set). Makes no driver call. See the module docs for the rules.
pub(crate) fn multicast_allowed(env: impl Fn(&str) -> Option<OsString>) -> Result<MulticastPermit> {
    let refuse = |variable: &'static str, reason: String| Err(Error::MulticastRefused { variable, reason });
    if let Some(v) = env("NCCL_NVLS_ENABLE")
        && !clearly_on(&v)
    {
        return refuse(
            "NCCL_NVLS_ENABLE",
            format!("NCCL_NVLS_ENABLE={} turns NVLS off (only 1/true/yes/on keep it on)", v.display()),
        );
    }
    for var in ["NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"] {
        if let Some(v) = env(var)
            && !clearly_off(&v)
        {
            return refuse(var, format!("{var}={} turns multicast off (only 0/false/no/off leave it on)", v.display()));
        }
    }
    match env(ALLOW_VAR) {
        Some(v) if v.to_str().is_some_and(|v| v.trim() == "1") => Ok(MulticastPermit { _private: () }),
        Some(v) => refuse(ALLOW_VAR, format!("{ALLOW_VAR}={}; set it to 1 to opt in", v.display())),
        None => refuse(ALLOW_VAR, format!("{ALLOW_VAR} is not set; set it to 1 to opt in")),
    }
}

/// The multicast guard over this process's environment: the only public way to get a
/// [`MulticastPermit`]. Makes no driver call. See the module docs for the rules.
pub fn multicast_allowed_by_env() -> Result<MulticastPermit> {
    multicast_allowed(|name| std::env::var_os(name))
}
