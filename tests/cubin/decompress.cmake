# Tests of the LZ4 and Zstandard decompressors (src/cubin/{lz4,zstd,xxhash}.cpp).
#
# Test data is made at build time: cubin_decompress_gen writes deterministic
# inputs (text, random, repetitive, structured, a real ELF executable, ...),
# and the zstd and lz4 programs compress them with many settings. The test
# decompresses each file and compares it byte for byte with its input; the
# list of (kind, compressed, original) triples is in decompress-data/manifest.txt.
# Without the zstd or lz4 program (scripts/setup.sh installs both) the
# data-driven tests are skipped and only the hand-made cases run.
find_program(LITHOS_ZSTD_PROGRAM zstd)
find_program(LITHOS_LZ4_PROGRAM lz4)

set(decomp_dir ${CMAKE_CURRENT_BINARY_DIR}/decompress-data)
file(MAKE_DIRECTORY ${decomp_dir})

add_executable(cubin_decompress_gen ${CMAKE_CURRENT_SOURCE_DIR}/decompress_gen.cpp)
target_link_libraries(cubin_decompress_gen PRIVATE lithos_options)
target_include_directories(cubin_decompress_gen PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})

set(decomp_inputs empty one tiny text repeat random ints mixed long elf skip small smallrep smallrand medium)
set(decomp_input_files "")
foreach(name IN LISTS decomp_inputs)
  list(APPEND decomp_input_files ${decomp_dir}/${name}.bin)
endforeach()
add_custom_command(OUTPUT ${decomp_input_files}
  COMMAND cubin_decompress_gen inputs ${decomp_dir}
  DEPENDS cubin_decompress_gen
  COMMENT "decompressor test inputs" VERBATIM)

set(decomp_outputs ${decomp_input_files})
set(decomp_manifest "")

# decomp_zstd(out input flags...): ${decomp_dir}/<out> = zstd <flags> <input>.bin
function(decomp_zstd out input)
  add_custom_command(OUTPUT ${decomp_dir}/${out}
    COMMAND ${LITHOS_ZSTD_PROGRAM} -q -f ${ARGN} ${decomp_dir}/${input}.bin -o ${decomp_dir}/${out}
    DEPENDS ${decomp_dir}/${input}.bin
    COMMENT "zstd ${ARGN} ${input}" VERBATIM)
  set(decomp_outputs ${decomp_outputs} ${decomp_dir}/${out} PARENT_SCOPE)
  set(decomp_manifest "${decomp_manifest}zstd ${out} ${input}.bin\n" PARENT_SCOPE)
endfunction()

# decomp_lz4(out input flags...): ${decomp_dir}/<out> = lz4 <flags> <input>.bin
function(decomp_lz4 out input)
  add_custom_command(OUTPUT ${decomp_dir}/${out}
    COMMAND ${LITHOS_LZ4_PROGRAM} -q -f ${ARGN} ${decomp_dir}/${input}.bin ${decomp_dir}/${out}
    DEPENDS ${decomp_dir}/${input}.bin
    COMMENT "lz4 ${ARGN} ${input}" VERBATIM)
  set(decomp_outputs ${decomp_outputs} ${decomp_dir}/${out} PARENT_SCOPE)
  set(decomp_manifest "${decomp_manifest}lz4 ${out} ${input}.bin\n" PARENT_SCOPE)
endfunction()

# decomp_cat(out files...): concatenation (no manifest entry)
function(decomp_cat out)
  set(files "")
  foreach(f IN LISTS ARGN)
    list(APPEND files ${decomp_dir}/${f})
  endforeach()
  add_custom_command(OUTPUT ${decomp_dir}/${out}
    COMMAND cubin_decompress_gen cat ${decomp_dir}/${out} ${files}
    DEPENDS cubin_decompress_gen ${files}
    COMMENT "cat ${out}" VERBATIM)
  set(decomp_outputs ${decomp_outputs} ${decomp_dir}/${out} PARENT_SCOPE)
endfunction()

set(decomp_seeds "")
if(LITHOS_ZSTD_PROGRAM AND LITHOS_LZ4_PROGRAM)
  # Zstandard: levels from --fast to --ultra -22, with and without the
  # checksum and the content size, small windows, long-distance matching.
  decomp_zstd(text-1.zst text -1)
  decomp_zstd(text-3.zst text -3)
  decomp_zstd(text-9.zst text -9)
  decomp_zstd(text-19.zst text -19)
  decomp_zstd(text-22.zst text --ultra -22)
  decomp_zstd(text-fast.zst text --fast=3)
  decomp_zstd(text-nocheck.zst text -3 --no-check)
  decomp_zstd(text-nosize.zst text -19 --no-check --no-content-size)
  decomp_zstd(text-wlog10.zst text -6 --zstd=wlog=10)
  decomp_zstd(repeat-1.zst repeat -1)
  decomp_zstd(repeat-19.zst repeat -19)
  decomp_zstd(repeat-22.zst repeat --ultra -22)
  decomp_zstd(random-3.zst random -3)
  decomp_zstd(random-19.zst random -19 --no-check)
  decomp_zstd(ints-3.zst ints -3)
  decomp_zstd(ints-19.zst ints -19)
  decomp_zstd(mixed-3.zst mixed -3)
  decomp_zstd(mixed-19-long.zst mixed -19 --long)
  decomp_zstd(long-3-long.zst long -3 --long)
  decomp_zstd(elf-1.zst elf -1)
  decomp_zstd(elf-3.zst elf -3)
  decomp_zstd(elf-19.zst elf -19)
  decomp_zstd(elf-22.zst elf --ultra -22 --no-check)
  decomp_zstd(tiny-3.zst tiny -3)
  decomp_zstd(tiny-19.zst tiny -19 --no-check)
  decomp_zstd(one-3.zst one -3)
  decomp_zstd(empty-3.zst empty -3)
  decomp_zstd(empty-nosize.zst empty -3 --no-content-size)
  decomp_zstd(small-1.zst small -1)
  decomp_zstd(small-19.zst small -19)
  decomp_zstd(small-22.zst small --ultra -22 --no-check)
  decomp_zstd(smallrep-19.zst smallrep -19)
  decomp_zstd(smallrand-3.zst smallrand -3)
  decomp_zstd(medium-19.zst medium -19)
  # Several frames, a skippable frame among them.
  decomp_cat(multi.zst text-1.zst tiny-19.zst skip.bin random-3.zst empty-3.zst ints-19.zst)
  decomp_cat(multi.bin text.bin tiny.bin random.bin empty.bin ints.bin)
  set(decomp_manifest "${decomp_manifest}zstd multi.zst multi.bin\n")
  decomp_cat(small-multi.zst small-1.zst skip.bin tiny-3.zst)
  decomp_cat(small-multi.bin small.bin tiny.bin)
  set(decomp_manifest "${decomp_manifest}zstd small-multi.zst small-multi.bin\n")

  # LZ4 frames with independent blocks (-BI), whose blocks the test feeds
  # to the block decoder one by one. -B4..-B7: 64 KiB to 4 MiB blocks.
  decomp_lz4(text-1.lz4 text -1 -BI -B4)
  decomp_lz4(text-9.lz4 text -9 -BI -B5)
  decomp_lz4(text-12.lz4 text -12 -BI -B6)
  decomp_lz4(text-fast.lz4 text --fast=4 -BI -B7)
  decomp_lz4(text-bx.lz4 text -1 -BI -B4 -BX --content-size --no-frame-crc)
  decomp_lz4(repeat-1.lz4 repeat -1 -BI -B4)
  decomp_lz4(repeat-12.lz4 repeat -12 -BI -B7)
  decomp_lz4(random-1.lz4 random -1 -BI -B4)
  decomp_lz4(ints-9.lz4 ints -9 -BI -B5)
  decomp_lz4(mixed-9.lz4 mixed -9 -BI -B4)
  decomp_lz4(elf-1.lz4 elf -1 -BI -B4)
  decomp_lz4(elf-12.lz4 elf -12 -BI -B5)
  decomp_lz4(tiny-1.lz4 tiny -1 -BI)
  decomp_lz4(tiny-12.lz4 tiny -12 -BI)
  decomp_lz4(one-1.lz4 one -1 -BI)
  decomp_lz4(empty-1.lz4 empty -1 -BI)
  decomp_lz4(small-1.lz4 small -1 -BI -B4)
  decomp_lz4(small-12.lz4 small -12 -BI -B4)
  decomp_lz4(smallrep-1.lz4 smallrep -1 -BI -B4)

  # Fuzz seeds: small compressed files, and LZ4 blocks behind their size.
  foreach(s IN ITEMS small smallrep)
    add_custom_command(OUTPUT ${decomp_dir}/${s}-1.lz4seed
      COMMAND cubin_decompress_gen lz4seed ${decomp_dir}/${s}-1.lz4seed ${decomp_dir}/${s}-1.lz4 ${decomp_dir}/${s}.bin
      DEPENDS cubin_decompress_gen ${decomp_dir}/${s}-1.lz4 ${decomp_dir}/${s}.bin VERBATIM)
    list(APPEND decomp_outputs ${decomp_dir}/${s}-1.lz4seed)
  endforeach()
  add_custom_command(OUTPUT ${decomp_dir}/small-12.lz4seed
    COMMAND cubin_decompress_gen lz4seed ${decomp_dir}/small-12.lz4seed ${decomp_dir}/small-12.lz4 ${decomp_dir}/small.bin
    DEPENDS cubin_decompress_gen ${decomp_dir}/small-12.lz4 ${decomp_dir}/small.bin VERBATIM)
  list(APPEND decomp_outputs ${decomp_dir}/small-12.lz4seed)
  foreach(s IN ITEMS small-1.zst small-19.zst small-22.zst smallrep-19.zst smallrand-3.zst tiny-3.zst
                     tiny-19.zst empty-3.zst medium-19.zst small-multi.zst
                     small-1.lz4seed small-12.lz4seed smallrep-1.lz4seed)
    list(APPEND decomp_seeds ${decomp_dir}/${s})
  endforeach()
else()
  message(STATUS "zstd or lz4 program not found: the decompressor tests run without compressed test data")
endif()

file(WRITE ${decomp_dir}/manifest.txt "${decomp_manifest}")
add_custom_target(cubin_decompress_data DEPENDS ${decomp_outputs})

lithos_add_test(cubin_decompress_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/decompress_test.cpp
  LIBS lithos_cubin)
add_dependencies(cubin_decompress_test cubin_decompress_data)
target_include_directories(cubin_decompress_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_compile_definitions(cubin_decompress_test PRIVATE LITHOS_DECOMPRESS_DATA="${decomp_dir}")

lithos_add_fuzz(fuzz_decompress
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_decompress.cpp
  LIBS lithos_cubin
  TEST cubin.fuzz_decompress
  SEEDS ${decomp_seeds}
  CORPUS ${LITHOS_FUZZ_REGRESSIONS}/fuzz_decompress
  DICT ${LITHOS_FUZZ_DIR}/dicts/decompress.dict
  SECONDS 20)
