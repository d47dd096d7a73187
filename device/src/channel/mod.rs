//! Channels: the device handles kernels use to move data to a peer and synchronise with it.

pub mod port;
