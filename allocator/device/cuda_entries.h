/* cuda_entries.h — the CUDA driver entry points the CUDA backend resolves
 * with dlsym, as one X-macro list. The driver double's tests resolve the same
 * list (and the few calls only tests make), so the two cannot drift apart.
 * Include after <cuda.h>: each entry is resolved under the name cuda.h maps
 * it to (cuMemAlloc -> cuMemAlloc_v2, ...) and with cuda.h's prototype. */
#ifndef GA_CUDA_ENTRIES_H
#define GA_CUDA_ENTRIES_H

#define GA_CU_FUNCS(X)              \
  X(cuInit)                         \
  X(cuGetErrorName)                 \
  X(cuGetErrorString)               \
  X(cuDeviceGetCount)               \
  X(cuDeviceGet)                    \
  X(cuDeviceGetAttribute)           \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuDevicePrimaryCtxRelease)      \
  X(cuCtxGetCurrent)                \
  X(cuCtxSetCurrent)                \
  X(cuCtxSynchronize)               \
  X(cuMemGetInfo)                   \
  X(cuMemAlloc)                     \
  X(cuMemFree)                      \
  X(cuMemAddressReserve)            \
  X(cuMemAddressFree)               \
  X(cuMemCreate)                    \
  X(cuMemRelease)                   \
  X(cuMemMap)                       \
  X(cuMemUnmap)                     \
  X(cuMemSetAccess)                 \
  X(cuMemGetAllocationGranularity)  \
  X(cuMemExportToShareableHandle)   \
  X(cuMemImportFromShareableHandle) \
  X(cuEventCreate)                  \
  X(cuEventRecord)                  \
  X(cuEventQuery)                   \
  X(cuEventSynchronize)             \
  X(cuEventDestroy)                 \
  X(cuStreamSynchronize)            \
  X(cuMemcpyDtoH)                   \
  X(cuMemcpyHtoD)                   \
  X(cuMemHostAlloc)                 \
  X(cuMemFreeHost)                  \
  X(cuStreamIsCapturing)            \
  X(cuThreadExchangeStreamCaptureMode)

#define GA_CU_NAME_(f) #f
#define GA_CU_NAME(f)  GA_CU_NAME_(f) /* after cuda.h's macro: "cuMemAlloc_v2" */

#endif /* GA_CUDA_ENTRIES_H */
