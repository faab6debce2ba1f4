# The build's environment rule (cmake/BatchcastCheckEnvironment.cmake), as a test: the source
# tree passes it, and each planted read of the environment outside core/environment.cc fails
# it with a message naming the file. Run by ctest (environment_check, label unit):
#   cmake -DSOURCE=<repo> -DWORK=<scratch dir> -P environment_check_test.cmake
set(check ${SOURCE}/cmake/BatchcastCheckEnvironment.cmake)

function(run_check root out_rc out_text)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -P ${check}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${out}${err}" PARENT_SCOPE)
endfunction()

# 1. The tree itself.
run_check(${SOURCE} rc text)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the source tree breaks the environment rule:\n${text}")
endif()

# 2. Planted reads, one at a time, in a scratch tree with its own core/environment.cc (which
#    may read the environment) and a file that only names getenv in a comment.
# (CMake lists split at ';', so the planted lines have none.)
set(cases
    "runtime/node/planted.cc|const char* v = std::getenv(\"RANK\")"
    "launcher/run/planted.cc|const char* v = secure_getenv(\"X\")"
    "runtime/gpu/planted.cu|char** first = environ"
    "bindings/python/batchcast/planted.py|address = os.environ.get(\"BATCHCAST_ADDRESS\")"
    "bindings/python/batchcast/planted2.py|rank = os.getenv(\"RANK\")")
foreach(c ${cases})
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 file)
  list(GET parts 1 code)
  file(REMOVE_RECURSE ${WORK})
  file(WRITE ${WORK}/runtime/core/environment.cc "extern char** environ\nconst char* g = getenv(\"A\")\n")
  file(WRITE ${WORK}/runtime/core/log.cc "// reads BATCHCAST_DEBUG through env::Get, never getenv(\n")
  run_check(${WORK} rc text)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the rule refused a tree without a planted read:\n${text}")
  endif()
  file(WRITE ${WORK}/${file} "${code}\n")
  run_check(${WORK} rc text)
  if(rc EQUAL 0)
    message(FATAL_ERROR "the rule let a read of the environment in ${file} pass: ${code}")
  endif()
  string(FIND "${text}" "${file}: reads" at)  # CMake wraps messages after a few words
  if(at EQUAL -1)
    message(FATAL_ERROR "the rule's message does not name ${file}:\n${text}")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
list(LENGTH cases n)
message(STATUS "environment rule: the tree passes, ${n} planted reads fail")
