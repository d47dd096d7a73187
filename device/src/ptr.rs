//! Typed addresses: shared memory, global memory (local or peer-mapped) and multicast memory are
//! different types, so a pointer of one kind cannot reach an instruction meant for another.
//!
//! All three are plain integers with a phantom element type, so they are `Copy`, have the same
//! layout on the host and the GPU, and can sit inside `#[repr(C)]` handles.

use core::marker::PhantomData;

use crate::abi::DeviceAbi;

/// A 32-bit address in the calling CTA's shared-memory window (`.shared::cta` state space).
#[repr(transparent)]
pub struct SharedPtr<T> {
    addr: u32,
    _t: PhantomData<fn() -> T>,
}

/// A 64-bit address of device memory in the global state space: this GPU's memory or a peer's
/// memory mapped into this context.
#[repr(transparent)]
pub struct GlobalPtr<T> {
    addr: u64,
    _t: PhantomData<fn() -> T>,
}

/// A 64-bit address inside an NVLink multicast mapping. Only `multimem.*` instructions accept it.
/// It comes from the host's multicast setup; building one from an integer is `unsafe`.
#[repr(transparent)]
pub struct MultimemPtr<T> {
    addr: u64,
    _t: PhantomData<fn() -> T>,
}

static_assertions::assert_eq_size!(SharedPtr<u64>, u32);
static_assertions::assert_eq_size!(GlobalPtr<u64>, u64);
static_assertions::assert_eq_size!(MultimemPtr<u64>, u64);
static_assertions::assert_eq_align!(GlobalPtr<u8>, u64);

macro_rules! common_ptr_impls {
    ($name:ident, $int:ty) => {
        impl<T> Clone for $name<T> {
            #[inline(always)]
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<T> {}
        impl<T> PartialEq for $name<T> {
            #[inline(always)]
            fn eq(&self, other: &Self) -> bool {
                self.addr == other.addr
            }
        }
        impl<T> Eq for $name<T> {}
        impl<T> core::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.addr)
            }
        }
        // SAFETY: a transparent wrapper of an integer; every bit pattern is a valid address value.
        unsafe impl<T: 'static> DeviceAbi for $name<T> {}
        // SAFETY: transparent over an integer, no padding, every bit pattern valid.
        unsafe impl<T: 'static> bytemuck::Zeroable for $name<T> {}
        // SAFETY: as above; PhantomData<fn() -> T> adds no bytes.
        unsafe impl<T: 'static> bytemuck::Pod for $name<T> {}

        impl<T> $name<T> {
            /// The raw address.
            #[inline(always)]
            pub const fn addr(self) -> $int {
                self.addr
            }
            /// The address `count` elements further on (no bounds check; an address is plain
            /// data, so the arithmetic wraps as a release build's does, in every build).
            #[inline(always)]
            pub const fn add(self, count: usize) -> Self {
                let bytes = count.wrapping_mul(core::mem::size_of::<T>()) as $int;
                Self { addr: self.addr.wrapping_add(bytes), _t: PhantomData }
            }
            /// The address `bytes` bytes further on (wrapping, as [`Self::add`]).
            #[inline(always)]
            pub const fn byte_add(self, bytes: usize) -> Self {
                Self { addr: self.addr.wrapping_add(bytes as $int), _t: PhantomData }
            }
            /// The same address with another element type.
            #[inline(always)]
            pub const fn cast<U>(self) -> $name<U> {
                $name { addr: self.addr, _t: PhantomData }
            }
            /// Whether the address is a multiple of `align` bytes (never, for an `align` of 0
            /// or one the address type cannot hold).
            #[inline(always)]
            pub const fn is_aligned_to(self, align: usize) -> bool {
                match self.addr.checked_rem(align as $int) {
                    Some(r) => r == 0 && align as $int as usize == align,
                    None => false,
                }
            }
        }
    };
}

common_ptr_impls!(SharedPtr, u32);
common_ptr_impls!(GlobalPtr, u64);
common_ptr_impls!(MultimemPtr, u64);

impl<T> SharedPtr<T> {
    /// A shared-memory address from its 32-bit value in the `.shared::cta` window.
    #[inline(always)]
    pub const fn from_addr(addr: u32) -> Self {
        Self { addr, _t: PhantomData }
    }
}

impl<T> GlobalPtr<T> {
    /// A global pointer from a device address (a `CUdeviceptr` on the host).
    #[inline(always)]
    pub const fn from_addr(addr: u64) -> Self {
        Self { addr, _t: PhantomData }
    }
    /// A global pointer from a generic pointer that points into global memory.
    #[inline(always)]
    pub fn from_ptr(ptr: *const T) -> Self {
        Self { addr: ptr as u64, _t: PhantomData }
    }
    /// The generic pointer (valid on the device that owns or maps the memory).
    #[inline(always)]
    pub const fn as_ptr(self) -> *mut T {
        self.addr as *mut T
    }
    /// The null address.
    #[inline(always)]
    pub const fn null() -> Self {
        Self { addr: 0, _t: PhantomData }
    }
    /// Whether this is the null address.
    #[inline(always)]
    pub const fn is_null(self) -> bool {
        self.addr == 0
    }
}

impl<T> MultimemPtr<T> {
    /// A multicast address from its integer value.
    ///
    /// # Safety
    /// `addr` must lie inside a multicast mapping created by the host for this device, since
    /// `multimem.*` on a unicast address is undefined behaviour.
    #[inline(always)]
    pub const unsafe fn from_addr(addr: u64) -> Self {
        Self { addr, _t: PhantomData }
    }
    /// The generic pointer value, for the `multimem.*` wrappers.
    #[inline(always)]
    pub const fn as_ptr(self) -> *mut T {
        self.addr as *mut T
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_arithmetic_scales_by_element() {
        let p = GlobalPtr::<u64>::from_addr(0x1000);
        assert_eq!(p.add(3).addr(), 0x1018);
        assert_eq!(p.byte_add(3).addr(), 0x1003);
        assert!(p.is_aligned_to(16));
        assert!(!p.byte_add(8).is_aligned_to(16));
        let s = SharedPtr::<u32>::from_addr(64);
        assert_eq!(s.add(4).addr(), 80);
        assert_eq!(s.cast::<u64>().add(1).addr(), 72);
    }

    #[test]
    fn address_arithmetic_never_panics() {
        // These overflowed (a panic in debug builds) or divided by zero.
        let top = GlobalPtr::<u64>::from_addr(u64::MAX - 7);
        assert_eq!(top.add(1).addr(), 0);
        assert_eq!(top.byte_add(usize::MAX).addr(), u64::MAX - 8);
        assert_eq!(GlobalPtr::<u64>::null().add(usize::MAX).addr(), 0u64.wrapping_sub(8));
        assert!(!top.is_aligned_to(0));
        let s = SharedPtr::<u8>::from_addr(u32::MAX);
        assert_eq!(s.byte_add(1).addr(), 0);
        assert!(!SharedPtr::<u8>::from_addr(0).is_aligned_to(1 << 32), "2^32 does not fit a shared address");
        assert!(SharedPtr::<u8>::from_addr(0).is_aligned_to(1 << 16));
    }
}
