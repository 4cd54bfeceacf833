# Detects the CUDA toolkit, NCCL and cuDNN. TRAINBENCH_WITH_CUDA defaults to what was found; forcing it ON
# without a toolkit is a configuration error naming what to install or which variable to set.
include(CheckLanguage)

# Finds <PREFIX>_INCLUDE_DIR (holding `header`) and <PREFIX>_LIBRARY (lib`library`.so) next to the CUDA
# toolkit or under <PREFIX>_ROOT (cache variable or environment); stops with a message naming that variable.
function(trainbench_find_cuda_library prefix header library)
  set(${prefix}_ROOT "" CACHE PATH "Folder holding ${prefix} (include/${header}, lib/lib${library}.so)")
  find_path(${prefix}_INCLUDE_DIR ${header} HINTS ${${prefix}_ROOT} ENV ${prefix}_ROOT ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(${prefix}_LIBRARY ${library} HINTS ${${prefix}_ROOT} ENV ${prefix}_ROOT ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NOT ${prefix}_INCLUDE_DIR OR NOT ${prefix}_LIBRARY)
    message(FATAL_ERROR "${prefix} not found: set ${prefix}_ROOT to the folder holding include/${header} and "
                        "lib/lib${library}.so, or configure with -DTRAINBENCH_WITH_CUDA=OFF")
  endif()
endfunction()
check_language(CUDA)
set(_tb_cuda_found OFF)
if(CMAKE_CUDA_COMPILER)
  set(_tb_cuda_found ON)
endif()
option(TRAINBENCH_WITH_CUDA "Build the CUDA/NCCL backend" ${_tb_cuda_found})

if(TRAINBENCH_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "TRAINBENCH_WITH_CUDA=ON but no CUDA compiler was found: install the CUDA toolkit or "
                        "set CMAKE_CUDA_COMPILER to nvcc's path")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # Hopper by default (H100/H200); override with -DCMAKE_CUDA_ARCHITECTURES=80 etc.
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # CMake 3.25 knows no CUDA20 dialect flag for nvcc: without these, any target with a .cu fails at generation.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  find_package(CUDAToolkit REQUIRED)

  trainbench_find_cuda_library(NCCL nccl.h nccl)
  trainbench_find_cuda_library(CUDNN cudnn.h cudnn)
  # cuDNN C++ frontend (header-only; launch/setup fetches it from PyPI into .deps/). Used by the CUDA
  # transformer's attention; the rest of the CUDA backend builds without it.
  find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend/include
            DOC "Folder holding cudnn_frontend.h (the include/ folder of the nvidia-cudnn-frontend wheel)")
  if(CUDNN_FRONTEND_INCLUDE_DIR)
    message(STATUS "trainbench: cuDNN frontend headers in ${CUDNN_FRONTEND_INCLUDE_DIR}")
  else()
    message(STATUS "trainbench: cuDNN frontend headers not found: run launch/setup, or set CUDNN_FRONTEND_INCLUDE_DIR")
  endif()

  add_library(trainbench_nccl INTERFACE)
  target_include_directories(trainbench_nccl INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(trainbench_nccl INTERFACE ${NCCL_LIBRARY})
  add_library(trainbench_cudnn INTERFACE)
  target_include_directories(trainbench_cudnn INTERFACE ${CUDNN_INCLUDE_DIR})
  target_link_libraries(trainbench_cudnn INTERFACE ${CUDNN_LIBRARY})
  message(STATUS "trainbench: CUDA backend ON (CUDA ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, "
                 "NCCL ${NCCL_LIBRARY}, cuDNN ${CUDNN_LIBRARY})")
else()
  message(STATUS "trainbench: CUDA backend OFF (stubs report \"built without CUDA\")")
endif()
