# tests/check_exports.cmake: libloom exports loom_* and nothing else.
#
#   cmake -DNM=nm -DLIBS="libloom.so;libloom.a" -P tests/check_exports.cmake
#
# For each library, every defined global symbol (nm -g --defined-only; the
# dynamic table, nm -D, for a shared library) must be a public name:
# `loom_` followed by anything but a second underscore (`loom__` names are
# internal). Anything else could clash with a name of the user's program
# (its own wire_encode, comm_create, ps_push) when it links libloom.a, or
# be bound to it when it links libloom.so. Fails naming each offender.
if(NOT NM OR NOT LIBS)
  message(FATAL_ERROR "usage: cmake -DNM=nm -DLIBS=lib1;lib2 -P check_exports.cmake")
endif()
set(bad 0)
foreach(lib ${LIBS})
  if(NOT EXISTS "${lib}")
    message(FATAL_ERROR "${lib}: no such file (build it first)")
  endif()
  if(lib MATCHES "\\.so(\\.[0-9]+)*$")
    set(args -D --defined-only)
  else()
    set(args -g --defined-only)
  endif()
  execute_process(COMMAND ${NM} ${args} ${lib} OUTPUT_VARIABLE out
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${args} ${lib} failed: ${err}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  set(n 0)
  set(others "")
  foreach(line ${lines})
    # "<value> <type> <name>"; file headers and blank lines have no type
    if(NOT line MATCHES "^[0-9a-fA-F]* +([A-Za-z]) +([^ ]+)$")
      continue()
    endif()
    set(name "${CMAKE_MATCH_2}")
    math(EXPR n "${n} + 1")
    if(NOT name MATCHES "^loom_[^_]")
      list(APPEND others "${name}")
    endif()
  endforeach()
  list(LENGTH others nothers)
  if(n EQUAL 0)
    message(SEND_ERROR "${lib}: no defined global symbol at all (is it the library?)")
    set(bad 1)
  elseif(nothers GREATER 0)
    list(JOIN others " " shown)
    message(SEND_ERROR "${lib}: ${nothers} of its ${n} global symbols are not loom_*: ${shown}")
    set(bad 1)
  else()
    message(STATUS "${lib}: ${n} global symbols, all loom_*")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "libloom must export loom_* only (hidden visibility; the installed "
          "archive is one relocatable object with the rest localized)")
endif()
