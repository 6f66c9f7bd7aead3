# Run after a test program is built (tests/CMakeLists.txt, flopmeter_add_test): asks the program for its GoogleTest
# cases (--gtest_list_tests) and writes one ctest test per suite into OUTPUT_FILE, run as
# `PROGRAM --gtest_filter=Suite.*`.
#
# Why suites and not cases: each program loads LibTorch's ~290 shared libraries before main (0.4-0.6 s on the CI
# machine's 2 cores). One process per case paid that 790 times per ctest run (about 3 minutes of the suite's 35);
# one per suite pays it 137 times. A failing case is still named: GoogleTest prints it, and ctest prints the
# output of a failing test.
#
# Each test's COST (ctest starts the costliest first, so that a long suite does not run alone at the end) is its
# number of cases times SECONDS_PER_CASE, a rough figure its CMakeLists gives (default 1).
#
# Inputs (-D): PROGRAM (the test program), OUTPUT_FILE, WORKING_DIRECTORY, LABELS (a ;-list, may be empty),
# SECONDS_PER_CASE.
if(NOT PROGRAM OR NOT OUTPUT_FILE)
  message(FATAL_ERROR "flopmeter_list_suites.cmake: PROGRAM and OUTPUT_FILE are required")
endif()
execute_process(COMMAND "${PROGRAM}" --gtest_list_tests
                WORKING_DIRECTORY "${WORKING_DIRECTORY}"
                OUTPUT_VARIABLE listing ERROR_VARIABLE listing_errors RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "flopmeter_list_suites.cmake: ${PROGRAM} --gtest_list_tests exited with ${status}:\n"
                      "${listing}${listing_errors}")
endif()

# The listing has a suite line ("Suite." or "Prefix/Suite/0.", maybe followed by "  # TypeParam = ...") and
# indented case lines below it; anything else (gtest_main's "Running main() from ...") has no trailing period.
string(REPLACE "\n" ";" lines "${listing}")
set(suites "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    list(APPEND suites "${suite}")
    set(cases_${suite} 0)
  elseif(line MATCHES "^  [^ ]" AND DEFINED suite)
    math(EXPR cases_${suite} "${cases_${suite}} + 1")
  endif()
endforeach()
if(NOT SECONDS_PER_CASE)
  set(SECONDS_PER_CASE 1)
endif()
if(NOT suites)
  message(FATAL_ERROR "flopmeter_list_suites.cmake: ${PROGRAM} lists no test suite:\n${listing}")
endif()

set(script "# Written by cmake/flopmeter_list_suites.cmake after ${PROGRAM} was built.\n")
foreach(suite IN LISTS suites)
  string(APPEND script "add_test([=[${suite}]=] [=[${PROGRAM}]=] [=[--gtest_filter=${suite}.*]=])\n")
  math(EXPR cost "${cases_${suite}} * ${SECONDS_PER_CASE}")
  string(APPEND script "set_tests_properties([=[${suite}]=] PROPERTIES WORKING_DIRECTORY [=[${WORKING_DIRECTORY}]=]"
                       " COST ${cost}")
  if(LABELS)
    string(APPEND script " LABELS [=[${LABELS}]=]")
  endif()
  string(APPEND script ")\n")
endforeach()
file(WRITE "${OUTPUT_FILE}" "${script}")
