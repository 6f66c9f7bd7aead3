# ctest checks of a built libflopmeter.so (tests/CMakeLists.txt):
#   cmake -DCHECK=symbols -DLIBRARY=<libflopmeter.so> [-DNCCL_LIBRARY=<libflopmeter_nccl.so>] -P check_library.cmake
#     packaging_exported_symbols: `nm -D --defined-only -C` lists the public API and the C ABI, and no
#     flopmeter::detail::, toml++, fmt or spdlog symbol (hidden visibility, plugin/CMakeLists.txt).
#   cmake -DCHECK=needed -DLIBRARY=<libflopmeter.so> -P check_library.cmake
#     packaging_needs_no_cuda: readelf's NEEDED entries of libflopmeter.so name no CUDA or NCCL library (the raw
#     NCCL adapter is libflopmeter_nccl.so).
foreach(var CHECK LIBRARY)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_library.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "check_library.cmake: '${ARGN}' failed (${result}): ${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

if(CHECK STREQUAL "symbols")
  find_program(NM nm REQUIRED)
  run(symbols ${NM} -D --defined-only -C "${LIBRARY}")
  string(REPLACE "\n" ";" lines "${symbols}")
  set(leaks "")
  foreach(line IN LISTS lines)
    # Leaked: anything of flopmeter::detail, and any symbol of (or instantiated over) toml++, fmt or spdlog,
    # except the public functions that take a spdlog logger as an argument.
    string(REGEX REPLACE "^[0-9a-f]+ [A-Za-z] " "" name "${line}")
    if(name MATCHES "flopmeter::detail::" OR name MATCHES "(^|[^A-Za-z_])(toml|fmt)::" OR
       name MATCHES "^((typeinfo|typeinfo name|vtable|VTT|guard variable) for )?spdlog::")
      string(APPEND leaks "\n  ${name}")
    endif()
  endforeach()
  if(leaks)
    message(FATAL_ERROR "${LIBRARY} exports symbols outside the public API:${leaks}")
  endif()
  # The C ABI and a sample of the C++ API must be there.
  foreach(expected flopmeter_abi_version flopmeter_create flopmeter_create_gloo_from_env flopmeter_on_microbatch
                   flopmeter_on_log flopmeter_flush flopmeter_destroy flopmeter_health flopmeter_status_string
                   flopmeter_set_metrics_callback "flopmeter::throughput_plugin::create\\("
                   "flopmeter::load_model_spec\\(" "flopmeter::make_local_communicator\\(\\)"
                   "flopmeter::compute_coefficients\\(" "typeinfo for flopmeter::error")
    if(NOT symbols MATCHES "[0-9a-f]+ [TVWR] ${expected}")
      message(FATAL_ERROR "${LIBRARY} does not export ${expected}")
    endif()
  endforeach()
  if(NCCL_LIBRARY)
    run(nccl_symbols ${NM} -D --defined-only -C "${NCCL_LIBRARY}")
    if(NOT nccl_symbols MATCHES "T flopmeter::make_nccl_communicator\\(")
      message(FATAL_ERROR "${NCCL_LIBRARY} does not export flopmeter::make_nccl_communicator")
    endif()
  endif()
  message("${LIBRARY}: exports the public API and the C ABI only")
elseif(CHECK STREQUAL "needed")
  find_program(READELF readelf REQUIRED)
  run(dynamic ${READELF} -d "${LIBRARY}")
  string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${dynamic}")
  message("${LIBRARY} needs: ${needed}")
  foreach(entry IN LISTS needed)
    if(entry MATCHES "\\[lib(cuda|cudart|nccl|cublas|cublasLt|nvrtc|cudnn|nvToolsExt)[^]]*\\.so")
      message(FATAL_ERROR "${LIBRARY} needs a CUDA library (${entry}): a CPU-only trainer could not load it")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "check_library.cmake: unknown CHECK '${CHECK}'")
endif()
