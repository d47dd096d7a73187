//! Model checks of the trigger FIFO protocol (`mscclpp_device::protocol::fifo`), the same code
//! the GPU runs, over CPU atomics:
//!
//! * with `--cfg loom` (see `./x test`): every interleaving, within loom's bounds, of two
//!   producers pushing more triggers than the ring holds and one consumer popping in order;
//! * without loom: a stress run with real threads.
//!
//! Each check: no trigger lost or duplicated, each producer's triggers in its push order, and no
//! torn trigger (word 0 and word 1 carry the same payload).

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

use mscclpp_device::fifo::ProxyTrigger;
use mscclpp_device::protocol::Waiter;
use mscclpp_device::protocol::fifo::{self as proto, Consumer, ConsumerMem, ProducerMem};

struct Ring {
    head: AtomicU64,
    tail: AtomicU64,
    cache: AtomicU64,
    slots: Vec<(AtomicU64, AtomicU64)>,
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
    fn new(size: usize, _producers: usize) -> Self {
        Self {
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            cache: AtomicU64::new(0),
            slots: (0..size).map(|_| (AtomicU64::new(0), AtomicU64::new(0))).collect(),
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
        self.head.fetch_add(1, Ordering::Relaxed)
    }
    fn tail_cache(&self) -> u64 {
        self.cache.load(Ordering::Acquire)
    }
    fn load_tail(&self) -> u64 {
        self.tail.load(Ordering::Acquire)
    }
    fn raise_cache(&self, tail: u64) {
        self.cache.fetch_max(tail, Ordering::Release);
    }
    fn publish(&self, slot: u64, w0: u64, w1: u64) {
        // The GPU does one 16-byte release store; two stores with the release on word 1 (which
        // the consumer acquires first) is the weakest equivalent the model can express.
        let s = &self.slots[slot as usize];
        s.0.store(w0, Ordering::Relaxed);
        s.1.store(w1, Ordering::Release);
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
    fn read_slot(&self, slot: u64) -> (u64, u64) {
        let s = &self.slots[slot as usize];
        let w1 = s.1.load(Ordering::Acquire);
        (s.0.load(Ordering::Relaxed), w1)
    }
    fn store_tail(&self, tail: u64) {
        self.tail.store(tail, Ordering::Release);
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
        thread::yield_now();
    }
}

/// Payload of producer `p`'s `i`-th trigger, in both words (word 1 below the commit bit).
fn trigger(p: u64, i: u64) -> ProxyTrigger {
    let v = (p << 20) | i;
    ProxyTrigger { fst: v, snd: v }
}

fn run(size: usize, producers: u64, per_producer: u64) {
    let ring = Arc::new(Ring::new(size, producers as usize));
    let handles: Vec<_> = (0..producers)
        .map(|p| {
            let r = ring.clone();
            thread::spawn(move || {
                for i in 0..per_producer {
                    proto::push(&*r, trigger(p, i), &mut Wait { ring: &r });
                }
            })
        })
        .collect();
    let mut consumer = Consumer::new();
    let mut next = vec![0u64; producers as usize];
    for _ in 0..producers * per_producer {
        let t = next_trigger(&ring, &consumer);
        assert_eq!(t.fst, t.snd, "torn trigger at position {}", consumer.position());
        let (p, i) = (t.fst >> 20, t.fst & 0xfffff);
        assert!(p < producers, "unknown producer {p}");
        assert_eq!(i, next[p as usize], "producer {p}: trigger out of order or duplicated");
        next[p as usize] += 1;
        consumer.complete(&*ring);
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == per_producer), "lost triggers: {next:?}");
    // Nothing extra was published.
    assert!(consumer.peek(&*ring).is_none());
    assert!(proto::poll(&*ring, producers * per_producer - 1));
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
    model(|| run(1, 2, 1));
}

/// Two producers, two pushes each, on a ring of two: laps, full-ring waits and interleaving.
#[cfg(loom)]
#[test]
fn two_producers_wrap_a_ring_of_two() {
    model(|| run(2, 2, 2));
}

/// One producer laps a ring of one three times.
#[cfg(loom)]
#[test]
fn one_producer_laps_a_ring_of_one() {
    model(|| run(1, 1, 3));
}

#[cfg(not(loom))]
#[test]
fn stress_many_producers_small_ring() {
    for size in [1usize, 2, 8, 64] {
        run(size, 6, 3000);
    }
}
