# What `cmake --install` puts under the prefix (GNUInstallDirs), the CMake package
# (find_package(gpuverbs CONFIG)), gpuverbs.pc, and `cpack -G DEB`. docs/packaging.md says what
# each gives a user, and the compatibility policy. Install components: runtime (the shared
# library), dev (headers, static library, CMake package, gpuverbs.pc), tools (programs), doc.
include(CMakePackageConfigHelpers)

set(GV_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpuverbs)

# The libraries, exported as gpuverbs::gpuverbs (shared) and gpuverbs::gpuverbs_static.
install(TARGETS gpuverbs_shared gpuverbs
  EXPORT gpuverbs-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Every public header: the host API, the device API, the mlx5 layer and detail/ (the internals
# kernels compile). Nothing from src/ (tests/headers/check_headers.py checks that no public
# header reaches outside include/gpuverbs).
install(DIRECTORY include/gpuverbs DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev
  FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh" PATTERN "*.h")

# The CMake package.
install(EXPORT gpuverbs-targets NAMESPACE gpuverbs:: FILE gpuverbs-targets.cmake
  DESTINATION ${GV_CMAKE_PACKAGE_DIR} COMPONENT dev)
if(GV_HAVE_CUDA)
  set(GV_PKG_WITH_CUDA ON)
  set(GV_PKG_CUDA_VERSION ${CUDAToolkit_VERSION})
  set(GV_PKG_CUDA_VERSION_MAJOR ${CUDAToolkit_VERSION_MAJOR})
  set(GV_PKG_CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
else()
  set(GV_PKG_WITH_CUDA OFF)
  set(GV_PKG_CUDA_VERSION "")
  set(GV_PKG_CUDA_VERSION_MAJOR "")
  set(GV_PKG_CUDA_ARCHITECTURES "")
endif()
configure_package_config_file(cmake/gpuverbs-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs-config.cmake
  INSTALL_DESTINATION ${GV_CMAKE_PACKAGE_DIR})
# The compatibility policy: while the major version is 0, a minor version may break the API,
# the ABI and the out-of-band wire format, so only the same minor version is compatible
# (find_package(gpuverbs 0.2) accepts 0.2.x, x >= the patch asked for; not 0.1 or 0.3). From
# 1.0, the same major version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(GV_COMPATIBILITY SameMinorVersion)
else()
  set(GV_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${GV_COMPATIBILITY})
install(FILES
  ${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs-config.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs-config-version.cmake
  cmake/gpuverbs-rdma.cmake
  DESTINATION ${GV_CMAKE_PACKAGE_DIR} COMPONENT dev)

# gpuverbs.pc. Its paths are those of the prefix it is installed under, which is only known at
# install time (cmake --install --prefix, cpack's /usr): the template is filled in then.
if(GV_HAVE_CUDA)
  set(GV_PC_CUDA_LIBDIR "${CUDAToolkit_LIBRARY_DIR}")
  set(GV_PC_LIBS_PRIVATE "-lpthread -ldl -L\${cuda_libdir} -lcudart")
  set(GV_PC_WITH_CUDA 1)
else()
  set(GV_PC_CUDA_LIBDIR "")
  set(GV_PC_LIBS_PRIVATE "-lpthread -ldl")
  set(GV_PC_WITH_CUDA 0)
endif()
set(GV_PC_PREFIX "@GV_PC_PREFIX@")  # filled in at install time, below
configure_file(cmake/gpuverbs.pc.in ${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs.pc.in @ONLY)
install(CODE "
  set(GV_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/package/gpuverbs.pc.in\"
                 \"${CMAKE_CURRENT_BINARY_DIR}/package/pkgconfig/gpuverbs.pc\" @ONLY)
" COMPONENT dev)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/package/pkgconfig/gpuverbs.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The documentation, and the consumer example (a project of its own: examples/consumer).
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc)
# The design notes and their figures; not perf-logs/ (raw logs of measurement runs).
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc PATTERN perf-logs EXCLUDE)
install(DIRECTORY examples/consumer DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT doc
  PATTERN "build*" EXCLUDE)

# cpack -G DEB: one package, gpuverbs, with everything above (prefix /usr).
set(CPACK_PACKAGE_NAME gpuverbs)
set(CPACK_PACKAGE_VENDOR gpuverbs)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU-initiated RDMA: CUDA kernels post RDMA work requests and poll completions")
set(CPACK_PACKAGE_DESCRIPTION
"gpuverbs lets CUDA kernels drive RDMA themselves: a kernel posts RDMA WRITE, READ,
SEND and RECV work requests in the mlx5 WQE format, rings the doorbell and polls
completions, while the CPU only sets things up. Backends: a software RDMA device
(any machine, GPU or CPU threads) and ConnectX NICs through rdma-core.
This package holds the shared and static libraries, the headers (host and device
API), the CMake package and gpuverbs.pc, the tools (gv_demo, gpuverbs_info,
gv_selftest, benchmarks) and the documentation.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(GV_DEB_MAINTAINER "gpuverbs maintainers <maintainers@users.noreply.a-seed-37e351ef.example>"
    CACHE STRING "The Maintainer field of the .deb")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${GV_DEB_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Dependencies, as Debian/Ubuntu name them: libibverbs1 (libibverbs.so.1) and ibverbs-providers
# (libmlx5.so.1). With CUDA, the package holding libcudart.so.MAJOR, which libgpuverbs.so needs:
# in NVIDIA's CUDA repository (the usual source on GPU machines) cuda-cudart-MAJOR-MINOR for the
# toolkit built with; Debian and Ubuntu (non-free / multiverse) name it libcudartMAJOR
# (libcudart12 there today). Either satisfies the dependency. Building against the headers also
# needs libibverbs-dev (infiniband/mlx5dv.h), hence the recommendations.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libibverbs1, ibverbs-providers")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libibverbs-dev, pkg-config")
if(GV_HAVE_CUDA)
  set(GV_DEB_CUDART
      "cuda-cudart-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR} | libcudart${CUDAToolkit_VERSION_MAJOR}"
      CACHE STRING "The .deb's dependency on the CUDA runtime (Debian package names)")
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${GV_DEB_CUDART}")
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS
         ", cuda-cudart-dev-${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
endif()
# dpkg-shlibdeps adds the versioned dependencies it derives from the binaries (libc6,
# libstdc++6, libgcc-s1, libibverbs1 and ibverbs-providers with their minimum versions). Not
# with CUDA: the runtime there usually comes from NVIDIA's installer or packages, which
# dpkg-shlibdeps has no information about (it fails).
find_program(GV_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(GV_DPKG_SHLIBDEPS)
if(GV_DPKG_SHLIBDEPS AND NOT GV_HAVE_CUDA)
  set(GV_DEB_SHLIBDEPS_DEFAULT ON)
else()
  set(GV_DEB_SHLIBDEPS_DEFAULT OFF)
endif()
option(GV_DEB_SHLIBDEPS "Let dpkg-shlibdeps add the .deb's versioned library dependencies" ${GV_DEB_SHLIBDEPS_DEFAULT})
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ${GV_DEB_SHLIBDEPS})
if(NOT GV_DEB_SHLIBDEPS)
  # What dpkg-shlibdeps would have added, unversioned: the C and C++ runtimes.
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libc6, libstdc++6, libgcc-s1")
endif()
# A shlibs file for libgpuverbs.so.*, and the ldconfig trigger.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_GENERATOR DEB)
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/out/")
include(CPack)
