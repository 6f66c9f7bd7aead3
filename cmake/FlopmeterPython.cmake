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
