# All third-party dependencies, found once. Everything comes from Debian
# packages (scripts/setup.sh installs them); CUDA is optional.
find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto) # HMAC of the control-plane handshake
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBFABRIC REQUIRED IMPORTED_TARGET libfabric>=1.17)
find_path(TOMLPP_INCLUDE_DIR toml++/toml.h REQUIRED) # used header-only (config/CMakeLists.txt)

# CAF 0.17.6 ships no CMake config and no pkg-config file.
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

# CUDA: detected, never required. The device layer's CUDA code builds only where nvcc exists.
find_program(LAYERSTREAM_NVCC nvcc PATHS /usr/local/cuda/bin NO_CACHE)
if(LAYERSTREAM_NVCC)
  set(LAYERSTREAM_HAVE_NVCC ON)
else()
  set(LAYERSTREAM_HAVE_NVCC OFF)
endif()
