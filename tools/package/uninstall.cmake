# SPDX-License-Identifier: Apache-2.0
# Removes what one `cmake --install` put on this machine, from the manifest CMake wrote for it
# (BUILD/install_manifest.txt). For the /usr/local install beside the Debian package: files that a
# Debian package owns are left to apt (dpkg -S says whose they are), so the package's copy survives.
#
#   cmake --build BUILD --target uninstall
#   cmake -DMANIFEST=BUILD/install_manifest.txt -P tools/package/uninstall.cmake
# The manifest is the last `cmake --install` run from BUILD: the one of the install to remove.
if(NOT MANIFEST)
  message(FATAL_ERROR "uninstall: give -DMANIFEST=BUILD/install_manifest.txt")
endif()
if(NOT EXISTS "${MANIFEST}")
  message(FATAL_ERROR "uninstall: ${MANIFEST} does not exist: nothing was installed from this build "
                      "(cmake --install writes it), so there is nothing to remove")
endif()
# The manifest lists paths without DESTDIR (as CMake writes it); an install staged under DESTDIR is
# removed from there, given the same DESTDIR.
file(STRINGS "${MANIFEST}" listed)
set(files "")
foreach(file IN LISTS listed)
  list(APPEND files "$ENV{DESTDIR}${file}")
endforeach()
find_program(DPKG_QUERY dpkg-query)
set(removed 0)
set(kept 0)
set(directories "")
foreach(file IN LISTS files)
  if(NOT IS_SYMLINK "${file}" AND NOT EXISTS "${file}")
    message(STATUS "Already gone: ${file}")
    continue()
  endif()
  if(DPKG_QUERY)
    execute_process(COMMAND "${DPKG_QUERY}" -S "${file}" RESULT_VARIABLE owned OUTPUT_VARIABLE owner ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(owned EQUAL 0)
      message(STATUS "Kept (a Debian package's, remove it with apt): ${owner}")
      math(EXPR kept "${kept} + 1")
      continue()
    endif()
  endif()
  file(REMOVE "${file}")
  if(IS_SYMLINK "${file}" OR EXISTS "${file}")
    message(FATAL_ERROR "uninstall: cannot remove ${file} (root needed for this prefix?)")
  endif()
  message(STATUS "Removed: ${file}")
  math(EXPR removed "${removed} + 1")
  get_filename_component(directory "${file}" DIRECTORY)
  list(APPEND directories "${directory}")
endforeach()
# Directories only Sieve's files were in (share/sieve, share/doc/sieve, lib/cmake/Sieve), once empty.
list(REMOVE_DUPLICATES directories)
foreach(directory IN LISTS directories)
  get_filename_component(name "${directory}" NAME)
  string(TOLOWER "${name}" lower)
  file(GLOB left "${directory}/*")
  if(lower STREQUAL "sieve" AND NOT left)
    file(REMOVE_RECURSE "${directory}")
    message(STATUS "Removed: ${directory}/")
  endif()
endforeach()
message(STATUS "uninstall: ${removed} file(s) removed, ${kept} kept; run ldconfig if the library was in its cache")
