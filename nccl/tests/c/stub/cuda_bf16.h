/* nccl.h includes it; the C interface test needs nothing from it. */
