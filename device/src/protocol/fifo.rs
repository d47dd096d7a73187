//! The trigger FIFO between GPU producers and a host consumer.
//!
//! ```text
//!  producer (any GPU thread)                         consumer (host proxy thread)
//!  pos = head.fetch_add(1)                           loop at its own position p:
//!  wait until pos < tail + size  (slot free)           w1 = slot[p % size].1  (acquire)
//!  slot[pos % size].0 = w0            (relaxed)        if commit bit of w1 == commit(p):
//!  slot[pos % size].1 = w1 | commit(pos)  (release) ─►   w0 = slot[p % size].0 (after w1)
//!                                                        handle it; tail = p + 1 (release) ──┐
//!  sync(pos): wait until tail > pos  ◄──────────────────────────────────────────────────────┘
//! ```
//!
//! A trigger is two words, and word 1 (holding the commit bit) is its publication: the producer
//! stores word 0 first, then word 1 with release order; the consumer acquires word 1 and only
//! then reads word 0. A consumer that sees the new word 1 therefore sees the new word 0. Both
//! orders are [`push`]'s and [`Consumer::peek`]'s, not the facades': a facade supplies one access
//! per word. (A single 16-byte vector store of both words would not do: the PTX memory model
//! treats a vector access as one access per element, in no order among them, so a consumer could
//! acquire the new word 1 and read the old word 0. The loom model shows that tear for word 1
//! stored first, `word_one_first_tears` in `device/tests/fifo_model.rs`.)
//!
//! The commit bit (bit 63 of word 1) is the inverse parity of the lap, `((pos / size) & 1) ^ 1`:
//! a zeroed ring reads as empty for lap 0, and a slot still holding the previous lap's trigger
//! has the other parity, so the consumer never needs to clear slots. A producer may overwrite a
//! slot only once the consumer has moved the tail past the slot's previous occupant.
//!
//! [`push`], [`poll`] and [`sync`] are safe functions; what makes them sound is that
//! [`ProducerMem`] and [`ConsumerMem`] are `unsafe` traits. Safe code cannot hand them a facade
//! over arbitrary addresses:
//!
//! ```compile_fail,E0200
//! use mscclpp_device::protocol::fifo::ProducerMem;
//! struct Anywhere(u64);
//! impl ProducerMem for Anywhere {
//!     fn size(&self) -> u64 { 1 }
//!     fn fetch_add_head(&self) -> u64 { 0 }
//!     fn tail_cache(&self) -> u64 { 0 }
//!     fn load_tail(&self) -> u64 { 0 }
//!     fn raise_cache(&self, _: u64) {}
//!     fn store_word0(&self, slot: u64, w0: u64) {
//!         // Would write anywhere from safe code.
//!         unsafe { *((self.0 + slot) as *mut u64) = w0 }
//!     }
//!     fn store_word1(&self, _: u64, _: u64) {}
//! }
//! ```
//!
//! ```compile_fail,E0200
//! use mscclpp_device::protocol::fifo::ConsumerMem;
//! struct Anywhere(u64);
//! impl ConsumerMem for Anywhere {
//!     fn size(&self) -> u64 { 1 }
//!     fn load_word1(&self, slot: u64) -> u64 { unsafe { *((self.0 + slot) as *const u64) } }
//!     fn load_word0(&self, _: u64) -> u64 { 0 }
//!     fn store_tail(&self, _: u64) {}
//! }
//! ```

use super::Waiter;
use crate::trigger::{COMMIT_BIT, ProxyTrigger};

/// The memory orderings of the FIFO's accesses, in one place: the loom model and the host
/// consumer take their orderings from here, and the PTX checks of the push kernel
/// (`tests/fifo_ptx.rs`) hold the GPU facade's instructions to them.
pub mod order {
    use core::sync::atomic::Ordering::{self, Acquire, Relaxed, Release};

    /// [`super::ProducerMem::fetch_add_head`]: only hands out positions.
    pub const FETCH_ADD_HEAD: Ordering = Relaxed;
    /// [`super::ProducerMem::tail_cache`].
    pub const TAIL_CACHE: Ordering = Acquire;
    /// [`super::ProducerMem::load_tail`].
    pub const LOAD_TAIL: Ordering = Acquire;
    /// [`super::ProducerMem::raise_cache`] (a read-modify-write).
    pub const RAISE_CACHE: Ordering = Release;
    /// [`super::ProducerMem::store_word0`]: stored first; the release of word 1 that follows
    /// orders it before the consumer's read.
    pub const STORE_WORD0: Ordering = Relaxed;
    /// [`super::ProducerMem::store_word1`]: the publication, stored after word 0 (partner: the
    /// consumer's acquire [`READ_WORD1`]).
    pub const STORE_WORD1: Ordering = Release;
    /// [`super::ConsumerMem::load_word1`]: read first (partner: the producer's release
    /// [`STORE_WORD1`]).
    pub const READ_WORD1: Ordering = Acquire;
    /// [`super::ConsumerMem::load_word0`]: read after word 1, only when it holds the expected
    /// commit bit.
    pub const READ_WORD0: Ordering = Relaxed;
    /// [`super::ConsumerMem::store_tail`].
    pub const STORE_TAIL: Ordering = Release;
}

/// The producer's view of the FIFO's memory.
///
/// The protocol functions ([`push`], [`poll`], [`sync`]) are safe to call, so the obligation
/// sits here: only a value that really describes a live FIFO may implement this trait.
///
/// # Safety
/// An implementation promises, for as long as the value is reachable:
/// * [`ProducerMem::size`] returns the same power of two (at least 1) on every call, the number
///   of slots of the ring;
/// * every method may be called from any thread of the producers at any time, with any
///   arguments allowed here ([`ProducerMem::store_word0`] and [`ProducerMem::store_word1`] with
///   any `slot < size()`), and touches
///   only memory that is valid for those accesses (the head, tail, cache and ring of one FIFO);
/// * the orderings stated on each method hold.
///
/// A plain handle that safe code can build with arbitrary addresses (such as a zeroed
/// [`crate::fifo::FifoDeviceHandle`]) must therefore not implement it; wrap it in a type that
/// only an `unsafe` constructor produces instead.
pub unsafe trait ProducerMem {
    /// The number of slots (a power of two, constant).
    fn size(&self) -> u64;
    /// Atomically takes the next position (`head++`), returning it.
    fn fetch_add_head(&self) -> u64;
    /// The producer-side cached copy of the tail (may lag the real tail). Must be an *acquire*
    /// load: a producer that reuses a slot on the cache's word must be ordered after the
    /// consumer's read of the slot's previous trigger (found by the loom model: with a relaxed
    /// cache, another producer's older trigger could overwrite the new one).
    fn tail_cache(&self) -> u64;
    /// Reads the consumer's tail (acquire).
    fn load_tail(&self) -> u64;
    /// Raises the cache to `tail` with a *release* read-modify-write (the partner of
    /// [`ProducerMem::tail_cache`]'s acquire). Called once per wait, not per poll.
    fn raise_cache(&self, tail: u64);
    /// Stores word 0 of slot `slot` (`slot < size()`) with [`order::STORE_WORD0`] (relaxed). One
    /// 8-byte access of that word alone (on the GPU: `st.relaxed.sys.global.u64`).
    fn store_word0(&self, slot: u64, w0: u64);
    /// Stores word 1 of slot `slot` (`slot < size()`) with [`order::STORE_WORD1`] (release), the
    /// trigger's publication: [`push`] calls it after [`ProducerMem::store_word0`], so a consumer
    /// that acquires this word also sees word 0. One 8-byte access of that word alone (on the
    /// GPU: `st.release.sys.global.u64`).
    fn store_word1(&self, slot: u64, w1: u64);
}

/// The consumer's view of the FIFO's memory.
///
/// # Safety
/// An implementation promises that [`ConsumerMem::size`] returns the same power of two (at
/// least 1) on every call, that [`ConsumerMem::load_word1`] and [`ConsumerMem::load_word0`] are
/// sound for every `slot < size()`, that [`ConsumerMem::store_tail`] is sound at any time, and
/// that they touch only the ring and tail of one live FIFO with the orderings stated on each
/// method.
pub unsafe trait ConsumerMem {
    /// The number of slots (a power of two, constant).
    fn size(&self) -> u64;
    /// Loads word 1 of slot `slot` (`slot < size()`) with [`order::READ_WORD1`] (acquire).
    /// [`Consumer::peek`] calls it before [`ConsumerMem::load_word0`].
    fn load_word1(&self, slot: u64) -> u64;
    /// Loads word 0 of slot `slot` (`slot < size()`) with [`order::READ_WORD0`] (relaxed).
    fn load_word0(&self, slot: u64) -> u64;
    /// Publishes the tail (release): triggers before it are handled and their slots free.
    fn store_tail(&self, tail: u64);
}

/// The commit bit expected at position `pos` of a ring of `size` slots (a power of two).
#[inline(always)]
pub const fn commit_bit(pos: u64, size: u64) -> u64 {
    if (pos / size) & 1 == 0 { COMMIT_BIT } else { 0 }
}

/// Pushes `trigger` (its bit 63 is replaced by the commit bit) and returns its position.
#[inline(always)]
pub fn push<M: ProducerMem, W: Waiter>(m: &M, trigger: ProxyTrigger, waiter: &mut W) -> u64 {
    let size = m.size();
    let pos = m.fetch_add_head();
    // The slot is free once the consumer has handled position pos - size.
    if pos >= m.tail_cache().wrapping_add(size) {
        let mut tail = 0;
        waiter.wait_until(|| {
            tail = m.load_tail();
            pos < tail.wrapping_add(size)
        });
        m.raise_cache(tail);
    }
    let w1 = (trigger.snd & !COMMIT_BIT) | commit_bit(pos, size);
    let slot = pos & (size - 1);
    // Word 0, then word 1 (release): the publication comes last (see the module docs).
    m.store_word0(slot, trigger.fst);
    m.store_word1(slot, w1);
    pos
}

/// Whether the consumer has handled position `pos` (never blocks).
#[inline(always)]
pub fn poll<M: ProducerMem>(m: &M, pos: u64) -> bool {
    pos < m.tail_cache() || pos < m.load_tail()
}

/// Waits until the consumer has handled position `pos`. Does not raise the cache (a release
/// read-modify-write with its fence on every flush); only a push that found the ring full does.
#[inline(always)]
pub fn sync<M: ProducerMem, W: Waiter>(m: &M, pos: u64, waiter: &mut W) {
    if pos < m.tail_cache() {
        return;
    }
    waiter.wait_until(|| pos < m.load_tail());
}

/// The consumer's position in the ring (the ring's size comes from its [`ConsumerMem`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Consumer {
    pos: u64,
}

impl Consumer {
    /// A consumer at position 0.
    pub const fn new() -> Self {
        Self { pos: 0 }
    }

    /// The position of the next trigger to pop.
    pub const fn position(&self) -> u64 {
        self.pos
    }

    /// The trigger at the current position, if it has been published (commit bit cleared).
    /// Does not advance: call [`Consumer::complete`] once it is handled.
    #[inline(always)]
    pub fn peek<M: ConsumerMem>(&self, m: &M) -> Option<ProxyTrigger> {
        let size = m.size();
        let slot = self.pos & (size - 1);
        // Word 1 first (acquire), then word 0: see the module docs.
        let w1 = m.load_word1(slot);
        if w1 & COMMIT_BIT != commit_bit(self.pos, size) {
            return None;
        }
        Some(ProxyTrigger { fst: m.load_word0(slot), snd: w1 & !COMMIT_BIT })
    }

    /// Marks the current trigger handled: advances and publishes the tail, freeing its slot.
    #[inline(always)]
    pub fn complete<M: ConsumerMem>(&mut self, m: &M) {
        self.pos += 1;
        m.store_tail(self.pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};

    struct Ring {
        head: Cell<u64>,
        tail: Cell<u64>,
        cache: Cell<u64>,
        slots: RefCell<Vec<(u64, u64)>>,
        /// The word accesses, in program order: (`"store"` or `"load"`, word, slot).
        log: RefCell<Vec<(&'static str, u8, u64)>>,
    }
    impl Ring {
        fn new(size: usize) -> Self {
            Self {
                head: Cell::new(0),
                tail: Cell::new(0),
                cache: Cell::new(0),
                slots: RefCell::new(vec![(0, 0); size]),
                log: RefCell::new(Vec::new()),
            }
        }
        fn take_log(&self) -> Vec<(&'static str, u8, u64)> {
            self.log.take()
        }
    }
    // SAFETY: a single-threaded test ring; the word accesses index a Vec of `size()`
    // slots (bounds-checked).
    unsafe impl ProducerMem for Ring {
        fn size(&self) -> u64 {
            self.slots.borrow().len() as u64
        }
        fn fetch_add_head(&self) -> u64 {
            let h = self.head.get();
            self.head.set(h + 1);
            h
        }
        fn tail_cache(&self) -> u64 {
            self.cache.get()
        }
        fn load_tail(&self) -> u64 {
            self.tail.get()
        }
        fn raise_cache(&self, tail: u64) {
            self.cache.set(self.cache.get().max(tail));
        }
        fn store_word0(&self, slot: u64, w0: u64) {
            self.log.borrow_mut().push(("store", 0, slot));
            self.slots.borrow_mut()[slot as usize].0 = w0;
        }
        fn store_word1(&self, slot: u64, w1: u64) {
            self.log.borrow_mut().push(("store", 1, slot));
            self.slots.borrow_mut()[slot as usize].1 = w1;
        }
    }
    // SAFETY: as above.
    unsafe impl ConsumerMem for Ring {
        fn size(&self) -> u64 {
            self.slots.borrow().len() as u64
        }
        fn load_word1(&self, slot: u64) -> u64 {
            self.log.borrow_mut().push(("load", 1, slot));
            self.slots.borrow()[slot as usize].1
        }
        fn load_word0(&self, slot: u64) -> u64 {
            self.log.borrow_mut().push(("load", 0, slot));
            self.slots.borrow()[slot as usize].0
        }
        fn store_tail(&self, tail: u64) {
            self.tail.set(tail);
        }
    }
    struct NoWait;
    impl Waiter for NoWait {
        fn wait_until<F: FnMut() -> bool>(&mut self, mut cond: F) {
            assert!(cond(), "would block in a single-threaded test");
        }
    }

    #[test]
    fn zeroed_ring_is_empty_and_laps_alternate_parity() {
        let r = Ring::new(4);
        let mut c = Consumer::new();
        assert_eq!(c.peek(&r), None);
        for lap in 0..3u64 {
            for i in 0..4u64 {
                let t = ProxyTrigger { fst: lap * 10 + i, snd: 7 | COMMIT_BIT };
                let pos = push(&r, t, &mut NoWait);
                assert_eq!(pos, lap * 4 + i);
                assert_eq!(r.slots.borrow()[i as usize].1 & COMMIT_BIT != 0, lap % 2 == 0);
            }
            for i in 0..4u64 {
                let t = c.peek(&r).expect("published");
                assert_eq!((t.fst, t.snd), (lap * 10 + i, 7));
                assert!(!poll(&r, lap * 4 + i));
                c.complete(&r);
                assert!(poll(&r, lap * 4 + i));
            }
            // Every slot now holds this lap's parity: the next lap reads empty.
            assert_eq!(c.peek(&r), None);
        }
    }

    /// The publication order lives in the shared code, so every facade (the GPU's, the host's,
    /// the loom model's) gets it: word 0 then word 1 on push; word 1 then, only when committed,
    /// word 0 on peek. (The loom model shows the tears that either other order allows.)
    #[test]
    fn push_stores_word_one_last_and_peek_loads_it_first() {
        let r = Ring::new(2);
        let mut c = Consumer::new();
        assert_eq!(c.peek(&r), None);
        assert_eq!(r.take_log(), [("load", 1, 0)], "an uncommitted slot's word 0 is not read");
        for pos in 0..5u64 {
            let slot = pos % 2;
            push(&r, ProxyTrigger { fst: pos, snd: pos }, &mut NoWait);
            assert_eq!(r.take_log(), [("store", 0, slot), ("store", 1, slot)]);
            assert_eq!(c.peek(&r), Some(ProxyTrigger { fst: pos, snd: pos }));
            assert_eq!(r.take_log(), [("load", 1, slot), ("load", 0, slot)]);
            c.complete(&r);
        }
    }
}
