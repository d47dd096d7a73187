//! What an `ncclUniqueId` of this library carries: where rank 0's bootstrap listens and a random
//! session token (the bootstrap authenticates every connection with it).
//!
//! ```text
//!  bytes 0..8    magic "MSRSNCL1"
//!        8       address family: 4 or 6
//!        9       0
//!        10..12  port (little-endian)
//!        12..28  address (IPv4 in the first 4 bytes)
//!        28..44  session token
//!        44..128 zero
//! ```
//!
//! The address is chosen where `ncclGetUniqueId` runs, which must be the machine of rank 0 (as
//! with NCCL, the process that makes the id is rank 0's in practice): `MSCCLPP_RS_BOOTSTRAP` or
//! NCCL's `NCCL_COMM_ID` (`host:port`) when set; else, when `NCCL_SOCKET_IFNAME` is set, the
//! first IPv4 address of an interface that is up, not loopback and matches it (as NCCL reads it:
//! a list of name prefixes, `^` to exclude, `=` for exact names); else loopback, which serves
//! every job on one machine. Ranks on several machines therefore need one of these variables,
//! as they do to pick NCCL's own interface. The port is a free one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};

use mscclpp_host::frame::Token;

use crate::abi::UNIQUE_ID_BYTES;
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"MSRSNCL1";

/// A decoded unique id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UniqueId {
    /// Where rank 0 listens.
    pub addr: SocketAddr,
    /// The session token.
    pub token: [u8; 16],
}

impl UniqueId {
    /// A new id: an address for rank 0 (see the module docs) and a random token.
    pub fn generate() -> Result<Self> {
        let given = ["MSCCLPP_RS_BOOTSTRAP", "NCCL_COMM_ID"]
            .iter()
            .find_map(|name| std::env::var(name).ok().map(|v| (*name, v)));
        let addr = match given {
            Some((name, v)) => v.to_socket_addrs().ok().and_then(|mut a| a.next()).ok_or_else(|| {
                Error::invalid_argument(format!("{name}={v} is not a host:port this machine resolves"))
            })?,
            None => {
                let ip = default_ip();
                let port = TcpListener::bind((ip, 0))
                    .and_then(|l| l.local_addr())
                    .map_err(|e| Error {
                        code: crate::abi::ncclSystemError,
                        message: format!("finding a free port on {ip}: {e}"),
                    })?
                    .port();
                SocketAddr::new(ip, port)
            }
        };
        Ok(Self { addr, token: Token::random().0 })
    }

    /// The 128 bytes.
    pub fn encode(&self) -> [u8; UNIQUE_ID_BYTES] {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[..8].copy_from_slice(MAGIC);
        match self.addr.ip() {
            IpAddr::V4(a) => {
                b[8] = 4;
                b[12..16].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                b[8] = 6;
                b[12..28].copy_from_slice(&a.octets());
            }
        }
        b[10..12].copy_from_slice(&self.addr.port().to_le_bytes());
        b[28..44].copy_from_slice(&self.token);
        b
    }

    /// Reads 128 bytes; an id not made by this library (another NCCL's, or garbage) is refused.
    pub fn decode(b: &[u8; UNIQUE_ID_BYTES]) -> Result<Self> {
        if &b[..8] != MAGIC {
            return Err(Error::invalid_argument(
                "this ncclUniqueId was not made by mscclpp-rs's ncclGetUniqueId (made by another NCCL library, or not initialised)",
            ));
        }
        let port = u16::from_le_bytes([b[10], b[11]]);
        let ip = match b[8] {
            4 => IpAddr::V4(Ipv4Addr::new(b[12], b[13], b[14], b[15])),
            6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&b[12..28]).unwrap_or([0; 16]))),
            f => return Err(Error::invalid_argument(format!("ncclUniqueId with address family {f}"))),
        };
        if port == 0 || b[9] != 0 || b[44..].iter().any(|&x| x != 0) {
            return Err(Error::invalid_argument("malformed ncclUniqueId (port 0 or reserved bytes set)"));
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&b[28..44]);
        Ok(Self { addr: SocketAddr::new(ip, port), token })
    }

    /// `host:port` as the bootstrap takes it.
    pub fn addr_string(&self) -> String {
        self.addr.to_string()
    }
}

/// The address `ncclGetUniqueId` offers when none is given (see the module docs).
fn default_ip() -> IpAddr {
    let Ok(filter) = std::env::var("NCCL_SOCKET_IFNAME") else {
        return IpAddr::V4(Ipv4Addr::LOCALHOST);
    };
    interfaces()
        .into_iter()
        .find(|(name, ip)| !ip.is_loopback() && interface_matches(&filter, name))
        .map(|(_, ip)| IpAddr::V4(ip))
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Whether interface `name` passes an `NCCL_SOCKET_IFNAME` filter.
pub fn interface_matches(filter: &str, name: &str) -> bool {
    let (exclude, list) = match filter.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, filter),
    };
    let (exact, list) = match list.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let hit = list.split(',').filter(|p| !p.is_empty()).any(|p| if exact { name == p } else { name.starts_with(p) });
    hit != exclude
}

/// The IPv4 addresses of the interfaces that are up, in the system's order.
fn interfaces() -> Vec<(String, Ipv4Addr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list it allocated, freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
        // SAFETY: ifa_addr, when non-null, points to a sockaddr whose family says its type.
        if up && !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: an AF_INET address is a sockaddr_in; the name is NUL-terminated.
            let (sin, name) =
                unsafe { (&*(ifa.ifa_addr as *const libc::sockaddr_in), std::ffi::CStr::from_ptr(ifa.ifa_name)) };
            out.push((name.to_string_lossy().into_owned(), Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_foreign_ids_are_refused() {
        for addr in ["10.1.2.3:29500", "[fe80::1]:65535", "127.0.0.1:1"] {
            let id = UniqueId { addr: addr.parse().unwrap(), token: rand::random() };
            assert_eq!(UniqueId::decode(&id.encode()).unwrap(), id);
        }
        let mut foreign = [0u8; UNIQUE_ID_BYTES];
        foreign[..8].copy_from_slice(&2u64.to_le_bytes());
        assert!(UniqueId::decode(&foreign).unwrap_err().message.contains("another NCCL"));
        let mut bad = UniqueId { addr: "1.2.3.4:5".parse().unwrap(), token: [1; 16] }.encode();
        bad[100] = 1;
        assert!(UniqueId::decode(&bad).is_err());
        bad[100] = 0;
        bad[10] = 0;
        bad[11] = 0;
        assert!(UniqueId::decode(&bad).unwrap_err().message.contains("port 0"));
    }

    #[test]
    fn generated_ids_differ_and_name_a_reachable_kind_of_address() {
        let (a, b) = (UniqueId::generate().unwrap(), UniqueId::generate().unwrap());
        assert_ne!(a.token, b.token);
        assert_ne!(a.addr.port(), 0);
    }

    #[test]
    fn socket_ifname_filters_as_nccl_reads_them() {
        assert!(interface_matches("eth", "eth0"));
        assert!(!interface_matches("eth", "ib0"));
        assert!(interface_matches("^docker,lo", "eth0"));
        assert!(!interface_matches("^docker,lo", "docker0"));
        assert!(interface_matches("=eth0", "eth0"));
        assert!(!interface_matches("=eth0", "eth01"));
        assert!(interface_matches("ib,eth", "eth1"));
    }
}
