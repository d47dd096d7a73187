//! The element types and reductions of the operations built on the library (the collectives,
//! expert parallelism, the NCCL interface), defined once for all of them.

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `f32`.
    F32,
    /// IEEE half precision (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`).
    Bf16,
    /// `i32` (wrapping sums).
    I32,
    /// `u32` (wrapping sums).
    U32,
    /// `f64`: accepted by NCCL, not (yet) by the collectives; asking them for it is an error.
    F64,
}

impl DataType {
    /// The types with a sum on the device (`mscclpp_device::element::Element`), which the
    /// collectives implement: every type but `F64`.
    pub const SUPPORTED: [DataType; 5] = [DataType::F32, DataType::F16, DataType::Bf16, DataType::I32, DataType::U32];
    /// Bytes of one element.
    pub const fn bytes(self) -> usize {
        match self {
            DataType::F16 | DataType::Bf16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 => 8,
        }
    }
    /// The name used in kernel names and tables.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::F32 => "f32",
            DataType::F16 => "f16",
            DataType::Bf16 => "bf16",
            DataType::I32 => "i32",
            DataType::U32 => "u32",
            DataType::F64 => "f64",
        }
    }
}

/// Reduction operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum (in rank order, so every rank gets the same bits).
    Sum,
    /// Maximum: not implemented by the collectives yet; asking them for it is an error.
    Max,
}
