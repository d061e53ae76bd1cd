# Third-party libraries, all from Debian 12 packages through pkg-config.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

# The runtime needs only these (carried as extracted .debs to the GPU machine).
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)

if(NOT MMGW_RUNTIME_ONLY)
  pkg_check_modules(LIBEVENT REQUIRED IMPORTED_TARGET libevent libevent_pthreads libevent_openssl)
  pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
  pkg_check_modules(OPENSSL REQUIRED IMPORTED_TARGET openssl)
  pkg_check_modules(GRPC REQUIRED IMPORTED_TARGET grpc)
  pkg_check_modules(PROTOBUFC REQUIRED IMPORTED_TARGET libprotobuf-c)
  pkg_check_modules(FFMPEG REQUIRED IMPORTED_TARGET libavformat libavcodec libswscale libavutil)
  pkg_check_modules(VIPS REQUIRED IMPORTED_TARGET vips)
  pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
  pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
  find_program(PROTOC_C protoc-c REQUIRED)
endif()
