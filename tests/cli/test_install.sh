#!/usr/bin/env bash
# The installed tool (issue 35): `cmake --install` of the existing build into a temporary
# prefix lays out bin/ (ztrain, zt-prepare, zt-consolidate, zt-eval, zt-generate, ztrun), share/ztrain/ (decks,
# Slurm scripts, postproc) and a modulefile that puts bin/ on PATH; the demo deck then runs
# from the prefix alone, outside the source tree, through the installed launcher, and a
# Ctrl-C there stops it with a checkpoint and a message naming the signal.
# Usage: test_install.sh BIN_DIR SOURCE_DIR (the source is not used: the prefix must do)
set -u
BIN=$1
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
# As a user has it: no Open MPI root permission in the environment (ztrun gives its own).
unset OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
build=$(cd "$BIN/.." && pwd)
prefix="$work/prefix"
if ! cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1; then
  echo "FAIL: cmake --install $build --prefix $prefix"; tail -5 "$work/install.log"; exit 1
fi
for f in bin/ztrain bin/zt-prepare bin/zt-consolidate bin/zt-eval bin/zt-generate bin/ztrun; do
  check "installed $f (executable)" test -x "$prefix/$f"
done
for f in inputs/demo.ini inputs/tasks/tiny_choice.jsonl inputs/tiny.ini inputs/llama_tiny.ini inputs/gpt2_124m.ini inputs/smollm2_135m.ini \
         slurm/common.sh slurm/cpu.sbatch postproc/plot_metrics.py postproc/inspect_checkpoint.py; do
  check "installed share/ztrain/$f" test -f "$prefix/share/ztrain/$f"
done
version=$("$prefix/bin/ztrain" --version | awk '{print $2}')
modfile="$prefix/share/modulefiles/ztrain/$version"
check "the modulefile share/modulefiles/ztrain/$version exists" test -f "$modfile"
# The modulefile, read as Environment Modules and Lmod read it (Tcl), with their commands
# stubbed: it must prepend the prefix's bin/ to PATH and name the share folder.
if command -v tclsh > /dev/null && [ -f "$modfile" ]; then
  env_out=$(tclsh <<TCL 2>&1
proc prepend-path {var val} { puts "\$var=\$val" }
proc setenv {var val} { puts "\$var=\$val" }
proc module-whatis {args} {}
proc conflict {args} {}
source {$modfile}
TCL
)
  check "the modulefile prepends $prefix/bin to PATH" grep -qxF "PATH=$prefix/bin" <<<"$env_out"
  check "the modulefile sets ZT_BIN for the Slurm scripts" grep -qxF "ZT_BIN=$prefix/bin/ztrain" <<<"$env_out"
else
  echo "note: no tclsh: the modulefile is not evaluated"
fi
expect 2 "usage: ztrun N PROGRAM" "$prefix/bin/ztrun"

# The demo deck from the prefix, in a folder outside the source tree, on PATH alone.
mkdir -p "$work/user" && cd "$work/user" || exit 1
export PATH="$prefix/bin:$PATH"
for i in $(seq 1 400); do echo "a fortune $i: the early bird gets the worm"; echo "%"; done > fortunes.txt
expect 0 "val: [0-9]+ tokens" zt-prepare --input fortunes.txt --output data/fortunes --doc-separator % --val-fraction 0.05
deck="$prefix/share/ztrain/inputs/demo.ini"
expect 0 "^ztrain: 3 steps in" ztrun 2 ztrain --config "$deck" --train.max_steps=3 --train.eval_every=0 \
  --train.threads=1 --train.sample_tokens=0
check "the run wrote run/demo/metrics.jsonl where the user stands" test -s run/demo/metrics.jsonl
expect 0 "wrote" zt-consolidate run/demo/checkpoints --output run/demo/model.safetensors

# Ctrl-C (SIGINT to the launcher's process group, as a terminal sends it).
set -m
ztrun 2 ztrain --config "$deck" --run.dir=run/stop --train.max_steps=100000 --train.eval_every=0 \
  --train.threads=1 --train.log_every=1 --train.sample_tokens=0 > stop.log 2>&1 &
pid=$!
set +m
for _ in $(seq 1 300); do grep -qE "step +2/" stop.log 2>/dev/null && break; sleep 0.1; done
kill -INT -- "-$pid"
for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && { echo "FAIL: Ctrl-C did not stop the installed run"; kill -KILL -- "-$pid"; }
wait "$pid"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "stopped after Ctrl-C (SIGINT, passed to the ranks as SIGUSR1)" stop.log &&
   [ -s run/stop/checkpoints/latest ]; then
  echo "ok: Ctrl-C through the installed ztrun: checkpoint $(cat run/stop/checkpoints/latest), exit 0, signal named"
else
  echo "FAIL: Ctrl-C through the installed ztrun: exit $rc"; tail -5 stop.log; failures=$((failures + 1))
fi
cd / && [ "$failures" -eq 0 ]
