// engine_cuda.cu — the example engine on a GPU: real CUDA streams, and a
// kernel that writes into every buffer gardenalloc hands out.
#include <cuda_runtime.h>

#include "engine.h"

__global__ void fill(unsigned char *p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = 0x5a;
}

static void touch(void *ptr, size_t bytes, ga_stream_t stream) {
  fill<<<8, 256, 0, (cudaStream_t)stream>>>((unsigned char *)ptr, bytes);
}

int main(int argc, char **argv) {
  const char *conf = argc > 1 ? argv[1] : "backend:cuda,expandable_segments:True";
  cudaFree(0); // make the runtime use (and create) the primary context gardenalloc uses too
  cudaStream_t prefill, decode;
  cudaStreamCreate(&prefill);
  cudaStreamCreate(&decode);
  ga_allocator_t *a;
  if (ga_create(conf, 0, &a) != GA_OK) {
    fprintf(stderr, "engine_cuda: %s\n", ga_last_error());
    return 1;
  }
  int rc = engine_run(a, prefill, decode, touch, 200);
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    fprintf(stderr, "engine_cuda: %s\n", cudaGetErrorString(err));
    rc = 1;
  }
  ga_destroy(a);
  return rc;
}
