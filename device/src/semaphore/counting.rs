//! The counting semaphore for the threads of one GPU (see [`DeviceSemaphore`]).

/// A counting semaphore for the threads of one GPU, with `permits` initial permits. Fair:
/// acquirers are served in the order they took their ticket.
///
/// `acquire` takes a ticket `t` (a relaxed increment) and waits until `released + permits > t`;
/// `release` adds one to `released` with release order, which the waiter's acquire load pairs
/// with. Correct while fewer than 2^31 acquirers wait at once.
///
/// It lives in global memory (allocate it with [`DeviceSemaphore::new`] on the host, or declare
/// a `static` in the kernel crate) and is used through a [`GlobalPtr`](crate::ptr::GlobalPtr)
/// to it: `acquire` and `release` are methods of `GlobalPtr<DeviceSemaphore>`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeviceSemaphore {
    /// Tickets handed out (acquire calls so far).
    pub tickets: u32,
    /// Permits returned (release calls so far).
    pub released: u32,
    /// Initial permits.
    pub permits: u32,
    /// Padding (zero).
    pub _pad: u32,
}
static_assertions::assert_eq_size!(DeviceSemaphore, [u32; 4]);
static_assertions::const_assert_eq!(core::mem::offset_of!(DeviceSemaphore, released), 4);
static_assertions::const_assert_eq!(core::mem::offset_of!(DeviceSemaphore, permits), 8);

impl DeviceSemaphore {
    /// A semaphore with `permits` permits and no acquirer.
    pub const fn new(permits: u32) -> Self {
        Self { tickets: 0, released: 0, permits, _pad: 0 }
    }
    /// Whether the holder of ticket `ticket` may enter when `released` permits have come back.
    pub const fn admits(&self, ticket: u32, released: u32) -> bool {
        (released.wrapping_add(self.permits).wrapping_sub(ticket).wrapping_sub(1) as i32) >= 0
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::atomic::{self, Acquire, Gpu, Relaxed, Release};
    use crate::poll::{SpinBudget, spin_until};
    use crate::ptr::GlobalPtr;

    impl GlobalPtr<DeviceSemaphore> {
        /// Takes one permit, waiting (in ticket order) until one is free; acquire order: the
        /// writes of the thread that released the permit are visible afterwards. Traps with a
        /// message if no permit comes within `budget`. Called by one thread (guard a block's
        /// work with a CTA barrier on both sides).
        ///
        /// # Safety
        /// `self` points to a `DeviceSemaphore` in global memory initialised with
        /// [`DeviceSemaphore::new`].
        #[inline(always)]
        pub unsafe fn acquire(self, budget: SpinBudget) {
            let words = self.cast::<u32>();
            let (tickets, released, permits) = (words.as_ptr(), words.add(1).as_ptr(), words.add(2).as_ptr());
            // SAFETY: the words belong to the semaphore (caller's contract); `permits` is not
            // written after initialisation.
            unsafe {
                let ticket = atomic::fetch_add::<Relaxed, Gpu, u32>(tickets, 1);
                let sem = DeviceSemaphore::new(atomic::load::<Relaxed, Gpu, u32>(permits));
                spin_until(budget, c"DeviceSemaphore::acquire", || {
                    // Partner: the release add in `release`.
                    sem.admits(ticket, atomic::load::<Acquire, Gpu, u32>(released))
                });
            }
        }

        /// Returns one permit; release order: this thread's earlier writes (and those it
        /// synchronised with) are visible to the next acquirer.
        ///
        /// # Safety
        /// As for [`GlobalPtr::acquire`]; the caller holds a permit.
        #[inline(always)]
        pub unsafe fn release(self) {
            // SAFETY: as for `acquire`. Partner: the acquire load in `acquire`.
            unsafe { atomic::red_add::<Release, Gpu, u32>(self.cast::<u32>().add(1).as_ptr(), 1) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_admission_is_wrap_safe() {
        let s = DeviceSemaphore::new(2);
        assert!(s.admits(0, 0) && s.admits(1, 0) && !s.admits(2, 0));
        assert!(s.admits(2, 1) && !s.admits(3, 1));
        // Counters that wrapped past u32::MAX.
        assert!(s.admits(u32::MAX, u32::MAX - 1));
        assert!(s.admits(0, u32::MAX));
        assert!(!s.admits(1, u32::MAX));
        assert_eq!(bytemuck::cast::<_, [u32; 4]>(DeviceSemaphore::new(7)), [0, 0, 7, 0]);
    }
}
