# What the build must do differently for different LibTorch builds (the C++ side of
# this is starter/kit/compat.h). Included by Dependencies.cmake right after
# find_package(Torch); adjusts KIT_TORCH_LIBRARIES and the compile/link options.

get_filename_component(_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)

# 1. One c10 only. TorchConfig finds libc10 with find_library(... PATHS <its lib dir>),
#    which searches the system directories first: with Debian's libtorch-dev installed,
#    an official LibTorch links Debian's libc10.so.1.13 next to its own libc10.so, two
#    versions of one library in one process. Use LibTorch's own copy.
set(_libs "")
foreach(l ${KIT_TORCH_LIBRARIES})
  get_filename_component(_name "${l}" NAME)
  if(IS_ABSOLUTE "${l}" AND _name MATCHES "^lib(c10|torch)")
    get_filename_component(_real "${l}" REALPATH)
    if(NOT _real MATCHES "^${_torch_prefix}/")
      if(EXISTS "${_torch_prefix}/lib/${_name}")
        message(STATUS "Using ${_torch_prefix}/lib/${_name} instead of ${l} (another LibTorch's)")
        set(l "${_torch_prefix}/lib/${_name}")
      else()
        message(STATUS "Not linking ${l}: it belongs to another LibTorch")
        continue()
      endif()
    endif()
  endif()
  list(APPEND _libs "${l}")
endforeach()
set(KIT_TORCH_LIBRARIES ${_libs})

# 2. The pip wheel's own CUDA libraries. The wheel runs with the CUDA runtime, NCCL,
#    cuDNN, ... of its nvidia-* packages (site-packages/nvidia/*/lib), but TorchConfig
#    links the kit against the CUDA toolkit it finds (e.g. /usr/local/cuda), whose
#    libcudart.so.13 and libnccl.so.2 have the same names and other versions: linking
#    then fails (libtorch_cuda needs symbols the older libnccl lacks) or the programs
#    load the wrong copies. Put the wheel's directories first in the run path, so the
#    linker and the loader both find the libraries LibTorch was built with.
get_filename_component(_wheel_nvidia "${_torch_prefix}/../nvidia" ABSOLUTE)
file(GLOB _wheel_libdirs LIST_DIRECTORIES true "${_wheel_nvidia}/*/lib")
if(_wheel_libdirs)
  list(JOIN _wheel_libdirs ":" _rpath)
  add_link_options("LINKER:-rpath,${_rpath}")
  message(STATUS "CUDA libraries of the LibTorch wheel come first in the run path: ${_rpath}")
endif()

# 3. LibTorch builds that require C++20 (they say so with cxx_std_20): in C++20 mode,
#    where std::string is constexpr, GCC 12 warns falsely about `"literal" + std::string`
#    (-Wstringop-overflow, -Warray-bounds and -Wrestrict inside char_traits.h, GCC bugs
#    105329 and 105651) in code that is fine. LibTorch builds with -Wno-stringop-overflow.
get_target_property(_features torch INTERFACE_COMPILE_FEATURES)
if(_features AND "cxx_std_20" IN_LIST _features AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  add_compile_options(-Wno-stringop-overflow -Wno-array-bounds -Wno-restrict)
endif()
