# Locates OpenBLAS (with its CBLAS header) and defines the imported target ZT::OpenBLAS.
# Debian ships several variants; the pthread one is preferred because its
# openblas_set_num_threads() lets ztrain keep BLAS threads and OpenMP threads apart.
find_path(ZT_OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas
        /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include
  NO_DEFAULT_PATH)
find_library(ZT_OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu
        /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib64 /usr/lib)
if(NOT ZT_OPENBLAS_INCLUDE_DIR OR NOT ZT_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS with cblas.h not found; install libopenblas-dev")
endif()
add_library(ZT::OpenBLAS UNKNOWN IMPORTED)
set_target_properties(ZT::OpenBLAS PROPERTIES
  IMPORTED_LOCATION ${ZT_OPENBLAS_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${ZT_OPENBLAS_INCLUDE_DIR})
