# flopmeter's install rules (FLOPMETER_INSTALL; included from the top-level CMakeLists.txt).
#
#   <prefix>/lib/libflopmeter.so                  flopmeter::flopmeter: the C++ API and the C ABI
#   <prefix>/lib/libflopmeter_nccl.so             flopmeter::nccl (when CUDA and NCCL were found): the raw NCCL
#                                                 adapter, the only part that needs CUDA at run time
#   <prefix>/include/flopmeter/*.h                the public headers of the parts that were built (c10d.h and
#                                                 torch.h only with LibTorch, nccl.h only with NCCL), export.h
#   <prefix>/lib/cmake/flopmeter/                 find_package(flopmeter [COMPONENTS torch nccl])
#   <prefix>/lib/pkgconfig/flopmeter.pc           pkg-config --cflags --libs flopmeter (non-CMake trainers)
#   <prefix>/bin/flopmeter                        the command-line tool
#   <prefix>/share/flopmeter/model_configs/       model configs and SCHEMA.md
#   <prefix>/share/flopmeter/plugin_configs/      example.toml and SCHEMA.md (its model path is relative:
#                                                 ../model_configs/, which holds here too)
#   <prefix>/share/flopmeter/examples/c10d_trainer/  the README's c10d trainer (source, CMakeLists, config)
include(CMakePackageConfigHelpers)

set(flopmeter_header_excludes "")
if(NOT FLOPMETER_HAVE_TORCH)
  list(APPEND flopmeter_header_excludes PATTERN "c10d.h" EXCLUDE PATTERN "torch.h" EXCLUDE)
endif()
if(NOT FLOPMETER_HAVE_NCCL)
  list(APPEND flopmeter_header_excludes PATTERN "nccl.h" EXCLUDE)
endif()
install(DIRECTORY include/flopmeter DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h"
        ${flopmeter_header_excludes})
install(FILES ${PROJECT_BINARY_DIR}/include/flopmeter/export.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flopmeter)

set(flopmeter_installed_targets flopmeter flopmeter_cli)
if(FLOPMETER_HAVE_NCCL)
  list(APPEND flopmeter_installed_targets flopmeter_nccl)
endif()
install(TARGETS ${flopmeter_installed_targets} EXPORT flopmeterTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # include dirs: the targets' INSTALL_INTERFACE (once)
install(EXPORT flopmeterTargets NAMESPACE flopmeter:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flopmeter)

# The package config knows which optional parts this build has (FLOPMETER_HAVE_TORCH, FLOPMETER_HAVE_NCCL).
configure_package_config_file(cmake/flopmeterConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flopmeterConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flopmeter)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flopmeterConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flopmeterConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flopmeterConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flopmeter)

# pkg-config: the C++ API and the C ABI (libflopmeter.so). The prefix is found from the .pc file's own
# directory (${pcfiledir}, pkg-config and pkgconf), so `cmake --install --prefix`, DESTDIR staging and a moved
# tree all work.
file(RELATIVE_PATH flopmeter_pc_prefix_from_pcfiledir "${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig"
     "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/$" "" flopmeter_pc_prefix_from_pcfiledir "${flopmeter_pc_prefix_from_pcfiledir}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(flopmeter_pc_libdir "${CMAKE_INSTALL_LIBDIR}")
else()
  set(flopmeter_pc_libdir "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(flopmeter_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(flopmeter_pc_includedir "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/flopmeter.pc.in ${CMAKE_CURRENT_BINARY_DIR}/flopmeter.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flopmeter.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY model_configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/flopmeter/model_configs)
install(FILES plugin_configs/example.toml plugin_configs/SCHEMA.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/flopmeter/plugin_configs)
# The README's c10d path as a complete program, to copy from: its plugin config names
# ../../model_configs/tiny_vlm.toml, which resolves to the model configs installed above.
install(FILES examples/c10d_trainer/CMakeLists.txt examples/c10d_trainer/main.cpp examples/c10d_trainer/flopmeter.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/flopmeter/examples/c10d_trainer)
