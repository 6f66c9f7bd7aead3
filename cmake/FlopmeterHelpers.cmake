# Helpers shared by flopmeter's CMake files. Flags go on our own targets only (target_* commands), never
# globally, so a trainer that adds flopmeter as a subdirectory keeps its own warning settings.

function(flopmeter_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
    if(FLOPMETER_WERROR)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(FLOPMETER_SANITIZE)
      target_compile_options(${target} PRIVATE -fsanitize=${FLOPMETER_SANITIZE} -fno-omit-frame-pointer
                                               -fno-sanitize-recover=all)
      target_link_options(${target} PRIVATE -fsanitize=${FLOPMETER_SANITIZE})
    endif()
  endif()
endfunction()

# Torch: found through the Debian libtorch-dev package (or any LibTorch via Torch_DIR / CMAKE_PREFIX_PATH).
macro(flopmeter_find_torch)
  set(FLOPMETER_HAVE_TORCH OFF)
  if(NOT FLOPMETER_WITH_TORCH STREQUAL "OFF")
    if(FLOPMETER_WITH_TORCH STREQUAL "ON")
      find_package(Torch REQUIRED)
    else()
      find_package(Torch QUIET)
    endif()
    if(Torch_FOUND OR TORCH_FOUND)
      set(FLOPMETER_HAVE_TORCH ON)
      flopmeter_own_torch_libraries()
      flopmeter_check_torch_abi()
      # A PyPI LibTorch finds its CUDA libraries (NCCL, cuDNN, ...) through its own RPATH, in
      # site-packages/nvidia/*/lib. The linker looks first in the link line's -rpath directories, which LibTorch's
      # CUDA targets fill with the system toolkit's (/usr/local/cuda/lib), where an older NCCL may sit
      # ("libtorch_cuda.so: undefined reference to `ncclCommResume'"); -rpath-link directories come before those.
      file(GLOB flopmeter_torch_nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
      foreach(dir IN LISTS flopmeter_torch_nvidia_libs)
        if(IS_DIRECTORY "${dir}")
          get_filename_component(dir "${dir}" ABSOLUTE)
          list(APPEND TORCH_LIBRARIES "-Wl,-rpath-link,${dir}")
        endif()
      endforeach()
      # ProcessGroupGloo.hpp includes Gloo's own headers, which neither libtorch-dev nor the PyPI wheel ships
      # (Debian: libgloo-dev).
      find_path(FLOPMETER_GLOO_INCLUDE_DIR gloo/algorithm.h)
      if(FLOPMETER_GLOO_INCLUDE_DIR)
        # Every LibTorch user here takes TORCH_INCLUDE_DIRS; Gloo's headers may live in a prefix of their own
        # (CMAKE_PREFIX_PATH; scripts/gpu_check.sh unpacks them there). /usr/include is dropped by CMake.
        list(APPEND TORCH_INCLUDE_DIRS "${FLOPMETER_GLOO_INCLUDE_DIR}")
      endif()
    endif()
  endif()
  if(FLOPMETER_HAVE_TORCH)
    message(STATUS "flopmeter: LibTorch parts ON (LibTorch ${Torch_VERSION} in ${TORCH_INSTALL_PREFIX})")
  else()
    message(STATUS "flopmeter: LibTorch parts OFF")
  endif()
endmacro()

# LibTorch's CMake config finds libc10 (and libc10_cuda, libkineto) with find_library(... PATHS <its prefix>/lib),
# which searches the system's library directories FIRST: with Debian's libtorch-dev installed, a PyPI LibTorch
# 2.x would link Debian's libc10.so.1.13 next to its own libc10.so, and its programs abort at start
# ("next_functionality_ <= iterator::end_iter_mask_val INTERNAL ASSERT FAILED at ./c10/core/DispatchKeySet.cpp").
# This puts the LibTorch's own copy in TORCH_LIBRARIES instead of any found outside its prefix.
macro(flopmeter_own_torch_libraries)
  foreach(flopmeter_var c10_LIBRARY C10_CUDA_LIBRARY kineto_LIBRARY)
    set(flopmeter_found "${${flopmeter_var}}")
    if(flopmeter_found AND EXISTS "${flopmeter_found}")
      string(FIND "${flopmeter_found}" "${TORCH_INSTALL_PREFIX}/" flopmeter_at)
      if(NOT flopmeter_at EQUAL 0)
        string(REGEX REPLACE "_LIBRARY$" "" flopmeter_name "${flopmeter_var}")
        string(TOLOWER "${flopmeter_name}" flopmeter_name)
        find_library(FLOPMETER_OWN_${flopmeter_var} ${flopmeter_name} PATHS "${TORCH_INSTALL_PREFIX}/lib"
                     NO_DEFAULT_PATH)
        if(FLOPMETER_OWN_${flopmeter_var})
          set(flopmeter_libraries "")
          foreach(flopmeter_lib IN LISTS TORCH_LIBRARIES)
            if(flopmeter_lib STREQUAL flopmeter_found)
              set(flopmeter_lib "${FLOPMETER_OWN_${flopmeter_var}}")
            endif()
            list(APPEND flopmeter_libraries "${flopmeter_lib}")
          endforeach()
          set(TORCH_LIBRARIES "${flopmeter_libraries}")
          set(${flopmeter_var} "${FLOPMETER_OWN_${flopmeter_var}}")
          message(STATUS "flopmeter: LibTorch's config found ${flopmeter_found}, outside ${TORCH_INSTALL_PREFIX}; "
                         "using ${FLOPMETER_OWN_${flopmeter_var}}")
        endif()
      endif()
    endif()
  endforeach()
endmacro()

# The C++ ABI of the LibTorch found must be the one everything else in flopmeter uses: std::string crosses
# the LibTorch boundary (ProcessGroup::getBackendName, TCPStore's host, c10::Error messages ...), and the
# same targets link Debian's spdlog and toml++, built with the new (C++11, _GLIBCXX_USE_CXX11_ABI=1) ABI.
# LibTorch builds with the old ABI (PyPI wheels before 2.7, the "pre-cxx11 ABI" LibTorch zips) export old-ABI
# std::string symbols and put -D_GLIBCXX_USE_CXX11_ABI=0 on every target that links them; spdlog's then do
# not resolve, and the build would fail only at link time with undefined references (or worse, at run time).
# This stops at configure time instead: first by the flag LibTorch's CMake config exports, then by linking a
# probe that calls a LibTorch function taking a std::string (c10::Device's parsing constructor).
function(flopmeter_check_torch_abi)
  set(hint "flopmeter links spdlog and toml++ (new C++11 ABI) into the same library as LibTorch; use a LibTorch \
built with the new ABI: Debian's libtorch-dev, a PyPI torch >= 2.7 (its torch/share/cmake), or a \
'cxx11 ABI' LibTorch download. Or configure with -DFLOPMETER_WITH_TORCH=OFF to build flopmeter without its \
LibTorch parts (the C ABI plugin and the C++ API work without them).")
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=0")
    message(FATAL_ERROR "flopmeter: the LibTorch in ${TORCH_INSTALL_PREFIX} (${Torch_VERSION}) uses the old "
                        "C++ ABI (its CMake config sets TORCH_CXX_FLAGS='${TORCH_CXX_FLAGS}'). ${hint}")
  endif()
  if(c10_LIBRARY)
    set(c10 "${c10_LIBRARY}")
  else()
    find_library(FLOPMETER_C10_LIBRARY c10 HINTS "${TORCH_INSTALL_PREFIX}/lib")
    set(c10 "${FLOPMETER_C10_LIBRARY}")
  endif()
  if(NOT c10)
    message(STATUS "flopmeter: LibTorch ABI probe skipped (libc10 not found)")
    return()
  endif()
  if(FLOPMETER_TORCH_ABI_OK STREQUAL c10)
    return()  # probed before, in an earlier configure
  endif()
  set(standard 17)
  if(TARGET torch)
    get_target_property(features torch INTERFACE_COMPILE_FEATURES)
    if(features MATCHES "cxx_std_20")
      set(standard 20)
    endif()
  endif()
  set(probe_dir "${CMAKE_BINARY_DIR}/CMakeFiles/flopmeter_torch_abi")
  file(WRITE "${probe_dir}/probe.cpp"
       "#include <c10/core/Device.h>\n#include <string>\n"
       "int main(int argc, char**) { c10::Device d(std::string(argc > 5 ? \"cuda:1\" : \"cpu\")); return d.is_cpu() ? 0 : 1; }\n")
  foreach(abi 1 0)
    try_compile(linked_${abi} "${probe_dir}/build_${abi}" SOURCES "${probe_dir}/probe.cpp"
                CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${TORCH_INCLUDE_DIRS}"
                COMPILE_DEFINITIONS -D_GLIBCXX_USE_CXX11_ABI=${abi}
                LINK_LIBRARIES "${c10}"
                CXX_STANDARD ${standard}
                OUTPUT_VARIABLE output_${abi})
    if(linked_1)
      break()
    endif()
  endforeach()
  if(linked_1)
    set(FLOPMETER_TORCH_ABI_OK "${c10}" CACHE INTERNAL "The libc10 found to use the new C++ ABI")
    message(STATUS "flopmeter: LibTorch C++ ABI: new (_GLIBCXX_USE_CXX11_ABI=1), as spdlog and toml++")
  elseif(linked_0)
    message(FATAL_ERROR "flopmeter: the LibTorch in ${TORCH_INSTALL_PREFIX} (${Torch_VERSION}) was built with "
                        "the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0): ${c10} exports c10::Device(std::string) "
                        "only with the old std::string. ${hint}")
  else()
    message(WARNING "flopmeter: could not determine LibTorch's C++ ABI (the probe linking ${c10} failed both "
                    "ways); continuing. Probe output:\n${output_1}")
  endif()
endfunction()

# NCCL + CUDA runtime: from /usr/local/cuda (or CUDAToolkit_ROOT). Compiled whenever both are found.
macro(flopmeter_find_nccl)
  set(FLOPMETER_HAVE_NCCL OFF)
  if(NOT FLOPMETER_WITH_NCCL STREQUAL "OFF")
    if(EXISTS /usr/local/cuda AND NOT CUDAToolkit_ROOT)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
    # A PyPI torch loads the NCCL of its nvidia-nccl-* wheel (site-packages/nvidia/nccl). flopmeter must use
    # that same one: a process maps one libnccl.so.2, and if ours (say /usr/local/cuda's) is loaded first,
    # libtorch_cuda fails to resolve the newer NCCL symbols it needs (e.g. "undefined symbol: ncclCommResume").
    set(torch_nccl "")
    if(FLOPMETER_HAVE_TORCH AND TORCH_INSTALL_PREFIX AND EXISTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include/nccl.h")
      get_filename_component(torch_nccl "${TORCH_INSTALL_PREFIX}/../nvidia/nccl" ABSOLUTE)
    endif()
    find_path(FLOPMETER_NCCL_INCLUDE_DIR nccl.h
              HINTS ${torch_nccl}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
    find_library(FLOPMETER_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
                 HINTS ${torch_nccl}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
    if(CUDAToolkit_FOUND AND FLOPMETER_NCCL_INCLUDE_DIR AND FLOPMETER_NCCL_LIBRARY)
      set(FLOPMETER_HAVE_NCCL ON)
    elseif(FLOPMETER_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLOPMETER_WITH_NCCL=ON but CUDA runtime or NCCL was not found")
    endif()
  endif()
  message(STATUS "flopmeter: raw NCCL adapter ${FLOPMETER_HAVE_NCCL}")
endmacro()

# Hidden visibility for a target compiled into a flopmeter shared library: only what the public headers
# declare inside `namespace flopmeter FLOPMETER_EXPORT { ... }` and the C ABI's FLOPMETER_EXPORT functions are
# exported (plugin/CMakeLists.txt).
function(flopmeter_hidden_symbols target)
  set_target_properties(${target} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()
