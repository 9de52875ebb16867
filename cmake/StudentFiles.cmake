# The student files: read from the rubrics ("student_files"), the single lists that the
# build, the starter generator and the grader all use. grader/rubric.json is assignment 1;
# grader/assignment<N>/rubric.json the later ones. A student bundle carries grader/rubric.json
# and its own assignment's rubric only; the list matters with KIT_SOLUTION=ON, in the
# instructor's checkout, which has every rubric (without it, every starter/*.cpp is built anyway).
file(GLOB _kit_rubrics "${CMAKE_SOURCE_DIR}/grader/assignment*/rubric.json")
list(PREPEND _kit_rubrics "${CMAKE_SOURCE_DIR}/grader/rubric.json")
set(KIT_STUDENT_FILES "")
foreach(_path ${_kit_rubrics})
  file(READ "${_path}" _rubric)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_path}")
  string(JSON _n LENGTH "${_rubric}" student_files)
  math(EXPR _last "${_n} - 1")
  foreach(i RANGE ${_last})
    string(JSON _f GET "${_rubric}" student_files ${i})
    list(APPEND KIT_STUDENT_FILES "${_f}")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES KIT_STUDENT_FILES)

if(KIT_SOLUTION)
  message(STATUS "Student files: solution/ (reference solution)")
else()
  message(STATUS "Student files: starter/ (KIT_SOLUTION=OFF)")
endif()

# Replace starter/<f> by solution/<f> in the list named by VAR when KIT_SOLUTION is on.
function(kit_select_student_sources VAR)
  set(out ${${VAR}})
  if(KIT_SOLUTION)
    foreach(f ${KIT_STUDENT_FILES})
      if(NOT EXISTS "${CMAKE_SOURCE_DIR}/solution/${f}")
        message(FATAL_ERROR "a rubric under grader/ lists ${f} but solution/${f} does not exist")
      endif()
      list(FIND out "${CMAKE_SOURCE_DIR}/starter/${f}" _at)
      if(_at GREATER -1)   # only the lists that hold it (the kit's, the planner's)
        list(REMOVE_AT out ${_at})
        list(APPEND out "${CMAKE_SOURCE_DIR}/solution/${f}")
      endif()
    endforeach()
  endif()
  set(${VAR} ${out} PARENT_SCOPE)
endfunction()
