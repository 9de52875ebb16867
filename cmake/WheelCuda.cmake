# The CUDA build of PyTorch's torch wheel (PyPI's default) needs a CUDA toolkit at configure
# time: its Caffe2Config.cmake looks for nvcc and the CUDA libraries, and stops with "Your
# installed Caffe2 version uses CUDA but I cannot find the CUDA libraries" when there is none,
# even for a CPU-only use of the kit. Included before find_package(Torch).
#
# A machine with a CUDA toolkit (CUDA_TOOLKIT_ROOT_DIR, CUDAToolkit_ROOT, CUDA_HOME, nvcc on
# PATH or /usr/local/cuda) needs nothing here. Without one, scripts/cuda_toolkit_from_pip.sh
# puts NVIDIA's own nvcc packages from PyPI next to the wheel and lays them out as a toolkit
# (site-packages/nvidia/kit-cuda-toolkit), which this file then uses; where that is not done
# either, configure stops here with the two ways out.

find_file(_kit_torch_config TorchConfig.cmake PATH_SUFFIXES Torch share/cmake/Torch NO_CACHE)
if(_kit_torch_config)
  get_filename_component(_kit_torch_root "${_kit_torch_config}/../../../.." ABSOLUTE)   # .../torch
  get_filename_component(_kit_site "${_kit_torch_root}/.." ABSOLUTE)                    # site-packages
  set(_kit_view "${_kit_site}/nvidia/kit-cuda-toolkit")
  find_program(_kit_nvcc nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(EXISTS "${_kit_torch_root}/lib/libtorch_cuda.so" AND NOT CUDA_TOOLKIT_ROOT_DIR AND NOT CUDAToolkit_ROOT
     AND NOT DEFINED ENV{CUDA_HOME} AND NOT DEFINED ENV{CUDA_PATH} AND NOT CMAKE_CUDA_COMPILER AND NOT _kit_nvcc)
    if(EXISTS "${_kit_view}/bin/nvcc")
      set(CUDA_TOOLKIT_ROOT_DIR "${_kit_view}" CACHE PATH "CUDA toolkit (the wheel's, from PyPI)")
      set(CMAKE_CUDA_COMPILER "${_kit_view}/bin/nvcc" CACHE FILEPATH "nvcc (the wheel's, from PyPI)")
      message(STATUS "CUDA toolkit: ${_kit_view} (NVIDIA's PyPI packages, scripts/cuda_toolkit_from_pip.sh)")
    else()
      message(FATAL_ERROR
        "The torch wheel at ${_kit_torch_root} is PyTorch's CUDA build, and its CMake files need a "
        "CUDA toolkit (nvcc) to configure, even to use it on the CPU. None was found (no "
        "CUDA_TOOLKIT_ROOT_DIR, CUDA_HOME, nvcc on PATH or /usr/local/cuda).\n"
        "Fix, either:\n"
        "  - scripts/cuda_toolkit_from_pip.sh <the venv's python>: installs NVIDIA's nvcc "
        "packages from PyPI into the same venv, matching the wheel's CUDA; then re-run cmake;\n"
        "  - or, for CPU only, the CPU wheel: pip install torch --index-url "
        "https://download.pytorch.org/whl/cpu (a few hundred MB instead of gigabytes);\n"
        "  - or load your cluster's CUDA module (module load cuda) so that nvcc is on PATH.")
    endif()
  endif()
endif()
