//! The memory channel: this GPU's threads read and write a peer GPU's buffer directly (NVLink,
//! peer-mapped memory), and order it with a memory semaphore or with LL packets.
//!
//! ```text
//!  GPU A: channel {dst = B.buf, src = A.buf, packets = A.pkts, remote_packets = B.pkts}
//!
//!  put(d, s, n, threads):  A.buf[s..s+n] ──st.global──► B.buf[d..d+n]   (all threads share it)
//!  get(d, s, n, threads):  A.buf[s..s+n] ◄──ld.global── B.buf[d..d+n]
//!  then: bar.sync / grid barrier; one thread signal()  ──►  B: wait(); bar.sync; read B.buf
//!
//!  put_packets(p, s, n, flag):    A.buf[s..] ──LL packets──► B.pkts[p..]
//!  B: unpack_packets(s, p, n, flag): B.pkts[p..] ──(wait for flag)──► B.buf[s..]   no signal needed
//!  read_put_packets(p2, p, n, flag): A.pkts[p..] ──(wait for flag)──► B.pkts[p2..]  (forward)
//! ```
//!
//! Offsets are in bytes. `put`/`get` take any offsets and size (the copy uses the widest
//! element both addresses allow, see [`crate::copy::copy_widest`]). The data path orders
//! nothing by itself: after a `put`, every thread that wrote must be synchronised with the one
//! thread that calls [`MemoryChannel::signal`] (a `bar.sync`, or a grid barrier when several
//! blocks put), and the peer reads only after its `wait`. Packets carry their own flags (see
//! [`crate::packet`] for the flag discipline).

use crate::abi::DeviceAbi;
use crate::ptr::GlobalPtr;
use crate::semaphore::MemoryDevice2DeviceSemaphore;

/// A memory channel handle, built by the host and passed to kernels by value (88 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct MemoryChannel {
    /// Orders the data path: `signal` after writing the peer's buffer, `wait` before reading
    /// what the peer wrote.
    pub semaphore: MemoryDevice2DeviceSemaphore,
    /// The peer's buffer, mapped into this GPU's address space (written by `put`, read by `get`).
    pub dst: GlobalPtr<u8>,
    /// This GPU's buffer (read by `put`, written by `get` and `unpack_packets`).
    pub src: GlobalPtr<u8>,
    /// This GPU's packet buffer: the peer writes packets here (zeroed at creation).
    pub packets: GlobalPtr<u8>,
    /// The peer's packet buffer, mapped here (`put_packets` writes it).
    pub remote_packets: GlobalPtr<u8>,
    /// Size of `dst` in bytes.
    pub dst_bytes: u64,
    /// Size of `src` in bytes.
    pub src_bytes: u64,
    /// Size of each side's packet buffer in bytes.
    pub packet_bytes: u64,
}
static_assertions::assert_eq_size!(MemoryChannel, [u64; 11]);
static_assertions::assert_eq_align!(MemoryChannel, u64);
static_assertions::const_assert_eq!(core::mem::offset_of!(MemoryChannel, dst), 32);
static_assertions::const_assert_eq!(core::mem::offset_of!(MemoryChannel, remote_packets), 56);
static_assertions::const_assert_eq!(core::mem::offset_of!(MemoryChannel, packet_bytes), 80);
// SAFETY: repr(C) of a repr(C) handle, addresses and integers; no implicit padding (asserted).
unsafe impl DeviceAbi for MemoryChannel {}

impl MemoryChannel {
    /// Whether `[offset, offset + bytes)` lies inside a buffer of `size` bytes.
    pub const fn fits(offset: u64, bytes: u64, size: u64) -> bool {
        match offset.checked_add(bytes) {
            Some(end) => end <= size,
            None => false,
        }
    }
}

#[cfg(any(target_arch = "nvptx64", doc))]
mod device {
    use super::*;
    use crate::copy::{Threads, copy_widest};
    use crate::device_assert;
    use crate::packet::{Packet, copy_from_packets, copy_to_packets, packet_bytes};
    use crate::poll::SpinBudget;

    impl MemoryChannel {
        /// Element `index` of type `T` of the peer's buffer (a plain load over NVLink).
        ///
        /// # Safety
        /// The handle must come from the host runtime; the element must lie inside `dst` and
        /// `dst` be aligned for `T`; nothing may write the element concurrently.
        #[inline(always)]
        pub unsafe fn read<T: bytemuck::Pod>(&self, index: usize) -> T {
            let size = core::mem::size_of::<T>() as u64;
            device_assert!(Self::fits(index as u64 * size, size, self.dst_bytes), "MemoryChannel::read out of range");
            // SAFETY: forwarded from the caller.
            unsafe { self.dst.cast::<T>().add(index).as_ptr().read() }
        }

        /// Writes element `index` of type `T` of the peer's buffer (a plain store over NVLink).
        ///
        /// # Safety
        /// As for [`MemoryChannel::read`], for writes; the peer must not read the element before
        /// a signal that follows this write.
        #[inline(always)]
        pub unsafe fn write<T: bytemuck::Pod>(&self, index: usize, value: T) {
            let size = core::mem::size_of::<T>() as u64;
            device_assert!(Self::fits(index as u64 * size, size, self.dst_bytes), "MemoryChannel::write out of range");
            // SAFETY: forwarded from the caller.
            unsafe { self.dst.cast::<T>().add(index).as_ptr().write(value) }
        }

        /// Copies `bytes` from `src + src_off` (this GPU) to `dst + dst_off` (the peer), shared by
        /// the threads of `t`. Any offsets and size.
        ///
        /// # Safety
        /// The handle must come from the host runtime; both ranges inside their buffers (checked
        /// in debug/`checks` builds); every thread of `t` calls it with the same arguments; the
        /// peer must not use the destination range until it is signalled.
        #[inline(always)]
        pub unsafe fn put(&self, dst_off: u64, src_off: u64, bytes: u64, t: Threads) {
            device_assert!(Self::fits(dst_off, bytes, self.dst_bytes), "MemoryChannel::put: destination out of range");
            device_assert!(Self::fits(src_off, bytes, self.src_bytes), "MemoryChannel::put: source out of range");
            // SAFETY: forwarded from the caller.
            unsafe { copy_widest(self.dst.byte_add(dst_off as usize), self.src.byte_add(src_off as usize), bytes, t) }
        }

        /// Copies `bytes` from `dst + dst_off` (the peer) to `src + src_off` (this GPU), shared by
        /// the threads of `t`: the reverse of [`MemoryChannel::put`].
        ///
        /// # Safety
        /// As for [`MemoryChannel::put`]; the peer must have finished writing the range (e.g. this
        /// side waited for its signal).
        #[inline(always)]
        pub unsafe fn get(&self, dst_off: u64, src_off: u64, bytes: u64, t: Threads) {
            device_assert!(Self::fits(dst_off, bytes, self.dst_bytes), "MemoryChannel::get: source out of range");
            device_assert!(Self::fits(src_off, bytes, self.src_bytes), "MemoryChannel::get: target out of range");
            // SAFETY: forwarded from the caller.
            unsafe { copy_widest(self.src.byte_add(src_off as usize), self.dst.byte_add(dst_off as usize), bytes, t) }
        }

        /// Packet `index` of type `P` in this GPU's packet buffer (where the peer writes).
        #[inline(always)]
        pub fn packet<P: Packet>(&self, index: usize) -> GlobalPtr<P> {
            let size = core::mem::size_of::<P>() as u64;
            device_assert!(
                Self::fits(index as u64 * size, size, self.packet_bytes),
                "MemoryChannel::packet out of range"
            );
            self.packets.cast::<P>().add(index)
        }

        /// Packet `index` of type `P` in the peer's packet buffer (where this GPU writes).
        #[inline(always)]
        pub fn remote_packet<P: Packet>(&self, index: usize) -> GlobalPtr<P> {
            let size = core::mem::size_of::<P>() as u64;
            device_assert!(
                Self::fits(index as u64 * size, size, self.packet_bytes),
                "MemoryChannel::remote_packet out of range"
            );
            self.remote_packets.cast::<P>().add(index)
        }

        /// Sends `bytes` from `src + src_off` as packets with `flag` to the peer's packet buffer at
        /// byte `pkt_off`, shared by the threads of `t` (packet `i` by thread `i % t.count`).
        /// The packets take `2 * bytes` of the buffer.
        ///
        /// # Safety
        /// The handle must come from the host runtime; `bytes` and `src_off` multiples of
        /// `P::PAYLOAD_BYTES`, `pkt_off` of the packet size, both ranges inside their buffers
        /// (checked in debug/`checks` builds); `flag` not 0; the peer no longer needs the slots
        /// (see [`crate::packet`]).
        #[inline(always)]
        pub unsafe fn put_packets<P: Packet>(&self, pkt_off: u64, src_off: u64, bytes: u64, flag: u32, t: Threads) {
            device_assert!(
                Self::fits(pkt_off, packet_bytes::<P>(bytes), self.packet_bytes),
                "MemoryChannel::put_packets: packets out of range"
            );
            device_assert!(
                Self::fits(src_off, bytes, self.src_bytes),
                "MemoryChannel::put_packets: source out of range"
            );
            // SAFETY: forwarded from the caller.
            unsafe {
                copy_to_packets::<P>(
                    self.remote_packets.byte_add(pkt_off as usize).cast(),
                    self.src.byte_add(src_off as usize),
                    bytes,
                    flag,
                    t,
                )
            }
        }

        /// Waits for the packets at byte `pkt_off` of this GPU's packet buffer that carry `bytes`
        /// of data with `flag`, and writes the data to `src + src_off`, shared by the threads of
        /// `t` (packet `i` by thread `i % t.count`). Traps if a packet does not arrive within
        /// `budget`.
        ///
        /// # Safety
        /// As for [`MemoryChannel::put_packets`], with `src_off` the target.
        #[inline(always)]
        pub unsafe fn unpack_packets<P: Packet>(
            &self,
            src_off: u64,
            pkt_off: u64,
            bytes: u64,
            flag: u32,
            t: Threads,
            budget: SpinBudget,
        ) {
            device_assert!(
                Self::fits(pkt_off, packet_bytes::<P>(bytes), self.packet_bytes),
                "MemoryChannel::unpack_packets: packets out of range"
            );
            device_assert!(
                Self::fits(src_off, bytes, self.src_bytes),
                "MemoryChannel::unpack_packets: target out of range"
            );
            // SAFETY: forwarded from the caller.
            unsafe {
                copy_from_packets::<P>(
                    self.src.byte_add(src_off as usize),
                    self.packets.byte_add(pkt_off as usize).cast(),
                    bytes,
                    flag,
                    t,
                    budget,
                )
            }
        }

        /// Forwards packets: waits for the packets at byte `local_pkt_off` of this GPU's packet
        /// buffer that carry `bytes` of data with `flag`, and writes each, with the same flag, to
        /// byte `remote_pkt_off` of the peer's packet buffer. Shared by the threads of `t`
        /// (packet `i` by thread `i % t.count`); traps if a packet does not arrive within `budget`.
        ///
        /// # Safety
        /// As for [`MemoryChannel::put_packets`] and [`MemoryChannel::unpack_packets`].
        #[inline(always)]
        pub unsafe fn read_put_packets<P: Packet>(
            &self,
            remote_pkt_off: u64,
            local_pkt_off: u64,
            bytes: u64,
            flag: u32,
            t: Threads,
            budget: SpinBudget,
        ) {
            let span = packet_bytes::<P>(bytes);
            device_assert!(
                Self::fits(remote_pkt_off, span, self.packet_bytes)
                    && Self::fits(local_pkt_off, span, self.packet_bytes),
                "MemoryChannel::read_put_packets: packets out of range"
            );
            device_assert!(
                bytes.is_multiple_of(P::PAYLOAD_BYTES),
                "read_put_packets: size not a multiple of the payload"
            );
            let from = self.packets.byte_add(local_pkt_off as usize).cast::<P>();
            let to = self.remote_packets.byte_add(remote_pkt_off as usize).cast::<P>();
            let n = bytes / P::PAYLOAD_BYTES;
            for i in t.stride(n) {
                // SAFETY: packet i lies inside both ranges (caller's contract).
                unsafe { to.add(i as usize).write(from.add(i as usize).read(flag, budget), flag) };
            }
        }

        /// The semaphore's [`MemoryDevice2DeviceSemaphore::signal`] (release): the peer's `wait`
        /// then sees every write this thread made, or synchronised with, before the signal.
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::signal`]: one signalling thread per channel.
        #[inline(always)]
        pub unsafe fn signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.semaphore.signal() }
        }

        /// The semaphore's [`MemoryDevice2DeviceSemaphore::relaxed_signal`].
        ///
        /// # Safety
        /// As for [`MemoryChannel::signal`].
        #[inline(always)]
        pub unsafe fn relaxed_signal(&self) {
            // SAFETY: forwarded from the caller.
            unsafe { self.semaphore.relaxed_signal() }
        }

        /// The semaphore's [`MemoryDevice2DeviceSemaphore::poll`] (consumes a signal if present).
        ///
        /// # Safety
        /// As for [`MemoryDevice2DeviceSemaphore::poll`]: one waiting thread per channel.
        #[inline(always)]
        pub unsafe fn poll(&self) -> bool {
            // SAFETY: forwarded from the caller.
            unsafe { self.semaphore.poll() }
        }

        /// The semaphore's [`MemoryDevice2DeviceSemaphore::wait`] (acquire).
        ///
        /// # Safety
        /// As for [`MemoryChannel::poll`].
        #[inline(always)]
        pub unsafe fn wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.semaphore.wait(budget) }
        }

        /// The semaphore's [`MemoryDevice2DeviceSemaphore::relaxed_wait`].
        ///
        /// # Safety
        /// As for [`MemoryChannel::poll`].
        #[inline(always)]
        pub unsafe fn relaxed_wait(&self, budget: SpinBudget) {
            // SAFETY: forwarded from the caller.
            unsafe { self.semaphore.relaxed_wait(budget) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_bounds() {
        let sem = MemoryDevice2DeviceSemaphore {
            inbound: GlobalPtr::from_addr(1),
            remote_inbound: GlobalPtr::from_addr(2),
            expected: GlobalPtr::from_addr(3),
            outbound: GlobalPtr::from_addr(4),
        };
        let c = MemoryChannel {
            semaphore: sem,
            dst: GlobalPtr::from_addr(5),
            src: GlobalPtr::from_addr(6),
            packets: GlobalPtr::from_addr(7),
            remote_packets: GlobalPtr::from_addr(8),
            dst_bytes: 9,
            src_bytes: 10,
            packet_bytes: 11,
        };
        let words: [u64; 11] = bytemuck::cast(c);
        assert_eq!(words, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert!(MemoryChannel::fits(0, 16, 16));
        assert!(MemoryChannel::fits(16, 0, 16));
        assert!(!MemoryChannel::fits(1, 16, 16));
        assert!(!MemoryChannel::fits(u64::MAX, 2, u64::MAX));
    }
}
