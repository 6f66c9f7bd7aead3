# ctest driver (tests/CMakeLists.txt: example_find_package_demo, example_c10d_trainer): install the flopmeter
# build into a temporary prefix, then configure, build and run a consumer project against it with
# CMAKE_PREFIX_PATH, in WORK_DIR.
#   cmake -DFLOPMETER_BUILD_DIR=... -DDEMO_SOURCE_DIR=... -DWORK_DIR=... -DMODEL_CONFIG=... -P run_test.cmake
# Optional: -DDEMO_PROGRAM=<target> -DDEMO_ARGS=<a;b> run that program with those arguments instead of
# `flopmeter_demo MODEL_CONFIG WORK_DIR/demo.jsonl`; -DDEMO_PREFIX_PATH=<dirs> adds prefixes the consumer searches
# after the install (e.g. LibTorch's).
foreach(var FLOPMETER_BUILD_DIR DEMO_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_test.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "find_package demo: ${name} failed (${result})")
  endif()
endfunction()

step("install" ${CMAKE_COMMAND} --install "${FLOPMETER_BUILD_DIR}" --prefix "${prefix}")
set(search_path "${prefix}")
if(DEFINED DEMO_PREFIX_PATH AND NOT DEMO_PREFIX_PATH STREQUAL "")
  list(APPEND search_path ${DEMO_PREFIX_PATH})
endif()
string(REPLACE ";" "\\;" search_path_arg "${search_path}")
step("configure" ${CMAKE_COMMAND} -S "${DEMO_SOURCE_DIR}" -B "${WORK_DIR}/build"
     "-DCMAKE_PREFIX_PATH=${search_path_arg}" -DCMAKE_BUILD_TYPE=Release)
step("build" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
if(DEFINED DEMO_PROGRAM)
  set(run_command "${WORK_DIR}/build/${DEMO_PROGRAM}" ${DEMO_ARGS})
else()
  if(NOT DEFINED MODEL_CONFIG)
    message(FATAL_ERROR "run_test.cmake: -DMODEL_CONFIG=... is required for flopmeter_demo")
  endif()
  set(run_command "${WORK_DIR}/build/flopmeter_demo" "${MODEL_CONFIG}" "${WORK_DIR}/demo.jsonl")
endif()
execute_process(COMMAND ${run_command} WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE result OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}${err}")
if(NOT result EQUAL 0)
  message(FATAL_ERROR "find_package consumer: run failed (${result})")
endif()
