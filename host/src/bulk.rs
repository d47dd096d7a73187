//! Host-side checks for bulk-copy (TMA) work: reject bad arguments before any launch.

use mscclpp_device::bulk;

use crate::error::{Error, Result};
use crate::gpu::DeviceInfo;

/// Whether the device has the bulk-copy engine (`cp.async.bulk`, compute capability 9.0+).
pub fn is_bulk_supported(info: &DeviceInfo) -> bool {
    info.compute_capability.0 >= 9
}

/// Checks one bulk copy's arguments: 16-byte aligned addresses, a non-zero size that is a
/// multiple of 16 and fits in 32 bits. The rule is the one the device asserts in checked builds.
pub fn validate_copy(dst: u64, src: u64, bytes: u64) -> Result<()> {
    bulk::validate(dst, src, bytes)
        .map_err(|e| Error::InvalidArgument(format!("{e} (dst {dst:#x}, src {src:#x}, {bytes} bytes)")))
}

/// Checks that `bytes` of dynamic shared memory fit one block of the device.
pub fn validate_shared(info: &DeviceInfo, bytes: u64) -> Result<()> {
    if bytes > info.max_shared_optin as u64 {
        return Err(Error::InvalidArgument(format!(
            "{bytes} bytes of shared memory exceed GPU {}'s limit of {} bytes per block",
            info.ordinal, info.max_shared_optin
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "test".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_optin: 232_448,
            total_mem: 1 << 30,
        }
    }

    #[test]
    fn rejects_bad_copies_with_a_clear_message() {
        assert!(validate_copy(0x1000, 0x2000, 4096).is_ok());
        let e = validate_copy(0x1008, 0x2000, 4096).unwrap_err().to_string();
        assert!(e.contains("destination is not 16-byte aligned") && e.contains("0x1008"), "{e}");
        let e = validate_copy(0x1000, 0x2004, 4096).unwrap_err().to_string();
        assert!(e.contains("source is not 16-byte aligned"), "{e}");
        let e = validate_copy(0x1000, 0x2000, 40).unwrap_err().to_string();
        assert!(e.contains("multiple of 16"), "{e}");
        assert!(validate_copy(0, 0, 0).is_err());
    }

    #[test]
    fn shared_memory_limit() {
        let d = h200();
        assert!(validate_shared(&d, 227 * 1024).is_ok());
        assert!(validate_shared(&d, 232_449).unwrap_err().to_string().contains("exceed"));
        assert!(is_bulk_supported(&d));
        assert!(!is_bulk_supported(&DeviceInfo { compute_capability: (8, 0), ..d }));
    }
}
