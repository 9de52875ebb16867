# Finds everything the kit links against and says how to install what is missing.
# Debian/Ubuntu: scripts/install_deps.sh installs all of it.
# A LibTorch 2.x (pip wheel or the official zip) works too:
#   cmake -S . -B build-2x -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"

find_package(Torch QUIET)
if(NOT Torch_FOUND)
  message(FATAL_ERROR
    "LibTorch not found.\n"
    "  Debian/Ubuntu: run scripts/install_deps.sh (installs libtorch-dev).\n"
    "  Official LibTorch: pass -DCMAKE_PREFIX_PATH=/path/to/libtorch, or for the pip wheel\n"
    "  -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')")
endif()
if(Torch_VERSION AND Torch_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR
    "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} is too old: the kit needs 1.13 or newer "
    "(Debian 12's libtorch-dev, or an official LibTorch 2.x). Older distributions (e.g. Ubuntu 22.04, "
    "LibTorch 1.8) need the official LibTorch: pass -DCMAKE_PREFIX_PATH=/path/to/libtorch.")
endif()
set(KIT_TORCH_LIBRARIES ${TORCH_LIBRARIES})
include(cmake/TorchCompat.cmake)   # differences between LibTorch builds
set(KIT_DEFINITIONS "")
message(STATUS "LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}")

find_package(nlohmann_json 3.2 QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "nlohmann_json not found: apt-get install nlohmann-json3-dev (or run scripts/install_deps.sh)")
endif()
find_package(CLI11 QUIET)
if(NOT CLI11_FOUND)
  message(FATAL_ERROR "CLI11 not found: apt-get install libcli11-dev (or run scripts/install_deps.sh)")
endif()

find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
endif()
if(NOT SENTENCEPIECE_FOUND)
  message(FATAL_ERROR "SentencePiece not found: apt-get install libsentencepiece-dev (or run scripts/install_deps.sh)")
endif()
set(KIT_SENTENCEPIECE_LIBRARIES PkgConfig::SENTENCEPIECE)

include(cmake/Distributed.cmake)
