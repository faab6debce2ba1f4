# batchcast-run tests (included from tests/e2e/CMakeLists.txt).
# - launcher_trainer: the test trainer every launcher test (e2e and tests/slurm) starts.
# - launcher_placement_test: launch-environment detection and placement, no processes (unit).
# - launcher_test.sh CASE: real mpirun / torchrun-style launches and impossible layouts (e2e).
add_executable(launcher_trainer ${CMAKE_CURRENT_LIST_DIR}/launcher_trainer.cc)
target_link_libraries(launcher_trainer PRIVATE batchcast_static)
target_compile_options(launcher_trainer PRIVATE ${BATCHCAST_WARNINGS})

add_executable(launcher_placement_test ${CMAKE_CURRENT_LIST_DIR}/launcher_placement_test.cc)
target_link_libraries(launcher_placement_test PRIVATE bc_launch_run GTest::gtest_main)
target_compile_options(launcher_placement_test PRIVATE ${BATCHCAST_WARNINGS})
gtest_discover_tests(launcher_placement_test DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120
                     PROPERTIES LABELS "unit;e2e" TIMEOUT 60)

set(launcher_env LAUNCHER_RUN_BIN=$<TARGET_FILE:batchcast_run>
    LAUNCHER_CLI_BIN=$<TARGET_FILE:batchcast_cli>
    LAUNCHER_TRAINER=$<TARGET_FILE:launcher_trainer>
    LAUNCHER_SOURCE_DIR=${PROJECT_SOURCE_DIR} MPIEXEC=${MPIEXEC_EXECUTABLE})
if(TARGET _batchcast)  # the Python module: a Python trainer under the launcher
  list(APPEND launcher_env LAUNCHER_PYTHONPATH=${BATCHCAST_PYTHON_DIR})
  set(launcher_python_case python_trainer)
endif()
foreach(case mpirun_three ${launcher_python_case} mpirun_leader_trains mpirun_trainer_fails
             mpirun_sweep_trial_killed shard torchrun_style torch_ddp signals layouts
             gpu_placement mps_fake telemetry_dir)
  add_test(NAME e2e_launcher_${case}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/launcher_test.sh ${case}
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(e2e_launcher_${case} PROPERTIES LABELS e2e TIMEOUT 180
                       ENVIRONMENT "${launcher_env}")
endforeach()
