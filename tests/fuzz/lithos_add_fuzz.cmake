# lithos_add_fuzz(name SOURCES src... LIBS lib... TEST test-name
#                 [SEEDS file...] [CORPUS dir...] [DICT file] [DEPENDS target...] [SECONDS s])
#
# One fuzz target: a file defining LLVMFuzzerTestOneInput (and optionally
# LLVMFuzzerInitialize), built two ways from the same sources:
#  - the usual builds (g++; ASan + UBSan in the asan preset): linked with
#    tests/fuzz/fuzz_main.cpp, the project's own bounded mutation driver, and
#    run as the ctest test TEST for SECONDS (LITHOS_FUZZ_SECONDS overrides
#    every target's time) from SEEDS and the files in the CORPUS folders;
#  - LITHOS_FUZZ (clang, the `fuzz` preset): linked with libFuzzer
#    (-fsanitize=fuzzer), run by scripts/fuzz.sh; the test TEST then only
#    replays the CORPUS folders once (-runs=0).
# SEEDS are files, usually made at build time (compiled fixtures, generated
# streams): the target depends on them. CORPUS folders are committed
# (tests/fuzz/corpora/<target>, tests/fuzz/regressions/<target>). DICT is a
# libFuzzer dictionary. Each target writes build/<preset>/fuzz-targets/<name>.sh,
# which scripts/fuzz.sh reads (binary, seeds, corpora, dictionary).
set(LITHOS_FUZZ_SECONDS "" CACHE STRING "seconds each fuzz test runs (empty: each target's default)")
set(LITHOS_FUZZ_DIR ${CMAKE_CURRENT_LIST_DIR})
# Committed inputs, one folder per target: corpora/<target> (seeds made by
# hand or by the generators here) and regressions/<target> (inputs that
# crashed once, replayed by every run).
set(LITHOS_FUZZ_CORPORA ${LITHOS_FUZZ_DIR}/corpora)
set(LITHOS_FUZZ_REGRESSIONS ${LITHOS_FUZZ_DIR}/regressions)
if(NOT TARGET fuzz_targets)
  add_custom_target(fuzz_targets)
endif()

function(lithos_add_fuzz name)
  cmake_parse_arguments(ARG "" "SECONDS;DICT;TEST" "SOURCES;LIBS;SEEDS;CORPUS;DEPENDS" ${ARGN})
  # Committed folders that hold nothing yet are left out.
  set(corpus "")
  foreach(d IN LISTS ARG_CORPUS)
    if(IS_DIRECTORY ${d})
      list(APPEND corpus ${d})
    endif()
  endforeach()
  set(ARG_CORPUS ${corpus})
  if(NOT ARG_TEST)
    message(FATAL_ERROR "lithos_add_fuzz(${name}): TEST missing")
  endif()
  if(LITHOS_FUZZ)
    add_executable(${name} ${ARG_SOURCES})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${name} ${ARG_SOURCES} ${LITHOS_FUZZ_DIR}/fuzz_main.cpp)
  endif()
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} lithos_options)
  if(ARG_SEEDS)
    add_custom_target(${name}_seed_files DEPENDS ${ARG_SEEDS})
    add_dependencies(${name} ${name}_seed_files)
  endif()
  if(ARG_DEPENDS)
    add_dependencies(${name} ${ARG_DEPENDS})
  endif()
  add_dependencies(fuzz_targets ${name})

  set(secs ${ARG_SECONDS})
  if(NOT secs)
    set(secs 20)
  endif()
  if(LITHOS_FUZZ_SECONDS)
    set(secs ${LITHOS_FUZZ_SECONDS})
  endif()
  set(workdir ${CMAKE_CURRENT_BINARY_DIR}/${name}-work)
  file(MAKE_DIRECTORY ${workdir})
  if(LITHOS_FUZZ)
    if(ARG_CORPUS)
      add_test(NAME ${ARG_TEST} COMMAND ${name} -runs=0 ${ARG_CORPUS} WORKING_DIRECTORY ${workdir})
    endif()
  else()
    add_test(NAME ${ARG_TEST} COMMAND ${name} --seconds ${secs} --seed 1 ${ARG_SEEDS} ${ARG_CORPUS}
             WORKING_DIRECTORY ${workdir})
    set_tests_properties(${ARG_TEST} PROPERTIES TIMEOUT 600 PASS_REGULAR_EXPRESSION "no crash")
    # A known bug that is not fixed yet (regressions/open/<target>) would
    # fail every run of this driver, which cannot go past a crash: the test
    # is disabled (ctest lists it so) until the input moves to
    # regressions/<target>. scripts/fuzz.sh keeps fuzzing such a target.
    file(GLOB open_bugs ${LITHOS_FUZZ_REGRESSIONS}/open/${name}/*.bin)
    if(open_bugs)
      set_tests_properties(${ARG_TEST} PROPERTIES DISABLED TRUE)
      message(STATUS "${ARG_TEST} is disabled: tests/fuzz/regressions/open/${name} holds a known bug")
    endif()
  endif()

  # What scripts/fuzz.sh needs, as bash it sources.
  set(text "# written by lithos_add_fuzz (tests/fuzz/lithos_add_fuzz.cmake)\nname=${name}\nbinary=$<TARGET_FILE:${name}>\nseeds=(")
  foreach(f IN LISTS ARG_SEEDS)
    string(APPEND text " '${f}'")
  endforeach()
  string(APPEND text " )\ncorpora=(")
  foreach(d IN LISTS ARG_CORPUS)
    string(APPEND text " '${d}'")
  endforeach()
  string(APPEND text " )\ndict='${ARG_DICT}'\n")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/fuzz-targets/${name}.sh CONTENT "${text}")
endfunction()
