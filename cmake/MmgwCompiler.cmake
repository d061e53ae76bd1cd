# Warnings, sanitizers and visibility shared by every C target.
include(CheckCCompilerFlag)
set(MMGW_C_WARNINGS -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wshadow -Wpointer-arith
    -Wvla -Wformat=2 -Wno-unused-parameter -Werror=implicit-function-declaration)
if(MMGW_WERROR)
  list(APPEND MMGW_C_WARNINGS -Werror)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C>:${MMGW_C_WARNINGS}>")
add_compile_definitions(_GNU_SOURCE)

if(MMGW_SANITIZE)
  set(_san "-fsanitize=${MMGW_SANITIZE}" -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${_san}>")
  add_link_options(${_san})
endif()
