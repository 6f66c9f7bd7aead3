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
      # ProcessGroupGloo.hpp includes Gloo's own headers, which libtorch-dev does not pull in (libgloo-dev).
      find_path(FLOPMETER_GLOO_INCLUDE_DIR gloo/algorithm.h)
    endif()
  endif()
  message(STATUS "flopmeter: LibTorch parts ${FLOPMETER_HAVE_TORCH}")
endmacro()

# NCCL + CUDA runtime: from /usr/local/cuda (or CUDAToolkit_ROOT). Compiled whenever both are found.
macro(flopmeter_find_nccl)
  set(FLOPMETER_HAVE_NCCL OFF)
  if(NOT FLOPMETER_WITH_NCCL STREQUAL "OFF")
    if(EXISTS /usr/local/cuda AND NOT CUDAToolkit_ROOT)
      set(CUDAToolkit_ROOT /usr/local/cuda)
    endif()
    find_package(CUDAToolkit QUIET)
    find_path(FLOPMETER_NCCL_INCLUDE_DIR nccl.h
              HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
    find_library(FLOPMETER_NCCL_LIBRARY NAMES nccl
                 HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
    if(CUDAToolkit_FOUND AND FLOPMETER_NCCL_INCLUDE_DIR AND FLOPMETER_NCCL_LIBRARY)
      set(FLOPMETER_HAVE_NCCL ON)
    elseif(FLOPMETER_WITH_NCCL STREQUAL "ON")
      message(FATAL_ERROR "FLOPMETER_WITH_NCCL=ON but CUDA runtime or NCCL was not found")
    endif()
  endif()
  message(STATUS "flopmeter: raw NCCL adapter ${FLOPMETER_HAVE_NCCL}")
endmacro()
