# Tests of the sm_90 splicer (src/cubin/sass90.cpp) and the atomizing
# rewrite (src/cubin/atomize.cpp), on kernels compiled here by nvcc and PTX
# assembled here by ptxas. Needs the container fixtures (container.cmake).
if(LITHOS_NVCC)
  find_program(LITHOS_PTXAS ptxas PATHS /usr/local/cuda/bin NO_DEFAULT_PATH)
  set(atom_fixtures "")
  # The atom check assembled by ptxas with the bounds at several offsets.
  foreach(pad IN ITEMS 0 8 1000 4096)
    if(pad EQUAL 0)
      set(PAD_PARAM "")
    else()
      set(PAD_PARAM ".param .align 8 .b8 pad[${pad}], ")
    endif()
    configure_file(fixtures/atom_check.ptx.in ${LITHOS_CUBIN_FIXTURES}/atom_check.${pad}.ptx @ONLY)
    set(out ${LITHOS_CUBIN_FIXTURES}/atom_check.${pad}.cubin)
    add_custom_command(OUTPUT ${out}
      COMMAND ${LITHOS_PTXAS} -arch=sm_90 -o ${out} ${LITHOS_CUBIN_FIXTURES}/atom_check.${pad}.ptx
      DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/atom_check.ptx.in COMMENT "ptxas atom_check.${pad}" VERBATIM)
    list(APPEND atom_fixtures ${out})
  endforeach()
  set(out ${LITHOS_CUBIN_FIXTURES}/branches.cubin)
  add_custom_command(OUTPUT ${out}
    COMMAND ${LITHOS_PTXAS} -arch=sm_90 -o ${out} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/branches.ptx
    DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/branches.ptx COMMENT "ptxas branches" VERBATIM)
  list(APPEND atom_fixtures ${out})
  # The GPU corpus's driver-API kernels (scripts/atom/corpus_kernels.cu).
  set(out ${LITHOS_CUBIN_FIXTURES}/corpus_kernels.sm90.cubin)
  add_custom_command(OUTPUT ${out}
    COMMAND ${LITHOS_NVCC} -cubin -arch=sm_90 -o ${out} ${PROJECT_SOURCE_DIR}/scripts/atom/corpus_kernels.cu
    DEPENDS ${PROJECT_SOURCE_DIR}/scripts/atom/corpus_kernels.cu COMMENT "nvcc corpus_kernels" VERBATIM)
  list(APPEND atom_fixtures ${out})
  add_custom_target(cubin_atom_fixtures ALL DEPENDS ${atom_fixtures})

  lithos_add_test(cubin_atomize_test SOURCES atomize_test.cpp LIBS lithos_cubin)
  target_compile_definitions(cubin_atomize_test PRIVATE LITHOS_CUBIN_FIXTURES="${LITHOS_CUBIN_FIXTURES}")
  add_dependencies(cubin_atomize_test cubin_atom_fixtures cubin_fixtures)

  lithos_add_fuzz(fuzz_atomize SOURCES fuzz_atomize.cpp LIBS lithos_cubin TEST cubin.fuzz_atomize
    SEEDS ${LITHOS_CUBIN_FIXTURES}/coop.sm90.cubin ${LITHOS_CUBIN_FIXTURES}/misc.sm90.cubin
          ${LITHOS_CUBIN_FIXTURES}/corpus_kernels.sm90.cubin
    CORPUS ${LITHOS_FUZZ_REGRESSIONS}/fuzz_atomize
    DICT ${LITHOS_FUZZ_DIR}/dicts/cubin.dict SECONDS 20)
endif()

# `lithos atomize` through the binary: a fatbin in, the rewritten cubin out.
if(LITHOS_NVCC AND TARGET lithos)
  add_test(NAME cli.atomize.fatbin
    COMMAND $<TARGET_FILE:lithos> atomize ${LITHOS_CUBIN_FIXTURES}/kernels.zstd.fatbin
            ${CMAKE_CURRENT_BINARY_DIR}/kernels.atomized.cubin --json)
  set_tests_properties(cli.atomize.fatbin PROPERTIES
    PASS_REGULAR_EXPRESSION "\"compressed\":true.*\"status\":\"patched\"")
  # The rewritten cubin is refused a second time: nothing left to rewrite (exit 1).
  add_test(NAME cli.atomize.twice
    COMMAND sh -c "\"$0\" atomize \"$1\" \"$2\" >/dev/null && \"$0\" atomize \"$2\" \"$2.again\"; test $? -eq 1"
            $<TARGET_FILE:lithos> ${LITHOS_CUBIN_FIXTURES}/corpus_kernels.sm90.cubin
            ${CMAKE_CURRENT_BINARY_DIR}/corpus.atomized.cubin)
  # Not an image: exit 2. PTX: exit 1, saying the interposer compiles it first.
  add_test(NAME cli.atomize.garbage
    COMMAND sh -c "\"$0\" atomize \"$1\" /dev/null 2>&1; test $? -eq 2" $<TARGET_FILE:lithos>
            ${CMAKE_CURRENT_SOURCE_DIR}/atomize.cmake)
  add_test(NAME cli.atomize.ptx
    COMMAND $<TARGET_FILE:lithos> atomize ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/atom_check.ptx.in /dev/null)
  set_tests_properties(cli.atomize.ptx PROPERTIES WILL_FAIL FALSE PASS_REGULAR_EXPRESSION "compiles such PTX")
endif()
