//! The device-only views of shared memory that need an instruction: this launch's dynamic
//! window ([`SharedPtr::dynamic`]) and the generic pointer of a shared address
//! ([`SharedPtr::as_generic`]). Kept apart from `ptr` (the address types, which the instruction
//! wrappers take) so that `ptr` does not depend on `ptx`.

#[cfg(any(target_arch = "nvptx64", doc))]
use crate::ptr::SharedPtr;

#[cfg(any(target_arch = "nvptx64", doc))]
impl<T> SharedPtr<T> {
    /// The start of this launch's dynamic shared memory (128-byte aligned), as a typed address.
    #[inline(always)]
    pub fn dynamic() -> SharedPtr<T> {
        SharedPtr::from_addr(crate::ptx::smem::dynamic_smem_base())
    }

    /// The generic pointer of this shared address, for ordinary loads and stores.
    #[inline(always)]
    pub fn as_generic(self) -> *mut T {
        crate::ptx::smem::cvta_shared_u64(self.addr()).cast()
    }
}
