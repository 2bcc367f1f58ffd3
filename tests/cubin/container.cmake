# Tests of the container readers and writers (src/cubin/{fatbin,elf,nvinfo}.cpp).
#
# The fixtures are CUDA sources in fixtures/ compiled here by nvcc into
# cubins (sm_90, sm_80, relocatable, debug) and multi-architecture fatbins
# (sm_80 and sm_90 SASS plus compute_90 PTX) stored plain, Zstandard- and
# LZ4-compressed. Without nvcc the tests that need them are skipped.
set(cont_sources kernels coop cluster misc)
set(cont_fixtures "")
if(LITHOS_NVCC)
  foreach(src IN LISTS cont_sources)
    lithos_cubin_fixture(OUTPUT ${src}.sm90.cubin SOURCE ${src}.cu ARGS -cubin -arch=sm_90)
    list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/${src}.sm90.cubin)
  endforeach()
  foreach(src IN ITEMS kernels coop misc)
    lithos_cubin_fixture(OUTPUT ${src}.sm80.cubin SOURCE ${src}.cu ARGS -cubin -arch=sm_80)
    list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/${src}.sm80.cubin)
  endforeach()
  # sm_100 cubins carry Mercury sections, one sharing another's bytes.
  lithos_cubin_fixture(OUTPUT kernels.sm100.cubin SOURCE kernels.cu ARGS -cubin -arch=sm_100)
  list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/kernels.sm100.cubin)
  # Relocatable (ET_REL) and debug (-G) cubins exercise other layouts.
  lithos_cubin_fixture(OUTPUT kernels.rdc.sm90.cubin SOURCE kernels.cu ARGS -cubin -rdc=true -arch=sm_90)
  lithos_cubin_fixture(OUTPUT coop.debug.sm90.cubin SOURCE coop.cu ARGS -cubin -G -arch=sm_90)
  list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/kernels.rdc.sm90.cubin
       ${LITHOS_CUBIN_FIXTURES}/coop.debug.sm90.cubin)

  set(cont_gencode -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
                   -gencode arch=compute_90,code=compute_90)
  # --compress-mode=none: every entry plain. size: every entry Zstandard.
  # speed with -compress-all: every entry LZ4 (CUDA 13 still writes LZ4).
  lithos_cubin_fixture(OUTPUT kernels.plain.fatbin SOURCE kernels.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=none)
  lithos_cubin_fixture(OUTPUT kernels.zstd.fatbin SOURCE kernels.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=size)
  lithos_cubin_fixture(OUTPUT kernels.lz4.fatbin SOURCE kernels.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=speed -Xfatbin=-compress-all)
  # Default-ish: balance compresses only the PTX (Zstandard).
  lithos_cubin_fixture(OUTPUT kernels.balance.fatbin SOURCE kernels.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=balance)
  lithos_cubin_fixture(OUTPUT coop.debug.fatbin SOURCE coop.cu
    ARGS -fatbin -G -gencode arch=compute_90,code=sm_90 --compress-mode=none)
  # Small fatbins, mostly as fuzz seeds.
  lithos_cubin_fixture(OUTPUT coop.plain.fatbin SOURCE coop.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=none)
  lithos_cubin_fixture(OUTPUT coop.zstd.fatbin SOURCE coop.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=size)
  lithos_cubin_fixture(OUTPUT coop.lz4.fatbin SOURCE coop.cu
    ARGS -fatbin ${cont_gencode} --compress-mode=speed -Xfatbin=-compress-all)
  foreach(f IN ITEMS kernels.plain kernels.zstd kernels.lz4 kernels.balance coop.debug coop.plain coop.zstd
                     coop.lz4)
    list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/${f}.fatbin)
  endforeach()
  lithos_cubin_fixture(OUTPUT kernels.sm90.ptx SOURCE kernels.cu ARGS -ptx -arch=sm_90)
  list(APPEND cont_fixtures ${LITHOS_CUBIN_FIXTURES}/kernels.sm90.ptx)
endif()

# Fuzz seeds: the small fixtures (the large ones slow every mutation down).
set(cont_seeds "")
if(LITHOS_NVCC)
  foreach(f IN ITEMS coop.sm90.cubin cluster.sm90.cubin misc.sm90.cubin coop.sm80.cubin coop.plain.fatbin
                     coop.zstd.fatbin coop.lz4.fatbin)
    list(APPEND cont_seeds ${LITHOS_CUBIN_FIXTURES}/${f})
  endforeach()
endif()

lithos_add_test(cubin_container_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/container_test.cpp
  LIBS lithos_cubin)
if(LITHOS_NVCC)
  target_compile_definitions(cubin_container_test PRIVATE LITHOS_CUBIN_FIXTURES="${LITHOS_CUBIN_FIXTURES}")
  add_dependencies(cubin_container_test cubin_fixtures)
endif()

lithos_add_fuzz(fuzz_container
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_container.cpp
  LIBS lithos_cubin
  TEST cubin.fuzz_container
  SEEDS ${cont_seeds}
  CORPUS ${LITHOS_FUZZ_CORPORA}/fuzz_container ${LITHOS_FUZZ_REGRESSIONS}/fuzz_container
  DICT ${LITHOS_FUZZ_DIR}/dicts/cubin.dict
  SECONDS 20)
