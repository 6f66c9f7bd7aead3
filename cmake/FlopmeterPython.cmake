# Install rules of the Python package (FLOPMETER_PYTHON, set by pyproject.toml through scikit-build-core):
# the wheel's flopmeter/ holds
#   _lib/libflopmeter.so*             the core library, built without LibTorch (FLOPMETER_WITH_TORCH=OFF)
#   _bin/flopmeter                    the command-line tool (`python -m flopmeter`)
#   share/flopmeter/model_configs/    the shipped model configs, where the tool looks beside its ../share
#   share/flopmeter/plugin_configs/   the example plugin config (its ../model_configs path resolves there)
# The Python sources come from python/flopmeter (wheel.packages).
if(FLOPMETER_HAVE_TORCH)
  message(FATAL_ERROR "FLOPMETER_PYTHON=ON needs FLOPMETER_WITH_TORCH=OFF: the package must not load a LibTorch "
                      "into a process that holds the trainer's own torch")
endif()
set(FLOPMETER_PY_DIR flopmeter)
install(TARGETS flopmeter LIBRARY DESTINATION ${FLOPMETER_PY_DIR}/_lib NAMELINK_SKIP)
set_target_properties(flopmeter_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../_lib")
install(TARGETS flopmeter_cli RUNTIME DESTINATION ${FLOPMETER_PY_DIR}/_bin)
install(DIRECTORY model_configs/ DESTINATION ${FLOPMETER_PY_DIR}/share/flopmeter/model_configs)
install(DIRECTORY plugin_configs/ DESTINATION ${FLOPMETER_PY_DIR}/share/flopmeter/plugin_configs)

# flopmeter/_fastpath: Meter.on_microbatch's hot path in C (python/flopmeter/_fastpath.c). It needs Python's
# headers (Debian: python3-dev) and nothing else: no torch headers, no link to libflopmeter (it calls the
# function address that ctypes resolved, so both use one copy of the library). Without the headers the package
# still builds and works; on_microbatch then takes its ctypes fast path (flopmeter._batch.NATIVE_FAST_PATH
# says which the installed package has).
find_package(Python COMPONENTS Interpreter Development.Module)
if(Python_Development.Module_FOUND)
  enable_language(C)
  Python_add_library(flopmeter_fastpath MODULE WITH_SOABI python/flopmeter/_fastpath.c)
  set_target_properties(flopmeter_fastpath PROPERTIES OUTPUT_NAME _fastpath C_STANDARD 99 C_VISIBILITY_PRESET hidden)
  target_include_directories(flopmeter_fastpath PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/include)
  add_dependencies(flopmeter_fastpath flopmeter)  # export.h is generated with the library
  install(TARGETS flopmeter_fastpath LIBRARY DESTINATION ${FLOPMETER_PY_DIR})
else()
  message(WARNING "flopmeter: Python's development headers were not found (Debian: python3-dev); the package "
                  "is built without its C fast path for on_microbatch (the ctypes one is used)")
endif()
