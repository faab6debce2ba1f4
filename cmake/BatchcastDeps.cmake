# Finds every third-party dependency once, as imported targets.
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(HDF5 REQUIRED COMPONENTS C)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
pkg_check_modules(LIBJPEG REQUIRED IMPORTED_TARGET libjpeg)  # the libjpeg API: crop decoding
pkg_check_modules(SPNG REQUIRED IMPORTED_TARGET spng)
find_package(ZLIB REQUIRED)                                     # IDX .gz files (data)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)    # dataset checksums (data)

# OpenCV's core + imgproc only (resampling); Debian ships no CMake config without libopencv-dev.
find_path(OPENCV_INCLUDE_DIR opencv2/imgproc.hpp PATH_SUFFIXES opencv4 REQUIRED)
find_library(OPENCV_CORE_LIB opencv_core REQUIRED)
find_library(OPENCV_IMGPROC_LIB opencv_imgproc REQUIRED)
add_library(bc_opencv INTERFACE)
target_include_directories(bc_opencv SYSTEM INTERFACE ${OPENCV_INCLUDE_DIR})
target_link_libraries(bc_opencv INTERFACE ${OPENCV_IMGPROC_LIB} ${OPENCV_CORE_LIB})

add_library(bc_hdf5 INTERFACE)
target_include_directories(bc_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(bc_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(bc_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

# CUDA is optional: with /usr/local/cuda the CUDA sources compile and link for sm_80 and sm_90.
set(BATCHCAST_HAVE_CUDA OFF)
if(NOT BATCHCAST_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    # CMake 3.25 knows no nvcc flag for CUDA20: kernels (*.cu) are C++17 and include only
    # their own plain headers (docs/gpu.md); host code stays C++20.
    if(NOT DEFINED CMAKE_CUDA_STANDARD)
      set(CMAKE_CUDA_STANDARD 17)
    endif()
    # The CUDA plane is loaded at run time (docs/gpu.md "One build for CPU and GPU nodes"):
    # the CUDA runtime is linked statically (it opens the driver, libcuda.so.1, itself) and
    # NCCL is dlopen'ed (transport/cuda/nccl_loader.cc), so only nccl.h is needed here and
    # libbatchcast.so has no CUDA or NCCL load-time dependency.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(NCCL_INCLUDE_DIR)
      set(BATCHCAST_HAVE_CUDA ON)
    elseif(BATCHCAST_CUDA STREQUAL "ON")
      message(FATAL_ERROR "BATCHCAST_CUDA=ON but nccl.h was not found next to ${CUDAToolkit_INCLUDE_DIRS}")
    endif()
  elseif(BATCHCAST_CUDA STREQUAL "ON")
    message(FATAL_ERROR "BATCHCAST_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()
message(STATUS "Batchcast: CUDA data plane ${BATCHCAST_HAVE_CUDA}")

set(BATCHCAST_HAVE_TORCH OFF)
if(NOT BATCHCAST_TORCH STREQUAL "OFF")
  # A CUDA LibTorch (a pip wheel's) sets CMAKE_CUDA_ARCHITECTURES to OFF in our scope ("not
  # compatible") and appends its own -gencode list to CMAKE_CUDA_FLAGS, down to compute_50,
  # which CUDA 13's nvcc no longer has: our kernels keep our architectures and flags.
  set(bc_cuda_archs "${CMAKE_CUDA_ARCHITECTURES}")
  set(bc_cuda_flags "${CMAKE_CUDA_FLAGS}")
  if(BATCHCAST_TORCH STREQUAL "ON")
    find_package(Torch REQUIRED)
  else()
    find_package(Torch QUIET)
  endif()
  if(BATCHCAST_HAVE_CUDA)
    set(CMAKE_CUDA_ARCHITECTURES "${bc_cuda_archs}")
    set(CMAKE_CUDA_FLAGS "${bc_cuda_flags}")
  endif()
  if(Torch_FOUND)
    set(BATCHCAST_HAVE_TORCH ON)
    # A pip wheel's TorchConfig (TORCH_INSTALL_PREFIX: .../site-packages/torch) looks for its
    # libraries with plain find_library calls: with Debian's libtorch-dev installed too, it
    # takes /usr/lib's libtorch.so of another version, and the build mixes two LibTorches.
    get_filename_component(bc_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
    if(TORCH_INSTALL_PREFIX AND NOT bc_torch_lib_dir MATCHES "^${TORCH_INSTALL_PREFIX}")
      message(FATAL_ERROR "LibTorch of ${TORCH_INSTALL_PREFIX} found its library at "
        "${TORCH_LIBRARY}, another LibTorch's; add ${TORCH_INSTALL_PREFIX} to CMAKE_PREFIX_PATH "
        "(next to its share/cmake) in a fresh build directory")
    endif()
    message(STATUS "Batchcast: LibTorch ${Torch_VERSION} (${TORCH_LIBRARY})")
    # bc_libtorch: LibTorch for our own targets. LibTorch 2.x ships fmt (12.x) headers in its
    # include directory, which would shadow the system fmt (9.x) our code is compiled and
    # linked against (libfmt.so.9): the targets search a directory holding only the system's
    # fmt first (an -I directory comes before LibTorch's -isystem ones).
    add_library(bc_libtorch INTERFACE)
    find_path(BC_SYSTEM_FMT_DIR fmt/format.h REQUIRED
              PATHS ${fmt_DIR}/../../../../include /usr/include NO_DEFAULT_PATH)
    file(REAL_PATH "${TORCH_INSTALL_PREFIX}/include/fmt" bc_torch_fmt)
    file(REAL_PATH "${BC_SYSTEM_FMT_DIR}/fmt" bc_system_fmt)
    if(EXISTS "${bc_torch_fmt}" AND NOT bc_torch_fmt STREQUAL bc_system_fmt)  # not Debian's
      set(bc_fmt_first ${PROJECT_BINARY_DIR}/fmt-before-libtorch)
      file(MAKE_DIRECTORY ${bc_fmt_first})
      file(CREATE_LINK ${BC_SYSTEM_FMT_DIR}/fmt ${bc_fmt_first}/fmt SYMBOLIC)
      target_include_directories(bc_libtorch INTERFACE ${bc_fmt_first})
    endif()
    target_link_libraries(bc_libtorch INTERFACE torch)
    # A CUDA pip wheel loads its own NVIDIA libraries (site-packages/nvidia/*/lib, through its
    # DT_RPATH at run time). The static linker resolves libtorch_cuda.so's NEEDED entries
    # along our -rpath first, where /usr/local/cuda's older libnccl.so.2 lacks symbols the
    # wheel's NCCL has (ncclCommGrow...): point it at the wheel's copies first.
    file(GLOB bc_wheel_nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
    if(bc_wheel_nvidia_libs)
      list(JOIN bc_wheel_nvidia_libs ":" bc_wheel_nvidia_path)
      target_link_options(bc_libtorch INTERFACE "LINKER:-rpath-link,${bc_wheel_nvidia_path}")
    endif()
  endif()
endif()
message(STATUS "Batchcast: LibTorch target ${BATCHCAST_HAVE_TORCH}")
