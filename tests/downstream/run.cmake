# A downstream project, as docs/your-own-project.md builds it: `cmake --install` volt into a scratch
# prefix, then build tests/downstream (find_package(volt), its own model and data module behind
# volt::CLI) and run fit, a resume from ckpt_path=last, and predict with a PredictionWriter from
# YAML. Also: the installed `volt` runs from the prefix, and every file of the project appears
# verbatim in the page.
set(prefix ${VOLT_BINARY_DIR}/downstream-prefix)
set(work ${VOLT_BINARY_DIR}/downstream-build)
set(src ${VOLT_SOURCE_DIR}/tests/downstream)
file(REMOVE_RECURSE ${prefix} ${work})

# The page shows exactly these files.
file(READ ${VOLT_SOURCE_DIR}/docs/your-own-project.md page)
foreach(name CMakeLists.txt model.h data.h main.cpp config.yaml predict.yaml)
  file(READ ${src}/${name} text)
  string(FIND "${page}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "docs/your-own-project.md does not show tests/downstream/${name} verbatim")
  endif()
endforeach()

execute_process(COMMAND ${CMAKE_COMMAND} --install ${VOLT_BINARY_DIR} --prefix ${prefix} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
# The installed command finds the installed libvolt.so (its RPATH), from anywhere.
execute_process(COMMAND ${prefix}/bin/volt --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${VOLT_BINARY_DIR})
if(NOT rc EQUAL 0 OR NOT out MATCHES "usage: volt")
  message(FATAL_ERROR "the installed volt --help failed (${rc}): ${out}${err}")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} -S ${src} -B ${work} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the downstream project failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${work} -j2 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the downstream project failed: ${rc}")
endif()

# Runs `my_project ARGS...` in the build folder (the config's paths are relative to it) and checks
# the exit code.
function(run_project expect)
  execute_process(COMMAND ${work}/my_project ${ARGN} WORKING_DIRECTORY ${work} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect)
    message(FATAL_ERROR "my_project ${ARGN}: exit ${rc}, expected ${expect}\n${out}\n${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

run_project(0 --help)
run_project(0 fit --help)
if(NOT last_output MATCHES "--model.init_args.hidden +\\(type: int, default: 32\\)")
  message(FATAL_ERROR "my_project fit --help does not list model.init_args.hidden:\n${last_output}")
endif()
run_project(2 fit --config ${src}/config.yaml --model.init_args.hiden=8)
if(NOT last_output MATCHES "model.init_args.hiden")
  message(FATAL_ERROR "the unknown key is not named:\n${last_output}")
endif()

run_project(0 fit --config ${src}/config.yaml)
if(NOT EXISTS ${work}/runs/regressor/checkpoints/last.ckpt)
  message(FATAL_ERROR "fit wrote no runs/regressor/checkpoints/last.ckpt")
endif()
run_project(0 fit --config ${src}/config.yaml --ckpt_path=last --trainer.max_epochs=8)
run_project(0 predict --config ${src}/config.yaml --config ${src}/predict.yaml --ckpt_path=last)
if(NOT EXISTS ${work}/runs/regressor/predictions/rank_0.pt)
  message(FATAL_ERROR "predict wrote no runs/regressor/predictions/rank_0.pt")
endif()
