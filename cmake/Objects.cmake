# Which objects a build compiled from which sources, written as kit_objects.json in the build
# folder, and read back by a build with KIT_PREBUILT (CMakeLists.txt) and by the grader
# (grader/objects.py). Everything in it comes from what CMake promises: a target's SOURCES and
# $<TARGET_OBJECTS:target>, expanded by file(GENERATE). Nothing here or in the grader spells a
# path inside CMakeFiles/, so another CMake version's layout changes nothing.
#
#   {"format": "kit objects 1", "source_dir": ..., "unity": ON|OFF, "unity_batch": 8,
#    "targets": {name: {"folder": where it is defined, relative to source_dir ("" the top),
#                       "sources": [path relative to source_dir, ...],
#                       "apart": [the sources compiled outside the unity batches],
#                       "objects": [what it compiled, then the objects it links as sources]}},
#    "files": {path: {"target": name, "objects": [its one object]}}}
#
# "files" holds each student file's object: every student file compiles as an object library
# of its own (kit_file_object), so its object is known by name, not found by a naming rule.

# kit_file_object(<out var> <source> <kit|planner> [EXCLUDE_FROM_ALL]): the object library of
# one student file (the same library for the same source and flavour, however often asked):
# kit, compiled as the kit's libraries are (LibTorch, the shared header); planner, as
# kit_planner (no LibTorch). Sets <out var> to its $<TARGET_OBJECTS:...>.
function(kit_file_object out src flavour)
  file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${src}")
  string(MAKE_C_IDENTIFIER "${flavour}_${rel}" id)
  set(target "kit_file_${id}")
  if(NOT TARGET ${target})
    add_library(${target} OBJECT ${ARGN} "${src}")
    set_source_files_properties("${src}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    if(flavour STREQUAL "kit")
      kit_library_settings(${target})
    else()
      target_include_directories(${target} PRIVATE "${CMAKE_SOURCE_DIR}/starter")
      target_link_libraries(${target} PRIVATE nlohmann_json::nlohmann_json)
      target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
    endif()
    set_property(GLOBAL APPEND PROPERTY KIT_FILE_OBJECT_TARGETS ${target})
  elseif(NOT "EXCLUDE_FROM_ALL" IN_LIST ARGN)
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL OFF)
  endif()
  set(${out} "$<TARGET_OBJECTS:${target}>" PARENT_SCOPE)
endfunction()

# The targets of a folder and of every folder below it.
function(_kit_targets_below dir out)
  get_property(mine DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(sub ${subs})
    _kit_targets_below("${sub}" below)
    list(APPEND mine ${below})
  endforeach()
  set(${out} ${mine} PARENT_SCOPE)
endfunction()

# A JSON list of strings from a CMake list (generator expressions in it expand at generation).
function(_kit_json_list out)
  if(ARGN)
    list(JOIN ARGN "\"$<COMMA> \"" joined)
    set(${out} "[\"${joined}\"]" PARENT_SCOPE)
  else()
    set(${out} "[]" PARENT_SCOPE)
  endif()
endfunction()

# ON or OFF: whether this build compiles in unity batches, as the manifest writes it.
function(_kit_unity out)
  if(CMAKE_UNITY_BUILD)
    set(${out} ON PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

# kit_write_object_manifest(): kit_objects.json for every target that compiles or links
# objects. Call once, after every target is defined.
function(kit_write_object_manifest)
  _kit_targets_below("${CMAKE_SOURCE_DIR}" targets)
  get_property(file_targets GLOBAL PROPERTY KIT_FILE_OBJECT_TARGETS)
  set(entries "")
  set(files "")
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "^(OBJECT_LIBRARY|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    get_target_property(dir ${t} SOURCE_DIR)
    get_target_property(srcs ${t} SOURCES)
    set(compiled "")
    set(apart "")
    set(lent "")
    foreach(s ${srcs})
      if(s MATCHES "^\\$<")   # another target's objects: that target's entry lists them
        continue()
      endif()
      get_filename_component(path "${s}" ABSOLUTE BASE_DIR "${dir}")
      if(path MATCHES "\\.o$")
        list(APPEND lent "${path}")
        continue()
      endif()
      if(NOT path MATCHES "\\.(cpp|cc|cxx|c)$")
        continue()
      endif()
      file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${path}")
      list(APPEND compiled "${rel}")
      get_source_file_property(skip "${path}" DIRECTORY "${dir}" SKIP_UNITY_BUILD_INCLUSION)
      if(skip)
        list(APPEND apart "${rel}")
      endif()
    endforeach()
    _kit_json_list(objects_json "$<JOIN:$<TARGET_OBJECTS:${t}>,\"$<COMMA> \">" ${lent})
    if(NOT compiled)   # objects only: $<TARGET_OBJECTS> expands to nothing
      _kit_json_list(objects_json ${lent})
    endif()
    if(t IN_LIST file_targets)
      list(GET compiled 0 rel)
      list(APPEND files "\"${rel}\": {\"target\": \"${t}\", \"objects\": ${objects_json}}")
      continue()
    endif()
    _kit_json_list(sources_json ${compiled})
    _kit_json_list(apart_json ${apart})
    file(RELATIVE_PATH folder "${CMAKE_SOURCE_DIR}" "${dir}")
    list(APPEND entries "\"${t}\": {\"folder\": \"${folder}\", \"sources\": ${sources_json}, \"apart\": ${apart_json}, \"objects\": ${objects_json}}")
  endforeach()
  list(JOIN entries ",\n  " entries)
  list(JOIN files ",\n  " files)
  _kit_unity(unity)
  file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/kit_objects.json" CONTENT
       "{\"format\": \"kit objects 1\", \"source_dir\": \"${CMAKE_SOURCE_DIR}\", \"unity\": \"${unity}\", \"unity_batch\": \"${CMAKE_UNITY_BUILD_BATCH_SIZE}\",\n\"targets\": {\n  ${entries}\n},\n\"files\": {\n  ${files}\n}}\n")
endfunction()

# ---- reading KIT_PREBUILT's manifest ---------------------------------------------------------
# The manifest of KIT_PREBUILT, read once: FATAL_ERROR naming the fix where it has none.
function(_kit_prebuilt_manifest out)
  get_property(m GLOBAL PROPERTY KIT_PREBUILT_MANIFEST)
  if(NOT m)
    set(path "${KIT_PREBUILT}/kit_objects.json")
    if(NOT EXISTS "${path}")
      message(FATAL_ERROR "KIT_PREBUILT=${KIT_PREBUILT} has no kit_objects.json: configure and build that tree "
                          "with this kit's CMakeLists.txt first (all of it), or leave KIT_PREBUILT empty")
    endif()
    file(READ "${path}" m)
    string(JSON format ERROR_VARIABLE err GET "${m}" format)
    if(err OR NOT format STREQUAL "kit objects 1")
      message(FATAL_ERROR "KIT_PREBUILT=${KIT_PREBUILT}: ${path} is not a kit object manifest (\"kit objects 1\"): "
                          "build that tree again with this kit, or leave KIT_PREBUILT empty")
    endif()
    set_property(GLOBAL PROPERTY KIT_PREBUILT_MANIFEST "${m}")
  endif()
  set(${out} "${m}" PARENT_SCOPE)
endfunction()

# The strings of a JSON list at <member...> of <json>, as a CMake list (empty where it has none).
function(_kit_json_strings out json)
  string(JSON n ERROR_VARIABLE err LENGTH "${json}" ${ARGN})
  set(items "")
  if(NOT err AND n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON item GET "${json}" ${ARGN} ${i})
      list(APPEND items "${item}")
    endforeach()
  endif()
  set(${out} ${items} PARENT_SCOPE)
endfunction()

# Every object must be there: a tree built in part lends nothing.
function(_kit_check_objects_exist what)
  foreach(obj ${ARGN})
    if(NOT EXISTS "${obj}")
      message(FATAL_ERROR "KIT_PREBUILT=${KIT_PREBUILT} has no ${obj} (${what}): build that tree first (all of "
                          "it), or leave KIT_PREBUILT empty")
    endif()
  endforeach()
endfunction()

# kit_prebuilt_objects(<out var> <target> <sources>...): KIT_PREBUILT's objects of <target>,
# which must have compiled the same sources (relative to each tree) in the same order, the same
# ones outside the unity batches, with the same unity setting: then its objects are the ones
# this build would compile (the build stops on any difference: never a silent mix).
function(kit_prebuilt_objects out target)
  _kit_prebuilt_manifest(m)
  string(JSON entry ERROR_VARIABLE err GET "${m}" targets ${target})
  if(err)
    message(FATAL_ERROR "KIT_PREBUILT=${KIT_PREBUILT} has no target ${target} (its kit_objects.json): build "
                        "that tree from the same sources, or leave KIT_PREBUILT empty")
  endif()
  set(mine "")
  set(apart "")
  foreach(src ${ARGN})
    file(RELATIVE_PATH rel "${CMAKE_SOURCE_DIR}" "${src}")
    list(APPEND mine "${rel}")
    get_source_file_property(skip "${src}" SKIP_UNITY_BUILD_INCLUSION)
    if(skip)
      list(APPEND apart "${rel}")
    endif()
  endforeach()
  _kit_json_strings(theirs "${entry}" sources)
  _kit_json_strings(their_apart "${entry}" apart)
  string(JSON unity GET "${m}" unity)
  string(JSON batch GET "${m}" unity_batch)
  _kit_unity(my_unity)
  if(NOT "${mine}" STREQUAL "${theirs}" OR NOT "${apart}" STREQUAL "${their_apart}" OR NOT unity STREQUAL my_unity
     OR (my_unity AND NOT batch STREQUAL "${CMAKE_UNITY_BUILD_BATCH_SIZE}"))
    message(FATAL_ERROR "KIT_PREBUILT=${KIT_PREBUILT}: its ${target} compiled [${theirs}] (apart from the unity "
                        "batches: [${their_apart}], unity ${unity}, batches of ${batch}); this build would compile "
                        "[${mine}] (apart: [${apart}], unity ${my_unity}, batches of ${CMAKE_UNITY_BUILD_BATCH_SIZE}): "
                        "build both trees from the same sources, or leave KIT_PREBUILT empty")
  endif()
  _kit_json_strings(objs "${entry}" objects)
  _kit_check_objects_exist("${target}'s" ${objs})
  set(${out} ${objs} PARENT_SCOPE)
endfunction()

# kit_prebuilt_file_object(<out var> <path>): KIT_PREBUILT's object of the student file at
# <path> relative to its source tree (starter/<f> or solution/<f>), or "" where it compiled none.
function(kit_prebuilt_file_object out path)
  _kit_prebuilt_manifest(m)
  string(JSON objs ERROR_VARIABLE err GET "${m}" files ${path} objects)
  set(obj "")
  if(NOT err)
    string(JSON obj GET "${m}" files ${path} objects 0)
    _kit_check_objects_exist("the object of ${path}" ${obj})
  endif()
  set(${out} "${obj}" PARENT_SCOPE)
endfunction()

# kit_prebuilt_pch(<out var>): KIT_PREBUILT's precompiled header, as -include takes it (the
# path of kit_pch's .gch without the suffix), or "" where it has none (then this build
# compiles its own).
function(kit_prebuilt_pch out)
  _kit_prebuilt_manifest(m)
  _kit_json_strings(objs "${m}" targets kit_pch objects)
  set(header "")
  foreach(obj ${objs})
    if(obj MATCHES "\\.gch$" AND EXISTS "${obj}")
      string(REGEX REPLACE "\\.gch$" "" header "${obj}")
    endif()
  endforeach()
  set(${out} "${header}" PARENT_SCOPE)
endfunction()
