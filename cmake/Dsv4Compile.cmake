# Compile settings shared by every dsv4 target.
#
# Numerics: -ffp-contract=off everywhere, so the compiler never fuses a*b+c into an fma behind our
# back: every kernel states its accumulation order and uses std::fma / _mm*_fmadd_* explicitly where
# it wants one, which is what lets SIMD, scalar and (later) CUDA paths agree bit for bit.
# No -ffast-math anywhere.
add_library(dsv4_compile_options INTERFACE)
target_compile_options(dsv4_compile_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align -Wformat=2
  -Wimplicit-fallthrough -Wmissing-declarations
  -ffp-contract=off -fno-math-errno)
if(DSV4_WERROR)
  target_compile_options(dsv4_compile_options INTERFACE -Werror)
endif()
if(DSV4_NATIVE)
  target_compile_options(dsv4_compile_options INTERFACE -march=native)
endif()
if(DSV4_SANITIZE)
  target_compile_options(dsv4_compile_options INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(dsv4_compile_options INTERFACE -fsanitize=address,undefined)
endif()

# Per-file ISA flags for run-time dispatched kernels (the rest of the code stays baseline x86-64).
set(DSV4_AVX2_FLAGS -mavx2 -mfma -mf16c -mbmi2)
# GCC 12's own avx512*intrin.h trips -W(maybe-)uninitialized on _mm512_undefined_* (GCC bug 105593),
# so AVX-512 files turn those two warnings off.
set(DSV4_AVX512_FLAGS -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mavx2 -mfma -mf16c -mbmi2
    -Wno-uninitialized -Wno-maybe-uninitialized)

# dsv4_room(NAME SOURCES... DEPS ...): a room is a static library whose headers are included as
# "room/file.h" from src/.
function(dsv4_room name)
  cmake_parse_arguments(R "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${R_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${R_DEPS} PRIVATE dsv4_compile_options)
endfunction()
