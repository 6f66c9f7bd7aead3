# ctest driver of the packaging tests (tests/CMakeLists.txt, packaging_*): a project that uses flopmeter the
# way a trainer would, built and run from scratch in WORK_DIR.
#   cmake -DMODE=<mode> -DFLOPMETER_SOURCE_DIR=... -DFLOPMETER_BUILD_DIR=... -DWORK_DIR=... -P run_consumer.cmake
# MODE
#   find_package      install FLOPMETER_BUILD_DIR into WORK_DIR/prefix; configure, build and run
#                     examples/find_package_demo against it; check the installed files (headers of the built
#                     parts only, export.h, the configs and schemas) and that the program loads no CUDA
#                     library (ldd)
#   pkg_config        install as above; compile c_consumer.c as C99 with `pkg-config --cflags --libs
#                     flopmeter`; run it on the installed plugin_configs/example.toml
#   add_subdirectory  build add_subdirectory_consumer/ (flopmeter embedded, without LibTorch and NCCL) and run
#                     it; then install that embedded flopmeter and run the find_package checks against it: the
#                     configuration without LibTorch
# Optional: -DHAVE_TORCH=ON|OFF -DHAVE_NCCL=ON|OFF (what FLOPMETER_BUILD_DIR was built with),
#           -DCOMPILER_LAUNCHER=ccache, -DCXX_COMPILER=..., -DC_COMPILER=...
foreach(var MODE FLOPMETER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

set(model "${FLOPMETER_SOURCE_DIR}/model_configs/tiny_vlm.toml")
set(demo_source "${FLOPMETER_SOURCE_DIR}/examples/find_package_demo")
set(compiler_args "")
if(COMPILER_LAUNCHER)
  list(APPEND compiler_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER}")
endif()
if(CXX_COMPILER)
  list(APPEND compiler_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(step name)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE result OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message("-- ${name}\n${out}${err}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "packaging test (${MODE}): ${name} failed (${result})")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "packaging test (${MODE}): ${path} was not installed")
  endif()
endfunction()
function(expect_no_file path why)
  if(EXISTS "${path}")
    message(FATAL_ERROR "packaging test (${MODE}): ${path} was installed, but ${why}")
  endif()
endfunction()

# The program must not load a CUDA library: none on its ldd list (a CPU-only trainer).
function(expect_no_cuda program)
  step("ldd ${program}" ldd "${program}")
  string(REGEX MATCHALL "(^|[\n\t /])lib(cuda|cudart|nccl|cublas|cublasLt|nvrtc|cudnn|nvToolsExt)[^\n\t /]*\\.so[^\n\t ]*"
         found "${step_output}")
  if(found)
    message(FATAL_ERROR "packaging test (${MODE}): ${program} loads CUDA libraries: ${found}")
  endif()
endfunction()

# What an install of a build with (HAVE_TORCH, HAVE_NCCL) must hold.
function(check_installed prefix have_torch have_nccl)
  file(GLOB libdirs LIST_DIRECTORIES true "${prefix}/lib*")
  set(libdir "")
  foreach(dir IN LISTS libdirs)
    if(EXISTS "${dir}/cmake/flopmeter/flopmeterConfig.cmake")
      set(libdir "${dir}")
    endif()
  endforeach()
  if(NOT libdir)
    message(FATAL_ERROR "packaging test (${MODE}): no <libdir>/cmake/flopmeter/flopmeterConfig.cmake under ${prefix}")
  endif()
  foreach(file include/flopmeter/c_api.h include/flopmeter/export.h include/flopmeter/throughput.h
               share/flopmeter/model_configs/SCHEMA.md share/flopmeter/model_configs/qwen3_vl_2b.toml
               share/flopmeter/plugin_configs/example.toml share/flopmeter/plugin_configs/SCHEMA.md)
    expect_file("${prefix}/${file}")
  endforeach()
  expect_file("${libdir}/pkgconfig/flopmeter.pc")
  foreach(header c10d.h torch.h)
    if(have_torch)
      expect_file("${prefix}/include/flopmeter/${header}")
    else()
      expect_no_file("${prefix}/include/flopmeter/${header}" "this flopmeter was built without LibTorch")
    endif()
  endforeach()
  expect_file("${prefix}/share/flopmeter/examples/c10d_trainer/main.cpp")
  # Each include directory once in the exported targets (INSTALL_INTERFACE alone, no INCLUDES DESTINATION).
  file(READ "${libdir}/cmake/flopmeter/flopmeterTargets.cmake" targets)
  if(targets MATCHES "/include;[^\n\"]*/include\"")
    message(FATAL_ERROR "packaging test (${MODE}): flopmeterTargets.cmake lists an include directory twice")
  endif()
  if(have_nccl)
    expect_file("${prefix}/include/flopmeter/nccl.h")
    # libflopmeter_nccl.so finds libflopmeter.so.0 beside it ($ORIGIN), without LD_LIBRARY_PATH.
    execute_process(COMMAND readelf -d "${libdir}/libflopmeter_nccl.so" OUTPUT_VARIABLE dynamic)
    if(NOT dynamic MATCHES "R(UN)?PATH[^\n]*[$]ORIGIN")
      message(FATAL_ERROR "packaging test (${MODE}): libflopmeter_nccl.so has no $ORIGIN run path:\n${dynamic}")
    endif()
  else()
    expect_no_file("${prefix}/include/flopmeter/nccl.h" "this flopmeter was built without NCCL")
  endif()
  set(installed_libdir "${libdir}" PARENT_SCOPE)
endfunction()

# Install a build, then configure, build and run the find_package demo against the install.
function(find_package_consumer build_dir prefix have_torch have_nccl)
  step("install" ${CMAKE_COMMAND} --install "${build_dir}" --prefix "${prefix}")
  check_installed("${prefix}" ${have_torch} ${have_nccl})
  step("configure the find_package demo" ${CMAKE_COMMAND} -S "${demo_source}" -B "${prefix}-demo"
       "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release ${compiler_args})
  step("build the find_package demo" ${CMAKE_COMMAND} --build "${prefix}-demo")
  step("run the find_package demo" "${prefix}-demo/flopmeter_demo" "${model}" "${prefix}-demo/demo.jsonl")
  # flopmeter::flopmeter alone: a CPU-only trainer's program loads no CUDA library, whether or not this
  # flopmeter was built with the raw NCCL adapter (that is libflopmeter_nccl.so, flopmeter::nccl).
  expect_no_cuda("${prefix}-demo/flopmeter_demo")
  if(have_nccl)
    step("configure the find_package demo with COMPONENTS nccl" ${CMAKE_COMMAND} -S "${demo_source}"
         -B "${prefix}-demo-nccl" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release ${compiler_args}
         -DDEMO_COMPONENTS=nccl)
    step("build the find_package demo with COMPONENTS nccl" ${CMAKE_COMMAND} --build "${prefix}-demo-nccl")
  endif()
  if(have_torch)
    # flopmeter::torch carries LibTorch: the demo links it (as a c10d.h user's program would) and runs.
    step("configure the find_package demo with COMPONENTS torch" ${CMAKE_COMMAND} -S "${demo_source}"
         -B "${prefix}-demo-torch" "-DCMAKE_PREFIX_PATH=${prefix}" -DCMAKE_BUILD_TYPE=Release ${compiler_args}
         -DDEMO_COMPONENTS=torch)
    step("build the find_package demo with COMPONENTS torch" ${CMAKE_COMMAND} --build "${prefix}-demo-torch")
    step("run the find_package demo with COMPONENTS torch" "${prefix}-demo-torch/flopmeter_demo" "${model}"
         "${prefix}-demo-torch/demo.jsonl")
  endif()
  # A component this build does not have is reported, not silently absent.
  if(NOT have_torch)
    execute_process(COMMAND ${CMAKE_COMMAND} -S "${demo_source}" -B "${prefix}-demo-torch"
                            "-DCMAKE_PREFIX_PATH=${prefix}" -DDEMO_COMPONENTS=torch ${compiler_args}
                    RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(result EQUAL 0 OR NOT "${out}${err}" MATCHES "built without LibTorch")
      message(FATAL_ERROR "packaging test (${MODE}): find_package(flopmeter COMPONENTS torch) against a build "
                          "without LibTorch did not fail with a message saying so:\n${out}${err}")
    endif()
  endif()
endfunction()

if(MODE STREQUAL "find_package")
  find_package_consumer("${FLOPMETER_BUILD_DIR}" "${WORK_DIR}/prefix" ${HAVE_TORCH} ${HAVE_NCCL})
elseif(MODE STREQUAL "pkg_config")
  find_program(PKG_CONFIG pkg-config REQUIRED)
  if(NOT C_COMPILER)
    set(C_COMPILER cc)
  endif()
  step("install" ${CMAKE_COMMAND} --install "${FLOPMETER_BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
  check_installed("${WORK_DIR}/prefix" ${HAVE_TORCH} ${HAVE_NCCL})
  set(ENV{PKG_CONFIG_PATH} "${installed_libdir}/pkgconfig")
  step("pkg-config --cflags" ${PKG_CONFIG} --cflags flopmeter)
  string(STRIP "${step_output}" cflags)
  step("pkg-config --libs" ${PKG_CONFIG} --libs flopmeter)
  string(STRIP "${step_output}" libs)
  step("pkg-config --variable=libdir" ${PKG_CONFIG} --variable=libdir flopmeter)
  string(STRIP "${step_output}" pc_libdir)
  get_filename_component(pc_libdir "${pc_libdir}" REALPATH)
  get_filename_component(real_libdir "${installed_libdir}" REALPATH)
  if(NOT pc_libdir STREQUAL real_libdir)
    message(FATAL_ERROR "packaging test (pkg_config): flopmeter.pc's libdir is ${pc_libdir}, the library is in "
                        "${real_libdir}")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  separate_arguments(libs UNIX_COMMAND "${libs}")
  step("compile c_consumer.c as C99" ${C_COMPILER} -std=c99 -Wall -Wextra -Werror -pedantic
       "${CMAKE_CURRENT_LIST_DIR}/c_consumer.c" -o "${WORK_DIR}/c_consumer" ${cflags} ${libs}
       "-Wl,-rpath,${installed_libdir}")
  step("run c_consumer on the installed example.toml" "${WORK_DIR}/c_consumer"
       "${WORK_DIR}/prefix/share/flopmeter/plugin_configs/example.toml")
  expect_no_cuda("${WORK_DIR}/c_consumer")
elseif(MODE STREQUAL "add_subdirectory")
  set(build "${WORK_DIR}/build")
  # Debug at -O0 without debug info: the test is that the embedded build configures, links and runs, and this
  # compiles flopmeter's core in about half the time -O2 takes on the 2-core CI machine.
  step("configure the add_subdirectory consumer" ${CMAKE_COMMAND}
       -S "${CMAKE_CURRENT_LIST_DIR}/add_subdirectory_consumer" -B "${build}"
       "-DFLOPMETER_SOURCE_DIR=${FLOPMETER_SOURCE_DIR}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0
       ${compiler_args}
       -DFLOPMETER_WITH_TORCH=OFF -DFLOPMETER_WITH_NCCL=OFF -DFLOPMETER_INSTALL=ON)
  step("build the add_subdirectory consumer" ${CMAKE_COMMAND} --build "${build}" --parallel 2)
  step("run the add_subdirectory consumer" "${build}/consumer" "${model}" "${WORK_DIR}/consumer.jsonl")
  expect_no_cuda("${build}/consumer")
  # The same embedded build, installed: find_package without LibTorch and NCCL.
  find_package_consumer("${build}" "${WORK_DIR}/prefix" OFF OFF)
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE '${MODE}'")
endif()
message("packaging test (${MODE}): OK")
