# install.cmake — what `cmake --install BUILD [--prefix P]` puts under the prefix (GNUInstallDirs): the CLI,
# libtokroute.so (SONAME libtokroute.so.<SOVERSION>) and libtokroute.a, the public headers, tokroute.pc and the CMake
# package (find_package(tokroute) → tokroute::tokroute, tokroute::tokroute_static, with a version file).
# Included by CMakeLists.txt after the library targets; cmake/uninstall.cmake undoes it from install_manifest.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TR_CMAKE_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tokroute)
set_target_properties(tokroute_shared PROPERTIES EXPORT_NAME tokroute)
set_target_properties(tokroute_lib PROPERTIES EXPORT_NAME tokroute_static)
# A sanitized build's libraries need the sanitizer runtime in whatever links them: the package says so.
if(TR_SANITIZE)
  target_link_options(tokroute_shared INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
  target_link_options(tokroute_lib INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
  set(TR_PC_LINK_EXTRA " -fsanitize=address,undefined")
endif()

install(TARGETS tokroute RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS tokroute_shared tokroute_lib EXPORT tokrouteTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/tokroute.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/tokroute DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

install(EXPORT tokrouteTargets NAMESPACE tokroute:: DESTINATION ${TR_CMAKE_PACKAGE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/tokrouteConfig.cmake.in
  ${CMAKE_BINARY_DIR}/tokrouteConfig.cmake INSTALL_DESTINATION ${TR_CMAKE_PACKAGE_DIR})
# Before 1.0 a minor release may change the ABI (as the SONAME says), so 0.1 satisfies only requests for 0.1.x.
if(TR_LIB_VERSION MATCHES "^0\\.")
  set(TR_COMPATIBILITY SameMinorVersion)
else()
  set(TR_COMPATIBILITY SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/tokrouteConfigVersion.cmake VERSION ${TR_LIB_VERSION}
  COMPATIBILITY ${TR_COMPATIBILITY})
install(FILES ${CMAKE_BINARY_DIR}/tokrouteConfig.cmake ${CMAKE_BINARY_DIR}/tokrouteConfigVersion.cmake
  DESTINATION ${TR_CMAKE_PACKAGE_DIR})

# tokroute.pc names the prefix the install goes to, known only when it runs (`--prefix` overrides the configured
# one): written then into the build folder, then installed like any file (so it is in install_manifest.txt).
install(CODE "set(TR_PC_VERSION \"${TR_LIB_VERSION}\")
  set(TR_PC_LINK_EXTRA \"${TR_PC_LINK_EXTRA}\")
  set(TR_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(TR_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(TR_PC_IN \"${CMAKE_SOURCE_DIR}/cmake/tokroute.pc.in\")
  set(TR_PC_OUT \"${CMAKE_BINARY_DIR}/tokroute.pc\")")
install(CODE [[
  set(TR_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  if(NOT IS_ABSOLUTE "${TR_PC_LIBDIR}")
    set(TR_PC_LIBDIR "\${exec_prefix}/${TR_PC_LIBDIR}")
  endif()
  if(NOT IS_ABSOLUTE "${TR_PC_INCLUDEDIR}")
    set(TR_PC_INCLUDEDIR "\${prefix}/${TR_PC_INCLUDEDIR}")
  endif()
  configure_file("${TR_PC_IN}" "${TR_PC_OUT}" @ONLY)
]])
install(FILES ${CMAKE_BINARY_DIR}/tokroute.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# `cmake --build BUILD --target uninstall` (as `make uninstall`).
add_custom_target(uninstall COMMAND ${CMAKE_COMMAND} -DMANIFEST=${CMAKE_BINARY_DIR}/install_manifest.txt
  -P ${CMAKE_SOURCE_DIR}/cmake/uninstall.cmake VERBATIM)
