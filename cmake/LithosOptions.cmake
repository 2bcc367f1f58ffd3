# Compiler settings shared by every lithos target, applied through the
# interface library lithos_options so that third-party code is unaffected.
add_library(lithos_options INTERFACE)
target_compile_options(lithos_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Wcast-align -Woverloaded-virtual
  -Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
# GCC 12 at -O2/-O3 reports -Wrestrict on `"literal" + std::string` inside
# libstdc++ itself (GCC bug 105329, fixed in GCC 13): a false positive.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(lithos_options INTERFACE -Wno-restrict)
endif()
# x86-64-v2 (2008 and later: POPCNT, SSE4.2): TpcSet counts bits on every
# scheduling decision, and without POPCNT that is a library call.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  target_compile_options(lithos_options INTERFACE -march=x86-64-v2)
endif()
if(LITHOS_WERROR)
  target_compile_options(lithos_options INTERFACE -Werror)
endif()
if(LITHOS_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "LITHOS_FUZZ needs clang (libFuzzer): configure with the `fuzz` preset or scripts/fuzz.sh")
  endif()
  # Coverage for libFuzzer in every lithos object; the fuzz targets add
  # -fsanitize=fuzzer at link time (tests/fuzz/lithos_add_fuzz.cmake).
  target_compile_options(lithos_options INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(lithos_options INTERFACE -fsanitize=address,undefined)
elseif(LITHOS_SANITIZE)
  target_compile_options(lithos_options INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(lithos_options INTERFACE -fsanitize=address,undefined)
endif()
target_include_directories(lithos_options INTERFACE ${PROJECT_SOURCE_DIR}/src)
