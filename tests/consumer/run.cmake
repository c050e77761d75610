# ctest driver for the consumer project (cmake -P). Variables:
#   MODE        install: cmake --install BUILD_DIR into a fresh prefix under WORK_DIR, then
#                        build tests/consumer with find_package(posenc), run it, and build and
#                        run the same program with pkg-config's flags;
#               subdirectory: configure tests/consumer with add_subdirectory(SOURCE_DIR) only
#                        (it fails if the CLI, tests or Python module would be built).
#   SOURCE_DIR, BUILD_DIR, WORK_DIR, GENERATOR, CXX
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${err}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer ${SOURCE_DIR}/tests/consumer)
if(MODE STREQUAL "subdirectory")
  run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -G ${GENERATOR}
      -DCMAKE_CXX_COMPILER=${CXX} -DPOSENC_CONSUMER_SUBDIRECTORY=${SOURCE_DIR})
  return()
endif()

set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/posenc/encodings/rope.hpp lib/cmake/posenc/posenc-config.cmake
          lib/cmake/posenc/posenc-config-version.cmake lib/pkgconfig/posenc.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/consumer)

# pkg-config: the flags of the installed posenc.pc, one compile-and-link command.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
execute_process(COMMAND pkg-config --cflags --libs posenc RESULT_VARIABLE rc
                OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs posenc failed: ${err}")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CXX} -O1 ${consumer}/main.cpp -o ${WORK_DIR}/consumer_pc ${flags})
run(${WORK_DIR}/consumer_pc)
