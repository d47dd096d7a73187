use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::{Rng, RngExt};

use super::*;
use crate::bootstrap::BootstrapExt;

/// Runs `f(rank's bootstrap)` on one thread per rank; returns the results in rank order.
fn on_threads<T: Send + 'static>(
    group: Vec<LocalBootstrap>,
    f: impl Fn(LocalBootstrap) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let handles: Vec<_> = group
        .into_iter()
        .map(|b| {
            let f = f.clone();
            thread::spawn(move || f(b))
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
}

fn random_bytes(rng: &mut impl Rng, max: usize) -> Vec<u8> {
    let len = rng.random_range(0..=max);
    (0..len).map(|_| rng.random()).collect()
}

#[test]
fn the_group_says_every_rank_is_on_this_machine() {
    let n = rand::rng().random_range(1..=9);
    let g = LocalBootstrap::group(n).unwrap();
    for (r, b) in g.iter().enumerate() {
        assert_eq!(
            *b.info(),
            RankInfo { rank: r, world_size: n, local_rank: r, local_size: n, source: RankSource::Threads }
        );
        assert_eq!((b.rank(), b.world_size(), b.local_rank(), b.local_size()), (r, n, r, n));
        assert_eq!(b.hints().timeout, Some(DEFAULT_TIMEOUT));
    }
    assert!(LocalBootstrap::group(0).is_err());
    assert!(LocalBootstrap::group(super::super::env::MAX_WORLD_SIZE + 1).is_err());
}

#[test]
fn all_gathers_and_barriers_return_every_rank_s_random_contribution() {
    for n in [1, 2, 5, 8] {
        let seeds: Vec<u64> = (0..n).map(|_| rand::rng().random()).collect();
        let rounds = 20;
        // Every rank's contributions, computed ahead from its seed, so each thread can check all.
        let expect: Arc<Vec<Vec<Vec<u8>>>> = Arc::new(
            seeds
                .iter()
                .map(|&s| {
                    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(s);
                    (0..rounds).map(|_| random_bytes(&mut rng, 300)).collect()
                })
                .collect(),
        );
        let e = expect.clone();
        let out = on_threads(LocalBootstrap::group(n).unwrap(), move |b| {
            let me = b.rank();
            for round in 0..rounds {
                let got = b.all_gather(&e[me][round]).unwrap();
                let want: Vec<Vec<u8>> = (0..n).map(|r| e[r][round].clone()).collect();
                assert_eq!(got, want, "rank {me} round {round}");
                b.barrier().unwrap();
            }
            let v: u64 = (me as u64) << 32 | rand::rng().random::<u32>() as u64;
            let all = b.all_gather_pod(&v).unwrap();
            assert_eq!(all[me], v);
            assert!(all.iter().enumerate().all(|(r, x)| (x >> 32) as usize == r));
            me
        });
        assert_eq!(out, (0..n).collect::<Vec<_>>());
    }
}

#[test]
fn tagged_messages_arrive_in_order_per_peer_and_tag() {
    let n = 4;
    let out = on_threads(LocalBootstrap::group(n).unwrap(), move |b| {
        let me = b.rank();
        let mut rng = rand::rng();
        // To every rank (itself included), 30 messages on each of two tags, interleaved.
        let mut sent = Vec::new();
        for i in 0..30u32 {
            for peer in 0..n {
                for tag in [0u32, 7] {
                    let mut m = random_bytes(&mut rng, 64);
                    m.extend_from_slice(&i.to_le_bytes());
                    m.extend_from_slice(&(me as u32).to_le_bytes());
                    b.send_tagged(peer, tag, &m).unwrap();
                    sent.push((peer, tag, m));
                }
            }
        }
        // Receive tag 7 first: tag 0's queued messages must not get in the way.
        let mut got = Vec::new();
        for tag in [7u32, 0] {
            for peer in 0..n {
                for i in 0..30u32 {
                    let m = b.recv_tagged(peer, tag).unwrap();
                    let tail = &m[m.len() - 8..];
                    assert_eq!(&tail[..4], &i.to_le_bytes(), "rank {me} from {peer} tag {tag}");
                    assert_eq!(&tail[4..], &(peer as u32).to_le_bytes());
                    got.push((peer, tag, m));
                }
            }
        }
        b.barrier().unwrap();
        (sent, got)
    });
    // What rank r sent to p under t is, in order, what p received from r under t.
    for (r, (sent, _)) in out.iter().enumerate() {
        for (p, (_, got)) in out.iter().enumerate() {
            for t in [0u32, 7] {
                let s: Vec<_> = sent.iter().filter(|(to, tag, _)| (*to, *tag) == (p, t)).map(|x| &x.2).collect();
                let g: Vec<_> = got.iter().filter(|(from, tag, _)| (*from, *tag) == (r, t)).map(|x| &x.2).collect();
                assert_eq!(s, g, "{r} -> {p} tag {t}");
            }
        }
    }
}

#[test]
fn a_missing_rank_is_a_timeout_naming_it() {
    let timeout = Duration::from_millis(200);
    let mut g = LocalBootstrap::group_with_timeout(3, timeout).unwrap();
    let silent = g.pop().unwrap();
    // Rank 0 is alive and sends nothing: a timeout, not a loss.
    let e = silent.recv(0).unwrap_err().to_string();
    assert!(e.contains("timed out") && e.contains("rank 0"), "{e}");
    let t = Instant::now();
    let out = on_threads(g, |b| b.all_gather(&[b.rank() as u8]).unwrap_err().to_string());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    for (r, e) in out.iter().enumerate() {
        assert!(e.contains(&format!("rank {r}: all_gather #0")) && e.contains("waiting for rank 2"), "{e}");
    }
    // Now that the others are gone, nothing more can come from them.
    assert!(silent.recv(0).unwrap_err().to_string().contains("said goodbye"));
    drop(silent);
}

#[test]
fn different_collectives_fail_with_a_protocol_error_on_both_ranks() {
    let out = on_threads(LocalBootstrap::group(2).unwrap(), |b| {
        if b.rank() == 0 { b.barrier().map(drop) } else { b.all_gather(&[1, 2]).map(drop) }.unwrap_err().to_string()
    });
    for e in out {
        assert!(e.contains("protocol") && e.contains("barrier") && e.contains("all_gather"), "{e}");
    }
}

#[test]
fn abandon_fails_every_wait_for_the_rank_and_runs_each_hook_once() {
    let n = 3;
    let mut g = LocalBootstrap::group(n).unwrap();
    let quitter = g.remove(2);
    let calls = Arc::new(Mutex::new(Vec::new()));
    for b in &g {
        let (calls, me) = (calls.clone(), b.rank());
        assert!(b.on_peer_lost(Arc::new(move |peer, why: &str| calls.lock().unwrap().push((
            me,
            peer,
            why.to_string()
        )))));
    }
    quitter.send(0, b"last words").unwrap();
    let abandoner = thread::spawn(move || {
        thread::sleep(Duration::from_millis(rand::rng().random_range(20..80)));
        quitter.abandon();
        // Later calls of the abandoning rank fail.
        assert!(quitter.barrier().is_err());
        assert!(quitter.send(0, b"x").is_err());
        quitter.abandon();
    });
    let t = Instant::now();
    let out = on_threads(g, |b| {
        let e = b.all_gather(b"x").unwrap_err().to_string();
        let first = if b.rank() == 0 { Some(b.recv(2).unwrap()) } else { None };
        let r = b.recv(2).unwrap_err().to_string();
        let s = b.send(2, b"y").unwrap_err().to_string();
        (e, first, r, s)
    });
    abandoner.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    for (r, (e, first, rv, s)) in out.into_iter().enumerate() {
        assert!(e.contains("connection to rank 2 lost") && e.contains("abandon"), "rank {r}: {e}");
        assert_eq!(first.as_deref(), (r == 0).then_some(&b"last words"[..]));
        assert!(rv.contains("rank 2 lost"), "{rv}");
        assert!(s.contains("rank 2 lost"), "{s}");
    }
    let mut calls = calls.lock().unwrap().clone();
    calls.sort();
    assert_eq!(calls.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(), vec![(0, 2), (1, 2)]);
    assert!(calls.iter().all(|c| c.2.contains("abandon")));
}

#[test]
fn a_hook_registered_after_the_loss_runs_at_once() {
    let mut g = LocalBootstrap::group(2).unwrap();
    g[1].abandon();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    g[0].on_peer_lost(Arc::new(move |peer, _| {
        assert_eq!(peer, 1);
        c.fetch_add(1, Ordering::SeqCst);
    }));
    assert_eq!(count.load(Ordering::SeqCst), 1);
    g.truncate(1);
    assert_eq!(count.load(Ordering::SeqCst), 1, "dropping an abandoned rank must not report it again");
}

#[test]
fn a_dropped_rank_departs_without_running_hooks_and_a_panicking_one_is_lost() {
    let mut g = LocalBootstrap::group(3).unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let c = calls.clone();
    g[0].on_peer_lost(Arc::new(move |peer, why: &str| c.lock().unwrap().push((peer, why.to_string()))));
    let panicker = g.pop().unwrap();
    let leaver = g.pop().unwrap();
    let payload: Vec<u8> = random_bytes(&mut rand::rng(), 100);
    leaver.send(0, &payload).unwrap();
    drop(leaver);
    let b0 = &g[0];
    // Queued before the departure: still delivered; then nothing more can come.
    assert_eq!(b0.recv(1).unwrap(), payload);
    let e = b0.recv(1).unwrap_err().to_string();
    assert!(e.contains("said goodbye"), "{e}");
    assert!(calls.lock().unwrap().is_empty(), "a departure is not a loss");
    let r = thread::spawn(move || {
        let _b = panicker;
        panic!("rank 2 fails on purpose");
    })
    .join();
    assert!(r.is_err());
    assert_eq!(calls.lock().unwrap().clone(), vec![(2, PANICKED.to_string())]);
    let e = b0.barrier().unwrap_err().to_string();
    assert!(e.contains("rank 1 lost") || e.contains("rank 2 lost"), "{e}");
}

#[test]
fn peers_out_of_range_are_refused() {
    let g = LocalBootstrap::group(2).unwrap();
    assert!(g[0].send(2, b"x").unwrap_err().to_string().contains("not below the world size"));
    assert!(g[1].recv(usize::MAX).is_err());
    // A rank may message itself.
    g[1].send_tagged(1, 3, b"me").unwrap();
    assert_eq!(g[1].recv_tagged(1, 3).unwrap(), b"me");
}
