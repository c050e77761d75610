# docs/schemes.md's table of the declared schemes, written from the declarations at build time:
# the output of `posenc schemes` replaces what stands between the doc's markers, and the file is
# rewritten only when that changes (a clean clone of a current main builds without touching it).
#   cmake -DPOSENC=<posenc binary> -DDOC=<docs/schemes.md> -DSTAMP=<file> -P gen-schemes-doc.cmake
# tests/test_cli_schemes.cpp (CliSchemes.DocsTableIsCurrent) fails on a committed doc left stale.
foreach(v POSENC DOC STAMP)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "gen-schemes-doc: -D${v}= is required")
  endif()
endforeach()
# A sanitized binary reports its (intended) leaks at exit otherwise.
set(ENV{ASAN_OPTIONS} "detect_leaks=0")
execute_process(COMMAND ${POSENC} schemes OUTPUT_VARIABLE table RESULT_VARIABLE rc
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gen-schemes-doc: `${POSENC} schemes` failed (${rc}): ${err}")
endif()
file(READ ${DOC} doc)
set(begin "<!-- BEGIN posenc schemes -->\n")
set(end "<!-- END posenc schemes -->")
string(FIND "${doc}" "${begin}" b)
string(FIND "${doc}" "${end}" e)
if(b EQUAL -1 OR e EQUAL -1 OR e LESS b)
  message(FATAL_ERROR "gen-schemes-doc: ${DOC} lacks the markers ${begin} ... ${end}")
endif()
string(LENGTH "${begin}" n)
math(EXPR head "${b} + ${n}")
string(SUBSTRING "${doc}" 0 ${head} before)
string(SUBSTRING "${doc}" ${e} -1 after)
set(new "${before}${table}${after}")
if(NOT new STREQUAL doc)
  file(WRITE ${DOC} "${new}")
  message(STATUS "gen-schemes-doc: ${DOC} rewritten from the declarations")
endif()
file(TOUCH ${STAMP})
