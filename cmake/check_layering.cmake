# The layering check: every #include of a file under src/ or include/ztrain/ must name its
# own component or one that its component depends on (directly or through others), as
# declared by zt_component() in CMakeLists.txt. So a lower layer cannot include a higher
# one (core including backend, comm including backend/cuda, ...), and the library graph
# and the include graph cannot drift apart.
#
#   cmake -DZT_SOURCE_DIR=<repo> -DZT_LAYERING_TABLE=<build>/layering_table.cmake -P check_layering.cmake
#
# Run by every build (target zt_layering) and by ctest (test unit.layering). Which
# component a file belongs to: src/<dir> by the longest DIR that zt_component declared,
# include/ztrain/<component>/ by its folder. What an include names: "ztrain/<component>/..."
# by that folder, a relative "..." include by the file it resolves to. src/app/ (the
# executables, above everything) is not checked; "ztrain/config.hpp" (generated build
# settings) and system headers are allowed everywhere.
cmake_minimum_required(VERSION 3.24)
if(NOT ZT_SOURCE_DIR OR NOT ZT_LAYERING_TABLE)
  message(FATAL_ERROR "check_layering.cmake: pass -DZT_SOURCE_DIR and -DZT_LAYERING_TABLE")
endif()
include(${ZT_LAYERING_TABLE})

# The component that owns the file at absolute path `path`, or "" (not layered).
function(zt_owner path out)
  file(RELATIVE_PATH rel ${ZT_SOURCE_DIR} ${path})
  set(owner "")
  if(rel MATCHES "^include/ztrain/([^/]+)/")
    set(owner ${CMAKE_MATCH_1})
  elseif(rel MATCHES "^src/")
    set(best_length 0)
    foreach(component ${ZT_COMPONENTS})
      set(dir ${ZT_LAYER_DIR_${component}})
      string(LENGTH "${dir}" length)
      string(FIND "${rel}" "${dir}/" at)
      if(at EQUAL 0 AND length GREATER best_length)
        set(owner ${component})
        set(best_length ${length})
      endif()
    endforeach()
  endif()
  set(${out} "${owner}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files
  ${ZT_SOURCE_DIR}/src/*.cpp ${ZT_SOURCE_DIR}/src/*.hpp ${ZT_SOURCE_DIR}/src/*.cu
  ${ZT_SOURCE_DIR}/src/*.cuh ${ZT_SOURCE_DIR}/include/ztrain/*.hpp)
set(violations "")
set(checked 0)
foreach(file ${files})
  zt_owner(${file} owner)
  if(owner STREQUAL "")
    if(NOT file MATCHES "/src/app/")
      file(RELATIVE_PATH rel ${ZT_SOURCE_DIR} ${file})
      string(APPEND violations "  ${rel}: belongs to no component (add its folder with zt_component)\n")
    endif()
    continue()
  endif()
  if(NOT DEFINED ZT_LAYER_${owner})
    file(RELATIVE_PATH rel ${ZT_SOURCE_DIR} ${file})
    string(APPEND violations "  ${rel}: include/ztrain/${owner}/ is no component (zt_component)\n")
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  get_filename_component(dir ${file} DIRECTORY)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" name "${line}")
    set(target "")
    if(name STREQUAL "ztrain/config.hpp")
      continue()
    elseif(name MATCHES "^ztrain/([^/]+)/")
      set(target ${CMAKE_MATCH_1})
    elseif(EXISTS ${dir}/${name})
      get_filename_component(resolved ${dir}/${name} ABSOLUTE)
      zt_owner(${resolved} target)
    endif()
    if(target STREQUAL "" OR target STREQUAL owner)
      continue()
    endif()
    if(NOT target IN_LIST ZT_LAYER_${owner})
      file(RELATIVE_PATH rel ${ZT_SOURCE_DIR} ${file})
      set(allowed "${ZT_LAYER_${owner}}")
      if(allowed STREQUAL "")
        set(allowed "no other component")
      endif()
      string(REPLACE ";" ", " allowed "${allowed}")
      string(APPEND violations
        "  ${rel} (${owner}) includes \"${name}\" (${target}); ${owner} may include: ${allowed}\n")
    endif()
  endforeach()
endforeach()

if(NOT violations STREQUAL "")
  message(FATAL_ERROR "layering violations (a component includes one it does not depend on; "
                      "the dependencies are the DEPS of zt_component() in CMakeLists.txt and the "
                      "README's architecture map):\n${violations}")
endif()
message(STATUS "layering: ${checked} files follow the component dependencies")
