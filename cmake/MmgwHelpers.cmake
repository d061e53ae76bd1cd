# mmgw_add_plugin(NAME SOURCES ... [LIBS ...]): a dlopen-able model plugin in build/plugins/NAME.so
# with hidden visibility; only mmgw_plugin_entry is exported.
function(mmgw_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  set_target_properties(${name} PROPERTIES PREFIX "" OUTPUT_NAME ${name}
    LIBRARY_OUTPUT_DIRECTORY ${MMGW_PLUGIN_DIR} C_VISIBILITY_PRESET hidden)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/plugins/include)
  target_link_libraries(${name} PRIVATE ${P_LIBS})
endfunction()

# mmgw_add_test(NAME SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s] [ARGS ...]):
# one executable in build/tests, registered with CTest. Exit code 77 = skipped (with a reason printed).
function(mmgw_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "MMGW_TESTDATA=${MMGW_TESTDATA};MMGW_BUILD=${CMAKE_BINARY_DIR};MMGW_SOURCE=${CMAKE_SOURCE_DIR}")
endfunction()

# mmgw_add_script_test(NAME COMMAND ... [LABELS ...] [TIMEOUT s]): a test driven by a script
# (shell or /usr/bin/python3) with the same environment as mmgw_add_test.
function(mmgw_add_script_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "COMMAND;LABELS" ${ARGN})
  add_test(NAME ${name} COMMAND ${T_COMMAND})
  if(NOT T_LABELS)
    set(T_LABELS integration)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "MMGW_TESTDATA=${MMGW_TESTDATA};MMGW_BUILD=${CMAKE_BINARY_DIR};MMGW_SOURCE=${CMAKE_SOURCE_DIR}")
endfunction()

# mmgw_add_subdirs(): add every child folder that has a CMakeLists.txt, so that separate parts of a
# component (gateway/media, gateway/http...) each own their build file.
macro(mmgw_add_subdirs)
  file(GLOB _children LIST_DIRECTORIES true ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _children)
  foreach(_c ${_children})
    if(IS_DIRECTORY ${_c} AND EXISTS ${_c}/CMakeLists.txt)
      add_subdirectory(${_c})
    endif()
  endforeach()
endmacro()
