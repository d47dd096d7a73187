//! What may cross the host/device boundary as a kernel parameter.
//!
//! Every handle that a host program passes to a kernel by value implements [`DeviceAbi`]. The host
//! crate's launch helper accepts only such types, so a kernel never receives a value whose layout
//! the GPU reads differently.

/// A type that can be passed by value as a kernel parameter: `#[repr(C)]` or `#[repr(transparent)]`,
/// `Copy`, and with no host-only meaning in its bits (device addresses are plain integers here).
///
/// # Safety
/// The implementor must have a stable C layout that is identical on the host and on nvptx64, and
/// every bit pattern the host writes must be valid for the device code that reads it.
pub unsafe trait DeviceAbi: Copy + 'static {}

macro_rules! device_abi_prims {
    ($($t:ty),*) => { $(
        // SAFETY: primitive integers and floats have the same layout on x86-64 and nvptx64.
        unsafe impl DeviceAbi for $t {}
    )* };
}
device_abi_prims!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64, half::f16, half::bf16);

// SAFETY: `usize`/`isize` are 64 bits on both supported hosts (64-bit) and nvptx64.
unsafe impl DeviceAbi for usize {}
// SAFETY: as for `usize`.
unsafe impl DeviceAbi for isize {}

static_assertions::const_assert_eq!(core::mem::size_of::<usize>(), 8);
