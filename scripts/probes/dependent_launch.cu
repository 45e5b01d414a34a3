// What programmatic dependent launch would save between the small kernels of a replayed call:
// a chain of memory passes (each reads the previous pass's output, as the passes of a scheme-II
// product do), captured into a CUDA graph and replayed, launched three ways:
//   plain      <<<>>> launches: each kernel starts after the previous one has finished;
//   dependent  cudaLaunchKernelEx with programmatic stream serialization, each kernel waiting
//              (griddepcontrol.wait) before it reads anything: its blocks are launched while the
//              previous kernel drains, and wait there for its completion and memory flush;
//   triggered  the same, each kernel also letting its dependent launch from its start
//              (griddepcontrol.launch_dependents).
// Per chain: the median of synchronized replays (as a synchronized call) and of back-to-back
// replays, against the sum of the kernels timed alone. Each chain's output is compared bit for bit
// with the plain chain's. Sizes: passes of 1024^2 and 2048^2 float64 entries (the 1024^3 and
// 2048^3 products' operand passes), 10 passes per chain.
//   nvcc -O3 -std=c++20 -arch=sm_90 scripts/probes/dependent_launch.cu -o /tmp/dependent_launch \
//        && /tmp/dependent_launch
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check.cuh"

constexpr int kThreads = 256;
constexpr int kPasses = 10;

enum class Launch { plain, dependent, triggered };
const char* name(Launch launch) {
  if (launch == Launch::plain) return "plain";
  return launch == Launch::dependent ? "dependent" : "triggered";
}

// y = x * 0.5 + pass over n entries, grid-stride; dependent kernels wait for the previous grid
// (and its memory) before the first read, and triggered ones let their own dependent launch first.
template <Launch L>
__global__ void __launch_bounds__(kThreads) pass_kernel(const double* x, double* y, int64_t n,
                                                        double pass) {
  if constexpr (L == Launch::triggered) asm volatile("griddepcontrol.launch_dependents;");
  if constexpr (L != Launch::plain) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    y[i] = x[i] * 0.5 + pass;
  }
}

template <Launch L>
void launch_pass(const double* x, double* y, int64_t n, double pass, int blocks,
                 cudaStream_t stream) {
  if constexpr (L == Launch::plain) {
    pass_kernel<L><<<blocks, kThreads, 0, stream>>>(x, y, n, pass);
  } else {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, pass_kernel<L>, x, y, n, pass));
  }
  CHECK(cudaGetLastError());
}

// The chain: x -> b0 -> b1 -> b0 -> ..., kPasses passes.
template <Launch L>
void chain(const double* x, double* b0, double* b1, int64_t n, int blocks, cudaStream_t stream) {
  const double* in = x;
  for (int p = 0; p < kPasses; ++p) {
    double* out = p % 2 == 0 ? b0 : b1;
    launch_pass<L>(in, out, n, static_cast<double>(p), blocks, stream);
    in = out;
  }
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d multiprocessors; %d passes per chain, y = x / 2 + pass over n float64\n",
              prop.name, sms, kPasses);
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  for (const int64_t side : {1024, 2048}) {
    const int64_t n = side * side;
    double *x, *b0, *b1;
    CHECK(cudaMalloc(&x, n * sizeof(double)));
    CHECK(cudaMalloc(&b0, n * sizeof(double)));
    CHECK(cudaMalloc(&b1, n * sizeof(double)));
    std::vector<double> host(n);
    for (int64_t i = 0; i < n; ++i) {
      host[i] = static_cast<double>((i * 2654435761u) % 1000003) / 7.0;
    }
    CHECK(cudaMemcpy(x, host.data(), n * sizeof(double), cudaMemcpyHostToDevice));
    const int blocks = sms * (2048 / kThreads);
    std::vector<double> reference(n), got(n);
    // one kernel alone, synchronized and back to back
    std::vector<float> alone;
    for (int r = 0; r < 51; ++r) {
      CHECK(cudaEventRecord(start, stream));
      launch_pass<Launch::plain>(x, b0, n, 1.0, blocks, stream);
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r > 0) alone.push_back(ms);
    }
    const float one = median(alone);
    std::printf("== %lld^2 entries (%.0f MB read and written per pass): one pass alone %.1f us, "
                "%d passes %.1f us\n",
                static_cast<long long>(side), 2.0 * n * sizeof(double) / 1e6, one * 1e3, kPasses,
                kPasses * one * 1e3);
    for (const Launch launch : {Launch::plain, Launch::dependent, Launch::triggered}) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      if (launch == Launch::plain) chain<Launch::plain>(x, b0, b1, n, blocks, stream);
      if (launch == Launch::dependent) chain<Launch::dependent>(x, b0, b1, n, blocks, stream);
      if (launch == Launch::triggered) chain<Launch::triggered>(x, b0, b1, n, blocks, stream);
      CHECK(cudaStreamEndCapture(stream, &graph));
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      CHECK(cudaMemset(b0, 0, n * sizeof(double)));
      CHECK(cudaMemset(b1, 0, n * sizeof(double)));
      CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaStreamSynchronize(stream));
      double* last = (kPasses - 1) % 2 == 0 ? b0 : b1;
      CHECK(cudaMemcpy(launch == Launch::plain ? reference.data() : got.data(), last,
                       n * sizeof(double), cudaMemcpyDeviceToHost));
      const bool same = launch == Launch::plain ||
                        std::memcmp(reference.data(), got.data(), n * sizeof(double)) == 0;
      std::vector<float> synchronized;
      for (int r = 0; r < 101; ++r) {
        CHECK(cudaEventRecord(start, stream));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (r > 0) synchronized.push_back(ms);
      }
      constexpr int kBackToBack = 200;
      CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < kBackToBack; ++r) CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float total = 0;
      CHECK(cudaEventElapsedTime(&total, start, stop));
      const float chain_ms = median(synchronized);
      std::printf("%-10s chain %7.1f us synchronized (%+6.1f us over the passes alone, %+5.2f per "
                  "boundary), %7.1f us back to back; bits as plain: %s\n",
                  name(launch), chain_ms * 1e3, (chain_ms - kPasses * one) * 1e3,
                  (chain_ms - kPasses * one) * 1e3 / (kPasses - 1), total / kBackToBack * 1e3,
                  same ? "yes" : "NO");
      CHECK(cudaGraphExecDestroy(exec));
      CHECK(cudaGraphDestroy(graph));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(b0));
    CHECK(cudaFree(b1));
  }
  return 0;
}
