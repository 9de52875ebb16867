# The user-space route: dependencies the build downloads when they are not installed, so
# that a machine without root (a cluster login node) needs only a compiler, CMake and a
# Python venv holding torch. Included by Dependencies.cmake.
#
# Every archive is pinned: one version, one SHA256. GoogleTest's and nlohmann_json's are
# the upstream GitHub release tarballs, which Debian mirrors byte for byte as its .orig
# tarballs (same SHA256), so either host serves them. CLI11, SentencePiece and
# gnuplot-iostream come from Debian's archive as Debian ships them (CLI11 and
# gnuplot-iostream are repacked there, so their hashes are Debian's); SentencePiece is
# 0.1.97, the release Debian 12's libsentencepiece-dev is, so both routes tokenize alike.
# LibTorch is never downloaded: it is gigabytes, and CPU or CUDA is the user's choice (the
# venv's torch wheel, -DCMAKE_PREFIX_PATH).
#
# Switches:
#   -DKIT_FETCH_DEPS=OFF                  never download; a missing dependency is an error
#   -DFETCHCONTENT_FULLY_DISCONNECTED=ON  CMake's own offline switch: use only what an
#                                         earlier configure of this build directory fetched
#   -DFETCHCONTENT_SOURCE_DIR_<NAME>=dir  use a source tree you unpacked yourself
#   KIT_DEPS_DOWNLOAD_DIR                 where the archives go; copy them there from
#                                         another machine to configure offline
include(FetchContent)
if(POLICY CMP0135)
  cmake_policy(SET CMP0135 NEW)   # extracted files get the extraction time
endif()
# The subprojects' option()s honour the settings made here (e.g. SPM_ENABLE_SHARED).
set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)
# SentencePiece 0.1.97 asks for CMake 3.1; CMake 4 refuses anything below 3.5 unless told.
set(CMAKE_POLICY_VERSION_MINIMUM 3.5)

option(KIT_FETCH_DEPS "Download missing dependencies (all but LibTorch) at pinned versions" ON)
set(KIT_DEPS_DOWNLOAD_DIR "${CMAKE_BINARY_DIR}/_deps/downloads" CACHE PATH
    "Where the pinned dependency archives are downloaded to (or copied to, for offline use)")

set(_deb https://deb.debian.org/debian/pool/main)
set(KIT_DEP_googletest_VERSION 1.12.1)
set(KIT_DEP_googletest_FILE googletest-release-1.12.1.tar.gz)
set(KIT_DEP_googletest_SHA256 81964fe578e9bd7c94dfdb09c8e4d6e6759e19967e397dbea48d1c10e45d0df2)
set(KIT_DEP_googletest_URLS
    https://github.com/google/googletest/archive/refs/tags/release-1.12.1.tar.gz
    ${_deb}/g/googletest/googletest_1.12.1.orig.tar.gz)

set(KIT_DEP_nlohmann_json_VERSION 3.11.3)
set(KIT_DEP_nlohmann_json_FILE json-3.11.3.tar.gz)
set(KIT_DEP_nlohmann_json_SHA256 0d8ef5af7f9794e3263480193c491549b2ba6cc74bb018906202ada498a79406)
set(KIT_DEP_nlohmann_json_URLS
    https://github.com/nlohmann/json/archive/refs/tags/v3.11.3.tar.gz
    ${_deb}/n/nlohmann-json3/nlohmann-json3_3.11.3.orig.tar.gz)

set(KIT_DEP_CLI11_VERSION 2.4.1)
set(KIT_DEP_CLI11_FILE cli11_2.4.1+ds.orig.tar.xz)
set(KIT_DEP_CLI11_SHA256 0b8fbf2398875f15f30a675c7f412123a2aaa38df2863e991de72004fd5f1292)
set(KIT_DEP_CLI11_URLS ${_deb}/c/cli11/cli11_2.4.1%2Bds.orig.tar.xz)

set(KIT_DEP_sentencepiece_VERSION 0.1.97)
set(KIT_DEP_sentencepiece_FILE sentencepiece_0.1.97.orig.tar.gz)
set(KIT_DEP_sentencepiece_SHA256 56430381f45dc6debfd2e0cbde4f039f9499c49ca825af184b0cbf318c17a18f)
set(KIT_DEP_sentencepiece_URLS ${_deb}/s/sentencepiece/sentencepiece_0.1.97.orig.tar.gz)

set(KIT_DEP_gnuplot_iostream_VERSION 0~20140302.gitc8919a0)
set(KIT_DEP_gnuplot_iostream_FILE gnuplot-iostream_0~20140302.gitc8919a0+dfsg.orig.tar.xz)
set(KIT_DEP_gnuplot_iostream_SHA256 09c7c1db251cb03b00e3edb2a4d1e457ed50aed8fcb4424a2a36f75bb73976b3)
set(KIT_DEP_gnuplot_iostream_URLS
    ${_deb}/g/gnuplot-iostream/gnuplot-iostream_0%7E20140302.gitc8919a0%2Bdfsg.orig.tar.xz)

# Gloo's headers, for a LibTorch that links Gloo but ships none of its headers (every
# official build: the pip wheel, the libtorch zip), so that the CPU backend "gloo" compiles
# in. Taken from Debian 12's libgloo-dev package (its data archive's usr/include/gloo),
# because that tree includes the gloo/config.h that Gloo's own build generates and a source
# tarball lacks. Any architecture's package will do: the headers are the same. Whether they
# fit the LibTorch at hand is checked by compiling its ProcessGroupGloo.hpp with them
# (Distributed.cmake), as for installed headers.
set(KIT_DEP_gloo_headers_VERSION 0.0~git20220518.5b14351-3)
set(KIT_DEP_gloo_headers_FILE libgloo-dev_0.0~git20220518.5b14351-3_amd64.deb)
set(KIT_DEP_gloo_headers_SHA256 80529c9fd8af452faf489e686b94bf87075965c40673803810c4f41634b1e299)
set(KIT_DEP_gloo_headers_URLS
    ${_deb}/g/gloo/libgloo-dev_0.0%7Egit20220518.5b14351-3_amd64.deb)

# kit_fetch_download(<name> <file-var> <reason-var>): downloads <name>'s pinned archive into
# KIT_DEPS_DOWNLOAD_DIR, trying each of its URLs, and sets <file-var> to its path. On
# failure sets <reason-var> to why (one line for the error message); else leaves it empty.
function(kit_fetch_download name file_var reason_var)
  set(${reason_var} "" PARENT_SCOPE)
  set(sha "${KIT_DEP_${name}_SHA256}")
  set(urls ${KIT_DEP_${name}_URLS})
  # Download here rather than in FetchContent: a failed download then becomes a line of
  # the one error message instead of a stack of sub-build logs. A file already present
  # with the right hash (an earlier configure, or copied in by hand) is used as it is.
  set(file "${KIT_DEPS_DOWNLOAD_DIR}/${KIT_DEP_${name}_FILE}")
  if(EXISTS "${file}")
    file(SHA256 "${file}" have)
    if(NOT have STREQUAL sha)
      message(STATUS "${file} has the wrong SHA256; downloading it again")
      file(REMOVE "${file}")
    endif()
  endif()
  set(errors "")
  foreach(url ${urls})
    if(EXISTS "${file}")
      break()
    endif()
    message(STATUS "Downloading ${name} ${KIT_DEP_${name}_VERSION} from ${url}")
    file(DOWNLOAD "${url}" "${file}.part" STATUS st TIMEOUT 300 INACTIVITY_TIMEOUT 30)
    list(GET st 0 code)
    list(GET st 1 text)
    if(code EQUAL 0)
      file(SHA256 "${file}.part" have)
      if(have STREQUAL sha)
        file(RENAME "${file}.part" "${file}")
        break()
      endif()
      list(APPEND errors "${url}: SHA256 ${have}, expected ${sha}")
    else()
      list(APPEND errors "${url}: ${text}")
    endif()
    list(GET errors -1 last)
    message(STATUS "  failed: ${last}")
    file(REMOVE "${file}.part")
  endforeach()
  if(NOT EXISTS "${file}")
    list(JOIN errors ", then " errors)   # no ";": the reason goes into a list
    set(${reason_var} "not installed, and the download failed (${errors})" PARENT_SCOPE)
    return()
  endif()
  set(${file_var} "${file}" PARENT_SCOPE)
endfunction()

# kit_fetch_forbidden(<reason-var> <it>): sets <reason-var> to the switch that forbids
# downloading <it> ("downloading is off (KIT_FETCH_DEPS=OFF)", ...), or empties it when
# downloading is allowed.
function(kit_fetch_forbidden reason_var it)
  if(NOT KIT_FETCH_DEPS)
    set(${reason_var} "downloading is off (KIT_FETCH_DEPS=OFF)" PARENT_SCOPE)
  elseif(FETCHCONTENT_FULLY_DISCONNECTED)
    set(${reason_var} "FETCHCONTENT_FULLY_DISCONNECTED=ON forbids downloading ${it}" PARENT_SCOPE)
  else()
    set(${reason_var} "" PARENT_SCOPE)
  endif()
endfunction()

# kit_fetch_prepare(<name> <reason-var>): makes <name>'s pinned source available to
# FetchContent (declared, not yet added). On failure sets <reason-var> to why, in words
# for the error message; on success leaves it empty.
function(kit_fetch_prepare name reason_var)
  set(${reason_var} "" PARENT_SCOPE)
  string(TOUPPER "${name}" uc)
  string(TOLOWER "${name}" lc)
  set(sha "${KIT_DEP_${name}_SHA256}")
  set(urls ${KIT_DEP_${name}_URLS})
  list(GET urls 0 first_url)
  if(FETCHCONTENT_SOURCE_DIR_${uc})   # the user's own copy: FetchContent uses it as it is
    FetchContent_Declare(${name} URL "${first_url}" URL_HASH SHA256=${sha})
    return()
  endif()
  kit_fetch_forbidden(forbidden it)
  if(forbidden)
    # Disconnected: FetchContent skips its own steps and trusts an earlier configure's sources.
    if(KIT_FETCH_DEPS AND EXISTS "${FETCHCONTENT_BASE_DIR}/${lc}-src")
      FetchContent_Declare(${name} URL "${first_url}" URL_HASH SHA256=${sha})
    else()
      set(${reason_var} "not installed, and ${forbidden}" PARENT_SCOPE)
    endif()
    return()
  endif()
  kit_fetch_download(${name} file reason)
  if(reason)
    set(${reason_var} "${reason}" PARENT_SCOPE)
    return()
  endif()
  FetchContent_Declare(${name} URL "${file}" URL_HASH SHA256=${sha})
endfunction()

# kit_fetch_add(<name> [HEADERS_ONLY]): unpacks a prepared dependency and adds its
# CMake project (EXCLUDE_FROM_ALL: only what the kit links gets built). HEADERS_ONLY:
# unpack only. Sets <lc>_SOURCE_DIR in the caller.
macro(kit_fetch_add name)
  string(TOLOWER "${name}" _kit_lc)
  FetchContent_GetProperties(${name})
  if(NOT ${_kit_lc}_POPULATED)
    if(POLICY CMP0169)
      cmake_policy(SET CMP0169 OLD)   # FetchContent_Populate: for EXCLUDE_FROM_ALL below
    endif()
    FetchContent_Populate(${name})
    if(NOT "${ARGN}" STREQUAL "HEADERS_ONLY")
      add_subdirectory("${${_kit_lc}_SOURCE_DIR}" "${${_kit_lc}_BINARY_DIR}" EXCLUDE_FROM_ALL)
    endif()
  endif()
  message(STATUS "${name} ${KIT_DEP_${name}_VERSION}: downloaded (in ${${_kit_lc}_SOURCE_DIR})")
endmacro()

# kit_fetch_add_fetched(<name> [<variable> <value>]...): when <name> is one of KIT_FETCHED,
# sets each <variable> (its project's build options) to <value>, then kit_fetch_add(<name>).
macro(kit_fetch_add_fetched name)
  if("${name}" IN_LIST KIT_FETCHED)
    set(_kit_settings ${ARGN})
    while(NOT "${_kit_settings}" STREQUAL "")
      list(POP_FRONT _kit_settings _kit_variable _kit_value)
      set(${_kit_variable} ${_kit_value})
    endwhile()
    kit_fetch_add(${name})
  endif()
endmacro()

# kit_fetch_gloo_headers(<dir-var> <reason-var>): Gloo's pinned headers (see
# KIT_DEP_gloo_headers above), unpacked once into the build directory; sets <dir-var> to the
# directory that contains gloo/. On failure sets <reason-var> to why, else leaves it empty.
function(kit_fetch_gloo_headers dir_var reason_var)
  set(${reason_var} "" PARENT_SCOPE)
  string(SUBSTRING "${KIT_DEP_gloo_headers_SHA256}" 0 12 pin)   # another pin, another directory
  set(dir "${FETCHCONTENT_BASE_DIR}/gloo_headers-${pin}")
  if(EXISTS "${dir}/include/gloo/config.h")   # unpacked by an earlier configure
    set(${dir_var} "${dir}/include" PARENT_SCOPE)
    return()
  endif()
  kit_fetch_forbidden(reason them)
  if(NOT reason)
    kit_fetch_download(gloo_headers deb reason)
  endif()
  if(reason)
    set(${reason_var} "${reason}" PARENT_SCOPE)
    return()
  endif()
  # A .deb is an ar archive holding data.tar.xz; CMake's libarchive reads both.
  file(REMOVE_RECURSE "${dir}.part")
  file(ARCHIVE_EXTRACT INPUT "${deb}" DESTINATION "${dir}.part/deb" PATTERNS "data.tar*")
  file(GLOB data "${dir}.part/deb/data.tar*")
  if(NOT data)
    set(${reason_var} "${deb} holds no data.tar archive" PARENT_SCOPE)
    return()
  endif()
  file(ARCHIVE_EXTRACT INPUT "${data}" DESTINATION "${dir}.part/data")
  if(NOT EXISTS "${dir}.part/data/usr/include/gloo/config.h")
    set(${reason_var} "${deb} holds no usr/include/gloo/config.h" PARENT_SCOPE)
    return()
  endif()
  file(MAKE_DIRECTORY "${dir}")
  file(RENAME "${dir}.part/data/usr/include" "${dir}/include")
  file(REMOVE_RECURSE "${dir}.part")
  message(STATUS "gloo_headers ${KIT_DEP_gloo_headers_VERSION}: downloaded (in ${dir}/include)")
  set(${dir_var} "${dir}/include" PARENT_SCOPE)
endfunction()
