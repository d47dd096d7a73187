//! NCCL's C types at the ABI of NCCL 2.28 (`nccl.h`): result codes, data types, reductions, the
//! unique id and `ncclConfig_t`. `tests/abi.rs` compiles a C program against the official header
//! and checks every value, size and offset here against it.

use std::ffi::{c_char, c_int, c_uint};

/// The NCCL version whose ABI this library implements: `ncclGetVersion` reports it, so callers'
/// feature checks keep their meaning.
pub const NCCL_VERSION_CODE: c_int = 22809;
/// `NCCL_MAJOR`, `NCCL_MINOR`, `NCCL_PATCH` of that version.
pub const NCCL_VERSION: (c_int, c_int, c_int) = (2, 28, 9);
/// `NCCL_UNIQUE_ID_BYTES`.
pub const UNIQUE_ID_BYTES: usize = 128;
/// `NCCL_CONFIG_UNDEF_INT`.
pub const CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The magic of `NCCL_CONFIG_INITIALIZER`.
pub const CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_SPLIT_NOCOLOR`.
pub const SPLIT_NOCOLOR: c_int = -1;

/// `ncclResult_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types, missing_docs)]
pub enum ncclResult_t {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
}
pub use ncclResult_t::*;

impl ncclResult_t {
    /// Every code, in order (`ncclNumResults` is their count).
    pub const ALL: [ncclResult_t; 8] = [
        ncclSuccess,
        ncclUnhandledCudaError,
        ncclSystemError,
        ncclInternalError,
        ncclInvalidArgument,
        ncclInvalidUsage,
        ncclRemoteError,
        ncclInProgress,
    ];

    /// `ncclGetErrorString`'s text (NUL-terminated).
    pub const fn text(self) -> &'static str {
        match self {
            ncclSuccess => "no error\0",
            ncclUnhandledCudaError => "unhandled cuda error (run with NCCL_DEBUG=INFO for details)\0",
            ncclSystemError => "unhandled system error (run with NCCL_DEBUG=INFO for details)\0",
            ncclInternalError => "internal error - please report this issue to the NCCL developers\0",
            ncclInvalidArgument => "invalid argument (run with NCCL_DEBUG=WARN for details)\0",
            ncclInvalidUsage => "invalid usage (run with NCCL_DEBUG=WARN for details)\0",
            ncclRemoteError => "remote process exited or there was a network error\0",
            ncclInProgress => "NCCL operation in progress\0",
        }
    }
}

/// `ncclNumResults`.
pub const NUM_RESULTS: c_int = 8;
/// `ncclNumTypes`.
pub const NUM_TYPES: c_int = 12;
/// `ncclNumOps` (the first value of a user-defined reduction).
pub const NUM_OPS: c_int = 5;
/// `ncclMaxRedOp`.
pub const MAX_RED_OP: c_int = 0x7fff_ffff;

/// `ncclDataType_t` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `ncclInt8` / `ncclChar` (0).
    I8,
    /// `ncclUint8` (1).
    U8,
    /// `ncclInt32` / `ncclInt` (2).
    I32,
    /// `ncclUint32` (3).
    U32,
    /// `ncclInt64` (4).
    I64,
    /// `ncclUint64` (5).
    U64,
    /// `ncclFloat16` / `ncclHalf` (6).
    F16,
    /// `ncclFloat32` / `ncclFloat` (7).
    F32,
    /// `ncclFloat64` / `ncclDouble` (8).
    F64,
    /// `ncclBfloat16` (9).
    Bf16,
    /// `ncclFloat8e4m3` (10).
    F8E4M3,
    /// `ncclFloat8e5m2` (11).
    F8E5M2,
}

impl DataType {
    /// Every type, in `ncclDataType_t` order.
    pub const ALL: [DataType; 12] = [
        DataType::I8,
        DataType::U8,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::F16,
        DataType::F32,
        DataType::F64,
        DataType::Bf16,
        DataType::F8E4M3,
        DataType::F8E5M2,
    ];
    /// The type of `ncclDataType_t` value `v`.
    pub fn from_raw(v: c_int) -> Option<Self> {
        usize::try_from(v).ok().and_then(|i| Self::ALL.get(i).copied())
    }
    /// The `ncclDataType_t` value.
    pub fn raw(self) -> c_int {
        Self::ALL.iter().position(|&t| t == self).unwrap_or(0) as c_int
    }
    /// Bytes of one element.
    pub const fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::F8E4M3 | DataType::F8E5M2 => 1,
            DataType::F16 | DataType::Bf16 => 2,
            DataType::I32 | DataType::U32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }
    /// The name in kernel names and messages (`nccl_reduce_<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I8 => "i8",
            DataType::U8 => "u8",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F16 => "f16",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
            DataType::Bf16 => "bf16",
            DataType::F8E4M3 => "f8e4m3",
            DataType::F8E5M2 => "f8e5m2",
        }
    }
    /// The same type in `mscclpp-collectives`, where its kernels sum it.
    pub const fn collectives(self) -> Option<mscclpp_collectives::DataType> {
        use mscclpp_collectives::DataType as C;
        match self {
            DataType::F32 => Some(C::F32),
            DataType::F16 => Some(C::F16),
            DataType::Bf16 => Some(C::Bf16),
            DataType::I32 => Some(C::I32),
            DataType::U32 => Some(C::U32),
            _ => None,
        }
    }
}

/// `ncclUniqueId`: 128 opaque bytes (see [`crate::id`] for what ours carry).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclUniqueId {
    /// The bytes.
    pub internal: [c_char; UNIQUE_ID_BYTES],
}
const _: () = assert!(std::mem::size_of::<ncclUniqueId>() == UNIQUE_ID_BYTES);

/// `ncclConfig_t` of NCCL 2.28 (`ncclConfig_v22800`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
pub struct ncclConfig_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
}

impl Default for ncclConfig_t {
    /// `NCCL_CONFIG_INITIALIZER`.
    fn default() -> Self {
        let u = CONFIG_UNDEF_INT;
        Self {
            size: std::mem::size_of::<Self>(),
            magic: CONFIG_MAGIC,
            version: NCCL_VERSION_CODE as c_uint,
            blocking: u,
            cgaClusterSize: u,
            minCTAs: u,
            maxCTAs: u,
            netName: std::ptr::null(),
            splitShare: u,
            trafficClass: u,
            commName: std::ptr::null(),
            collnetEnable: u,
            CTAPolicy: u,
            shrinkShare: u,
            nvlsCTAs: u,
            nChannelsPerNetPeer: u,
            nvlinkCentricSched: u,
        }
    }
}

/// `ncclSimInfo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_snake_case, non_camel_case_types, missing_docs)]
pub struct ncclSimInfo_t {
    pub size: usize,
    pub magic: c_uint,
    pub version: c_uint,
    pub estimatedTime: f32,
}

/// `ncclScalarDevice`.
pub const SCALAR_DEVICE: c_int = 0;
/// `ncclScalarHostImmediate`.
pub const SCALAR_HOST_IMMEDIATE: c_int = 1;

/// What a caller's `ncclConfig_t` asks for, read field by field (older, shorter configs are
/// read up to their `size`); fields left undefined take NCCL's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Whether calls block until done (NCCL's default; `blocking = 0` asks for non-blocking
    /// calls, which may still complete before they return, and then return `ncclSuccess`).
    pub blocking: bool,
    /// Most thread blocks one operation may use (a hint: `maxCTAs`).
    pub max_ctas: Option<u32>,
    /// The communicator's name (for messages).
    pub name: Option<String>,
    /// `splitShare`: a split child may share its parent's resources (a hint).
    pub split_share: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self { blocking: true, max_ctas: None, name: None, split_share: false }
    }
}

impl Config {
    /// Reads `cfg`, refusing a config that was not made by `NCCL_CONFIG_INITIALIZER` (wrong
    /// magic) or is too short to hold the versioned header.
    ///
    /// # Safety
    /// `cfg` is null or points to a readable `ncclConfig_t` of at least its stated `size`, whose
    /// string fields are null or NUL-terminated.
    pub unsafe fn read(cfg: *const ncclConfig_t) -> Result<Self, String> {
        if cfg.is_null() {
            return Ok(Self::default());
        }
        // SAFETY: the caller's contract; the header (size, magic, version) is in every version.
        let (size, magic) = unsafe { ((*cfg).size, (*cfg).magic) };
        if magic != CONFIG_MAGIC {
            return Err(format!(
                "ncclConfig_t has magic {magic:#x}, not {CONFIG_MAGIC:#x}: initialise it with NCCL_CONFIG_INITIALIZER"
            ));
        }
        if size < std::mem::offset_of!(ncclConfig_t, cgaClusterSize) {
            return Err(format!("ncclConfig_t of {size} bytes is too short"));
        }
        let has = |end: usize| size >= end;
        macro_rules! field {
            ($f:ident) => {{
                let end = std::mem::offset_of!(ncclConfig_t, $f)
                    + std::mem::size_of_val(
                        // SAFETY: only the field's size is taken, nothing is read.
                        &unsafe { (*cfg).$f },
                    );
                // SAFETY: the field lies within the caller's stated size.
                if has(end) { Some(unsafe { (*cfg).$f }) } else { None }
            }};
        }
        let defined = |v: Option<c_int>| v.filter(|&v| v != CONFIG_UNDEF_INT);
        let blocking = defined(field!(blocking)).is_none_or(|v| v != 0);
        let max_ctas = defined(field!(maxCTAs)).and_then(|v| u32::try_from(v).ok()).filter(|&v| v > 0);
        let split_share = defined(field!(splitShare)).is_some_and(|v| v != 0);
        let name = field!(commName).filter(|p| !p.is_null()).map(|p| {
            // SAFETY: a non-null commName is a NUL-terminated string (the caller's contract).
            unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
        });
        Ok(Self { blocking, max_ctas, name, split_share })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_types_round_trip_their_raw_values() {
        for (i, t) in DataType::ALL.iter().enumerate() {
            assert_eq!(t.raw(), i as c_int);
            assert_eq!(DataType::from_raw(i as c_int), Some(*t));
        }
        assert_eq!(DataType::from_raw(NUM_TYPES), None);
        assert_eq!(DataType::from_raw(-1), None);
    }

    #[test]
    fn configs_are_read_up_to_their_size_and_checked() {
        let mut c = ncclConfig_t::default();
        // SAFETY: a live config.
        assert_eq!(unsafe { Config::read(&c) }.unwrap(), Config::default());
        c.blocking = 0;
        c.maxCTAs = 16;
        // SAFETY: as above.
        let r = unsafe { Config::read(&c) }.unwrap();
        assert!(!r.blocking);
        assert_eq!(r.max_ctas, Some(16));
        // A config from an older header that ends before maxCTAs: the field is not read.
        c.size = std::mem::offset_of!(ncclConfig_t, maxCTAs);
        // SAFETY: as above.
        assert_eq!(unsafe { Config::read(&c) }.unwrap().max_ctas, None);
        c.magic = 0;
        // SAFETY: as above.
        let e = unsafe { Config::read(&c) }.unwrap_err();
        assert!(e.contains("NCCL_CONFIG_INITIALIZER"), "{e}");
        // SAFETY: null is allowed.
        assert_eq!(unsafe { Config::read(std::ptr::null()) }.unwrap(), Config::default());
    }

    #[test]
    fn every_result_code_has_a_text() {
        for (i, r) in ncclResult_t::ALL.iter().enumerate() {
            assert_eq!(*r as c_int, i as c_int);
            assert!(r.text().ends_with('\0') && r.text().len() > 1);
        }
        assert_eq!(ncclResult_t::ALL.len() as c_int, NUM_RESULTS);
    }
}
