//! What the TCP transport reads from and writes to: [`SourceMemory`] on the sending side (the
//! bytes of each put chunk, staged or in place) and [`LandingMemory`] on the receiving side (where
//! a put's payload is read to, the regions it lands in, semaphores, atomic adds). The GPU
//! implementations are in [`super::cuda`] and go through pinned staging slots; [`HostSource`]
//! and [`HostLanding`] work on host memory ([`HostRegion`]) with no staging at all: the socket
//! reads out of and writes into the regions themselves ([`HostSpan`]). With them the transport
//! runs, and is tested, on machines without GPUs.

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

/// Where the bytes of a staged put chunk are, for the sender to write to the socket.
#[derive(Debug)]
pub enum Outgoing<'a> {
    /// A copy the source made (a staging slot): it stays as it is until the slot is staged again.
    Staged(&'a [u8]),
    /// The chunk in place, in host memory: the sender writes it from there, under the region's
    /// lock, one non-blocking system call at a time.
    InPlace(HostSpan<'a>),
}

/// The sending side's memory: where puts read from.
///
/// The sender thread calls these in order: [`Self::stage`] starts preparing a chunk in a free
/// slot (a GPU source starts a device-to-host copy into it), [`Self::staged`] waits for it and
/// says where the bytes to send are. Several slots are in flight at once, so copying out overlaps
/// sending. A source that can hand out the chunk in place ([`Outgoing::InPlace`]) copies nothing;
/// its slots then only bound how many chunks the sender has prepared ahead. Either way the sender
/// has read the chunk from the source before it writes anything that comes after it (a flush's
/// request among them), so a flush that returns means the sources of the puts before it are no
/// longer read.
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
    /// Starts preparing `len` bytes at local address `src` as slot `slot`'s chunk. An address
    /// outside the memory this source serves, or a chunk larger than a slot, is an error.
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()>;
    /// Waits (until `deadline`) for slot `slot`'s chunk of `len` bytes and says where it is.
    fn staged(&mut self, slot: usize, len: usize, deadline: Instant) -> Result<Outgoing<'_>>;
}

/// The receiving side's memory: where the receiver reads a put's payload to (the destination
/// itself, [`Self::direct`], or a staging slot that then lands, [`Self::slot`] and
/// [`Self::land`]), the regions, and the semaphores signals increment.
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
    /// Where the payload of a put to `offset..offset + len` of region `region` may be read to
    /// directly, without a staging slot: `None` (the default) when this memory has no such place
    /// (GPU memory). The receiver has checked the range (implementations check it again) and
    /// reads the payload into the span as it arrives, so what was asked before must already have
    /// taken effect when this returns. A connection that ends or stalls in the middle of the
    /// payload leaves the part that arrived in the span; that put is never acknowledged.
    fn direct(&mut self, region: u32, offset: u64, len: usize) -> Result<Option<HostSpan<'_>>> {
        let _ = (region, offset, len);
        Ok(None)
    }
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
/// against it. Reads and writes go through a lock, the transport's too: it holds the lock only
/// for one non-blocking system call at a time, never while it waits for the network, so two
/// transports whose sends and landings use the same regions cannot wait for each other.
pub struct HostRegion {
    base: u64,
    len: usize,
    data: Mutex<Box<[u8]>>,
}

impl std::fmt::Debug for HostRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostRegion({:#x}, {} B)", self.base, self.len)
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
        Arc::new(Self { base, len, data: Mutex::new(vec![byte; len].into_boxed_slice()) })
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
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of the contents.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().to_vec()
    }

    /// Overwrites bytes from `offset` (an error if they do not fit).
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let span = self.span(offset, data.len()).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} bytes at offset {offset} of a {}-byte host region",
                data.len(),
                self.len
            ))
        })?;
        span.with(|d| d.copy_from_slice(data));
        Ok(())
    }

    /// The u64 at byte `offset` (little endian).
    pub fn read_u64(&self, offset: usize) -> Option<u64> {
        let d = self.lock();
        let b = d.get(offset..offset.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// Bytes `offset..offset + len`, if they lie inside.
    pub fn span(&self, offset: usize, len: usize) -> Option<HostSpan<'_>> {
        offset.checked_add(len).filter(|&end| end <= self.len).map(|_| HostSpan { region: self, offset, len })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<[u8]>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `src..src + len` as an offset into this region, if it lies inside.
    fn offset_of(&self, src: u64, len: usize) -> Option<usize> {
        let off = src.checked_sub(self.base)?;
        let end = off.checked_add(len as u64)?;
        (end <= self.len as u64).then_some(off as usize)
    }
}

/// A range of a [`HostRegion`], checked to lie inside it: where the transport's socket reads
/// from ([`Outgoing::InPlace`]) or writes to ([`LandingMemory::direct`]) without a copy.
#[derive(Clone, Copy, Debug)]
pub struct HostSpan<'a> {
    region: &'a HostRegion,
    offset: usize,
    len: usize,
}

impl HostSpan<'_> {
    /// Bytes in the span.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs `f` on the span's bytes under the region's lock. `f` must not wait for anything
    /// (the transport's I/O inside it is non-blocking).
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut d = self.region.lock();
        f(&mut d[self.offset..self.offset + self.len])
    }
}

/// A [`SourceMemory`] over host regions: puts may read from any of them, in place (staging
/// copies nothing; the sender writes each chunk to the socket from the region).
#[derive(Debug)]
pub struct HostSource {
    regions: Vec<Arc<HostRegion>>,
    slot_bytes: usize,
    /// Per slot: the chunk staged in it (region index, offset, bytes).
    staged: Vec<Option<(usize, usize, usize)>>,
}

impl HostSource {
    /// Serves `regions`, with chunks of at most `slot_bytes` and `slots` of them prepared ahead.
    pub fn new(regions: Vec<Arc<HostRegion>>, slots: usize, slot_bytes: usize) -> Result<Self> {
        if slots == 0 || slot_bytes == 0 {
            return Err(Error::InvalidArgument(format!("{slots} staging slots of {slot_bytes} bytes")));
        }
        Ok(Self { regions, slot_bytes, staged: vec![None; slots] })
    }
}

impl SourceMemory for HostSource {
    fn slots(&self) -> usize {
        self.staged.len()
    }
    fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }
    fn stage(&mut self, slot: usize, src: u64, len: usize) -> Result<()> {
        let bytes = self.slot_bytes;
        let staged = self
            .staged
            .get_mut(slot)
            .filter(|_| len <= bytes)
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} cannot hold {len} bytes")))?;
        let at = self.regions.iter().enumerate().find_map(|(i, r)| r.offset_of(src, len).map(|o| (i, o, len)));
        *staged = Some(at.ok_or_else(|| {
            Error::InvalidArgument(format!("put source {src:#x}..+{len} is not in a registered region"))
        })?);
        Ok(())
    }
    fn staged(&mut self, slot: usize, len: usize, _deadline: Instant) -> Result<Outgoing<'_>> {
        match self.staged.get(slot).copied().flatten() {
            Some((region, offset, staged)) if staged == len => {
                let span = self.regions[region].span(offset, len).expect("checked when staged");
                Ok(Outgoing::InPlace(span))
            }
            _ => Err(Error::InvalidArgument(format!("staging slot {slot} holds no chunk of {len} bytes"))),
        }
    }
}

/// A [`LandingMemory`] over host regions and host semaphore counters. Every operation takes
/// effect at once, under the region's lock; a put's payload is read from the socket straight
/// into its region ([`LandingMemory::direct`]), so the staging slots serve only callers of
/// [`LandingMemory::slot`] and [`LandingMemory::land`] (allocated at their first use).
#[derive(Debug)]
pub struct HostLanding {
    regions: Vec<Arc<HostRegion>>,
    sizes: Vec<u64>,
    semaphores: Vec<Arc<AtomicU64>>,
    slot_bytes: usize,
    staging: Vec<Option<Box<[u8]>>>,
}

impl HostLanding {
    /// Lands in `regions`, increments `semaphores`, with `slots` staging slots of `slot_bytes`.
    pub fn new(
        regions: Vec<Arc<HostRegion>>,
        semaphores: Vec<Arc<AtomicU64>>,
        slots: usize,
        slot_bytes: usize,
    ) -> Result<Self> {
        if slots == 0 || slot_bytes == 0 {
            return Err(Error::InvalidArgument(format!("{slots} staging slots of {slot_bytes} bytes")));
        }
        let sizes = regions.iter().map(|r| r.len() as u64).collect();
        Ok(Self { regions, sizes, semaphores, slot_bytes, staging: vec![None; slots] })
    }

    fn span(&self, region: u32, offset: u64, len: u64) -> Result<HostSpan<'_>> {
        check_span(&self.sizes, region, offset, len).map_err(Error::InvalidArgument)?;
        Ok(self.regions[region as usize].span(offset as usize, len as usize).expect("checked above"))
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
        self.slot_bytes
    }
    fn direct(&mut self, region: u32, offset: u64, len: usize) -> Result<Option<HostSpan<'_>>> {
        // Everything before took effect when it was asked: nothing is pending.
        self.span(region, offset, len as u64).map(Some)
    }
    fn slot(&mut self, slot: usize, _deadline: Instant) -> Result<&mut [u8]> {
        let (n, bytes) = (self.staging.len(), self.slot_bytes);
        let s =
            self.staging.get_mut(slot).ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} of {n}")))?;
        Ok(s.get_or_insert_with(|| vec![0u8; bytes].into_boxed_slice()))
    }
    fn land(&mut self, slot: usize, region: u32, offset: u64, len: usize) -> Result<()> {
        let dst = self.span(region, offset, len as u64)?;
        let src = self
            .staging
            .get(slot)
            .and_then(|s| s.as_deref()?.get(..len))
            .ok_or_else(|| Error::InvalidArgument(format!("staging slot {slot} has no {len} bytes")))?;
        dst.with(|d| d.copy_from_slice(src));
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
        self.span(region, offset, 8)?.with(|w| {
            let v = u64::from_le_bytes((&*w).try_into().expect("8 bytes")).wrapping_add(value);
            w.copy_from_slice(&v.to_le_bytes());
        });
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
        let bytes = |s: &mut HostSource, slot, len| match s.staged(slot, len, Instant::now()).unwrap() {
            Outgoing::InPlace(span) => span.with(|d| d.to_vec()),
            Outgoing::Staged(_) => panic!("a host source copied"),
        };
        s.stage(0, a.addr() + 1, 3).unwrap();
        s.stage(1, b.addr(), 4).unwrap();
        // In place: what the region holds when the chunk is sent, not when it was staged.
        a.write(3, &[7]).unwrap();
        assert_eq!(bytes(&mut s, 0, 3), [2, 3, 7]);
        assert_eq!(bytes(&mut s, 1, 4), [9; 4]);
        // A length other than the staged one, a slot never staged.
        assert!(s.staged(0, 2, Instant::now()).is_err());
        assert!(HostSource::new(vec![a.clone()], 2, 4).unwrap().staged(1, 1, Instant::now()).is_err());
        // One past the end, a range that straddles the end, a chunk larger than a slot.
        assert!(s.stage(0, a.addr() + 4, 1).is_err());
        assert!(s.stage(0, a.addr() + 2, 3).is_err());
        assert!(s.stage(0, a.addr() - 1, 1).is_err());
        assert!(s.stage(0, a.addr(), 5).is_err());
        assert!(s.stage(2, a.addr(), 1).is_err());
        assert!(HostSource::new(vec![a], 0, 4).is_err());
        // What it was made with (a survivor of `./x mutants tcp`: `slots` made 1 or `slot_bytes`
        // made 1 send all the same, one chunk in flight or a byte at a time).
        assert_eq!((s.slots(), s.slot_bytes()), (2, 4));
    }

    #[test]
    fn host_spans_stay_inside_their_region() {
        let r = HostRegion::filled(16, 0);
        assert_eq!(r.span(0, 16).unwrap().len(), 16);
        assert!(r.span(16, 0).unwrap().is_empty());
        assert!(r.span(1, 16).is_none() && r.span(17, 0).is_none() && r.span(usize::MAX, 2).is_none());
        r.span(3, 2).unwrap().with(|d| d.copy_from_slice(&[1, 2]));
        assert_eq!(r.to_vec()[..6], [0, 0, 0, 1, 2, 0]);
        assert!(r.write(15, &[1, 2]).is_err() && r.write(usize::MAX, &[1]).is_err());
    }

    #[test]
    fn host_landing_checks_every_write() {
        let r = HostRegion::filled(16, 0);
        let sem = Arc::new(AtomicU64::new(0));
        let mut l = HostLanding::new(vec![r.clone()], vec![sem.clone()], 2, 8).unwrap();
        // What it was made with (a survivor of `./x mutants tcp`: `slots` made 1 lands all the
        // same through one slot, a host landing's slots being free again at once).
        assert_eq!((l.regions(), l.semaphores(), l.slots(), l.slot_bytes()), (&[16u64][..], 1, 2, 8));
        assert!(l.land(1, 0, 0, 1).is_err(), "a slot never filled");
        l.slot(0, Instant::now()).unwrap()[..4].copy_from_slice(&[5, 6, 7, 8]);
        l.land(0, 0, 12, 4).unwrap();
        assert_eq!(l.slot(1, Instant::now()).unwrap().len(), 8);
        assert!(l.slot(2, Instant::now()).is_err());
        // The direct destination: the checked range of the region itself.
        l.direct(0, 8, 4).unwrap().unwrap().with(|d| d.copy_from_slice(&[1, 2, 3, 4]));
        assert!(l.direct(0, 13, 4).is_err() && l.direct(1, 0, 1).is_err() && l.direct(0, u64::MAX, 2).is_err());
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
        want[8..].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.to_vec(), want);
    }

    /// Survivors of `./x mutants tcp`: `HostRegion::is_empty` (made true or false, or its `==`
    /// read as `!=`), `HostSpan::is_empty` (made true) and `HostRegion`'s `Debug` (made to write
    /// nothing). Regions and spans say whether they are empty; a region's debug form names its
    /// address and size.
    #[test]
    fn host_regions_and_spans_say_whether_they_are_empty_and_what_they_are() {
        let (empty, one) = (HostRegion::filled(0, 0), HostRegion::filled(1, 0));
        assert!(empty.is_empty() && !one.is_empty());
        assert!(one.span(1, 0).unwrap().is_empty() && !one.span(0, 1).unwrap().is_empty());
        assert_eq!(format!("{one:?}"), format!("HostRegion({:#x}, 1 B)", one.addr()));
    }
}
