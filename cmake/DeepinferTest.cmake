# deepinfer_test(NAME sources... LIBS libs...): one GoogleTest binary registered with ctest.
# Tests run from the repository root so they can open tests/data/... by relative path.
function(deepinfer_test name)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  add_executable(${name} ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest_main)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()
