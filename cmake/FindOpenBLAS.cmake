# FindOpenBLAS: locates OpenBLAS with its CBLAS header, for find_package(OpenBLAS) (the
# top-level CMakeLists.txt puts this folder on CMAKE_MODULE_PATH, so this module is used
# ahead of any OpenBLASConfig.cmake a distribution ships).
#
# Debian ships several variants; the pthread one is preferred because its
# openblas_set_num_threads() lets ztrain keep BLAS threads and OpenMP threads apart.
#
# Imported target:  OpenBLAS::OpenBLAS
# Result variables: OpenBLAS_FOUND, OpenBLAS_VERSION (from openblas_config.h, when present),
#                   OpenBLAS_INCLUDE_DIRS, OpenBLAS_LIBRARIES
# Cache variables:  OpenBLAS_INCLUDE_DIR (the folder of cblas.h), OpenBLAS_LIBRARY
find_path(OpenBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
        /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include
  NO_DEFAULT_PATH)
find_library(OpenBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu
        /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib64 /usr/lib)
mark_as_advanced(OpenBLAS_INCLUDE_DIR OpenBLAS_LIBRARY)

unset(OpenBLAS_VERSION)
if(OpenBLAS_INCLUDE_DIR AND EXISTS "${OpenBLAS_INCLUDE_DIR}/openblas_config.h")
  # #define OPENBLAS_VERSION " OpenBLAS 0.3.21 "
  file(STRINGS "${OpenBLAS_INCLUDE_DIR}/openblas_config.h" _zt_openblas_version_line
       REGEX "^#define OPENBLAS_VERSION ")
  if(_zt_openblas_version_line MATCHES "OpenBLAS ([0-9]+(\\.[0-9]+)*)")
    set(OpenBLAS_VERSION ${CMAKE_MATCH_1})
  endif()
  unset(_zt_openblas_version_line)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLAS
  REQUIRED_VARS OpenBLAS_LIBRARY OpenBLAS_INCLUDE_DIR
  VERSION_VAR OpenBLAS_VERSION
  REASON_FAILURE_MESSAGE "ztrain needs OpenBLAS with cblas.h (Debian: libopenblas-dev)")

if(OpenBLAS_FOUND)
  set(OpenBLAS_INCLUDE_DIRS ${OpenBLAS_INCLUDE_DIR})
  set(OpenBLAS_LIBRARIES ${OpenBLAS_LIBRARY})
  if(NOT TARGET OpenBLAS::OpenBLAS)
    add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
    set_target_properties(OpenBLAS::OpenBLAS PROPERTIES
      IMPORTED_LOCATION "${OpenBLAS_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${OpenBLAS_INCLUDE_DIR}")
  endif()
endif()
