//! What the TCP transport reads from and writes to: [`SourceMemory`] on the sending side (copies
//! out of local memory into staging slots) and [`LandingMemory`] on the receiving side (staging
//! slots that land in registered regions, semaphores, atomic adds). The GPU implementations are
//! in [`super::cuda`]; [`HostSource`] and [`HostLanding`] work on host memory ([`HostRegion`]), so
//! the transport runs, and is tested, on machines without GPUs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::{Error, Result};

/// Checks that `offset..offset + len` lies inside region `index` of `regions` (sizes in bytes),
/// with checked arithmetic: the values come from the network and are not trusted.
pub fn check_span(regions: &[u64], index: u32, offset: u64, len: u64) -> std::result::Result<(), String> {
    let size = *regions
        .get(index as usize)
        .ok_or_else(|| format!("region {index} is not registered ({} regions)", regions.len()))?;
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(format!("range {offset}..+{len} lies outside region {index} of {size} bytes")),
    }
}

/// The sending side's memory: where puts read from, through staging slots.
///
/// The sender thread calls these in order: [`Self::stage`] starts copying a chunk into a free
/// slot, [`Self::staged`] waits for that copy and returns the bytes to send. Several slots are
/// in flight at once, so copying out overlaps sending.
pub trait SourceMemory: Send + 'static {
    /// Called once, on the sender thread, before anything else (a GPU implementation makes its
    /// context current).
    fn bind(&mut self) -> Result<()> {
        Ok(())
    }
    /// The number of staging slots.
    fn slots(&self) -> usize;
    /// Bytes per staging slot (the largest chunk).
    fn slot_bytes(&self) -> usize;
    /// Starts copying `len` bytes at local address `src` into slot `slot`. An address outside the
    /// memory this source serves, or a chunk larger than a slot, is an error.
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()>;
    /// Waits (until `deadline`) for slot `slot`'s copy of `len` bytes and returns them.
    fn staged(&mut self, slot: usize, len: usize, deadline: Instant) -> Result<&[u8]>;
}

/// The receiving side's memory: staging slots the receiver reads the network into, the regions
/// they land in, and the semaphores signals increment.
///
/// Everything a landing memory is asked to do takes effect in the order asked: a signal or an
/// atomic add after the puts before it, and [`Self::wait_all`] waits for all of it.
pub trait LandingMemory: Send + 'static {
    /// Called once, on the receiver thread, before anything else.
    fn bind(&mut self) -> Result<()> {
        Ok(())
    }
    /// The sizes of the registered regions, by index.
    fn regions(&self) -> &[u64];
    /// The number of registered semaphores.
    fn semaphores(&self) -> usize;
    /// The number of staging slots.
    fn slots(&self) -> usize;
    /// Bytes per staging slot (the largest chunk this side accepts).
    fn slot_bytes(&self) -> usize;
    /// Waits (until `deadline`) until slot `slot` no longer feeds an earlier landing and returns
    /// it to be filled.
    fn slot(&mut self, slot: usize, deadline: Instant) -> Result<&mut [u8]>;
    /// Starts writing the first `len` bytes of slot `slot` at `offset` of region `region`.
    /// Implementations check the range again.
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()>;
    /// Increments semaphore `semaphore` once everything before it has landed.
    fn signal(&mut self, semaphore: u32) -> Result<()>;
    /// Adds `value` to the u64 at `offset` (8-aligned) of region `region`, atomically with
    /// respect to other adds, after everything before it.
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()>;
    /// Waits (until `deadline`) until everything asked so far has taken effect.
    fn wait_all(&mut self, deadline: Instant) -> Result<()>;
}

/// A block of host memory with an address of its own (in a range no real pointer uses), so that
/// the proxy and the transport name it as they name GPU memory: by address, with bounds checked
/// against it. Reads and writes go through a lock.
pub struct HostRegion {
    base: u64,
    data: Mutex<Box<[u8]>>,
}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostRegion({:#x}, {} B)", self.base, self.len())
    }
}

/// Where the made-up addresses of host regions start (far above any user-space pointer).
const HOST_REGION_BASE: u64 = 0x7f00_0000_0000_0000;
static NEXT_HOST_ADDR: AtomicU64 = AtomicU64::new(HOST_REGION_BASE);

impl HostRegion {
    /// A region of `len` bytes, each `byte`.
    pub fn filled(len: usize, byte: u8) -> Arc<Self> {
        // Regions get disjoint address ranges with a gap between them, so that an address one
        // past the end of one is never inside the next.
        let span = (len as u64).div_ceil(4096).saturating_add(1).saturating_mul(4096);
        let base = NEXT_HOST_ADDR.fetch_add(span, Ordering::Relaxed);
        Arc::new(Self { base, data: Mutex::new(vec![byte; len].into_boxed_slice()) })
    }

    /// A region holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Arc<Self> {
        let r = Self::filled(data.len(), 0);
        r.lock().copy_from_slice(data);
        r
    }

    /// The region's address.
    pub fn addr(&self) -> u64 {
        self.base
    }

    /// Bytes in the region.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the contents.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().to_vec()
    }

    /// Overwrites bytes from `offset` (an error if they do not fit).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut d = self.lock();
        let end = offset.checked_add(data.len()).filter(|&e| e <= d.len()).ok_or_else(|| {
            Error::InvalidArgument(format!("{} bytes at offset {offset} of a {}-byte host region", data.len(), d.len()))
        })?;
        d[offset..end].copy_from_slice(data);
        Ok(())
    }

    /// The u64 at byte `offset` (little endian).
    pub fn read_u64(&self, offset: usize) -> Option<u64> {
        let d = self.lock();
        let b = d.get(offset..offset.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<[u8]>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `src..src + len` as an offset into this region, if it lies inside.
    fn offset_of(&self, src: u64, len: usize) -> Option<usize> {
        let off = src.checked_sub(self.base)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.len() as u64).then_some(off as usize)
    }
}

/// Host-memory staging slots.
fn slots(count: usize, bytes: usize) -> Result<Vec<Box<[u8]>>> {
    if count == 0 || bytes == 0 {
        return Err(Error::InvalidArgument(format!("{count} staging slots of {bytes} bytes")));
    }
    Ok((0..count).map(|_| vec![0u8; bytes].into_boxed_slice()).collect())
}

/// A [`SourceMemory`] over host regions: puts may read from any of them.
#[derive(Debug)]
pub struct HostSource {
    regions: Vec<Arc<HostRegion>>,
    staging: Vec<Box<[u8]>>,
}

impl HostSource {
    /// Serves `regions`, with `slots` staging slots of `slot_bytes`.
    pub fn new(regions: Vec<Arc<HostRegion>>, slots: usize, slot_bytes: usize) -> Result<Self> {
        Ok(Self { regions, staging: self::slots(slots, slot_bytes)? })
    }
}

impl SourceMemory for HostSource {
    fn slots(&self) -> usize {
        self.staging.len()
    }
    fn slot_bytes(&self) -> usize {
        self.staging[0].len()
    }
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()> {
        let staging = self
            .staging
            .get_mut(slot)
            .filter(|s| s.len() >= len)
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} cannot hold {len} bytes")))?;
        let (region, off) =
            self.regions.iter().find_map(|r| r.offset_of(src, len).map(|o| (r, o))).ok_or_else(|| {
                Error::InvalidArgument(format!("put source {src:#x}..+{len} is not in a registered region"))
            })?;
        staging[..len].copy_from_slice(&region.lock()[off..off + len]);
        Ok(())
    }
    fn staged(&mut self, slot: usize, len: usize, _deadline: Instant) -> Result<&[u8]> {
        self.staging
            .get(slot)
            .and_then(|s| s.get(..len))
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} has no {len} bytes")))
    }
}

/// A [`LandingMemory`] over host regions and host semaphore counters. Every operation takes
/// effect at once, under the region's lock.
#[derive(Debug)]
pub struct HostLanding {
    regions: Vec<Arc<HostRegion>>,
    sizes: Vec<u64>,
    semaphores: Vec<Arc<AtomicU64>>,
    staging: Vec<Box<[u8]>>,
}

impl HostLanding {
    /// Lands in `regions`, increments `semaphores`, with `slots` staging slots of `slot_bytes`.
    pub fn new(
        regions: Vec<Arc<HostRegion>>,
        semaphores: Vec<Arc<AtomicU64>>,
        slots: usize,
        slot_bytes: usize,
    ) -> Result<Self> {
        let sizes = regions.iter().map(|r| r.len() as u64).collect();
        Ok(Self { regions, sizes, semaphores, staging: self::slots(slots, slot_bytes)? })
    }

    fn span(&self, region: u32, offset: u64, len: u64) -> Result<(&HostRegion, usize)> {
        check_span(&self.sizes, region, offset, len).map_err(Error::InvalidArgument)?;
        Ok((&self.regions[region as usize], offset as usize))
    }
}

impl LandingMemory for HostLanding {
    fn regions(&self) -> &[u64] {
        &self.sizes
    }
    fn semaphores(&self) -> usize {
        self.semaphores.len()
    }
    fn slots(&self) -> usize {
        self.staging.len()
    }
    fn slot_bytes(&self) -> usize {
        self.staging[0].len()
    }
    fn slot(&mut self, slot: usize, _deadline: Instant) -> Result<&mut [u8]> {
        let n = self.staging.len();
        self.staging
            .get_mut(slot)
            .map(|s| &mut s[..])
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} of {n}")))
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        let (r, off) = self.span(region, offset, len as u64)?;
        let src = self
            .staging
            .get(slot)
            .and_then(|s| s.get(..len))
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} has no {len} bytes")))?;
        r.lock()[off..off + len].copy_from_slice(src);
        Ok(())
    }
    fn signal(&mut self, semaphore: u32) -> Result<()> {
        let s = self
            .semaphores
            .get(semaphore as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("semaphore {semaphore} is not registered")))?;
        // Partner: the waiter's acquire load; the landings before it happened under the lock.
        s.fetch_add(1, Ordering::Release);
        Ok(())
    }
    fn atomic_add(&mut self, region: u32, offset: u64, value: u64) -> Result<()> {
        if !offset.is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!("atomic add at unaligned offset {offset}")));
        }
        let (r, off) = self.span(region, offset, 8)?;
        let mut d = r.lock();
        let w = &mut d[off..off + 8];
        let v = u64::from_le_bytes((&*w).try_into().expect("8 bytes")).wrapping_add(value);
        w.copy_from_slice(&v.to_le_bytes());
        Ok(())
    }
    fn wait_all(&mut self, _deadline: Instant) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_checked_without_wrapping() {
        let r = [100u64, 8];
        assert!(check_span(&r, 0, 0, 100).is_ok());
        assert!(check_span(&r, 0, 100, 0).is_ok());
        assert!(check_span(&r, 0, 1, 100).is_err());
        assert!(check_span(&r, 1, 0, 8).is_ok());
        assert!(check_span(&r, 2, 0, 0).unwrap_err().contains("not registered"));
        assert!(check_span(&r, 0, u64::MAX, 2).is_err());
        assert!(check_span(&r, 0, 2, u64::MAX).is_err());
    }

    #[test]
    fn host_regions_have_disjoint_addresses_and_sources_stay_inside() {
        let a = HostRegion::from_slice(&[1, 2, 3, 4]);
        let b = HostRegion::filled(4, 9);
        assert!(b.addr() >= a.addr() + 4096 || a.addr() >= b.addr() + 4096);
        let mut s = HostSource::new(vec![a.clone(), b.clone()], 2, 4).unwrap();
        s.stage(0, a.addr() + 1, 3).unwrap();
        assert_eq!(s.staged(0, 3, Instant::now()).unwrap(), &[2, 3, 4]);
        s.stage(1, b.addr(), 4).unwrap();
        assert_eq!(s.staged(1, 4, Instant::now()).unwrap(), &[9; 4]);
        // One past the end, a range that straddles the end, a chunk larger than a slot.
        assert!(s.stage(0, a.addr() + 4, 1).is_err());
        assert!(s.stage(0, a.addr() + 2, 3).is_err());
        assert!(s.stage(0, a.addr() - 1, 1).is_err());
        assert!(s.stage(0, a.addr(), 5).is_err());
        assert!(s.stage(2, a.addr(), 1).is_err());
    }

    #[test]
    fn host_landing_checks_every_write() {
        let r = HostRegion::filled(16, 0);
        let sem = Arc::new(AtomicU64::new(0));
        let mut l = HostLanding::new(vec![r.clone()], vec![sem.clone()], 2, 8).unwrap();
        l.slot(0, Instant::now()).unwrap()[..4].copy_from_slice(&[5, 6, 7, 8]);
        l.land(0, 0, 12, 4).unwrap();
        assert!(l.land(0, 0, 13, 4).is_err());
        assert!(l.land(0, 1, 0, 4).is_err());
        assert!(l.land(0, 0, 0, 9).is_err(), "more than the slot holds");
        l.atomic_add(0, 0, 41).unwrap();
        l.atomic_add(0, 0, 1).unwrap();
        assert!(l.atomic_add(0, 4, 1).is_err());
        assert!(l.atomic_add(0, 16, 1).is_err());
        l.signal(0).unwrap();
        assert!(l.signal(1).is_err());
        assert_eq!(sem.load(Ordering::Acquire), 1);
        let mut want = vec![0u8; 16];
        want[..8].copy_from_slice(&42u64.to_le_bytes());
        want[12..].copy_from_slice(&[5, 6, 7, 8]);
        assert_eq!(r.to_vec(), want);
    }
}
