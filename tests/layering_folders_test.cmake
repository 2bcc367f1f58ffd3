# Fails when a folder of src/ includes a header of a folder above it: the
# folders point one way (cli -> daemon -> the adapters -> sched -> common;
# the top-level CMakeLists.txt draws the layers). layering_test.cmake keeps
# src/sched and src/common free of OS and third-party headers.
#   folder:the folders of src/ whose headers it must not include
set(rules
  "daemon:cli,intercept,sim"
  "intercept:cli,daemon,sim,bench"
  "bench:cli,daemon,intercept"
  "sim:cli,daemon,intercept,bench"
  "gpu:cli,daemon,intercept,sim,bench"
  "ipc:cli,daemon,intercept,sim,bench,gpu"
  "cubin:cli,daemon,intercept,sim,bench,gpu")
set(bad "")
foreach(rule IN LISTS rules)
  string(REPLACE ":" ";" parts "${rule}")
  list(GET parts 0 folder)
  list(GET parts 1 above)
  string(REPLACE "," "|" above "${above}")
  file(GLOB_RECURSE files "${ROOT}/src/${folder}/*.hpp" "${ROOT}/src/${folder}/*.cpp" "${ROOT}/src/${folder}/*.h"
                          "${ROOT}/src/${folder}/*.def")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"(${above})/")
    foreach(line IN LISTS lines)
      string(APPEND bad "\n  ${f}: ${line}")
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "a folder of src/ includes a header of a folder above it:${bad}")
endif()
message(STATUS "layering ok: no folder of ${ROOT}/src includes a header of a folder above it")
