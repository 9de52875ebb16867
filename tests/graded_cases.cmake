# kit_label_rubric_cases(SELFTEST <ON|OFF> RUBRICS <rubric.json>... [CASE_LABELS <pattern>=<label>...]):
# labels from the rubrics (and CASE_LABELS: a label for the cases a pattern matches).
#
# Every case an item's "tests" patterns match gets the item's "label" (p3.1_gpipe_1f1b, ...),
# so `ctest -L <label>` runs exactly one rubric item's cases (the handouts print one command
# per item; grader/tests/test_grade_unit.py checks that no label's regular expression matches
# another label). With SELFTEST ON, a case is also labelled `in_solution_selftest` when the
# grader's solution self-tests run it, so that scripts/test.sh (ctest -LE) runs each of them
# once, inside grader_selftest[.a<N>].solution, which fails unless every one of them passes:
# when, for one of the rubrics, its name matches a pattern in "tests" of an item and no pattern
# in "given_tests" (the grader does not run those) or "may_skip" (a case the grader may skip
# is not proven by it): grade.py's rule, with fnmatch's * and ?. The ctest name is
# <suite>.<gtest name> (gtest_discover_tests with TEST_PREFIX "<suite>." and
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

function(kit_label_rubric_cases)
  cmake_parse_arguments(ARG "" "SELFTEST" "RUBRICS;CASE_LABELS" ${ARGN})
  set(graded "")
  set(kept "")
  set(item_res "")
  set(item_labels "")
  foreach(rubric ${ARG_RUBRICS})
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${rubric}")
    file(READ "${rubric}" json)
    string(JSON n_items LENGTH "${json}" items)
    math(EXPR last "${n_items} - 1")
    set(run "")
    foreach(i RANGE ${last})
      kit_rubric_regex("${json}" re items ${i} tests)   # none for a figures item
      list(APPEND run ${re})
      if(re)
        string(JSON label ERROR_VARIABLE no_label GET "${json}" items ${i} label)
        if(no_label OR NOT label MATCHES "^p[0-9]+\\.[0-9]+_[a-z0-9_]+$")
          string(JSON name GET "${json}" items ${i} name)
          message(FATAL_ERROR "${rubric}: item '${name}' needs a \"label\" like p3.1_gpipe_1f1b "
                              "(p<problem>_<words>: ctest -L runs its cases)")
        endif()
        list(APPEND item_res "[==[${re}]==]")
        list(APPEND item_labels "${label}")
      endif()
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
  if(NOT ARG_SELFTEST)
    set(graded "")
    set(kept "")
  endif()
  foreach(pair ${ARG_CASE_LABELS})   # <pattern>=<label>: more labels by case name
    string(REGEX MATCH "^([^=]+)=(.+)$" _ "${pair}")
    kit_pattern_regex("${CMAKE_MATCH_1}" re)
    list(APPEND item_res "[==[^${re}$]==]")
    list(APPEND item_labels "${CMAKE_MATCH_2}")
  endforeach()
  list(JOIN item_res " " item_res)
  get_property(suites GLOBAL PROPERTY KIT_TEST_SUITE_NAMES)
  set(extra "")
  foreach(suite ${suites})   # the suites' own LABELS (kit_add_test_suite), which this script keeps
    get_property(l GLOBAL PROPERTY KIT_TEST_SUITE_LABELS_${suite})
    string(REPLACE ";" "," l "${l}")
    if(NOT l)
      set(l "-")   # none (an empty element would not survive the list)
    endif()
    string(APPEND extra " ${l}")
  endforeach()
  set(script "${CMAKE_CURRENT_BINARY_DIR}/graded_cases_labels.cmake")
  file(WRITE "${script}"
    "# Written by tests/graded_cases.cmake from the rubrics; run by ctest after the discovery scripts.\n"
    "set(kit_suites ${suites})\n"
    "set(kit_suite_labels${extra})\n"
    "set(kit_item_res ${item_res})\n"
    "set(kit_item_labels ${item_labels})\n"
    "set(kit_graded${graded})\n"
    "set(kit_kept${kept})\n"
    [==[
foreach(suite more IN ZIP_LISTS kit_suites kit_suite_labels)
  string(REPLACE "," ";" more "${more}")
  list(REMOVE_ITEM more "-")
  foreach(name IN LISTS test_${suite}_TESTS)
    set(labels ${suite} ${more})
    foreach(re label IN ZIP_LISTS kit_item_res kit_item_labels)
      if(name MATCHES "${re}")
        list(APPEND labels ${label})
      endif()
    endforeach()
    foreach(graded kept IN ZIP_LISTS kit_graded kit_kept)
      if(name MATCHES "${graded}" AND NOT name MATCHES "${kept}")
        list(APPEND labels in_solution_selftest)
        break()
      endif()
    endforeach()
    set_tests_properties("${name}" PROPERTIES LABELS "${labels}")
  endforeach()
endforeach()
]==])
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
