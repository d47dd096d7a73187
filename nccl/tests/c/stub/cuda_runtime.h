/* The two things nccl.h takes from the CUDA runtime's header, for compiling the C interface
 * test on a machine without the CUDA toolkit: the version macro and the stream type (an opaque
 * pointer, as in cuda_runtime_api.h). */
#ifndef MSCCLPP_RS_STUB_CUDA_RUNTIME_H
#define MSCCLPP_RS_STUB_CUDA_RUNTIME_H
#include <stddef.h>
#define CUDART_VERSION 13000
typedef struct CUstream_st *cudaStream_t;
#endif
