# batchcast_check_environment(ROOT): fails (FATAL_ERROR, naming the file and the line) when a
# source of ROOT/runtime, ROOT/launcher or ROOT/bindings reads the process environment
# anywhere but runtime/core/environment.cc: getenv / secure_getenv, the `environ` array, or
# os.environ / os.getenv in Python. Every environment variable Batchcast reads is an option
# of the registry (runtime/core/options.cc) or a row of the environment table
# (runtime/core/environment.h); docs/architecture.md "Configuration".
#
# runtime/CMakeLists.txt calls it at configure time; the unit test environment_check_planted
# runs this file as a script (cmake -DROOT=DIR -P BatchcastCheckEnvironment.cmake) on a tree
# with a planted getenv and expects it to fail.
function(batchcast_check_environment root)
  set(allowed ${root}/runtime/core/environment.cc)
  set(files)
  foreach(top runtime launcher bindings)
    file(GLOB_RECURSE found ${root}/${top}/*.h ${root}/${top}/*.cc ${root}/${top}/*.cu
         ${root}/${top}/*.py)
    list(APPEND files ${found})
  endforeach()
  foreach(f ${files})
    if(f STREQUAL allowed)
      continue()
    endif()
    # A read: getenv( / secure_getenv(, environ as a name, os.environ, os.getenv. Comment
    # lines (//, #) may name them.
    file(STRINGS ${f} lines REGEX
         "getenv[ \t]*\\(|(^|[^A-Za-z0-9_.])environ([^A-Za-z0-9_]|$)|os\\.environ|os\\.getenv")
    foreach(line ${lines})
      if(line MATCHES "^[ \t]*(//|#)")
        continue()
      endif()
      file(RELATIVE_PATH rel ${root} ${f})
      string(STRIP "${line}" code)
      message(FATAL_ERROR "${rel}: reads the environment outside the options registry "
                          "(${code}); read an option through the registry "
                          "(runtime/core/options.cc) and any other variable through "
                          "runtime/core/environment.h, adding its row there "
                          "(docs/architecture.md \"Configuration\")")
    endforeach()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED ROOT)
  batchcast_check_environment(${ROOT})
endif()
