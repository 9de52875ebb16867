# Finds everything the kit links against, downloads what is missing (all but LibTorch;
# cmake/FetchDeps.cmake), and otherwise says in one message what is missing and how to get it.
# Debian/Ubuntu: scripts/install_deps.sh installs all of it, and nothing is downloaded.
# A LibTorch 2.x (pip wheel or the official zip) works too:
#   cmake -S . -B build-2x -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"

include(cmake/FetchDeps.cmake)   # the user-space route: download what is missing

# Every missing dependency becomes one line of one error at the end, so a user sees the
# whole list at once instead of one failed configure per package.
set(KIT_MISSING "")
set(KIT_FETCHED "")

include(cmake/WheelCuda.cmake)   # the CUDA torch wheel without a CUDA toolkit
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  list(APPEND KIT_MISSING
       "LibTorch (1.13 or newer): not found, and never downloaded by the build (gigabytes, and CPU or CUDA is your choice)")
elseif(Torch_VERSION AND Torch_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR
    "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} is too old: the kit needs 1.13 or newer "
    "(Debian 12's libtorch-dev, or an official LibTorch 2.x). Older distributions (e.g. Ubuntu 22.04, "
    "LibTorch 1.8) need the official LibTorch: pass -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
endif()

# kit_need(<name> <what>): <name> is not installed: prepare its download, or record why not.
function(kit_need name what)
  kit_fetch_prepare(${name} reason)
  if(reason)
    set(KIT_MISSING ${KIT_MISSING} "${what}: ${reason}" PARENT_SCOPE)
  else()
    set(KIT_FETCHED ${KIT_FETCHED} ${name} PARENT_SCOPE)
  endif()
endfunction()

find_package(nlohmann_json 3.2 QUIET)
if(NOT nlohmann_json_FOUND)
  kit_need(nlohmann_json "nlohmann_json (Debian: nlohmann-json3-dev)")
endif()
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  kit_need(CLI11 "CLI11 (Debian: libcli11-dev)")
endif()
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
endif()
if(NOT SENTENCEPIECE_FOUND)
  kit_need(sentencepiece "SentencePiece (Debian: libsentencepiece-dev)")
endif()
if(KIT_TESTS)   # tests/CMakeLists.txt uses it
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    kit_need(googletest "GoogleTest (Debian: libgtest-dev)")
  endif()
endif()

if(KIT_MISSING)
  list(JOIN KIT_MISSING "\n  - " _list)
  message(FATAL_ERROR
    "The kit cannot be built. Missing:\n"
    "  - ${_list}\n"
    "Two ways to get them:\n"
    "  1. Debian/Ubuntu with root: sudo scripts/install_deps.sh   (installs every one of them)\n"
    "  2. Without root:\n"
    "     - user space: LibTorch from a Python venv holding torch, everything else downloaded\n"
    "       at pinned versions while configuring (needs network access; KIT_FETCH_DEPS=ON, the\n"
    "       default, and FETCHCONTENT_FULLY_DISCONNECTED=OFF):\n"
    "         python3 -m venv ~/torch && ~/torch/bin/pip install torch\n"
    "         cmake -S . -B build -DKIT_FETCH_DEPS=ON -DFETCHCONTENT_FULLY_DISCONNECTED=OFF \\\n"
    "           -DCMAKE_PREFIX_PATH=\"$(~/torch/bin/python -c 'import torch;print(torch.utils.cmake_prefix_path)')\"\n"
    "       (an official LibTorch zip instead of the venv: -DCMAKE_PREFIX_PATH=/path/to/libtorch)\n"
    "     - or the container, which has all of them: scripts/container/kit.def (Apptainer,\n"
    "       kit-cuda.def for GPUs) or scripts/container/Dockerfile (README.md: \"Setting up\")\n"
    "  Without network access: copy the archives named in cmake/FetchDeps.cmake from a machine\n"
    "  that has it into ${KIT_DEPS_DOWNLOAD_DIR}")
endif()

# A LibTorch built with the pre-C++11 std::string ABI (older official builds) must meet
# code built the same way: the downloaded GoogleTest is linked into the tests.
if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0" AND KIT_FETCHED)
  add_compile_definitions(_GLIBCXX_USE_CXX11_ABI=0)
endif()
kit_fetch_add_fetched(nlohmann_json JSON_BuildTests OFF JSON_Install OFF)
kit_fetch_add_fetched(CLI11 CLI11_BUILD_TESTS OFF CLI11_BUILD_EXAMPLES OFF CLI11_BUILD_DOCS OFF CLI11_INSTALL OFF)
kit_fetch_add_fetched(googletest BUILD_GMOCK OFF INSTALL_GTEST OFF)
if("sentencepiece" IN_LIST KIT_FETCHED)
  # Static libraries with the bundled protobuf-lite, linked into kit_spm only: the module
  # keeps its protobuf to itself as with Debian's library (starter/data/spm/shim.h).
  set(SPM_ENABLE_SHARED OFF)
  set(SPM_USE_BUILTIN_PROTOBUF ON)
  set(SPM_ENABLE_TCMALLOC OFF)
  set(SPM_BUILD_TEST OFF)
  kit_fetch_add(sentencepiece)
  add_library(kit_sentencepiece INTERFACE)
  target_include_directories(kit_sentencepiece SYSTEM INTERFACE "${sentencepiece_SOURCE_DIR}/src")
  target_link_libraries(kit_sentencepiece INTERFACE sentencepiece_train-static sentencepiece-static)
  set(KIT_SENTENCEPIECE_LIBRARIES kit_sentencepiece)
else()
  set(KIT_SENTENCEPIECE_LIBRARIES PkgConfig::SENTENCEPIECE)
endif()

set(KIT_TORCH_LIBRARIES ${TORCH_LIBRARIES})
include(cmake/TorchCompat.cmake)   # differences between LibTorch builds
set(KIT_DEFINITIONS "")
message(STATUS "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")
# KIT_HAVE_CUDA: this LibTorch is a CUDA build (it links c10_cuda), so kit/memory.cpp can read
# the CUDA caching allocator's statistics. Whether a GPU is there is asked at run time.
if(C10_CUDA_LIBRARY OR TORCH_CUDA_LIBRARIES)
  set(KIT_HAVE_CUDA 1)
else()
  set(KIT_HAVE_CUDA 0)
endif()
list(APPEND KIT_DEFINITIONS KIT_HAVE_CUDA=${KIT_HAVE_CUDA})

include(cmake/Distributed.cmake)
