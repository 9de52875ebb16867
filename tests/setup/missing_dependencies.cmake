# ctest setup.missing_dependencies: configure the kit with every dependency hidden and no
# downloading, and check that configure stops with one message that lists exactly the
# missing dependencies and both ways to get them. A configure only: a few seconds.
#   cmake -DKIT_SOURCE=<kit> -DWORK=<scratch dir> -DMODE=off|disconnected -P missing_dependencies.cmake
# MODE off: -DKIT_FETCH_DEPS=OFF. MODE disconnected: downloading allowed, but CMake's
# FETCHCONTENT_FULLY_DISCONNECTED=ON forbids it (a node without network).
file(REMOVE_RECURSE "${WORK}")
if(MODE STREQUAL "off")
  set(switch -DKIT_FETCH_DEPS=OFF)
  set(reason "downloading is off \\(KIT_FETCH_DEPS=OFF\\)")
else()
  set(switch -DKIT_FETCH_DEPS=ON -DFETCHCONTENT_FULLY_DISCONNECTED=ON)
  set(reason "FETCHCONTENT_FULLY_DISCONNECTED=ON forbids downloading it")
endif()
# pkg-config finds SentencePiece: give it an empty search path.
set(ENV{PKG_CONFIG_LIBDIR} /nonexistent)
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{CMAKE_PREFIX_PATH} "")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${KIT_SOURCE}" -B "${WORK}" ${switch}
          -DCMAKE_PREFIX_PATH=/nonexistent -DKIT_TESTS=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_Torch=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
set(all "${out}${err}")
file(REMOVE_RECURSE "${WORK}")

set(problems "")
if(rc EQUAL 0)
  list(APPEND problems "configure succeeded with every dependency hidden")
endif()
string(REGEX MATCHALL "CMake Error" errors "${all}")
list(LENGTH errors n_errors)
if(NOT n_errors EQUAL 1)
  list(APPEND problems "expected exactly one error, got ${n_errors}")
endif()
# The list: exactly these five lines, each saying why it was not downloaded.
string(REGEX REPLACE ".*Missing:(.*)Two ways to get them.*" "\\1" block "${all}")
string(REGEX MATCHALL "\n *- [^\n]*" items "${block}")
list(LENGTH items n_items)
if(NOT n_items EQUAL 5)
  list(APPEND problems "expected 5 missing dependencies listed, got ${n_items}")
endif()
foreach(dep "LibTorch \\(1.13 or newer\\): not found, and never downloaded"
            "nlohmann_json \\(Debian: nlohmann-json3-dev\\): not installed, and ${reason}"
            "CLI11 \\(Debian: libcli11-dev\\): not installed, and ${reason}"
            "SentencePiece \\(Debian: libsentencepiece-dev\\): not installed, and ${reason}"
            "GoogleTest \\(Debian: libgtest-dev\\): not installed, and ${reason}")
  if(NOT block MATCHES "\n *- ${dep}")
    list(APPEND problems "no line for: ${dep}")
  endif()
endforeach()
# Both routes, with their commands.
foreach(route "sudo scripts/install_deps.sh" "pip install torch" "torch.utils.cmake_prefix_path"
              "KIT_FETCH_DEPS=ON" "FETCHCONTENT_FULLY_DISCONNECTED=OFF" "scripts/container/kit.def")
  string(FIND "${all}" "${route}" at)
  if(at EQUAL -1)
    list(APPEND problems "the message does not mention ${route}")
  endif()
endforeach()
if(problems)
  list(JOIN problems "\n  " problems)
  message(FATAL_ERROR "configure output:\n${all}\nproblems:\n  ${problems}")
endif()
message(STATUS "ok (${MODE}): one error listing the 5 missing dependencies and both routes")
