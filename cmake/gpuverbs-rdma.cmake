# rdma-core, as gpuverbs uses it: the header infiniband/mlx5dv.h (the public mlx5 layer uses its
# types) and the libraries libibverbs and libmlx5. Defines three imported targets:
#   gpuverbs::rdma_headers   the include directory of infiniband/mlx5dv.h
#   gpuverbs::ibverbs        libibverbs (and the headers)
#   gpuverbs::mlx5           libmlx5 (and libibverbs)
# found by name on this machine (CMAKE_PREFIX_PATH, CMAKE_LIBRARY_PATH and the system paths),
# never at the path of the machine gpuverbs was built on. Shared by gpuverbs' own build and its
# installed CMake package (gpuverbs-config.cmake). When something is missing it sets
# gpuverbs_RDMA_MISSING to what, and defines nothing.
if(TARGET gpuverbs::ibverbs AND TARGET gpuverbs::mlx5 AND TARGET gpuverbs::rdma_headers)
  return()
endif()
find_path(gpuverbs_IBVERBS_INCLUDE_DIR infiniband/mlx5dv.h
          DOC "Directory holding infiniband/mlx5dv.h (rdma-core; Debian/Ubuntu: libibverbs-dev)")
find_library(gpuverbs_IBVERBS_LIBRARY ibverbs DOC "libibverbs (rdma-core; Debian/Ubuntu: libibverbs-dev)")
find_library(gpuverbs_MLX5_LIBRARY mlx5 DOC "libmlx5 (rdma-core; Debian/Ubuntu: libibverbs-dev)")
set(gpuverbs_RDMA_MISSING "")
if(NOT gpuverbs_IBVERBS_INCLUDE_DIR)
  list(APPEND gpuverbs_RDMA_MISSING "infiniband/mlx5dv.h")
endif()
if(NOT gpuverbs_IBVERBS_LIBRARY)
  list(APPEND gpuverbs_RDMA_MISSING "libibverbs")
endif()
if(NOT gpuverbs_MLX5_LIBRARY)
  list(APPEND gpuverbs_RDMA_MISSING "libmlx5")
endif()
if(gpuverbs_RDMA_MISSING)
  string(REPLACE ";" ", " _gv_missing "${gpuverbs_RDMA_MISSING}")
  string(CONCAT gpuverbs_RDMA_MISSING "rdma-core not found (${_gv_missing}): install libibverbs-dev "
         "(Debian/Ubuntu) or rdma-core-devel (RHEL/Fedora), or point CMAKE_PREFIX_PATH at rdma-core")
  unset(_gv_missing)
  return()
endif()
mark_as_advanced(gpuverbs_IBVERBS_INCLUDE_DIR gpuverbs_IBVERBS_LIBRARY gpuverbs_MLX5_LIBRARY)

add_library(gpuverbs::rdma_headers INTERFACE IMPORTED)
set_target_properties(gpuverbs::rdma_headers PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${gpuverbs_IBVERBS_INCLUDE_DIR}")
add_library(gpuverbs::ibverbs UNKNOWN IMPORTED)
set_target_properties(gpuverbs::ibverbs PROPERTIES
  IMPORTED_LOCATION "${gpuverbs_IBVERBS_LIBRARY}"
  INTERFACE_LINK_LIBRARIES gpuverbs::rdma_headers)
add_library(gpuverbs::mlx5 UNKNOWN IMPORTED)
set_target_properties(gpuverbs::mlx5 PROPERTIES
  IMPORTED_LOCATION "${gpuverbs_MLX5_LIBRARY}"
  INTERFACE_LINK_LIBRARIES gpuverbs::ibverbs)
