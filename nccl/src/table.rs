//! Which functions are served by this library's kernels, forwarded to a real NCCL, or refused:
//! the one source of the README's table (a test holds the two together, and the C interface
//! test checks that every name here is exported).

/// What happens to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Run by this library (on communicators whose ranks are all on one machine; forwarded on
    /// communicators spanning machines).
    Served,
    /// Answered by this library without a communicator (versions, ids, error texts, memory).
    Local,
    /// Refused on served communicators with `ncclInvalidUsage` and a message; forwarded on
    /// forwarded ones.
    Refused,
}

/// Every function of NCCL 2.28's `nccl.h` and the host functions of its device API, with what
/// this library does with it.
pub const TABLE: &[(&str, Disposition)] = {
    use Disposition::*;
    &[
        ("ncclGetVersion", Local),
        ("ncclGetUniqueId", Local),
        ("ncclGetErrorString", Local),
        ("ncclGetLastError", Local),
        ("ncclResetDebugInit", Local),
        ("ncclMemAlloc", Local),
        ("ncclMemFree", Local),
        ("ncclCommInitRank", Served),
        ("ncclCommInitRankConfig", Served),
        ("ncclCommInitRankScalable", Served),
        ("ncclCommInitAll", Served),
        ("ncclCommSplit", Served),
        ("ncclCommFinalize", Served),
        ("ncclCommDestroy", Served),
        ("ncclCommAbort", Served),
        ("ncclCommGetAsyncError", Served),
        ("ncclCommCount", Served),
        ("ncclCommCuDevice", Served),
        ("ncclCommUserRank", Served),
        ("ncclCommRegister", Served),
        ("ncclCommDeregister", Served),
        ("ncclCommWindowRegister", Served),
        ("ncclCommWindowDeregister", Served),
        ("ncclRedOpCreatePreMulSum", Served),
        ("ncclRedOpDestroy", Served),
        ("ncclAllReduce", Served),
        ("ncclReduce", Served),
        ("ncclBroadcast", Served),
        ("ncclBcast", Served),
        ("ncclReduceScatter", Served),
        ("ncclAllGather", Served),
        ("ncclAlltoAll", Served),
        ("ncclGather", Served),
        ("ncclScatter", Served),
        ("ncclSend", Served),
        ("ncclRecv", Served),
        ("ncclGroupStart", Served),
        ("ncclGroupEnd", Served),
        ("ncclTeamWorld", Served),
        ("ncclTeamLsa", Served),
        ("ncclTeamRail", Served),
        ("ncclTeamRankToWorld", Served),
        ("ncclTeamRankToLsa", Served),
        ("ncclGroupSimulateEnd", Refused),
        ("ncclCommShrink", Refused),
        ("ncclCommRevoke", Refused),
        ("ncclDevCommCreate", Refused),
        ("ncclDevCommDestroy", Refused),
        ("ncclLsaBarrierCreateRequirement", Refused),
        ("ncclGinBarrierCreateRequirement", Refused),
        ("ncclLLA2ACreateRequirement", Refused),
        ("ncclLLA2ACalcSlots", Refused),
    ]
};
