//! The `Bootstrap` trait from a program's side: an implementation of its own (ranks as threads of
//! one process, talking through queues) drives the same code as the TCP one, through
//! `&dyn Bootstrap` and `Arc<dyn Bootstrap>`. No GPU needed.

use std::collections::{HashMap, VecDeque};
use std::net::TcpListener;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use mscclpp_host::bootstrap::{BootstrapConfig, RankInfo, Token};
use mscclpp_host::{Bootstrap, BootstrapExt, Error, Result, TcpBootstrap};

/// Which stream a queued message belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Stream {
    Tagged(u32),
    Collective,
}

/// (from, to, stream): one ordered queue.
type Key = (usize, usize, Stream);

/// Queues shared by all ranks: messages in order per key.
#[derive(Default)]
struct Hub {
    queues: Mutex<HashMap<Key, VecDeque<Vec<u8>>>>,
    arrived: Condvar,
}

impl Hub {
    fn put(&self, key: Key, data: Vec<u8>) {
        self.queues.lock().unwrap().entry(key).or_default().push_back(data);
        self.arrived.notify_all();
    }

    fn take(&self, key: Key, rank: usize) -> Result<Vec<u8>> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut q = self.queues.lock().unwrap();
        loop {
            if let Some(d) = q.get_mut(&key).and_then(VecDeque::pop_front) {
                return Ok(d);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Bootstrap {
                    rank,
                    step: "take".into(),
                    cause: Box::new(Error::Timeout {
                        after: Duration::from_secs(20),
                        waiting_for: format!("rank {}", key.0),
                    }),
                });
            }
            q = self.arrived.wait_timeout(q, left).unwrap().0;
        }
    }
}

/// A bootstrap for ranks that are threads of this process.
struct ThreadBootstrap {
    info: RankInfo,
    hub: Arc<Hub>,
}

impl ThreadBootstrap {
    fn world(n: usize) -> Vec<ThreadBootstrap> {
        let hub = Arc::new(Hub::default());
        (0..n).map(|r| ThreadBootstrap { info: RankInfo::single_node(r, n).unwrap(), hub: hub.clone() }).collect()
    }
}

impl Bootstrap for ThreadBootstrap {
    fn info(&self) -> &RankInfo {
        &self.info
    }
    fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let me = self.rank();
        for peer in (0..self.world_size()).filter(|&p| p != me) {
            self.hub.put((me, peer, Stream::Collective), data.to_vec());
        }
        (0..self.world_size())
            .map(|p| if p == me { Ok(data.to_vec()) } else { self.hub.take((p, me, Stream::Collective), me) })
            .collect()
    }
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }
    fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
        if peer >= self.world_size() {
            return Err(Error::InvalidArgument(format!("no rank {peer}")));
        }
        self.hub.put((self.rank(), peer, Stream::Tagged(tag)), data.to_vec());
        Ok(())
    }
    fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
        if peer >= self.world_size() {
            return Err(Error::InvalidArgument(format!("no rank {peer}")));
        }
        self.hub.take((peer, self.rank(), Stream::Tagged(tag)), self.rank())
    }
}

/// Code written against the trait only: what a communicator does with whichever bootstrap it got.
fn exercise(boot: &dyn Bootstrap) -> Result<()> {
    let (me, n) = (boot.rank(), boot.world_size());
    assert_eq!(boot.local_rank(), me);
    assert_eq!(boot.local_size(), n);
    assert_eq!(boot.info().rank, me);

    // Typed all-gathers come with every implementation.
    assert_eq!(boot.all_gather_pod(&(me as u64 * 10))?, (0..n as u64).map(|r| r * 10).collect::<Vec<_>>());
    let slices = boot.all_gather_pod_slice(&vec![me as u32; me])?;
    assert_eq!(slices, (0..n).map(|r| vec![r as u32; r]).collect::<Vec<_>>());
    let bytes = boot.all_gather(format!("rank {me}").as_bytes())?;
    assert_eq!(bytes, (0..n).map(|r| format!("rank {r}").into_bytes()).collect::<Vec<_>>());
    boot.barrier()?;

    // Tags are independent streams, each in order; tag 0 is the untagged one.
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    for i in 0..3u8 {
        boot.send_tagged(next, 7, &[me as u8, 7, i])?;
        boot.send(next, &[me as u8, 0, i])?;
    }
    for i in 0..3u8 {
        // Read tag 0 first although tag 7 was sent first: nothing blocks on the other stream.
        assert_eq!(boot.recv(prev)?, [prev as u8, 0, i]);
    }
    for i in 0..3u8 {
        assert_eq!(boot.recv_tagged(prev, 7)?, [prev as u8, 7, i]);
    }
    // A message to oneself.
    boot.send_tagged(me, 3, b"self")?;
    assert_eq!(boot.recv_tagged(me, 3)?, b"self");
    boot.barrier()
}

#[test]
fn an_in_process_bootstrap_drives_code_written_against_the_trait() {
    let handles: Vec<_> = ThreadBootstrap::world(4)
        .into_iter()
        .map(|b| {
            // As a communicator holds it.
            let b: Arc<dyn Bootstrap> = Arc::new(b);
            thread::spawn(move || exercise(b.as_ref()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
}

#[test]
fn a_wrong_sized_contribution_names_the_rank() {
    // Rank 1 contributes 4 bytes where the others gather 8-byte values.
    let handles: Vec<_> = ThreadBootstrap::world(2)
        .into_iter()
        .map(|b| {
            thread::spawn(move || {
                let b: &dyn Bootstrap = &b;
                if b.rank() == 1 { b.all_gather_pod(&1u32).map(drop) } else { b.all_gather_pod(&0u64).map(drop) }
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let e = results[0].as_ref().unwrap_err();
    assert!(matches!(e.root_cause(), Error::Protocol(m) if m.contains("rank 1 sent 4 bytes")), "{e}");
    assert!(e.to_string().starts_with("rank 0: all_gather_pod: "), "{e}");
}

#[test]
fn the_tcp_bootstrap_behind_the_trait() {
    let n = 3;
    let addr = format!("127.0.0.1:{}", TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port());
    let token = Token::random();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let cfg = BootstrapConfig::new(RankInfo::single_node(r, n).unwrap(), addr.clone(), token)
                .with_timeout(Duration::from_secs(30));
            thread::spawn(move || -> Result<()> {
                let b: Arc<dyn Bootstrap> = Arc::new(TcpBootstrap::connect(&cfg)?);
                exercise(&*b)
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
}

/// A program's bootstrap fills in its `RankInfo` itself (public fields): what a communicator is
/// given is checked before it is relied on (`Communicator::new` checks at the first call that
/// uses it, `try_new` at once, both through `check_bootstrap`).
#[test]
fn a_custom_bootstraps_rank_information_is_checked() {
    use mscclpp_host::bootstrap::RankSource;
    use mscclpp_host::bootstrap::env::MAX_WORLD_SIZE;
    use mscclpp_host::comm::Communicator;
    let info = |rank, world_size, local_rank, local_size| RankInfo {
        rank,
        world_size,
        local_rank,
        local_size,
        source: RankSource::Launcher,
    };
    let with = |i: RankInfo| ThreadBootstrap { info: i, hub: Arc::new(Hub::default()) };
    for (bad, why) in [
        (info(4, 4, 0, 1), "rank 4 is not below the world size 4"),
        (info(0, 0, 0, 1), "world size is 0"),
        (info(0, MAX_WORLD_SIZE + 1, 0, 1), "above the limit"),
        (info(0, usize::MAX, 0, 1), "above the limit"),
        (info(1, 2, 2, 2), "local rank 2 is not below the local size 2"),
        (info(0, 2, 0, 3), "local size 3 is above the world size 2"),
    ] {
        let e = Communicator::check_bootstrap(&with(bad)).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains(why) && m.contains("RankInfo")), "{bad:?}: {e}");
    }
    for good in [info(0, 1, 0, 1), info(3, 4, 1, 2), info(MAX_WORLD_SIZE - 1, MAX_WORLD_SIZE, 0, 1)] {
        Communicator::check_bootstrap(&with(good)).unwrap();
    }

    /// A bootstrap whose `rank()` disagrees with its `info()`.
    struct Overriding(ThreadBootstrap);
    impl Bootstrap for Overriding {
        fn info(&self) -> &RankInfo {
            self.0.info()
        }
        fn rank(&self) -> usize {
            7
        }
        fn all_gather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
            self.0.all_gather(data)
        }
        fn barrier(&self) -> Result<()> {
            self.0.barrier()
        }
        fn send_tagged(&self, peer: usize, tag: u32, data: &[u8]) -> Result<()> {
            self.0.send_tagged(peer, tag, data)
        }
        fn recv_tagged(&self, peer: usize, tag: u32) -> Result<Vec<u8>> {
            self.0.recv_tagged(peer, tag)
        }
    }
    let e = Communicator::check_bootstrap(&Overriding(with(info(1, 2, 1, 2)))).unwrap_err().to_string();
    assert!(e.contains("says rank 7 of 2 but its RankInfo says rank 1 of 2"), "{e}");
}
