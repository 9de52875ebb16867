# c10d backends. Debian's LibTorch exports USE_C10D_GLOO itself; official builds
# may not, and may ship without Gloo's headers. Find out here and say what is missing.
include(CheckIncludeFileCXX)
get_target_property(_torch_defs torch INTERFACE_COMPILE_DEFINITIONS)
if(NOT _torch_defs)
  set(_torch_defs "")
endif()

set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
check_include_file_cxx("gloo/algorithm.h" KIT_HAVE_GLOO_HEADERS)
unset(CMAKE_REQUIRED_INCLUDES)
if(KIT_HAVE_GLOO_HEADERS)
  if(NOT "USE_C10D_GLOO" IN_LIST _torch_defs)
    list(APPEND KIT_DEFINITIONS USE_C10D_GLOO)
  endif()
  list(APPEND KIT_DEFINITIONS KIT_HAVE_GLOO=1)
  message(STATUS "c10d Gloo backend: yes")
else()
  message(WARNING
    "Gloo headers (gloo/algorithm.h) not found next to this LibTorch: the CPU (gloo) backend is "
    "compiled out and data-parallel runs need NCCL. Fix: apt-get install libgloo-dev, or add the "
    "Gloo headers of the same version as your LibTorch to CMAKE_PREFIX_PATH.")
endif()

if(TORCH_CUDA_LIBRARIES OR CUDA_FOUND)
  find_path(KIT_NCCL_INCLUDE nccl.h HINTS ${TORCH_INCLUDE_DIRS} ENV NCCL_HOME
            PATH_SUFFIXES include PATHS /usr/local/cuda)
  if(KIT_NCCL_INCLUDE)
    list(APPEND KIT_DEFINITIONS USE_C10D_NCCL KIT_HAVE_NCCL=1)
    list(APPEND TORCH_INCLUDE_DIRS ${KIT_NCCL_INCLUDE})
    message(STATUS "c10d NCCL backend: yes (nccl.h in ${KIT_NCCL_INCLUDE})")
  else()
    message(WARNING "LibTorch has CUDA but nccl.h was not found: the nccl backend is compiled out. "
                    "Fix: set NCCL_HOME or install the NCCL headers.")
  endif()
else()
  message(STATUS "c10d NCCL backend: no (this LibTorch has no CUDA)")
endif()
