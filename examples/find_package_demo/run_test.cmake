# ctest driver (tests/CMakeLists.txt, example_find_package_demo): install the flopmeter build into a temporary
# prefix, then configure, build and run examples/find_package_demo against it with CMAKE_PREFIX_PATH.
#   cmake -DFLOPMETER_BUILD_DIR=... -DDEMO_SOURCE_DIR=... -DWORK_DIR=... -DMODEL_CONFIG=... -P run_test.cmake
foreach(var FLOPMETER_BUILD_DIR DEMO_SOURCE_DIR WORK_DIR MODEL_CONFIG)
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
step("configure" ${CMAKE_COMMAND} -S "${DEMO_SOURCE_DIR}" -B "${WORK_DIR}/build"
     "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release)
step("build" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
step("run" "${WORK_DIR}/build/flopmeter_demo" "${MODEL_CONFIG}" "${WORK_DIR}/demo.jsonl")
