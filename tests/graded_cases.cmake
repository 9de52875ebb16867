# kit_label_graded_cases(<rubric.json>...): label `in_solution_selftest` the ctest cases that
# the grader's solution self-tests run, so that scripts/test.sh (ctest -LE) runs each of them
# once, inside grader_selftest[.a<N>].solution, which fails unless every one of them passes.
#
# A case is labelled when, for one of the rubrics, its name matches a pattern in "tests" of an
# item and no pattern in "given_tests" (the grader does not run those) or "may_skip" (a case
# the grader may skip is not proven by it): grade.py's rule, with fnmatch's * and ?. The ctest
# name is <suite>.<gtest name> (gtest_discover_tests with TEST_PREFIX "<suite>." and
# NO_PRETTY_VALUES), which is the name grade.py matches.
#
# The cases are listed when ctest runs (gtest_discover_tests, PRE_TEST), so the labels are set
# then, by the script written here: TEST_INCLUDE_FILES runs it after the discovery scripts,
# and each discovery leaves its case names in test_<suite>_TESTS (gtest_discover_tests's TEST_LIST).

# The CMake regular expression (whole name) of one rubric pattern.
function(kit_pattern_regex pattern out)
  if(pattern MATCHES "[][\\\\]")
    message(FATAL_ERROR "rubric test pattern '${pattern}' uses [ ] or \\, which "
                        "tests/graded_cases.cmake does not translate: write it with * and ? only")
  endif()
  set(re "${pattern}")
  foreach(c . + ^ $ | "(" ")")
    string(REPLACE "${c}" "\\${c}" re "${re}")
  endforeach()
  string(REPLACE "*" ".*" re "${re}")
  string(REPLACE "?" "." re "${re}")
  set(${out} "${re}" PARENT_SCOPE)
endfunction()

# ^a$|^b$|... for the patterns in the JSON array at <path>, none when there is no such array.
# (No groups: CMake's regular expressions allow only 9.)
function(kit_rubric_regex json out)
  set(res "")
  string(JSON n ERROR_VARIABLE missing LENGTH "${json}" ${ARGN})
  if(NOT missing AND n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON p GET "${json}" ${ARGN} ${i})
      kit_pattern_regex("${p}" re)
      list(APPEND res "^${re}$")
    endforeach()
  endif()
  list(JOIN res "|" res)
  set(${out} "${res}" PARENT_SCOPE)
endfunction()

function(kit_label_graded_cases)
  set(graded "")
  set(kept "")
  foreach(rubric ${ARGN})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${rubric}")
    file(READ "${rubric}" json)
    string(JSON n_items LENGTH "${json}" items)
    math(EXPR last "${n_items} - 1")
    set(run "")
    foreach(i RANGE ${last})
      kit_rubric_regex("${json}" re items ${i} tests)   # none for a figures item
      list(APPEND run ${re})
    endforeach()
    kit_rubric_regex("${json}" given given_tests)
    kit_rubric_regex("${json}" may_skip may_skip)
    set(not_run ${given} ${may_skip})
    list(JOIN run "|" run)
    list(JOIN not_run "|" not_run)
    if(NOT run)
      set(run "^$")     # matches no case name
    endif()
    if(NOT not_run)
      set(not_run "^$")
    endif()
    string(APPEND graded " [==[${run}]==]")
    string(APPEND kept " [==[${not_run}]==]")
  endforeach()
  get_property(suites GLOBAL PROPERTY KIT_TEST_SUITE_NAMES)
  set(script "${CMAKE_CURRENT_BINARY_DIR}/graded_cases_labels.cmake")
  file(WRITE "${script}"
    "# Written by tests/graded_cases.cmake from the rubrics; run by ctest after the discovery scripts.\n"
    "set(kit_suites ${suites})\n"
    "set(kit_graded${graded})\n"
    "set(kit_kept${kept})\n"
    [==[
foreach(suite IN LISTS kit_suites)
  foreach(name IN LISTS test_${suite}_TESTS)
    foreach(graded kept IN ZIP_LISTS kit_graded kit_kept)
      if(name MATCHES "${graded}" AND NOT name MATCHES "${kept}")
        set_tests_properties("${name}" PROPERTIES LABELS "${suite};in_solution_selftest")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()
]==])
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
