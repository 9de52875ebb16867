// doctor: what this machine and this LibTorch can do, and what to fix.
//   ./build/doctor                 # versions, backends, BLAS, measured GEMM rate, threads
//   ./build/doctor --gemm-only     # one line of JSON: this process's GEMM GFLOP/s (for scripts)
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <link.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "app/cli.h"
#include "kit/compat.h"  // KIT_HAVE_GLOO, KIT_HAVE_NCCL
#include "kit/gemm.h"
#include "kit/threads.h"

namespace {

// The BLAS LibTorch computes with. The official builds (PyPI wheel, libtorch zip) link MKL
// into libtorch_cpu itself, so no BLAS library shows among the loaded files: LibTorch says so
// (at::hasMKL). Debian's LibTorch calls libblas.so.3: the file behind it in this process.
std::string blas_library() {
  if (at::hasMKL()) return "MKL, linked into LibTorch";
  std::string found = "unknown";
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libblas") != std::string::npos || name.find("openblas") != std::string::npos ||
            name.find("mkl") != std::string::npos) {
          char buf[4096];
          const char* real = realpath(name.c_str(), buf);
          auto* s = static_cast<std::string*>(out);
          if (s->find("openblas") == std::string::npos) *s = real ? real : name;
        }
        return 0;
      },
      &found);
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Print LibTorch's version, the distributed backends, the BLAS in use with a measured GEMM "
               "rate and the thread settings, with a fix for each problem found."};
  bool gemm_only = false;
  int64_t threads = 1, n = 512;
  double seconds = 1.0;
  app.add_flag("--gemm-only", gemm_only, "Print only {\"gflops\": ...} for this process");
  app.add_option("--threads", threads, "Intra-op threads for the GEMM measurement")->capture_default_str();
  app.add_option("--size", n, "Matrix size n of the n x n GEMM")->capture_default_str();
  app.add_option("--seconds", seconds, "How long to measure")->capture_default_str();
  return kit::guarded_main(argc, argv, app, [&] {
    kit::set_threads(threads);
    const double rate = kit::measure_gemm_gflops(n, seconds);
    if (gemm_only) {
      std::cout << nlohmann::json{{"gflops", rate}, {"threads", threads}, {"size", n}}.dump() << "\n";
      return 0;
    }
    const std::string blas = blas_library();
    const unsigned cores = std::thread::hardware_concurrency();
    std::cout << "LibTorch         " << TORCH_VERSION << "\n"
              << "CUDA             " << (torch::cuda::is_available() ? "available, " + std::to_string(torch::cuda::device_count()) + " GPU(s)" : "not available") << "\n"
#if KIT_HAVE_NCCL
              << "NCCL backend     compiled in\n"
#else
              << "NCCL backend     not compiled in (needs a LibTorch with CUDA and nccl.h)\n"
#endif
#if KIT_HAVE_GLOO
              << "Gloo backend     compiled in\n"
#else
              << "Gloo backend     not compiled in (needs Gloo's headers: apt-get install libgloo-dev)\n"
#endif
              << "BLAS             " << blas << "\n"
              << "cores            " << cores << "\n"
              << "intra-op threads " << at::get_num_threads() << " (kit default 1; --threads N)\n"
              << "OMP_NUM_THREADS  " << (std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : "unset") << "\n"
              << "GEMM             " << rate << " GFLOP/s (float32, " << n << "x" << n << ", " << threads
              << " thread(s))\n";
    int problems = 0;
    if (blas.find("/blas/") != std::string::npos || blas.find("openblas") == std::string::npos) {
      if (blas.find("mkl") == std::string::npos && blas.find("MKL") == std::string::npos) {
        ++problems;
        std::cout << "warning: LibTorch is not using OpenBLAS (" << blas << "): GEMM is about 15x slower.\n"
                  << "  fix: sudo apt-get install libopenblas0-openmp && sudo update-alternatives --set "
                     "libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3\n";
      }
    }
    if (cores > 0 && threads > static_cast<int64_t>(cores)) {
      ++problems;
      std::cout << "warning: " << threads << " threads on " << cores << " cores oversubscribes the CPU.\n"
                << "  fix: --threads " << cores << " or less; with W ranks on one machine, W x threads <= "
                << cores << "\n";
    }
    std::cout << (problems ? "" : "no problems found\n");
    return 0;
  });
}
