# Which c10d backends kit::dist (starter/dist/dist.cpp) can use. Sets KIT_HAVE_GLOO and
# KIT_HAVE_NCCL to 0 or 1 for the code (dist.cpp tests those, never LibTorch's own
# USE_C10D_GLOO / USE_C10D_NCCL: official builds define them even when the headers
# they need are not there) and adds the include directories those headers need.
#
# Gloo (CPU): LibTorch's ProcessGroupGloo.hpp includes Gloo's own headers (gloo/*.h).
#   Debian's libtorch-dev comes with them (libgloo-dev). Official builds (the pip wheel,
#   the libtorch zip) link Gloo into libtorch_cpu but ship no gloo/ headers; Debian's
#   libgloo-dev headers work with them, because dist.cpp only calls ProcessGroupGloo's
#   out-of-line functions and holds Gloo objects through shared_ptr: no Gloo type's
#   layout or vtable is compiled into the kit (scripts/check_libtorch2.sh checks
#   libkit.so for that). Without Gloo headers the kit still builds; "gloo" is then
#   compiled out and asking for it is a kit::Error that says how to get it back. Where
#   none are installed, the pinned libgloo-dev headers are downloaded (FetchDeps.cmake,
#   kit_fetch_gloo_headers), so a venv's torch wheel alone gives CPU data parallelism.
# NCCL (GPU): ProcessGroupNCCL::Options holds an ncclConfig_t by value, and its size
#   changes between NCCL releases (2.28: 80 bytes, 2.30: 96), so nccl.h must be the
#   release LibTorch runs with, or creating the group corrupts memory. The pip wheel's
#   own nvidia-nccl package has the matching header; it is preferred over the CUDA
#   toolkit's, and a header whose version differs from LibTorch's libnccl is refused.
#
# Override the search with -DKIT_GLOO_INCLUDE_DIR=<dir containing gloo/> or
# -DKIT_NCCL_INCLUDE_DIR=<dir containing nccl.h> (or the NCCL_HOME environment variable).

# One interface target carries the extra include directories; it goes first in
# KIT_TORCH_LIBRARIES so that its nccl.h wins over one in the CUDA toolkit's include dir.
add_library(kit_c10d INTERFACE)
set(KIT_TORCH_LIBRARIES kit_c10d ${KIT_TORCH_LIBRARIES})

# kit_torch_defines(<out> <target>...): the compile definitions those LibTorch targets export.
function(kit_torch_defines out)
  set(defs "")
  foreach(t ${ARGN})
    if(TARGET ${t})
      get_target_property(d ${t} INTERFACE_COMPILE_DEFINITIONS)
      if(d)
        list(APPEND defs ${d})
      endif()
    endif()
  endforeach()
  set(${out} ${defs} PARENT_SCOPE)
endfunction()
kit_torch_defines(_kit_torch_defs torch torch_cpu torch_cuda)

# kit_check_gloo_headers(<dir>): sets the cache variable KIT_GLOO_HEADERS_FIT when
# LibTorch's ProcessGroupGloo.hpp compiles with the Gloo headers in <dir>. A function,
# so the settings for the check stay local.
function(kit_check_gloo_headers dir)
  include(CheckCXXSourceCompiles)
  get_target_property(features torch INTERFACE_COMPILE_FEATURES)
  if(features AND "cxx_std_20" IN_LIST features)
    set(CMAKE_CXX_STANDARD 20)   # what LibTorch requires, as the real build gets it
  endif()
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS} "${dir}")
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_DISTRIBUTED -DUSE_C10D_GLOO)
  set(CMAKE_REQUIRED_QUIET ON)
  set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)   # compile only: linking LibTorch is slow
  message(STATUS "Checking that ProcessGroupGloo.hpp compiles with the Gloo headers in ${dir}")
  check_cxx_source_compiles([[
    #include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
    int kit_gloo_check() { return c10d::ProcessGroupGloo::Options::create()->threads; }
  ]] KIT_GLOO_HEADERS_FIT)
endfunction()

# ---- Gloo ---------------------------------------------------------------------
set(KIT_HAVE_GLOO 0)
if(NOT "USE_C10D_GLOO" IN_LIST _kit_torch_defs)
  message(STATUS "c10d Gloo backend: no (this LibTorch was built without Gloo)")
else()
  find_path(KIT_GLOO_INCLUDE_DIR gloo/algorithm.h
            HINTS ${TORCH_INCLUDE_DIRS} ENV GLOO_HOME PATH_SUFFIXES include
            DOC "Directory that contains gloo/algorithm.h (Gloo's headers, e.g. from libgloo-dev)")
  set(_kit_gloo_dir "${KIT_GLOO_INCLUDE_DIR}")
  if(NOT _kit_gloo_dir)   # official builds: download the pinned headers (FetchDeps.cmake)
    kit_fetch_gloo_headers(_kit_gloo_dir _kit_gloo_why)
  endif()
  if(NOT _kit_gloo_dir)
    message(WARNING
      "Gloo's headers (gloo/algorithm.h) were not found: LibTorch ${Torch_VERSION} at "
      "${TORCH_INSTALL_PREFIX} does not ship them (official builds never do), and the kit did "
      "not download them: ${_kit_gloo_why}. The kit builds without the CPU backend \"gloo\", so "
      "data-parallel runs on CPU will fail with an error saying so.\n"
      "Fix: re-run cmake with network access and -DKIT_FETCH_DEPS=ON (the default), or "
      "apt-get install libgloo-dev (its headers also work with official LibTorch 2.x), or pass "
      "-DKIT_GLOO_INCLUDE_DIR=<dir containing gloo/>, then re-run cmake.")
  else()
    # The headers must also fit this LibTorch's ProcessGroupGloo.hpp: compile it once
    # (the result is cached per LibTorch and Gloo location).
    set(_key "${TORCH_INSTALL_PREFIX}|${Torch_VERSION}|${_kit_gloo_dir}")
    if(NOT "${_key}" STREQUAL "${KIT_GLOO_CHECKED_FOR}")
      unset(KIT_GLOO_HEADERS_FIT CACHE)
    endif()
    kit_check_gloo_headers("${_kit_gloo_dir}")
    set(KIT_GLOO_CHECKED_FOR "${_key}" CACHE INTERNAL "")
    if(KIT_GLOO_HEADERS_FIT)
      set(KIT_HAVE_GLOO 1)
      target_include_directories(kit_c10d SYSTEM INTERFACE "${_kit_gloo_dir}")
      message(STATUS "c10d Gloo backend: yes (Gloo headers in ${_kit_gloo_dir})")
    else()
      message(WARNING
        "The Gloo headers in ${_kit_gloo_dir} do not compile with LibTorch ${Torch_VERSION}'s "
        "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp (see CMakeFiles/CMakeError.log). The kit "
        "builds without the CPU backend \"gloo\".\n"
        "Fix: pass -DKIT_GLOO_INCLUDE_DIR=<dir> pointing at Gloo headers that match this LibTorch "
        "(the gloo/ tree of PyTorch ${Torch_VERSION}'s third_party/gloo, with its generated "
        "gloo/config.h), then re-run cmake.")
    endif()
  endif()
endif()

# ---- NCCL ---------------------------------------------------------------------
set(KIT_HAVE_NCCL 0)
if(NOT "USE_C10D_NCCL" IN_LIST _kit_torch_defs)
  message(STATUS "c10d NCCL backend: no (this LibTorch has no CUDA/NCCL)")
else()
  # The pip wheel's NCCL lives in site-packages/nvidia/nccl, next to torch/.
  get_filename_component(_pip_nvidia "${TORCH_INSTALL_PREFIX}/../nvidia" ABSOLUTE)
  set(_cuda_inc ${CUDAToolkit_INCLUDE_DIRS} ${CUDA_INCLUDE_DIRS})
  find_path(KIT_NCCL_INCLUDE_DIR nccl.h
            HINTS ENV NCCL_HOME ENV NCCL_ROOT "${_pip_nvidia}/nccl" ${TORCH_INCLUDE_DIRS}
                  ${_cuda_inc} /usr/local/cuda
            PATH_SUFFIXES include
            DOC "Directory that contains nccl.h (the NCCL release LibTorch runs with)")
  # Which NCCL LibTorch runs with: the libnccl next to it (pip wheel or libtorch zip).
  file(GLOB _libnccl "${_pip_nvidia}/nccl/lib/libnccl.so*" "${TORCH_INSTALL_PREFIX}/lib/libnccl.so*")
  set(_lib_version "")
  foreach(l ${_libnccl})
    if(NOT _lib_version)
      file(STRINGS "${l}" _s REGEX "NCCL version [0-9]+\\.[0-9]+\\.[0-9]+" LIMIT_COUNT 1)
      string(REGEX MATCH "[0-9]+\\.[0-9]+\\.[0-9]+" _lib_version "${_s}")
    endif()
  endforeach()
  set(_hdr_version "")
  if(KIT_NCCL_INCLUDE_DIR)
    file(STRINGS "${KIT_NCCL_INCLUDE_DIR}/nccl.h" _v REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
           _hdr_version "${_v}")
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _hdr_mm "${_hdr_version}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lib_mm "${_lib_version}")
  if(NOT KIT_NCCL_INCLUDE_DIR)
    message(WARNING
      "LibTorch ${Torch_VERSION} has CUDA but nccl.h was not found: the kit builds without the GPU "
      "backend \"nccl\".\nFix: install the NCCL headers of the release LibTorch uses "
      "(${_lib_version}) and pass -DKIT_NCCL_INCLUDE_DIR=<dir containing nccl.h> or set NCCL_HOME.")
  elseif(_lib_mm AND NOT _hdr_mm STREQUAL _lib_mm)
    message(WARNING
      "nccl.h in ${KIT_NCCL_INCLUDE_DIR} is NCCL ${_hdr_version} but LibTorch runs with NCCL "
      "${_lib_version}; structures LibTorch shares with the kit differ between them, so the kit "
      "builds without the GPU backend \"nccl\".\nFix: pass -DKIT_NCCL_INCLUDE_DIR=<dir containing "
      "nccl.h of NCCL ${_lib_version}> (the pip wheel has it in ${_pip_nvidia}/nccl/include).")
  else()
    set(KIT_HAVE_NCCL 1)
    target_include_directories(kit_c10d SYSTEM INTERFACE "${KIT_NCCL_INCLUDE_DIR}")
    if(_lib_version)
      message(STATUS "c10d NCCL backend: yes (nccl.h ${_hdr_version} in ${KIT_NCCL_INCLUDE_DIR}, "
                     "LibTorch runs NCCL ${_lib_version})")
    else()
      message(STATUS "c10d NCCL backend: yes (nccl.h ${_hdr_version} in ${KIT_NCCL_INCLUDE_DIR}; "
                     "could not tell which NCCL LibTorch runs with: it must be ${_hdr_mm}.x)")
    endif()
  endif()
endif()

list(APPEND KIT_DEFINITIONS KIT_HAVE_GLOO=${KIT_HAVE_GLOO} KIT_HAVE_NCCL=${KIT_HAVE_NCCL})
