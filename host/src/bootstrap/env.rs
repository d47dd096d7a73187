//! Rank discovery and bootstrap configuration, as pure functions over an [`EnvSnapshot`] so they
//! are tested without touching the process environment.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::frame::{DEFAULT_MAX_FRAME, Token, stable_hash};

/// This process's rank (set by the built-in launcher).
pub const ENV_RANK: &str = "MSCCLPP_RS_RANK";
/// Number of ranks (built-in launcher).
pub const ENV_WORLD_SIZE: &str = "MSCCLPP_RS_WORLD_SIZE";
/// Rank among the ranks on this machine (built-in launcher).
pub const ENV_LOCAL_RANK: &str = "MSCCLPP_RS_LOCAL_RANK";
/// Number of ranks on this machine (built-in launcher).
pub const ENV_LOCAL_SIZE: &str = "MSCCLPP_RS_LOCAL_SIZE";
/// `host:port` where rank 0 listens. Set by the launcher; may be set by hand under any launcher.
pub const ENV_BOOTSTRAP: &str = "MSCCLPP_RS_BOOTSTRAP";
/// The session token, 32 hex digits (set by the launcher).
pub const ENV_TOKEN: &str = "MSCCLPP_RS_TOKEN";
/// Timeout of every bootstrap connect and receive, in seconds (default 30).
pub const ENV_TIMEOUT: &str = "MSCCLPP_RS_BOOTSTRAP_TIMEOUT";

/// Default timeout of every bootstrap connect and receive.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// First port of the range the rendezvous port is derived into when no address is given.
pub const DERIVED_PORT_BASE: u16 = 20000;
/// Size of that range: ports 20000..=31999, below Linux's ephemeral range (32768..=60999), so a
/// derived port never collides with a port the kernel handed out for an outgoing connection.
pub const DERIVED_PORT_SPAN: u16 = 12000;

/// Variables whose value all ranks of one job share, tried in this order to derive the rendezvous
/// port and session token when neither is given: OpenMPI (4 and 5, through PMIx), then Slurm.
pub const JOB_ID_VARS: &[&str] =
    &["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri", "SLURM_JOB_ID"];

/// A copy of environment variables (only those with UTF-8 names and values).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvSnapshot {
    vars: BTreeMap<String, String>,
}

impl EnvSnapshot {
    /// The current process environment.
    pub fn capture() -> Self {
        let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self { vars: vars.collect() }
    }

    /// The value of `name`, if set and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str).filter(|v| !v.trim().is_empty())
    }

    /// Adds or replaces one variable (for building snapshots in tests).
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    fn usize(&self, name: &str) -> Result<Option<usize>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<usize>()
                .map(Some)
                .map_err(|_| Error::RankEnv(format!("{name}={v:?} is not a non-negative integer"))),
        }
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for EnvSnapshot {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Self { vars: iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect() }
    }
}

/// Who started the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankSource {
    /// The built-in launcher (`MSCCLPP_RS_RANK`, ...).
    Launcher,
    /// OpenMPI's `mpirun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// A PMI launcher such as MPICH's or Intel MPI's hydra (`PMI_RANK`, `PMI_SIZE`).
    Pmi,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`).
    Slurm,
    /// Ranks as threads of one process ([`LocalBootstrap`](super::local::LocalBootstrap)).
    Threads,
}

impl RankSource {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            RankSource::Launcher => "built-in launcher",
            RankSource::OpenMpi => "OpenMPI",
            RankSource::Pmi => "PMI",
            RankSource::Slurm => "Slurm",
            RankSource::Threads => "threads of one process",
        }
    }
}

/// Where this process sits among the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankInfo {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// Rank among the ranks on this machine, `0..local_size`.
    pub local_rank: usize,
    /// Number of ranks on this machine.
    pub local_size: usize,
    /// Which launcher's variables these came from.
    pub source: RankSource,
}

impl RankInfo {
    /// Rank `rank` of `world_size`, all on one machine (for tests and single-process use).
    pub fn single_node(rank: usize, world_size: usize) -> Result<Self> {
        let info = Self { rank, world_size, local_rank: rank, local_size: world_size, source: RankSource::Launcher };
        info.check("arguments")?;
        Ok(info)
    }

    /// The GPU this rank uses when `gpu_count` GPUs are visible: `local_rank % gpu_count`, so
    /// ranks on one machine spread over its GPUs (and share them round-robin when there are more
    /// ranks than GPUs). `None` without GPUs.
    pub fn gpu_index(&self, gpu_count: usize) -> Option<usize> {
        (gpu_count > 0).then(|| self.local_rank % gpu_count)
    }

    /// Reads the rank variables. `Ok(None)` when no launcher's variables are present (the process
    /// was started by hand, or by `cargo test`); an error when they are present but incomplete or
    /// inconsistent (rank not below the size, local rank not below the local size, ...).
    ///
    /// Precedence: the built-in launcher, OpenMPI, PMI, Slurm. OpenMPI comes before Slurm because
    /// `mpirun` inside a Slurm allocation leaves the allocation's `SLURM_PROCID` in every rank.
    pub fn from_env(env: &EnvSnapshot) -> Result<Option<Self>> {
        if env.get(ENV_RANK).is_some() {
            let (rank, world_size) = rank_and_size(env, ENV_RANK, ENV_WORLD_SIZE)?;
            let (local_rank, local_size) =
                local_pair(env, ENV_LOCAL_RANK, ENV_LOCAL_SIZE)?.unwrap_or((rank, world_size));
            return Self::checked(rank, world_size, local_rank, local_size, RankSource::Launcher, "MSCCLPP_RS_*");
        }
        if env.get("OMPI_COMM_WORLD_RANK").is_some() {
            let (rank, world_size) = rank_and_size(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")?;
            let (local_rank, local_size) = local_pair(env, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")?
                .unwrap_or((rank, world_size));
            return Self::checked(rank, world_size, local_rank, local_size, RankSource::OpenMpi, "OMPI_COMM_WORLD_*");
        }
        if env.get("PMI_RANK").is_some() {
            let (rank, world_size) = rank_and_size(env, "PMI_RANK", "PMI_SIZE")?;
            // PMI_LOCAL_* where the launcher provides them, else hydra's MPI_LOCAL*; without
            // either, one machine is assumed.
            let local = match local_pair(env, "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE")? {
                Some(l) => Some(l),
                None => local_pair(env, "MPI_LOCALRANKID", "MPI_LOCALNRANKS")?,
            };
            let (local_rank, local_size) = local.unwrap_or((rank, world_size));
            return Self::checked(rank, world_size, local_rank, local_size, RankSource::Pmi, "PMI_*");
        }
        if env.get("SLURM_PROCID").is_some() {
            let (rank, world_size) = rank_and_size(env, "SLURM_PROCID", "SLURM_NTASKS")?;
            let (local_rank, local_size) = match env.usize("SLURM_LOCALID")? {
                None => (rank, world_size),
                Some(lr) => (lr, slurm_local_size(env, world_size)?),
            };
            return Self::checked(rank, world_size, local_rank, local_size, RankSource::Slurm, "SLURM_*");
        }
        Ok(None)
    }

    fn checked(
        rank: usize,
        world_size: usize,
        local_rank: usize,
        local_size: usize,
        source: RankSource,
        vars: &str,
    ) -> Result<Option<Self>> {
        let info = Self { rank, world_size, local_rank, local_size, source };
        info.check(vars)?;
        Ok(Some(info))
    }

    pub(crate) fn check(&self, vars: &str) -> Result<()> {
        let bad = |what: String| Err(Error::RankEnv(format!("{vars}: {what}")));
        if self.world_size == 0 {
            return bad("world size is 0".into());
        }
        if self.world_size > MAX_WORLD_SIZE {
            return bad(format!("world size {} is above the limit of {MAX_WORLD_SIZE}", self.world_size));
        }
        if self.rank >= self.world_size {
            return bad(format!("rank {} is not below the world size {}", self.rank, self.world_size));
        }
        if self.local_size == 0 {
            return bad("local size is 0".into());
        }
        if self.local_rank >= self.local_size {
            return bad(format!("local rank {} is not below the local size {}", self.local_rank, self.local_size));
        }
        if self.local_size > self.world_size {
            return bad(format!("local size {} is above the world size {}", self.local_size, self.world_size));
        }
        Ok(())
    }
}

fn rank_and_size(env: &EnvSnapshot, rank: &str, size: &str) -> Result<(usize, usize)> {
    let r = env.usize(rank)?.ok_or_else(|| Error::RankEnv(format!("{rank} is not set")))?;
    let s = env.usize(size)?.ok_or_else(|| Error::RankEnv(format!("{rank} is set but {size} is not")))?;
    Ok((r, s))
}

/// Both variables or neither.
fn local_pair(env: &EnvSnapshot, rank: &str, size: &str) -> Result<Option<(usize, usize)>> {
    match (env.usize(rank)?, env.usize(size)?) {
        (Some(r), Some(s)) => Ok(Some((r, s))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::RankEnv(format!("{rank} is set but {size} is not"))),
        (None, Some(_)) => Err(Error::RankEnv(format!("{size} is set but {rank} is not"))),
    }
}

/// Ranks on this node under Slurm: `SLURM_TASKS_PER_NODE` (e.g. `2(x3),1`) at `SLURM_NODEID`,
/// else `SLURM_NTASKS_PER_NODE`, else all ranks when the step runs on one node.
fn slurm_local_size(env: &EnvSnapshot, world_size: usize) -> Result<usize> {
    if let (Some(spec), Some(node)) = (env.get("SLURM_TASKS_PER_NODE"), env.usize("SLURM_NODEID")?) {
        return tasks_on_node(spec, node).ok_or_else(|| {
            Error::RankEnv(format!("cannot read SLURM_TASKS_PER_NODE={spec:?} for SLURM_NODEID={node}"))
        });
    }
    if let Some(n) = env.usize("SLURM_NTASKS_PER_NODE")? {
        return Ok(n);
    }
    let nodes = match env.usize("SLURM_STEP_NUM_NODES")? {
        Some(n) => Some(n),
        None => env.usize("SLURM_NNODES")?,
    };
    match nodes {
        None | Some(1) => Ok(world_size),
        Some(n) => Err(Error::RankEnv(format!(
            "SLURM_LOCALID is set on a {n}-node step but neither SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is"
        ))),
    }
}

/// The count for node `node` in a Slurm tasks-per-node list such as `2(x3),1`.
fn tasks_on_node(spec: &str, node: usize) -> Option<usize> {
    let mut seen = 0usize;
    for item in spec.split(',') {
        let item = item.trim();
        let (count, repeat) = match item.split_once("(x") {
            Some((c, rest)) => (c, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (item, 1),
        };
        let count = count.parse::<usize>().ok()?;
        seen = seen.checked_add(repeat)?;
        if node < seen {
            return Some(count);
        }
    }
    None
}

/// The shared job identifier, as `NAME=value` (two variables for Slurm: job and step).
pub fn job_identifier(env: &EnvSnapshot) -> Option<String> {
    for &name in JOB_ID_VARS {
        if let Some(v) = env.get(name) {
            return Some(if name == "SLURM_JOB_ID" {
                format!("{name}={v}.{}", env.get("SLURM_STEP_ID").unwrap_or("-"))
            } else {
                format!("{name}={v}")
            });
        }
    }
    None
}

/// The rendezvous port derived from a job identifier: `20000 + hash % 12000`.
pub fn derived_port(job_id: &str) -> u16 {
    DERIVED_PORT_BASE + (stable_hash(b"mscclpp-rs port", job_id.as_bytes()) % u64::from(DERIVED_PORT_SPAN)) as u16
}

/// Whether `host:port` names a loopback address: an IP literal in 127.0.0.0/8 or `::1`, or
/// `localhost`. Any other name counts as not loopback (no name lookup here).
pub fn is_loopback_addr(addr: &str) -> bool {
    let Some((host, _port)) = addr.trim().rsplit_once(':') else { return false };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Everything [`TcpBootstrap::connect`](super::TcpBootstrap::connect) needs.
#[derive(Clone, Debug)]
pub struct BootstrapConfig {
    /// Where this process sits.
    pub rank: RankInfo,
    /// `host:port` where rank 0 listens (unused with one rank).
    pub addr: String,
    /// Whether `addr` was derived from the job identifier rather than given.
    pub addr_derived: bool,
    /// The session token (it never travels: frames carry a tag derived from it, and the
    /// rendezvous proves knowledge of it by challenge-response).
    pub token: Token,
    /// Whether `token` was derived from the job identifier (or the address) rather than given
    /// (`MSCCLPP_RS_TOKEN`, or [`BootstrapConfig::new`]): such a token is known to anyone who can
    /// read the job's environment, so nothing keyed by it may listen beyond loopback (the
    /// bootstrap's address, and the TCP transport's listener, which learns this through
    /// [`BootstrapHints::token_derived`](super::BootstrapHints::token_derived)).
    pub token_derived: bool,
    /// Timeout of the rendezvous as a whole and of every later operation.
    pub timeout: Duration,
    /// Largest payload accepted in one frame (and sent: larger sends are refused).
    pub max_frame: usize,
    /// Bytes of point-to-point messages one peer may have queued here unread (a single message
    /// is always accepted). A peer that sends more loses its connection with an error that says
    /// so, instead of growing this process's memory without bound.
    pub max_queued: usize,
}

/// Default [`BootstrapConfig::max_queued`]: 64 MiB per peer.
pub const DEFAULT_MAX_QUEUED: usize = 64 << 20;

/// The largest world size accepted (ranks travel as 32-bit numbers; rank 0 holds a socket and a
/// thread per rank, so far fewer is practical: `docs/bootstrap-scaling.md` projects 4096).
pub const MAX_WORLD_SIZE: usize = 65536;

impl BootstrapConfig {
    /// A configuration with the default timeout and frame limit.
    pub fn new(rank: RankInfo, addr: impl Into<String>, token: Token) -> Self {
        Self {
            rank,
            addr: addr.into(),
            addr_derived: false,
            token,
            token_derived: false,
            timeout: DEFAULT_TIMEOUT,
            max_frame: DEFAULT_MAX_FRAME,
            max_queued: DEFAULT_MAX_QUEUED,
        }
    }

    /// Replaces the cap on unread messages per peer.
    pub fn with_max_queued(mut self, max_queued: usize) -> Self {
        self.max_queued = max_queued;
        self
    }

    /// Replaces the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The configuration the environment describes, or `Ok(None)` without rank variables.
    ///
    /// * address: `MSCCLPP_RS_BOOTSTRAP` (`host:port`) when set. Otherwise, when all ranks are on
    ///   this machine, `127.0.0.1` and a port derived from the first of [`JOB_ID_VARS`] present
    ///   ([`derived_port`]); ranks on several machines must set the address.
    /// * token: `MSCCLPP_RS_TOKEN` when set, else [`Token::derive`] of the job identifier, else of
    ///   the address.
    /// * timeout: `MSCCLPP_RS_BOOTSTRAP_TIMEOUT` seconds (fractions allowed), default 30 s.
    pub fn from_env(env: &EnvSnapshot) -> Result<Option<Self>> {
        let Some(rank) = RankInfo::from_env(env)? else { return Ok(None) };
        let timeout = match env.get(ENV_TIMEOUT) {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Duration::from_secs_f64(s),
                _ => {
                    return Err(Error::RankEnv(format!(
                        "{ENV_TIMEOUT}={v:?} is not a number of seconds in (0, 86400]"
                    )));
                }
            },
        };
        let job = job_identifier(env);
        let (addr, addr_derived) = match env.get(ENV_BOOTSTRAP) {
            Some(a) => {
                let a = a.trim();
                match a.rsplit_once(':') {
                    Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0) => {}
                    _ => return Err(Error::RankEnv(format!("{ENV_BOOTSTRAP}={a:?} is not host:port"))),
                }
                (a.to_string(), false)
            }
            None if rank.world_size == 1 => (String::new(), false),
            None => {
                let Some(job) = &job else {
                    return Err(Error::RankEnv(format!(
                        "{} ranks but no bootstrap address: set {ENV_BOOTSTRAP}=host:port (none of {} is set to derive one from)",
                        rank.source.name(),
                        JOB_ID_VARS.join(", ")
                    )));
                };
                let multi_node = rank.local_size < rank.world_size
                    || env.usize("SLURM_STEP_NUM_NODES")?.is_some_and(|n| n > 1)
                    || env.usize("SLURM_NNODES")?.is_some_and(|n| n > 1);
                if multi_node {
                    return Err(Error::RankEnv(format!(
                        "the {} ranks span several machines ({} of {} here): set {ENV_BOOTSTRAP}=<rank 0's host>:<port>",
                        rank.world_size, rank.local_size, rank.world_size
                    )));
                }
                (format!("127.0.0.1:{}", derived_port(job)), true)
            }
        };
        let token_derived = env.get(ENV_TOKEN).is_none();
        let token = match env.get(ENV_TOKEN) {
            Some(t) => Token::from_hex(t).map_err(|e| Error::RankEnv(format!("{ENV_TOKEN}: {}", Error::from(e))))?,
            None if rank.world_size > 1 && !is_loopback_addr(&addr) => {
                return Err(Error::RankEnv(format!(
                    "{ENV_BOOTSTRAP}={addr} is not a loopback address, and a token derived from the job id can be \
                     computed by anyone who can read the job's environment: set {ENV_TOKEN} to the same 32 random hex \
                     digits on every rank (for example from `openssl rand -hex 16`)"
                )));
            }
            None => Token::derive(job.as_deref().unwrap_or(&addr)),
        };
        Ok(Some(Self {
            rank,
            addr,
            addr_derived,
            token,
            token_derived,
            timeout,
            max_frame: DEFAULT_MAX_FRAME,
            max_queued: DEFAULT_MAX_QUEUED,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> EnvSnapshot {
        pairs.iter().copied().collect()
    }

    fn info(pairs: &[(&str, &str)]) -> RankInfo {
        RankInfo::from_env(&env(pairs)).unwrap().unwrap()
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        match RankInfo::from_env(&env(pairs)) {
            Err(e) => e.to_string(),
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    #[test]
    fn nothing_set() {
        assert_eq!(RankInfo::from_env(&env(&[("PATH", "/bin"), ("OMPI_COMM_WORLD_RANK", "")])).unwrap(), None);
    }

    #[test]
    fn launcher() {
        let i = info(&[
            ("MSCCLPP_RS_RANK", "2"),
            ("MSCCLPP_RS_WORLD_SIZE", "4"),
            ("MSCCLPP_RS_LOCAL_RANK", "0"),
            ("MSCCLPP_RS_LOCAL_SIZE", "2"),
        ]);
        assert_eq!((i.rank, i.world_size, i.local_rank, i.local_size, i.source), (2, 4, 0, 2, RankSource::Launcher));
        let i = info(&[("MSCCLPP_RS_RANK", "3"), ("MSCCLPP_RS_WORLD_SIZE", "4")]);
        assert_eq!((i.local_rank, i.local_size), (3, 4));
    }

    #[test]
    fn openmpi_wins_over_slurm() {
        let i = info(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
        ]);
        assert_eq!((i.rank, i.world_size, i.local_rank, i.local_size, i.source), (5, 8, 1, 4, RankSource::OpenMpi));
    }

    #[test]
    fn pmi() {
        let i = info(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]);
        assert_eq!((i.rank, i.world_size, i.local_rank, i.local_size, i.source), (1, 2, 1, 2, RankSource::Pmi));
        let i = info(&[("PMI_RANK", "3"), ("PMI_SIZE", "4"), ("PMI_LOCAL_RANK", "1"), ("PMI_LOCAL_SIZE", "2")]);
        assert_eq!((i.local_rank, i.local_size), (1, 2));
        let i = info(&[("PMI_RANK", "3"), ("PMI_SIZE", "4"), ("MPI_LOCALRANKID", "0"), ("MPI_LOCALNRANKS", "1")]);
        assert_eq!((i.local_rank, i.local_size), (0, 1));
    }

    #[test]
    fn slurm() {
        let base = [("SLURM_PROCID", "4"), ("SLURM_NTASKS", "7"), ("SLURM_LOCALID", "0")];
        let mut v = base.to_vec();
        v.extend([("SLURM_TASKS_PER_NODE", "2(x2),3"), ("SLURM_NODEID", "2")]);
        let i = info(&v);
        assert_eq!((i.rank, i.world_size, i.local_rank, i.local_size, i.source), (4, 7, 0, 3, RankSource::Slurm));
        let mut v = base.to_vec();
        v.push(("SLURM_NTASKS_PER_NODE", "4"));
        assert_eq!(info(&v).local_size, 4);
        let mut v = base.to_vec();
        v.push(("SLURM_NNODES", "1"));
        assert_eq!(info(&v).local_size, 7);
        let mut v = base.to_vec();
        v.push(("SLURM_NNODES", "2"));
        assert!(err(&v).contains("SLURM_TASKS_PER_NODE"));
        let mut v = base.to_vec();
        v.extend([("SLURM_TASKS_PER_NODE", "2(x2"), ("SLURM_NODEID", "0")]);
        assert!(err(&v).contains("cannot read"));
        assert_eq!(tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(tasks_on_node("2(x3),1", 4), None);
        assert_eq!(tasks_on_node("8", 0), Some(8));
    }

    #[test]
    fn inconsistent() {
        assert!(
            err(&[("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")]).contains("not below the world size")
        );
        assert!(err(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "0")]).contains("world size is 0"));
        assert!(err(&[("PMI_RANK", "1")]).contains("PMI_SIZE is not"));
        assert!(err(&[("PMI_RANK", "x"), ("PMI_SIZE", "2")]).contains("not a non-negative integer"));
        assert!(err(&[("PMI_RANK", "-1"), ("PMI_SIZE", "2")]).contains("not a non-negative integer"));
        assert!(
            err(&[
                ("MSCCLPP_RS_RANK", "1"),
                ("MSCCLPP_RS_WORLD_SIZE", "4"),
                ("MSCCLPP_RS_LOCAL_RANK", "2"),
                ("MSCCLPP_RS_LOCAL_SIZE", "2")
            ])
            .contains("local rank 2 is not below the local size 2")
        );
        assert!(
            err(&[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "3")
            ])
            .contains("above the world size")
        );
        assert!(
            err(&[("MSCCLPP_RS_RANK", "1"), ("MSCCLPP_RS_WORLD_SIZE", "4"), ("MSCCLPP_RS_LOCAL_RANK", "1")])
                .contains("MSCCLPP_RS_LOCAL_SIZE is not")
        );
        assert!(
            err(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2"), ("SLURM_LOCALID", "3"), ("SLURM_NNODES", "1")])
                .contains("local rank 3")
        );
    }

    #[test]
    fn gpu_mapping() {
        let i = info(&[
            ("MSCCLPP_RS_RANK", "5"),
            ("MSCCLPP_RS_WORLD_SIZE", "8"),
            ("MSCCLPP_RS_LOCAL_RANK", "3"),
            ("MSCCLPP_RS_LOCAL_SIZE", "4"),
        ]);
        assert_eq!(i.gpu_index(0), None);
        assert_eq!(i.gpu_index(2), Some(1));
        assert_eq!(i.gpu_index(8), Some(3));
    }

    #[test]
    fn config_from_launcher_env() {
        let t = Token::random();
        let e = env(&[
            ("MSCCLPP_RS_RANK", "1"),
            ("MSCCLPP_RS_WORLD_SIZE", "2"),
            ("MSCCLPP_RS_BOOTSTRAP", "127.0.0.1:4000"),
            ("MSCCLPP_RS_TOKEN", &t.to_hex()),
            ("MSCCLPP_RS_BOOTSTRAP_TIMEOUT", "2.5"),
        ]);
        let c = BootstrapConfig::from_env(&e).unwrap().unwrap();
        assert_eq!(
            (c.addr.as_str(), c.addr_derived, c.token, c.timeout),
            ("127.0.0.1:4000", false, t, Duration::from_millis(2500))
        );
        assert!(!c.token_derived, "a token given in MSCCLPP_RS_TOKEN is not derived");
        for (k, v) in [
            ("MSCCLPP_RS_BOOTSTRAP_TIMEOUT", "0"),
            ("MSCCLPP_RS_BOOTSTRAP_TIMEOUT", "soon"),
            ("MSCCLPP_RS_BOOTSTRAP", "4000"),
            ("MSCCLPP_RS_BOOTSTRAP", "host:0"),
            ("MSCCLPP_RS_TOKEN", "00"),
        ] {
            assert!(BootstrapConfig::from_env(&e.clone().with(k, v)).is_err(), "{k}={v}");
        }
        assert!(BootstrapConfig::from_env(&EnvSnapshot::default()).unwrap().is_none());
    }

    #[test]
    fn config_derived_under_mpirun() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("PMIX_NAMESPACE", "prterun-host-1234@1"),
        ]);
        let a = BootstrapConfig::from_env(&e).unwrap().unwrap();
        let b = BootstrapConfig::from_env(&e.clone().with("OMPI_COMM_WORLD_RANK", "1")).unwrap().unwrap();
        assert!(a.addr_derived && a.addr.starts_with("127.0.0.1:"));
        assert!(a.token_derived && b.token_derived, "no MSCCLPP_RS_TOKEN: the token comes from the job id");
        assert_eq!((&a.addr, a.token), (&b.addr, b.token), "ranks of one job agree");
        let port = derived_port("PMIX_NAMESPACE=prterun-host-1234@1");
        assert!((DERIVED_PORT_BASE..DERIVED_PORT_BASE + DERIVED_PORT_SPAN).contains(&port));
        assert_eq!(a.addr, format!("127.0.0.1:{port}"));
        let other =
            BootstrapConfig::from_env(&e.clone().with("PMIX_NAMESPACE", "prterun-host-1235@1")).unwrap().unwrap();
        assert_ne!(a.token, other.token, "another job, another token");
        // Several machines: the address must be given.
        let multi = e.clone().with("OMPI_COMM_WORLD_SIZE", "4");
        assert!(BootstrapConfig::from_env(&multi).unwrap_err().to_string().contains("several machines"));
        let given = multi.with("MSCCLPP_RS_BOOTSTRAP", "node0:29500");
        // ... and, not being loopback, an explicit token.
        assert!(BootstrapConfig::from_env(&given).unwrap_err().to_string().contains("MSCCLPP_RS_TOKEN"));
        let given = given.with("MSCCLPP_RS_TOKEN", Token::random().to_hex());
        let c = BootstrapConfig::from_env(&given).unwrap().unwrap();
        assert_eq!((c.addr.as_str(), c.addr_derived, c.token_derived), ("node0:29500", false, false));
        // No job identifier at all.
        let bare = env(&[("PMI_RANK", "0"), ("PMI_SIZE", "2")]);
        assert!(BootstrapConfig::from_env(&bare).unwrap_err().to_string().contains("MSCCLPP_RS_BOOTSTRAP"));
        // Slurm: job and step both count.
        let s = env(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "0")]);
        let s1 = BootstrapConfig::from_env(&s).unwrap().unwrap();
        let s2 = BootstrapConfig::from_env(&s.clone().with("SLURM_STEP_ID", "1")).unwrap().unwrap();
        assert_ne!(s1.token, s2.token);
        // One rank needs no address.
        let one = BootstrapConfig::from_env(&env(&[("MSCCLPP_RS_RANK", "0"), ("MSCCLPP_RS_WORLD_SIZE", "1")]));
        assert!(one.unwrap().is_some());
    }

    #[test]
    fn non_loopback_needs_an_explicit_token() {
        let base = env(&[("MSCCLPP_RS_RANK", "0"), ("MSCCLPP_RS_WORLD_SIZE", "2")]);
        for addr in ["10.1.2.3:29500", "0.0.0.0:29500", "node0:29500", "[::]:29500", "[fe80::1]:7"] {
            let e = BootstrapConfig::from_env(&base.clone().with(ENV_BOOTSTRAP, addr)).unwrap_err().to_string();
            assert!(e.contains(ENV_TOKEN) && e.contains("not a loopback address") && e.contains("hex"), "{addr}: {e}");
            let t = Token::random();
            let ok = BootstrapConfig::from_env(&base.clone().with(ENV_BOOTSTRAP, addr).with(ENV_TOKEN, t.to_hex()));
            assert_eq!(ok.unwrap().unwrap().token, t, "{addr}");
        }
        for addr in ["127.0.0.1:29500", "127.8.0.1:1", "localhost:29500", "[::1]:29500"] {
            let c = BootstrapConfig::from_env(&base.clone().with(ENV_BOOTSTRAP, addr)).unwrap().unwrap();
            assert!(c.token_derived, "{addr}");
        }
        assert!(!is_loopback_addr("127.0.0.1"));
    }

    #[test]
    fn world_size_is_capped() {
        for size in ["65537", "1000000000000", "18446744073709551615"] {
            let e = RankInfo::from_env(&env(&[("MSCCLPP_RS_RANK", "0"), ("MSCCLPP_RS_WORLD_SIZE", size)]));
            assert!(e.unwrap_err().to_string().contains("above the limit"), "{size}");
        }
        let ok = RankInfo::from_env(&env(&[("MSCCLPP_RS_RANK", "0"), ("MSCCLPP_RS_WORLD_SIZE", "65536")]));
        assert_eq!(ok.unwrap().unwrap().world_size, MAX_WORLD_SIZE);
        let info =
            RankInfo { rank: 0, world_size: usize::MAX, local_rank: 0, local_size: 1, source: RankSource::Launcher };
        assert!(info.check("test").is_err());
    }
}
