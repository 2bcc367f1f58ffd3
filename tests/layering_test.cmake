# Fails when a file of the scheduling core includes a header that would tie it
# to CUDA, the operating system or a third-party library. The core is shared
# by the runtime and the simulator and must build and run anywhere.
file(GLOB_RECURSE core_files "${ROOT}/src/sched/*.hpp" "${ROOT}/src/sched/*.cpp"
                               "${ROOT}/src/common/*.hpp" "${ROOT}/src/common/*.cpp")
set(forbidden
  "cuda" "nvml" "unistd\\.h" "pthread" "sys/" "dlfcn\\.h" "fcntl\\.h" "thread>" "mutex>"
  "fstream" "iostream" "cstdio" "stdio\\.h" "filesystem" "fmt/" "toml" "nlohmann" "CLI/")
set(bad "")
foreach(f IN LISTS core_files)
  file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    foreach(pat IN LISTS forbidden)
      if(line MATCHES "${pat}")
        string(APPEND bad "\n  ${f}: ${line}")
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "the scheduling core includes forbidden headers:${bad}")
endif()
# The mechanism (src/sched) knows no policy: only src/sched/policies
# includes the policies' headers (their catalog, make_policy, lives there).
file(GLOB mechanism_files "${ROOT}/src/sched/*.hpp" "${ROOT}/src/sched/*.cpp")
foreach(f IN LISTS mechanism_files)
  file(STRINGS "${f}" includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS includes)
    if(line MATCHES "sched/policies/")
      string(APPEND bad "\n  ${f}: ${line}")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "src/sched includes a policy's header (only src/sched/policies may):${bad}")
endif()
message(STATUS "layering ok: ${ROOT}/src/sched and src/common include no CUDA, OS or third-party headers")
