# Git revision of the source tree, recorded in every report ("unknown" outside a git checkout).
find_package(Git QUIET)
set(TRAINBENCH_GIT_REVISION "unknown")
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short=12 HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE _rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND _rev)
    execute_process(COMMAND ${GIT_EXECUTABLE} diff --quiet HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                    RESULT_VARIABLE _dirty ERROR_QUIET)
    set(TRAINBENCH_GIT_REVISION "${_rev}")
    if(NOT _dirty EQUAL 0)
      set(TRAINBENCH_GIT_REVISION "${_rev}-dirty")
    endif()
  endif()
endif()
