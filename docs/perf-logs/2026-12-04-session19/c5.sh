#!/bin/bash
# Session 19 call 5 (the command as given to the device tool): call 4's README run was cut by its
# own 530 s limit in the install stage (the build took 308 s that time); with the device time
# left, the README command's remaining stage on the same tree: setup, configure, build, then
# tests/install/install_test.sh.
T0=$(date +%s); (set -e; source scripts/common.sh; cd "$GV_ROOT"; scripts/setup.sh > $OUT/setup.log 2>&1; configure build > $OUT/configure.log 2>&1; build_tree build > $OUT/build.log 2>&1; echo "built at $(( $(date +%s) - T0 )) s"; tests/install/install_test.sh build > $OUT/install.log 2>&1; echo "install_test rc=$? at $(( $(date +%s) - T0 )) s") 2>&1; echo "rc=$?"; tail -15 $OUT/install.log
