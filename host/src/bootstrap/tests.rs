//! In-process tests: every rank is a thread, all on loopback.

use super::*;
use std::thread;

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0)).unwrap().local_addr().unwrap().port()
}

fn configs(n: usize, timeout: Duration) -> Vec<BootstrapConfig> {
    let addr = format!("127.0.0.1:{}", free_port());
    let token = Token::random();
    (0..n)
        .map(|r| BootstrapConfig::new(RankInfo::single_node(r, n).unwrap(), addr.clone(), token).with_timeout(timeout))
        .collect()
}

/// Runs `f` on `n` ranks (threads), rank 0 starting after `root_delay`.
fn run<T: Send + 'static>(
    n: usize,
    timeout: Duration,
    root_delay: Duration,
    f: impl Fn(Bootstrap) -> Result<T> + Send + Sync + 'static,
) -> Vec<Result<T>> {
    let f = Arc::new(f);
    let handles: Vec<_> = configs(n, timeout)
        .into_iter()
        .map(|cfg| {
            let f = f.clone();
            thread::spawn(move || {
                if cfg.rank.rank == 0 {
                    thread::sleep(root_delay);
                }
                // A generous rendezvous (a loaded machine may be slow to start threads), then the
                // timeout under test.
                let mut b = Bootstrap::connect(&cfg.clone().with_timeout(Duration::from_secs(30)))?;
                b.set_timeout(cfg.timeout)?;
                f(b)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn contribution(rank: usize, round: usize) -> Vec<u8> {
    (0..(rank * 1000 + round * 7) % 5000).map(|i| (i * 31 + rank * 7 + round) as u8).collect()
}

#[test]
fn all_gather_and_barrier_on_four_ranks() {
    let results = run(4, Duration::from_secs(20), Duration::ZERO, |b| {
        for round in 0..5 {
            let all = b.all_gather(&contribution(b.rank(), round))?;
            assert_eq!(all.len(), 4);
            for (r, got) in all.iter().enumerate() {
                assert_eq!(got, &contribution(r, round), "rank {} round {round}: contribution of rank {r}", b.rank());
            }
            b.barrier()?;
        }
        let ranks = b.all_gather_pod(&(b.rank() as u64 * 10))?;
        assert_eq!(ranks, vec![0, 10, 20, 30]);
        let slices = b.all_gather_pod_slice(&vec![b.rank() as u32; b.rank()])?;
        assert_eq!(slices[3], vec![3, 3, 3]);
        // A large contribution (several MiB) from every rank at once: no write deadlock.
        let big = vec![b.rank() as u8; 3 << 20];
        let all = b.all_gather(&big)?;
        assert!(all.iter().enumerate().all(|(r, v)| v.len() == 3 << 20 && v.iter().all(|&x| x == r as u8)));
        Ok(b.rank())
    });
    for (r, res) in results.into_iter().enumerate() {
        assert_eq!(res.unwrap(), r);
    }
}

#[test]
fn root_may_start_late() {
    for res in run(3, Duration::from_secs(20), Duration::from_millis(700), |b| b.barrier()) {
        res.unwrap();
    }
}

#[test]
fn one_rank_world() {
    let cfg = BootstrapConfig::new(RankInfo::single_node(0, 1).unwrap(), "", Token::random());
    let b = Bootstrap::connect(&cfg).unwrap();
    assert_eq!(b.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    b.barrier().unwrap();
    b.send(0, b"self").unwrap();
    assert_eq!(b.recv(0).unwrap(), b"self");
    assert!(b.send(1, b"").unwrap_err().to_string().contains("peer 1 is not below the world size 1"));
}

#[test]
fn send_recv_interleaved_with_collectives() {
    let results = run(4, Duration::from_secs(20), Duration::ZERO, |b| {
        let (me, n) = (b.rank(), b.world_size());
        // Ring both ways, several messages each.
        for k in 0..3u8 {
            b.send((me + 1) % n, &[me as u8, k, 1])?;
            b.send((me + n - 1) % n, &[me as u8, k, 2])?;
        }
        for k in 0..3u8 {
            assert_eq!(b.recv((me + n - 1) % n)?, vec![((me + n - 1) % n) as u8, k, 1]);
        }
        // Messages from the right neighbour stay queued across a collective.
        b.all_gather(&[me as u8])?;
        for k in 0..3u8 {
            assert_eq!(b.recv((me + 1) % n)?, vec![((me + 1) % n) as u8, k, 2]);
        }
        // Everyone sends to rank 0 before the barrier; rank 0 receives in reverse rank order after.
        if me != 0 {
            b.send(0, &vec![me as u8; me * 100_000])?;
        }
        b.barrier()?;
        if me == 0 {
            for r in (1..n).rev() {
                assert_eq!(b.recv(r)?, vec![r as u8; r * 100_000]);
            }
        }
        b.send(me, b"to myself")?;
        assert_eq!(b.recv(me)?, b"to myself");
        b.barrier()
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn mismatched_collectives_fail_instead_of_hanging() {
    let t = Instant::now();
    let results = run(2, Duration::from_secs(20), Duration::ZERO, |b| {
        if b.rank() == 0 { b.barrier() } else { b.all_gather(b"x").map(drop) }
    });
    assert!(t.elapsed() < Duration::from_secs(10));
    let e = results[0].as_ref().unwrap_err().to_string();
    assert!(e.starts_with("rank 0: barrier #1: protocol: rank 1 called all_gather as collective #1"), "{e}");
}

#[test]
fn a_dropped_rank_is_named_without_waiting_for_the_timeout() {
    let t = Instant::now();
    let results = run(4, Duration::from_secs(30), Duration::ZERO, |b| {
        b.barrier()?;
        if b.rank() == 2 {
            drop(b); // as if the process died: its sockets close
            return Ok(());
        }
        b.all_gather(b"data").map(drop)
    });
    assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    for r in [0, 1, 3] {
        let e = results[r].as_ref().unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("rank {r}: all_gather #1: connection to rank 2 lost")), "{text}");
        assert!(matches!(e.root_cause(), Error::PeerLost { peer: 2, .. }));
    }
}

#[test]
fn a_silent_rank_times_out_by_name() {
    let results = run(3, Duration::from_millis(400), Duration::ZERO, |b| {
        if b.rank() == 1 {
            thread::sleep(Duration::from_millis(1500));
            return Ok(());
        }
        b.barrier()
    });
    for r in [0, 2] {
        let e = results[r].as_ref().unwrap_err();
        assert_eq!(e.to_string(), format!("rank {r}: barrier #1: timed out after 400 ms waiting for rank 1"));
        assert!(matches!(e.root_cause(), Error::Timeout { .. }));
    }
}

#[test]
fn recv_times_out_and_can_be_retried() {
    let results = run(2, Duration::from_millis(300), Duration::ZERO, |b| {
        if b.rank() == 0 {
            let e = b.recv(1).unwrap_err().to_string();
            assert_eq!(e, "rank 0: recv #1 from rank 1: timed out after 300 ms waiting for rank 1");
            b.barrier()?;
            b.recv(1)
        } else {
            thread::sleep(Duration::from_millis(400));
            b.barrier()?;
            b.send(0, b"late")?;
            Ok(vec![])
        }
    });
    assert_eq!(results[0].as_ref().unwrap(), b"late");
}

#[test]
fn no_root_is_a_named_timeout() {
    let cfg = &configs(2, Duration::from_millis(300))[1];
    let t = Instant::now();
    let e = Bootstrap::connect(cfg).unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("rank 1: rendezvous: timed out after 300 ms waiting for rank 0 at {}", cfg.addr)),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[test]
fn missing_ranks_are_listed_by_rank_zero() {
    let cfgs = configs(4, Duration::from_secs(2));
    let c1 = cfgs[1].clone();
    let joiner = thread::spawn(move || Bootstrap::connect(&c1).map(drop));
    let e = Bootstrap::connect(&cfgs[0]).unwrap_err().to_string();
    assert!(e.contains("timed out after 2 s waiting for ranks 2 and 3 to join"), "{e}");
    assert!(joiner.join().unwrap().is_err());
}

#[test]
fn stray_connections_are_rejected_and_the_rendezvous_goes_on() {
    let cfgs = configs(2, Duration::from_secs(20));
    let addr: SocketAddr = cfgs[0].addr.parse().unwrap();
    let c0 = cfgs[0].clone();
    let root = thread::spawn(move || Bootstrap::connect(&c0));
    // Strays: another job's token, then garbage, then a header claiming a huge frame.
    let stray = |bytes: Vec<u8>| {
        let mut s =
            connect_until(addr, Instant::now() + Duration::from_secs(10), Duration::from_secs(10), "rank 0").unwrap();
        s.write_all(&bytes).unwrap();
        // Rank 0 drops the connection: we see the end of the stream, no welcome.
        let mut buf = Vec::new();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.read_to_end(&mut buf);
        assert!(buf.is_empty());
    };
    let hello = Intro { rank: 1, world: 2, listen: "127.0.0.1:1".into() }.encode();
    stray(frame::encode(&Token([1; 16]), Kind::Hello, 0, &hello));
    stray(b"GET / HTTP/1.0\r\n\r\n".to_vec());
    let mut huge = frame::encode(&cfgs[0].token, Kind::Hello, 0, b"");
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    stray(huge);
    let leaf = Bootstrap::connect(&cfgs[1]).unwrap();
    let root = root.join().unwrap().unwrap();
    leaf.send(0, b"hi").unwrap();
    assert_eq!(root.recv(1).unwrap(), b"hi");
}

#[test]
fn wrong_token_ranks_do_not_meet() {
    let mut cfgs = configs(2, Duration::from_secs(2));
    cfgs[1].token = Token::random();
    let c0 = cfgs[0].clone();
    let root = thread::spawn(move || Bootstrap::connect(&c0));
    let e1 = Bootstrap::connect(&cfgs[1]).unwrap_err().to_string();
    let e0 = root.join().unwrap().unwrap_err().to_string();
    assert!(e1.contains("rank 1: rendezvous: connection to rank 0 lost: closed during the rendezvous"), "{e1}");
    assert!(e0.contains("waiting for rank 1 to join") && e0.contains("wrong session token"), "{e0}");
}

#[test]
fn oversized_sends_are_refused_locally() {
    let results = run(2, Duration::from_secs(20), Duration::ZERO, |b| {
        let e = b.send(1 - b.rank(), &vec![0; b.max_frame() + 1]).unwrap_err();
        assert!(e.to_string().contains("over the"), "{e}");
        b.barrier()
    });
    for r in results {
        r.unwrap();
    }
}

#[test]
fn a_bad_frame_after_the_rendezvous_ends_that_connection() {
    // Rank 1 is played by hand: it joins properly, then sends a frame with a foreign token.
    let cfgs = configs(2, Duration::from_secs(10));
    let c0 = cfgs[0].clone();
    let root = thread::spawn(move || {
        let b = Bootstrap::connect(&c0)?;
        b.recv(1)
    });
    let c1 = &cfgs[1];
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = connect_until(c1.addr.parse().unwrap(), deadline, c1.timeout, "rank 0").unwrap();
    let hello = Intro { rank: 1, world: 2, listen: "127.0.0.1:9".into() };
    send_frame(&s, c1, Kind::Hello, &hello.encode(), deadline, 0).unwrap();
    expect(&s, c1, Kind::Welcome, 0, deadline, 0, "welcome").unwrap();
    expect(&s, c1, Kind::Table, 1 << 20, deadline, 0, "table").unwrap();
    let mut w = &s;
    frame::write_frame(&mut w, &c1.token, Kind::Barrier, 0, &[]).unwrap();
    frame::write_frame(&mut w, &Token([9; 16]), Kind::Message, 0, b"from elsewhere").unwrap();
    let e = root.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("rank 0: recv #1 from rank 1: connection to rank 1 lost: rejected frame: wrong session token"),
        "{e}"
    );
}

#[test]
fn frame_faults_over_a_real_socket() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let t = Token([3; 16]);
    let cases: Vec<(Vec<u8>, FrameFault)> = vec![
        (frame::encode(&Token([4; 16]), Kind::Message, 0, b"abc"), FrameFault::WrongToken),
        (
            {
                let mut f = frame::encode(&t, Kind::Message, 0, b"");
                f[8..16].copy_from_slice(&(1u64 << 50).to_le_bytes());
                f
            },
            FrameFault::TooLong { len: 1 << 50, max: 1 << 20 },
        ),
        (
            frame::encode(&t, Kind::Message, 0, &[1; 100])[..70].to_vec(),
            FrameFault::Truncated { part: "payload", got: 30, want: 100 },
        ),
    ];
    for (bytes, want) in cases {
        let client = thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&bytes).unwrap();
            // Closing ends the stream: a truncated frame stays truncated.
        });
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        client.join().unwrap();
        match frame::read_frame(&mut s, &t, 1 << 20) {
            Err(Error::Frame(f)) => assert_eq!(f, want),
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }
}

#[test]
fn table_and_intro_codecs() {
    let t = vec![String::new(), "127.0.0.1:5".into(), "[::1]:7".into()];
    assert_eq!(decode_table(&encode_table(&t), 3).unwrap(), t);
    assert!(decode_table(&encode_table(&t), 2).is_none());
    assert!(decode_table(&[5, 0, b'a'], 1).is_none());
    let i = Intro::decode(&Intro { rank: 3, world: 8, listen: "x".into() }.encode()).unwrap();
    assert_eq!((i.rank, i.world, i.listen.as_str()), (3, 8, "x"));
    assert!(Intro::decode(&[1, 2, 3]).is_none());
    assert_eq!(ranks_list(&[1, 2, 5]), "ranks 1, 2 and 5");
    assert_eq!(ranks_list(&[4]), "rank 4");
}

#[test]
fn bootstrap_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Bootstrap>();
}

#[test]
fn absurd_timeouts() {
    let cfg = BootstrapConfig::new(RankInfo::single_node(0, 1).unwrap(), "", Token::random());
    assert!(Bootstrap::connect(&cfg.clone().with_timeout(Duration::ZERO)).is_err());
    let mut bad = cfg.clone();
    bad.rank.rank = 3;
    assert!(Bootstrap::connect(&bad).unwrap_err().to_string().contains("rank 3 is not below the world size 1"));
    let mut b = Bootstrap::connect(&cfg.with_timeout(Duration::MAX)).unwrap();
    assert!(b.set_timeout(Duration::ZERO).is_err());
    b.set_timeout(Duration::from_secs(1)).unwrap();
    b.barrier().unwrap();
    b.send(0, b"x").unwrap();
    assert_eq!(b.recv(0).unwrap(), b"x");
}
