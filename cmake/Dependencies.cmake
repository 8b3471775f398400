# All third-party dependencies, found once. Everything comes from Debian
# packages (scripts/setup.sh installs them); CUDA is optional.
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL) # HMAC of the control-plane handshake; SSL: the [tls] file check
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET libfabric>=1.17)
find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED) # used header-only (config/CMakeLists.txt)

# CAF 0.17.6 ships no CMake config and no pkg-config file. Found again at
# every configure: a cached path from another CAF root (Debian's, or an older
# source build) must not survive a change of LAYERSTREAM_CAF_ROOT.
unset(CAF_INCLUDE_DIR CACHE)
unset(CAF_CORE_LIBRARY CACHE)
unset(CAF_IO_LIBRARY CACHE)
unset(CAF_OPENSSL_LIBRARY CACHE)
if(LAYERSTREAM_SANITIZE STREQUAL "thread" AND NOT LAYERSTREAM_CAF_ROOT)
  message(FATAL_ERROR "LAYERSTREAM_SANITIZE=thread needs LAYERSTREAM_CAF_ROOT: a CAF built with "
                      "-fsanitize=thread (scripts/build_caf_tsan.sh prints its prefix); against "
                      "Debian's uninstrumented libcaf_core TSan reports races inside CAF")
endif()
if(LAYERSTREAM_CAF_ROOT)
  # A source build (for TSan): headers of libcaf_core plus its generated build_config.hpp.
  set(CAF_CORE_INCLUDE_DIRS ${LAYERSTREAM_CAF_ROOT}/include)
  find_library(CAF_CORE_LIBRARY caf_core PATHS ${LAYERSTREAM_CAF_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io PATHS ${LAYERSTREAM_CAF_ROOT}/lib NO_DEFAULT_PATH REQUIRED)
else()
  find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
  set(CAF_CORE_INCLUDE_DIRS ${CAF_INCLUDE_DIR})
  find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
  find_library(CAF_IO_LIBRARY caf_io REQUIRED)
endif()

add_library(caf::core INTERFACE IMPORTED)
target_include_directories(caf::core SYSTEM INTERFACE ${CAF_CORE_INCLUDE_DIRS})
target_link_libraries(caf::core INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)
add_library(caf::io INTERFACE IMPORTED)
target_link_libraries(caf::io INTERFACE ${CAF_IO_LIBRARY} caf::core)

# CAF's OpenSSL module: TLS on the control plane ([tls] in the config). A CAF
# built from source without it (scripts/build_caf_tsan.sh) gives a build whose
# prefill and decode refuse a config that sets [tls].
if(LAYERSTREAM_CAF_ROOT)
  find_library(CAF_OPENSSL_LIBRARY caf_openssl PATHS ${LAYERSTREAM_CAF_ROOT}/lib NO_DEFAULT_PATH)
else()
  find_library(CAF_OPENSSL_LIBRARY caf_openssl)
endif()
add_library(caf::openssl INTERFACE IMPORTED)
if(CAF_OPENSSL_LIBRARY)
  set(LAYERSTREAM_HAVE_TLS ON)
  # OpenSSL::SSL: the CLI checks the [tls] files with OpenSSL before CAF loads them.
  target_link_libraries(caf::openssl INTERFACE ${CAF_OPENSSL_LIBRARY} caf::io OpenSSL::SSL)
  target_compile_definitions(caf::openssl INTERFACE LAYERSTREAM_HAVE_TLS=1)
else()
  set(LAYERSTREAM_HAVE_TLS OFF)
  message(STATUS "CAF's OpenSSL module (caf_openssl) not found: no TLS on the control plane")
  target_link_libraries(caf::openssl INTERFACE caf::io)
endif()

# CUDA: detected, never required. The device layer's CUDA code (device/CMakeLists.txt)
# builds only where nvcc exists, and only in the plain build: libcudart is not
# instrumented, so sanitizer builds leave it out. Nothing else needs CUDA.
set(LAYERSTREAM_CUDA "AUTO" CACHE STRING "CUDA device layer: AUTO (where nvcc is found), ON (required) or OFF")
set_property(CACHE LAYERSTREAM_CUDA PROPERTY STRINGS AUTO ON OFF)
set(LAYERSTREAM_HAVE_NVCC OFF)
if(LAYERSTREAM_CUDA STREQUAL "OFF")
  set(LAYERSTREAM_CUDA_WHY "LAYERSTREAM_CUDA=OFF")
elseif(NOT LAYERSTREAM_SANITIZE STREQUAL "")
  set(LAYERSTREAM_CUDA_WHY "sanitizer build (libcudart is not instrumented)")
  message(STATUS "layerstream: CUDA stays off in the '${LAYERSTREAM_SANITIZE}' sanitizer build: "
                 "libcudart is not instrumented")
else()
  find_program(LAYERSTREAM_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
  if(LAYERSTREAM_NVCC)
    set(LAYERSTREAM_HAVE_NVCC ON)
  elseif(LAYERSTREAM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LAYERSTREAM_CUDA=ON but nvcc was not found (PATH, /usr/local/cuda/bin)")
  else()
    set(LAYERSTREAM_CUDA_WHY "nvcc not found")
  endif()
endif()
if(LAYERSTREAM_HAVE_NVCC)
  set(CMAKE_CUDA_COMPILER ${LAYERSTREAM_NVCC})
  set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90") # A100, H100/H200
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  get_filename_component(LAYERSTREAM_NVCC_BIN ${LAYERSTREAM_NVCC} DIRECTORY)
  set(CUDAToolkit_ROOT ${LAYERSTREAM_NVCC_BIN}/..)
  find_package(CUDAToolkit REQUIRED)
endif()
