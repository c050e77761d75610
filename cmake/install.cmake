# Install rules: headers, libposenc.a, the exported posenc::posenc target with
# posenc-config.cmake and its version file (find_package(posenc)), and posenc.pc (pkg-config).
# The CLI is installed too when it is built. Included from the top-level CMakeLists.txt when
# POSENC_INSTALL is on.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(POSENC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/posenc)

install(TARGETS posenc_lib EXPORT posenc-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The headers of the library; not those of the verification scaffolding (posenc_verify, not
# installed, include/posenc/verify/): the case tables, the property checks and the model's
# gradient checks.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/posenc
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp"
        PATTERN "verify" EXCLUDE)
if(POSENC_BUILD_CLI)
  install(TARGETS posenc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT posenc-targets NAMESPACE posenc:: FILE posenc-targets.cmake
        DESTINATION ${POSENC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/posenc-config.cmake.in
                              ${PROJECT_BINARY_DIR}/posenc-config.cmake
                              INSTALL_DESTINATION ${POSENC_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/posenc-config-version.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/posenc-config.cmake
              ${PROJECT_BINARY_DIR}/posenc-config-version.cmake
        DESTINATION ${POSENC_CMAKE_DIR})

# pkg-config: the static library with what it links (Highway, OpenMP; static, so not private)
# and the packages whose headers the public headers include (fmt, nlohmann_json).
set(POSENC_PC_OPENMP_FLAGS "${OpenMP_CXX_FLAGS}")
file(RELATIVE_PATH POSENC_PC_PREFIX_FROM_PCDIR /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/posenc.pc.in ${PROJECT_BINARY_DIR}/posenc.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/posenc.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
