//! Model checks of the trigger FIFO protocol (`mscclpp_device::protocol::fifo`), the same code
//! the GPU runs, over CPU atomics:
//!
//! * with `--cfg loom` (see `./x test`): every interleaving, within loom's bounds, of two
//!   producers pushing more triggers than the ring holds and one consumer popping in order;
//! * without loom: a stress run with real threads.
//!
//! Each check: no trigger lost or duplicated, each producer's triggers in its push order, and no
//! torn trigger (word 0 and word 1 carry the same payload); and a producer whose `sync` returned
//! sees what the consumer wrote before it moved the tail past that trigger.
//!
//! The orderings are not the model's own: every access takes its ordering from
//! `mscclpp_device::protocol::fifo::order`, the table the host consumer uses and the PTX checks
//! hold the GPU's instructions to; and the order of the accesses is the protocol code's (`push`
//! stores word 0, then word 1 with release; `Consumer::peek` acquires word 1, then reads word 0).
//! The GPU does the same with two 8-byte stores (`st.relaxed.sys`, then `st.release.sys`).
//!
//! Two variants of the producer's stores record why it must be so, each failing with a torn
//! trigger (the consumer acquires the new word 1 and reads the old word 0):
//! `word_one_first_tears` stores word 1 first (what a 16-byte vector store may do: the PTX
//! memory model treats its elements as separate accesses in no fixed order), and
//! `word_one_without_release_tears` stores word 1 relaxed.

#[cfg(loom)]
use loom::{
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    sync::{Condvar, Mutex},
    thread,
};
#[cfg(not(loom))]
use std::{
    sync::Arc,
    sync::atomic::{AtomicU64, Ordering},
    thread,
};

use mscclpp_device::protocol::Waiter;
use mscclpp_device::protocol::fifo::{self as proto, Consumer, ConsumerMem, ProducerMem, order};
use mscclpp_device::trigger::ProxyTrigger;

/// How the model's producers store the two words of a trigger.
#[derive(Clone, Copy, Debug)]
enum Words {
    /// As the protocol says: in `push`'s order, each with the table's ordering.
    Protocol,
    /// Word 1 first, then word 0 (both with the table's orderings). Only the loom model runs it,
    /// with one producer: with real threads it tears at random.
    #[cfg_attr(not(loom), allow(dead_code))]
    OneFirst,
    /// In `push`'s order, but word 1 relaxed (loom only, as for `OneFirst`).
    #[cfg_attr(not(loom), allow(dead_code))]
    OneRelaxed,
}

struct Ring {
    words: Words,
    /// What the consumer has handled (positions + 1), written before it moves the tail: a
    /// producer whose `sync(pos)` returned must read more than `pos` here.
    handled: AtomicU64,
    /// Set by a producer that panicked, so that the consumer stops waiting for its triggers
    /// (real threads only; loom reports the panic itself).
    #[cfg(not(loom))]
    failed: std::sync::atomic::AtomicBool,
    head: AtomicU64,
    tail: AtomicU64,
    cache: AtomicU64,
    slots: Vec<(AtomicU64, AtomicU64)>,
    /// With [`Words::OneFirst`], word 0 waits here (`std`'s atomic, outside the model: only the
    /// one producer touches it, in program order) until word 1 is stored.
    deferred: std::sync::atomic::AtomicU64,
    /// Under loom, waiting threads block instead of spinning (a spin loop has unbounded
    /// interleavings): producers on `tail_moved`, the consumer on `published`, each re-checking
    /// its condition under the mutex the notifier takes, so no wake-up is lost and every
    /// publication before the notification is visible. The protocol code never sees them.
    #[cfg(loom)]
    tail_moved: (Mutex<()>, Condvar),
    #[cfg(loom)]
    published: (Mutex<()>, Condvar),
}

impl Ring {
    fn new(size: usize, words: Words) -> Self {
        Self {
            words,
            handled: AtomicU64::new(0),
            #[cfg(not(loom))]
            failed: std::sync::atomic::AtomicBool::new(false),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            cache: AtomicU64::new(0),
            slots: (0..size).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect(),
            deferred: std::sync::atomic::AtomicU64::new(0),
            #[cfg(loom)]
            tail_moved: (Mutex::new(()), Condvar::new()),
            #[cfg(loom)]
            published: (Mutex::new(()), Condvar::new()),
        }
    }
}

// SAFETY: every method touches the ring's own atomics; slots index a Vec of `size()` entries
// (bounds-checked), and each method has the ordering the trait asks for.
unsafe impl ProducerMem for Ring {
    fn size(&self) -> u64 {
        self.slots.len() as u64
    }
    fn fetch_add_head(&self) -> u64 {
        self.head.fetch_add(1, order::FETCH_ADD_HEAD)
    }
    fn tail_cache(&self) -> u64 {
        self.cache.load(order::TAIL_CACHE)
    }
    fn load_tail(&self) -> u64 {
        self.tail.load(order::LOAD_TAIL)
    }
    fn raise_cache(&self, tail: u64) {
        self.cache.fetch_max(tail, order::RAISE_CACHE);
    }
    fn store_word0(&self, slot: u64, w0: u64) {
        match self.words {
            Words::Protocol | Words::OneRelaxed => self.slots[slot as usize].0.store(w0, order::STORE_WORD0),
            Words::OneFirst => self.deferred.store(w0, std::sync::atomic::Ordering::Relaxed),
        }
    }
    fn store_word1(&self, slot: u64, w1: u64) {
        let s = &self.slots[slot as usize];
        match self.words {
            Words::Protocol => s.1.store(w1, order::STORE_WORD1),
            Words::OneRelaxed => s.1.store(w1, Ordering::Relaxed),
            Words::OneFirst => {
                s.1.store(w1, order::STORE_WORD1);
                s.0.store(self.deferred.load(std::sync::atomic::Ordering::Relaxed), order::STORE_WORD0);
            }
        }
        #[cfg(loom)]
        {
            let _g = self.published.0.lock().unwrap();
            self.published.1.notify_all();
        }
    }
}

// SAFETY: as for `ProducerMem`.
unsafe impl ConsumerMem for Ring {
    fn size(&self) -> u64 {
        self.slots.len() as u64
    }
    fn load_word1(&self, slot: u64) -> u64 {
        self.slots[slot as usize].1.load(order::READ_WORD1)
    }
    fn load_word0(&self, slot: u64) -> u64 {
        self.slots[slot as usize].0.load(order::READ_WORD0)
    }
    fn store_tail(&self, tail: u64) {
        self.tail.store(tail, order::STORE_TAIL);
        #[cfg(loom)]
        {
            let _g = self.tail_moved.0.lock().unwrap();
            self.tail_moved.1.notify_all();
        }
    }
}

/// A producer's way of waiting: block until the tail moves under loom, yield with real threads.
struct Wait<'a> {
    #[cfg_attr(not(loom), allow(dead_code))]
    ring: &'a Ring,
}
impl Waiter for Wait<'_> {
    fn wait_until<F: FnMut() -> bool>(&mut self, mut cond: F) {
        #[cfg(loom)]
        {
            let mut g = self.ring.tail_moved.0.lock().unwrap();
            while !cond() {
                g = self.ring.tail_moved.1.wait(g).unwrap();
            }
        }
        #[cfg(not(loom))]
        while !cond() {
            thread::yield_now();
        }
    }
}

/// The consumer's next trigger, waiting for it.
fn next_trigger(ring: &Ring, consumer: &Consumer) -> ProxyTrigger {
    #[cfg(loom)]
    {
        let mut g = ring.published.0.lock().unwrap();
        loop {
            if let Some(t) = consumer.peek(ring) {
                return t;
            }
            g = ring.published.1.wait(g).unwrap();
        }
    }
    #[cfg(not(loom))]
    loop {
        if let Some(t) = consumer.peek(ring) {
            return t;
        }
        assert!(!ring.failed.load(Ordering::Relaxed), "a producer failed");
        thread::yield_now();
    }
}

/// Payload of producer `p`'s `i`-th trigger, in both words (word 1 below the commit bit).
fn trigger(p: u64, i: u64) -> ProxyTrigger {
    let v = (p << 20) | i;
    ProxyTrigger { fst: v, snd: v }
}

/// Marks the ring failed when a producer thread unwinds.
#[cfg(not(loom))]
struct FailFlag<'a>(&'a Ring);
#[cfg(not(loom))]
impl Drop for FailFlag<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// `producers` threads push `per_producer` triggers each into a ring of `size` slots, with the
/// words stored in `words` order; with `sync`, each producer waits for every trigger it pushed
/// to be handled before the next, and then checks that it sees the consumer's work.
fn run(size: usize, producers: u64, per_producer: u64, words: Words, sync: bool) {
    assert!(producers == 1 || matches!(words, Words::Protocol), "{words:?} defers word 0 for one producer only");
    let ring = Arc::new(Ring::new(size, words));
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let r = ring.clone();
            thread::spawn(move || {
                #[cfg(not(loom))]
                let _flag = FailFlag(&r);
                for i in 0..per_producer {
                    let pos = proto::push(&*r, trigger(p, i), &mut Wait { ring: &r });
                    if sync {
                        proto::sync(&*r, pos, &mut Wait { ring: &r });
                        // The consumer wrote `handled` before its tail store; `sync` acquired that
                        // store, so the write is visible (relaxed is enough after the acquire).
                        let handled = r.handled.load(Ordering::Relaxed);
                        assert!(handled > pos, "sync({pos}) returned with only {handled} handled ({words:?})");
                        assert!(proto::poll(&*r, pos), "poll({pos}) false after sync");
                    }
                }
            })
        })
        .collect();
    let mut consumer = Consumer::new();
    let mut next = vec![0u64; producers as usize];
    for _ in 0..producers * per_producer {
        let t = next_trigger(&ring, &consumer);
        assert_eq!(t.fst, t.snd, "torn trigger at position {} ({words:?})", consumer.position());
        let (p, i) = (t.fst >> 20, t.fst & 0xfffff);
        assert!(p < producers, "unknown producer {p}");
        assert_eq!(i, next[p as usize], "producer {p}: trigger out of order or duplicated");
        next[p as usize] += 1;
        // The consumer's work on this trigger, done before the tail moves past it.
        ring.handled.store(consumer.position() + 1, Ordering::Relaxed);
        consumer.complete(&*ring);
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == per_producer), "lost triggers: {next:?}");
    // Nothing extra was published.
    assert!(consumer.peek(&*ring).is_none());
}

#[cfg(loom)]
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Bounding preemptions keeps the search short; 3 covers the interleavings that matter here
    // (a push racing the consumer's tail update and a second push).
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Two producers share a one-slot ring: the second push must wait for the consumer (full ring),
/// and the slot is reused with the other commit parity.
#[cfg(loom)]
#[test]
fn two_producers_share_a_ring_of_one() {
    model(|| run(1, 2, 1, Words::Protocol, false));
}

/// Two producers, two pushes each, on a ring of two: laps, full-ring waits and interleaving.
#[cfg(loom)]
#[test]
fn two_producers_wrap_a_ring_of_two() {
    model(|| run(2, 2, 2, Words::Protocol, false));
}

/// One producer laps a ring of one three times.
#[cfg(loom)]
#[test]
fn one_producer_laps_a_ring_of_one() {
    model(|| run(1, 1, 3, Words::Protocol, false));
}

/// Producers that `sync` on each trigger see the consumer's work on it (a `sync` that returned
/// one trigger early, or without acquiring the tail, fails here).
#[cfg(loom)]
#[test]
fn a_producer_that_syncs_sees_the_consumers_work() {
    model(|| run(1, 2, 1, Words::Protocol, true));
    model(|| run(2, 1, 3, Words::Protocol, true));
}

/// With word 1 stored first, the consumer can read a torn trigger: the order of the stores
/// matters, and a 16-byte vector store of both words, whose elements the PTX memory model does
/// not order, would not do (see the module docs). Should this stop failing, the docs are wrong.
#[cfg(loom)]
#[test]
#[should_panic(expected = "torn trigger")]
fn word_one_first_tears() {
    model(|| run(1, 1, 2, Words::OneFirst, false));
}

/// With word 1 stored after word 0 but relaxed, the consumer's acquire has no partner and can
/// read a torn trigger: the release on word 1 is needed.
#[cfg(loom)]
#[test]
#[should_panic(expected = "torn trigger")]
fn word_one_without_release_tears() {
    model(|| run(1, 1, 2, Words::OneRelaxed, false));
}

#[cfg(not(loom))]
#[test]
fn stress_many_producers_small_ring() {
    for size in [1usize, 2, 8, 64] {
        run(size, 6, 3000, Words::Protocol, false);
        run(size, 4, 500, Words::Protocol, true);
    }
}
