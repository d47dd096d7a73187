//! Where every rank runs: its machine and the GPU it drives, exchanged through the bootstrap, and
//! the transport each pair of ranks uses ([`crate::transport`]).
//!
//! A machine is named by its boot id (`/proc/sys/kernel/random/boot_id`, else
//! `/etc/machine-id`) together with its host name: a host name alone is not enough (cloned
//! machines and containers share names), and neither is an id alone (containers of one machine
//! share its boot id but not its IPC namespace when their host names differ, so they are kept
//! apart). Two ranks share a machine only when both are known and equal.
//!
//! So ranks in network namespaces of one host, each with a UTS namespace of its own host name,
//! are different machines here, through this same path (no switch for tests): that is how
//! `host/tests/netns_procs.rs` runs several "machines" on one. No override is needed on a
//! cluster: machines there differ in both names, and a container with its own host name is
//! treated as a machine of its own, which is always correct (TCP instead of CUDA IPC between
//! containers of one host, at worst slower).

use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::transport::{TransportChoice, TransportKind};

/// The name of a machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostIdentity {
    /// The boot id, else the machine id; empty when neither could be read.
    pub machine: String,
    /// The host name.
    pub hostname: String,
}

impl HostIdentity {
    /// This machine's identity.
    pub fn this_machine() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
        let mut machine = read("/proc/sys/kernel/random/boot_id");
        if machine.is_empty() {
            machine = read("/etc/machine-id");
        }
        Self { machine, hostname: hostname() }
    }

    /// Whether both name the same machine (both fully known and equal).
    pub fn same_machine(&self, other: &Self) -> bool {
        !self.machine.is_empty() && !self.hostname.is_empty() && self == other
    }
}

/// This machine's host name (empty if it cannot be read).
fn hostname() -> String {
    nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default()
}

/// One rank's place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankPlace {
    /// Its machine.
    pub host: HostIdentity,
    /// The ordinal of its GPU in its process.
    pub gpu_ordinal: u32,
    /// Its GPU's PCI bus id (`0000:19:00.0`), the same in every process of the machine whatever
    /// `CUDA_VISIBLE_DEVICES` says; empty if unknown.
    pub gpu_bus_id: String,
    /// What its `MSCCLPP_RS_TRANSPORT` asked for.
    pub choice: TransportChoice,
}

/// Longest string field of a [`RankPlace`] on the wire.
const MAX_FIELD: usize = 255;

impl RankPlace {
    /// This rank's place, driving `gpu`.
    pub fn this_rank(gpu: &Gpu) -> Result<Self> {
        Ok(Self {
            host: HostIdentity::this_machine(),
            gpu_ordinal: gpu.ordinal() as u32,
            gpu_bus_id: pci_bus_id(gpu).unwrap_or_default(),
            choice: TransportChoice::from_env()?,
        })
    }

    /// The form [`Topology::exchange`] all-gathers, followed there by the rank's process id (a
    /// [`Bootstrap`] of a program's own, or a test's, may answer with the bare places of ranks it
    /// stands in for: their processes are then taken to be others than this one).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![1u8, u8::from(self.choice == TransportChoice::ForceTcp)];
        v.extend_from_slice(&self.gpu_ordinal.to_le_bytes());
        for s in [&self.host.machine, &self.host.hostname, &self.gpu_bus_id] {
            let b = &s.as_bytes()[..s.len().min(MAX_FIELD)];
            v.push(b.len() as u8);
            v.extend_from_slice(b);
        }
        v
    }

    /// A bare place ([`Self::encode`]), nothing after it.
    #[cfg(test)]
    fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        let (place, rest) = Self::decode_prefix(b)?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the last field", rest.len()));
        }
        Ok(place)
    }

    /// A place as [`Topology::exchange`] sends it: followed by the rank's process id (4 bytes,
    /// little-endian), or bare (a bootstrap standing in for other ranks may answer with bare
    /// places: [`Self::encode`]; their process is then unknown).
    fn decode_with_pid(b: &[u8]) -> std::result::Result<(Self, Option<u32>), String> {
        let (place, rest) = Self::decode_prefix(b)?;
        match rest {
            [] => Ok((place, None)),
            &[a, b, c, d] => Ok((place, Some(u32::from_le_bytes([a, b, c, d])))),
            _ => Err(format!("{} bytes after the last field", rest.len())),
        }
    }

    /// A place from the start of `b`, and what follows it.
    fn decode_prefix(b: &[u8]) -> std::result::Result<(Self, &[u8]), String> {
        let (&[version, choice], rest) = b.split_first_chunk::<2>().ok_or("too short")?;
        if version != 1 {
            return Err(format!("place format {version}, this rank speaks 1"));
        }
        let choice = match choice {
            0 => TransportChoice::Auto,
            1 => TransportChoice::ForceTcp,
            c => return Err(format!("transport choice {c}")),
        };
        let (ordinal, mut rest) = rest.split_first_chunk::<4>().ok_or("too short")?;
        let mut field = || -> std::result::Result<String, String> {
            let (&len, r) = rest.split_first().ok_or("too short")?;
            let (s, r) = r.split_at_checked(len as usize).ok_or("a field runs past the end")?;
            rest = r;
            String::from_utf8(s.to_vec()).map_err(|_| "a field is not UTF-8".to_string())
        };
        let (machine, hostname, gpu_bus_id) = (field()?, field()?, field()?);
        let place = Self {
            host: HostIdentity { machine, hostname },
            gpu_ordinal: u32::from_le_bytes(*ordinal),
            gpu_bus_id,
            choice,
        };
        Ok((place, rest))
    }
}

fn pci_bus_id(gpu: &Gpu) -> Option<String> {
    gpu.bind().ok()?;
    crate::driver::calls::device_pci_bus_id(gpu.context().cu_device()).ok()
}

/// Every rank's place, as this rank sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    me: usize,
    ranks: Vec<RankPlace>,
    /// Every rank's process id where known ([`Self::exchange`]): ranks of one machine with the
    /// same id are threads of one process.
    pids: Vec<Option<u32>>,
}

impl Topology {
    /// Exchanges every rank's place and process id (collective over `boot`: one all-gather).
    pub fn exchange(boot: &dyn Bootstrap, gpu: &Gpu) -> Result<Self> {
        Self::exchange_places(boot, &RankPlace::this_rank(gpu)?)
    }

    /// Exchanges `mine` and this process's id with every rank's (collective over `boot`: one
    /// all-gather): what [`Self::exchange`] does with this rank's GPU, for a rank that drives
    /// none (host memory only) or describes its GPU itself.
    pub fn exchange_places(boot: &dyn Bootstrap, mine: &RankPlace) -> Result<Self> {
        let mut payload = mine.encode();
        payload.extend_from_slice(&std::process::id().to_le_bytes());
        let all = crate::bootstrap::BootstrapExt::all_gather_checked(boot, &payload)?;
        let (ranks, pids) = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                RankPlace::decode_with_pid(b).map_err(|why| Error::Bootstrap {
                    rank: boot.rank(),
                    step: "exchanging where the ranks run".into(),
                    cause: Box::new(Error::Protocol(format!("rank {r}'s place: {why}"))),
                })
            })
            .collect::<Result<(Vec<_>, Vec<_>)>>()?;
        Ok(Self { pids, ..Self::from_places(boot.rank(), ranks)? })
    }

    /// A topology from known places (`me` indexes `ranks`), every rank a process of its own.
    pub fn from_places(me: usize, ranks: Vec<RankPlace>) -> Result<Self> {
        if me >= ranks.len() {
            return Err(Error::InvalidArgument(format!("rank {me} of {} places", ranks.len())));
        }
        Ok(Self { pids: vec![None; ranks.len()], me, ranks })
    }

    /// [`Self::from_places`] with every rank's process id (`pids[r]` of rank `r`).
    pub fn from_places_and_pids(me: usize, ranks: Vec<RankPlace>, pids: Vec<u32>) -> Result<Self> {
        if pids.len() != ranks.len() {
            return Err(Error::InvalidArgument(format!("{} process ids for {} places", pids.len(), ranks.len())));
        }
        Ok(Self { pids: pids.into_iter().map(Some).collect(), ..Self::from_places(me, ranks)? })
    }

    /// Whether rank `p` is a thread of this rank's process (this rank itself included).
    pub fn same_process(&self, p: usize) -> bool {
        let pid = |r: usize| self.pids.get(r).copied().flatten();
        p == self.me || (self.same_machine(p) && pid(p).is_some() && pid(p) == pid(self.me))
    }

    /// Whether rank `p` drives this rank's GPU (by PCI bus id where both are known, else by
    /// ordinal; this rank itself included).
    pub fn same_gpu(&self, p: usize) -> bool {
        let (Some(x), Some(y)) = (self.ranks.get(self.me), self.ranks.get(p)) else { return false };
        self.same_machine(p)
            && if x.gpu_bus_id.is_empty() || y.gpu_bus_id.is_empty() {
                x.gpu_ordinal == y.gpu_ordinal
            } else {
                x.gpu_bus_id == y.gpu_bus_id
            }
    }

    /// How many ranks of this process drive this rank's GPU (this one included, so at least 1):
    /// their kernels run on the GPU at the same time, so a kernel whose blocks wait for other
    /// ranks' blocks must leave room for theirs ([`Self::sm_share`]). Ranks in other processes
    /// on the same GPU are not counted: the GPU runs different processes' kernels in turns.
    pub fn ranks_sharing_gpu(&self) -> usize {
        (0..self.ranks.len()).filter(|&p| self.same_process(p) && self.same_gpu(p)).count().max(1)
    }

    /// This rank's share of `resident` co-resident blocks (a GPU's SM count, or its SMs times the
    /// blocks each can hold): `resident / ranks_sharing_gpu`, at least 1.
    pub fn sm_share(&self, resident: u32) -> u32 {
        (resident / self.ranks_sharing_gpu() as u32).max(1)
    }

    /// This rank.
    pub fn me(&self) -> usize {
        self.me
    }

    /// Rank `r`'s place (`None` past the last rank).
    pub fn place(&self, r: usize) -> Option<&RankPlace> {
        self.ranks.get(r)
    }

    /// Whether rank `p` runs on this rank's machine.
    pub fn same_machine(&self, p: usize) -> bool {
        self.pair_same_machine(self.me, p)
    }

    fn pair_same_machine(&self, a: usize, b: usize) -> bool {
        match (self.ranks.get(a), self.ranks.get(b)) {
            (Some(x), Some(y)) => a == b || x.host.same_machine(&y.host),
            _ => false,
        }
    }

    /// Whether every rank runs on this machine.
    pub fn single_machine(&self) -> bool {
        (0..self.ranks.len()).all(|p| self.same_machine(p))
    }

    /// The transport between this rank and rank `p`.
    pub fn transport(&self, p: usize) -> TransportKind {
        self.pair_transport(self.me, p)
    }

    fn pair_transport(&self, a: usize, b: usize) -> TransportKind {
        match (self.ranks.get(a), self.ranks.get(b)) {
            // A rank's own memory is always mapped.
            _ if a == b => TransportKind::CudaIpc,
            (Some(x), Some(y)) => TransportChoice::between(x.choice, y.choice, self.pair_same_machine(a, b)),
            _ => TransportKind::Tcp,
        }
    }

    /// Whether any pair of ranks (not only this rank's) uses TCP: every rank computes the same
    /// answer, so collective set-up steps can depend on it.
    pub fn any_tcp(&self) -> bool {
        let n = self.ranks.len();
        (0..n).any(|a| (a + 1..n).any(|b| self.pair_transport(a, b) == TransportKind::Tcp))
    }

    /// The first rank that is not on this machine, if any.
    pub fn first_off_machine(&self) -> Option<usize> {
        (0..self.ranks.len()).find(|&p| !self.same_machine(p))
    }

    /// `Ok` when every rank runs on this machine; else an [`Error::OffMachine`] for `what`
    /// (`memory channels`, `mapping GPU memory`, ...) naming the first rank elsewhere and why
    /// ([`Self::off_machine_reason`]). What every builder that maps a peer's memory asks first.
    pub fn require_one_machine(&self, what: &str) -> Result<()> {
        match self.first_off_machine() {
            Some(p) => Err(Error::OffMachine { peer: p, what: what.to_string(), reason: self.off_machine_reason(p) }),
            None => Ok(()),
        }
    }

    /// Why rank `p` cannot be reached through mapped memory, for error messages.
    pub fn off_machine_reason(&self, p: usize) -> String {
        let name = |r: usize| self.ranks.get(r).map_or("?".to_string(), |x| x.host.hostname.clone());
        format!(
            "rank {p} runs on another machine ({}, this rank on {}): this needs the peer's GPU memory mapped into \
             this process (CUDA IPC), which only works between processes of one machine; port channels reach \
             other machines through the proxy (TCP)",
            name(p),
            name(self.me)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(machine: &str, host: &str, gpu: u32, choice: TransportChoice) -> RankPlace {
        RankPlace {
            host: HostIdentity { machine: machine.into(), hostname: host.into() },
            gpu_ordinal: gpu,
            gpu_bus_id: format!("0000:{gpu:02x}:00.0"),
            choice,
        }
    }

    #[test]
    fn places_round_trip_and_malformed_ones_are_refused() {
        let p = place("3b1f-boot", "node-a", 3, TransportChoice::ForceTcp);
        assert_eq!(RankPlace::decode(&p.encode()), Ok(p.clone()));
        let b = p.encode();
        for cut in 0..b.len() {
            assert!(RankPlace::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(RankPlace::decode(&long).is_err());
        let mut v = b.clone();
        v[0] = 2;
        assert!(RankPlace::decode(&v).unwrap_err().contains("format 2"));
        let mut c = b.clone();
        c[1] = 7;
        assert!(RankPlace::decode(&c).is_err());
        let mut utf = b;
        utf[7] = 0xff; // inside the machine id
        assert!(RankPlace::decode(&utf).is_err());
        // What the exchange sends: the place, then the process id; a bare place has none.
        let mut with_pid = p.encode();
        with_pid.extend_from_slice(&4242u32.to_le_bytes());
        assert_eq!(RankPlace::decode_with_pid(&with_pid), Ok((p.clone(), Some(4242))));
        assert_eq!(RankPlace::decode_with_pid(&p.encode()), Ok((p.clone(), None)));
        assert!(RankPlace::decode(&with_pid).is_err(), "a bare decode takes no process id");
        for extra in [1, 3, 5] {
            let mut odd = p.encode();
            odd.extend(std::iter::repeat_n(0u8, extra));
            assert!(RankPlace::decode_with_pid(&odd).is_err(), "{extra} bytes after the place");
        }
        // An over-long field is cut on the way out, never sent as a length that wraps.
        let big = place(&"x".repeat(300), "h", 0, TransportChoice::Auto);
        assert_eq!(RankPlace::decode(&big.encode()).unwrap().host.machine.len(), MAX_FIELD);
    }

    #[test]
    fn machines_need_both_names_and_transports_follow() {
        use TransportChoice::*;
        let ranks = vec![
            place("boot-1", "a", 0, Auto),
            place("boot-1", "a", 1, Auto),
            place("boot-2", "b", 0, Auto),
            place("boot-1", "a2", 0, Auto), // same boot id, another host name: a container apart
            place("", "a", 0, Auto),        // unknown machine id
        ];
        let t = Topology::from_places(0, ranks.clone()).unwrap();
        assert_eq!((0..5).map(|p| t.same_machine(p)).collect::<Vec<_>>(), [true, true, false, false, false]);
        assert_eq!(t.transport(1), TransportKind::CudaIpc);
        assert_eq!(t.transport(2), TransportKind::Tcp);
        assert_eq!(t.first_off_machine(), Some(2));
        assert!(!t.single_machine() && t.any_tcp());
        assert!(t.off_machine_reason(2).contains("rank 2 runs on another machine (b, this rank on a)"));
        // One machine: IPC unless a rank forces TCP; then every pair with that rank uses TCP,
        // and every rank agrees that some pair does.
        let one = vec![place("m", "h", 0, Auto), place("m", "h", 1, Auto), place("m", "h", 0, ForceTcp)];
        for me in 0..3 {
            let t = Topology::from_places(me, one.clone()).unwrap();
            assert!(t.single_machine() && t.any_tcp());
            for p in 0..3 {
                let want = if me != p && (me == 2 || p == 2) { TransportKind::Tcp } else { TransportKind::CudaIpc };
                assert_eq!(t.transport(p), want, "{me} -> {p}");
            }
        }
        let t = Topology::from_places(1, one[..2].to_vec()).unwrap();
        assert!(t.single_machine() && !t.any_tcp());
        assert!(Topology::from_places(3, one).is_err());
    }

    #[test]
    fn ranks_sharing_a_gpu_are_counted_within_one_process() {
        use TransportChoice::*;
        // Ranks 0-3 one process (pid 10): 0, 1, 3 on GPU 0, 2 on GPU 1; rank 4 another process
        // on GPU 0; rank 5 the same pid on another machine.
        let mut ranks = vec![place("m", "h", 0, Auto); 6];
        ranks[2] = place("m", "h", 1, Auto);
        ranks[5] = place("m2", "h2", 0, Auto);
        let pids = vec![10, 10, 10, 10, 11, 10];
        let t = Topology::from_places_and_pids(0, ranks.clone(), pids.clone()).unwrap();
        assert_eq!((0..6).map(|p| t.same_process(p)).collect::<Vec<_>>(), [true, true, true, true, false, false]);
        assert_eq!(t.ranks_sharing_gpu(), 3);
        let sms = 132;
        assert_eq!(t.sm_share(sms), 44);
        assert_eq!(Topology::from_places_and_pids(2, ranks.clone(), pids.clone()).unwrap().ranks_sharing_gpu(), 1);
        assert_eq!(Topology::from_places_and_pids(4, ranks.clone(), pids).unwrap().ranks_sharing_gpu(), 1);
        // Without process ids every rank is a process of its own.
        let t = Topology::from_places(0, ranks.clone()).unwrap();
        assert_eq!((t.ranks_sharing_gpu(), t.sm_share(sms)), (1, sms));
        assert!(Topology::from_places_and_pids(0, ranks, vec![1]).is_err());
        // Never below one block.
        let many = vec![place("m", "h", 0, Auto); 300];
        let t = Topology::from_places_and_pids(7, many, vec![3; 300]).unwrap();
        assert_eq!((t.ranks_sharing_gpu(), t.sm_share(sms)), (300, 1));
    }

    #[test]
    fn mapping_a_peer_elsewhere_is_refused_naming_it_and_why() {
        use TransportChoice::*;
        let ranks = vec![place("boot-1", "node-a", 0, Auto), place("boot-1", "node-a", 1, Auto)];
        let mut apart = ranks.clone();
        apart.push(place("boot-2", "node-b", 0, Auto));
        apart.push(place("boot-3", "node-c", 0, Auto));
        // One machine, even with TCP forced: mapping works.
        Topology::from_places(1, ranks.clone()).unwrap().require_one_machine("memory channels").unwrap();
        let mut forced = ranks;
        forced[1].choice = ForceTcp;
        Topology::from_places(0, forced).unwrap().require_one_machine("memory channels").unwrap();
        // Ranks 2 and 3 elsewhere: the first of them is named, from either side.
        for (me, peer, here, there) in
            [(0, 2, "node-a", "node-b"), (1, 2, "node-a", "node-b"), (2, 0, "node-b", "node-a")]
        {
            let t = Topology::from_places(me, apart.clone()).unwrap();
            for what in ["memory channels", "mapping GPU memory"] {
                let e = t.require_one_machine(what).unwrap_err();
                let Error::OffMachine { peer: p, what: w, reason } = &e else { panic!("{e:?}") };
                assert_eq!((*p, w.as_str()), (peer, what));
                assert!(
                    reason.contains(&format!("rank {peer} runs on another machine ({there}, this rank on {here})"))
                );
                assert!(reason.contains("CUDA IPC") && reason.contains("port channels"), "{reason}");
                assert!(e.to_string().starts_with(&format!("{what} toward rank {peer}: rank {peer} runs on")), "{e}");
            }
        }
    }
}
