#!/usr/bin/env bash
# slurm/multi_node.sbatch on a private two-node Slurm cluster (start_local_slurm.sh --nodes 2):
# one slurmctld, and per node a slurmd in a network + UTS + mount namespace of its own (host
# name nodeI, a veth pair to a bridge, its own TmpFS), all inside a sandbox of network, UTS,
# mount and PID namespaces (tests/slurm/lib.sh) that leaves the host's network alone and takes
# every process with it when it ends.
#   1. MPI sees two hosts: an MPI probe (mpi_probe.c, srun --mpi=pmix, 4 ranks) reports 2
#      ranks per MPI_COMM_TYPE_SHARED node, 2 nodes, 4 ranks, one host per node, and an
#      allreduce over the nodes gives the right sum; with Open MPI's TCP transport taken
#      away (OMPI_MCA_btl=self,vader) the nodes cannot reach each other;
#   2. a reference job, `sbatch -N 2 --ntasks-per-node=2 slurm/multi_node.sbatch` with
#      parallel.shard_group=2, trains STEPS steps uninterrupted; ztrain's start-up line says
#      4 ranks = 2 nodes x 2 ranks/node, groups of 2;
#   3. the same job again, preempted: USR1 to the batch shell (as `--signal=B:USR1@120` sends
#      it) is forwarded to ztrain, which checkpoints and exits 0; the job requeues itself and
#      the second run resumes from that checkpoint to STEPS;
#   4. the resume is bit-exact: every step's loss, lr, gradient norm and token count in
#      metrics.jsonl, and the final validation loss, equal the reference's (JSON doubles are
#      written with 17 digits: equal text is equal bits), and the final checkpoints hold the
#      same bytes (every dataset of every shard file by h5diff, and the model's tensors after
#      zt-consolidate);
#   5. a link cut: while a job trains, node2's veth goes down; every rank ends within
#      parallel.timeout_s (+30 s), node1's ranks name node2's, `latest` names a complete
#      checkpoint, and with the link back a job resumes from it.
# Exit 0: passed; 1: failed; 77: skipped (not root, Slurm or namespaces not available).
# Usage: bash test_slurm_2node.sh BIN_DIR SOURCE_DIR
#   ZT_TEST_NO_INSTALL=1: do not apt-get install slurm-wlm, munge or iproute2 when missing.
#   ZT_TEST_KEEP=1: keep the scratch folder (job outputs, daemon logs, runs) afterwards.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"

if [ "${1:-}" != --in-sandbox ]; then
    BIN_DIR="$(cd "${1:?usage: test_slurm_2node.sh BIN_DIR SOURCE_DIR}" && pwd)"
    SRC="$(cd "${2:?usage: test_slurm_2node.sh BIN_DIR SOURCE_DIR}" && pwd)"
    zt_require_bins "$BIN_DIR" ztrain zt-prepare zt-consolidate
    zt_require_root
    zt_ensure_slurm
    command -v mpicc >/dev/null 2>&1 ||
        { echo "FAIL: mpicc not found (libopenmpi-dev; bash .ci/setup.sh installs it)" >&2; exit 1; }
    zt_enter_sandbox "${BASH_SOURCE[0]}" "$BIN_DIR" "$SRC"   # does not return
fi
shift
BIN_DIR="$1"
SRC="$2"
export PATH="$PATH:/usr/sbin:/sbin"
SBATCH_SCRIPT="$SRC/slurm/multi_node.sbatch"
STEPS=300           # steps of each training job (~20 ms each; the USR1 takes ~30 to arrive)
PREEMPT_AFTER=10    # USR1 once the job printed this step
# ztrain's start-up line (rank 0), as an ERE
START_RE='^ztrain: ranks: 4 = 2 nodes x 2 ranks/node; shard groups of 2 ranks \(2 replicas\)'
zt_sandbox_init

zt_scratch zt-slurm-2node
# After the stop: nothing of the cluster may be left. (The sandbox ends with this script and
# takes everything with it anyway; this says so if the stop itself left something behind.
# This script is the PID namespace's init: every other process here is the cluster's.)
zt_after_stop() {
    local left="" p comm state
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = "$$" ] && continue
        read -r comm <"$p/comm" 2>/dev/null || continue
        read -r _ _ state _ <"$p/stat" 2>/dev/null || continue
        [ "$state" = Z ] || left+="${p#/proc/} $comm; "
    done
    if [ -n "$left" ]; then
        echo "FAIL: processes left after stopping the cluster: $left" >&2
        [ "$rc" -eq 0 ] && rc=1
    fi
    if ip link show ztbr0 >/dev/null 2>&1; then
        echo "FAIL: the bridge ztbr0 is still there after stopping the cluster" >&2
        [ "$rc" -eq 0 ] && rc=1
    fi
}

# --- The cluster -----------------------------------------------------------------------
t0=$SECONDS
zt_start_cluster --nodes 2
# Between nodes Open MPI has only TCP over the bridge: name the subnet (here, in this test).
export OMPI_MCA_btl_tcp_if_include="$ZT_SLURM_SUBNET" OMPI_MCA_oob_tcp_if_include="$ZT_SLURM_SUBNET"
layout=(-N 2 --ntasks-per-node=2)
sbatch_opts=("${layout[@]}" -c 1 --chdir="$SCR")
zt_overcommit_for 2

# --- 1. MPI sees two hosts ---------------------------------------------------------------
if ! mpicc -O1 -o "$SCR/mpi_probe" "$HERE/mpi_probe.c" >"$SCR/mpicc.out" 2>&1; then
    echo "FAIL: mpicc could not build the MPI probe:" >&2
    cat "$SCR/mpicc.out" >&2
    exit 1
fi
if ! timeout 60 srun "${layout[@]}" ${ZT_SRUN_ARGS:-} --mpi=pmix "$SCR/mpi_probe" \
        >"$SCR/probe.out" 2>&1; then
    fail "probe: srun ${layout[*]} --mpi=pmix mpi_probe failed:"
    sed 's/^/    /' "$SCR/probe.out" >&2
    show_debug probe
    exit 1
fi
# "probe: rank R/W host H node-local L/S nodes N sum OK"
probe_problems="$(awk -v nodes="$ZT_SLURM_NODES" '
    BEGIN { n = split(nodes, known, ","); for (i = 1; i <= n; i++) is_node[known[i]] = 1 }
    /^probe: / {
        lines++
        split($3, rw, "/"); split($7, ls, "/")
        if (rw[2] != 4) print "rank " rw[1] " sees a world of " rw[2] " ranks, expected 4"
        if (ls[2] != 2) print "rank " rw[1] " on " $5 " has " ls[2] " rank(s) on its node (MPI_COMM_TYPE_SHARED), expected 2"
        if ($9 != 2) print "rank " rw[1] " counts " $9 " node(s), expected 2"
        if ($11 != "OK") print "rank " rw[1] ": the allreduce over all ranks gave a wrong sum"
        if (!($5 in is_node)) print "rank " rw[1] " runs on host " $5 ", not a cluster node (" nodes ")"
        host[rw[1]] = $5
        if (!($5 in per_host)) hosts++
        per_host[$5]++
    }
    END {
        if (lines != 4) print lines + 0 " probe line(s), expected 4"
        if (hosts != 2) print "the ranks ran on " hosts + 0 " host(s), expected 2"
        for (h in per_host) if (per_host[h] != 2) print per_host[h] " rank(s) on " h ", expected 2"
        if (host[0] != host[1] || host[2] != host[3] || host[0] == host[2])
            print "ranks 0,1 / 2,3 are on " host[0] "," host[1] " / " host[2] "," host[3] ", expected one node each"
    }' "$SCR/probe.out")"
if [ -n "$probe_problems" ]; then
    fail "probe: MPI does not see 2 nodes x 2 ranks:"
    sed 's/^/    /' <<<"$probe_problems" >&2
    sed 's/^/    probe output: /' "$SCR/probe.out" >&2
    exit 1
fi
# The nodes share no memory as far as MPI knows: with TCP taken away (shared memory and self
# only) ranks on different nodes cannot reach each other.
if timeout 60 env OMPI_MCA_btl=self,vader srun "${layout[@]}" ${ZT_SRUN_ARGS:-} --mpi=pmix \
        "$SCR/mpi_probe" >"$SCR/probe_no_tcp.out" 2>&1; then
    fail "probe: with OMPI_MCA_btl=self,vader (no TCP) the ranks still talked across nodes:" \
         "the nodes are not separate hosts to Open MPI"
    sed 's/^/    /' "$SCR/probe_no_tcp.out" >&2
    exit 1
elif ! grep -q 'unable to reach each other' "$SCR/probe_no_tcp.out"; then
    fail "probe: with OMPI_MCA_btl=self,vader it failed, but not with Open MPI's" \
         "'unable to reach each other' between the nodes:"
    head -30 "$SCR/probe_no_tcp.out" | sed 's/^/    /' >&2
    exit 1
fi
echo "slurm 2-node test: cluster and probe ok after $((SECONDS - t0)) s:" \
     "$(awk '/^probe: /{print $5}' "$SCR/probe.out" | sort | uniq -c | tr -s ' \n' ' ')"

# --- Data --------------------------------------------------------------------------------
zt_make_corpus "$BIN_DIR" "$SCR"
train_args=("--data.train=$SCR/data/train_*.bin" "--train.max_steps=$STEPS" --train.log_every=1
            --checkpoint.every=0 --parallel.zero_stage=3 --parallel.shard_group=2)

# expect_lines NAME COUNT ERE WHAT: NAME's output has COUNT lines matching ERE.
expect_lines() {
    local n
    n="$(grep -cE -- "$3" "$SCR/$1.out" 2>/dev/null)"
    if [ "${n:-0}" -ne "$2" ]; then
        fail "$1: ${n:-0} line(s) matching /$3/ ($4), expected $2; the job output (step lines left out):"
        grep -vE '^step +[0-9]+/' "$SCR/$1.out" 2>/dev/null | head -80 | sed 's/^/    /' >&2
        return 1
    fi
}

# --- 2. The reference: uninterrupted ----------------------------------------------------
REF="$SCR/ref"
t1=$SECONDS
timeout 150 sbatch --wait --job-name=zt-ref --output="$SCR/ref.out" "${sbatch_opts[@]}" \
    "$SBATCH_SCRIPT" "${train_args[@]}" --run.dir="$REF" >"$SCR/ref.sbatch" 2>&1
rc=$?
if ! check_status ref "$rc"; then
    if grep -q "unknown option '--parallel.shard_group'" "$SCR/ref.out"; then
        fail "ref: this ztrain has no parallel.shard_group key (issue 17, item 1): build one that has"
    fi
    exit 1
fi
expect_lines ref 1 "$START_RE" "ztrain's start-up line: 2 nodes, groups of 2"
expect_lines ref 1 "^step +$STEPS/$STEPS " "the last step"
echo "slurm 2-node test: reference job ran $STEPS steps in $((SECONDS - t1)) s"

# --- 3. Preempted with USR1, requeued, resumed --------------------------------------------
RUN="$SCR/run"
out="$SCR/preempt.out"
has_step() { grep -qE "^step +$PREEMPT_AFTER/" "$out" 2>/dev/null; }
t1=$SECONDS
ZT_MAX_RESTARTS=1 submit_bg preempt 150 "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "${train_args[@]}" \
    --run.dir="$RUN"
sb="$SUBMIT_PID"
preempt_once preempt has_step
if [ -n "$phase" ]; then
    fail "$phase"
    show_debug preempt
    [ -n "$JOB" ] && timeout 10 scancel "$JOB" 2>/dev/null
    exit 1
fi
wait "$sb"
rc=$?
bg_pids=()
check_status preempt "$rc" || exit 1
echo "slurm 2-node test: preempted job done in $((SECONDS - t1)) s (requeue delay included)"
expect_lines preempt 1 'got SIGUSR1' "the batch shell's trap"
expect_lines preempt 1 'requeueing job' "the self-requeue after the USR1"
expect_lines preempt 1 'restart count 1' "the second run's banner"
expect_lines preempt 2 "$START_RE" "ztrain's start-up line in both runs"
k="$(sed -nE 's/.*checkpoint .*step_0*([0-9]+) written.*/\1/p' "$out" | head -1)"
if [ -z "$k" ] || [ "$k" -lt "$PREEMPT_AFTER" ] || [ "$k" -ge "$STEPS" ]; then
    fail "preempt: the first run's checkpoint is at step '${k:-none}', expected one in" \
         "$PREEMPT_AFTER..$((STEPS - 1)) (the USR1 came after step $PREEMPT_AFTER)"
    sed 's/^/    /' "$out" >&2
    exit 1
fi
if ! awk '/restart count 1/ { r = 1 } r' "$out" | grep -i 'resum' |
        grep -qE "step[ _]0*$k([^0-9]|$)"; then
    fail "preempt: the requeued run did not say it resumed from step $k:"
    sed 's/^/    /' "$out" >&2
fi
if awk -v k="$k" '/restart count 1/ { r = 1 }
                 r && /^step +[0-9]+\// { split($2, a, "/"); if (a[1] + 0 <= k) bad = 1 }
                 END { exit !bad }' "$out"; then
    fail "preempt: the requeued run ran a step at or before $k again instead of resuming"
fi
expect_lines preempt 1 "^step +$STEPS/$STEPS " "the last step, in the second run"
echo "slurm 2-node test: preempted at step $k of $STEPS, resumed"

# --- 4. Bit-exact: metrics and final checkpoints --------------------------------------------
# Per step: step loss lr grad_norm tokens skipped loss_scale, as written (17 digits); and the
# validation losses. Timings and byte counters (per process) differ by nature.
metrics_table() {
    /usr/bin/python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line, parse_float=str, parse_int=str)
    if "loss" in r:
        print("step", *(r.get(k, "-") for k in ("step", "loss", "lr", "grad_norm", "tokens", "skipped", "loss_scale")))
    elif "val_loss" in r:
        print("val", r["step"], r["val_loss"])
PY
}
if ! metrics_table "$REF/metrics.jsonl" >"$SCR/ref.metrics" 2>"$SCR/metrics.err" ||
   ! metrics_table "$RUN/metrics.jsonl" >"$SCR/run.metrics" 2>>"$SCR/metrics.err"; then
    fail "cannot read metrics.jsonl: $(cat "$SCR/metrics.err")"
else
    n_ref="$(grep -c '^step ' "$SCR/ref.metrics")"
    n_run="$(grep -c '^step ' "$SCR/run.metrics")"
    [ "$n_ref" -eq "$STEPS" ] || fail "ref: $n_ref step record(s) in metrics.jsonl, expected $STEPS"
    [ "$n_run" -eq "$STEPS" ] || fail "preempt: $n_run step record(s) in metrics.jsonl, expected $STEPS (steps 1-$k, then $((k + 1))-$STEPS after the resume)"
    if ! diff "$SCR/ref.metrics" "$SCR/run.metrics" >"$SCR/metrics.diff"; then
        fail "the preempted run's metrics differ from the reference's (step loss lr grad_norm tokens skipped loss_scale; < reference, > preempted and resumed at step $k):"
        head -20 "$SCR/metrics.diff" | sed 's/^/    /' >&2
    fi
fi

last="$(printf 'step_%08d' "$STEPS")"
for d in "$REF" "$RUN"; do
    got="$(tr -d '[:space:]' <"$d/checkpoints/latest" 2>/dev/null)"
    [ "$got" = "$last" ] || fail "$d/checkpoints/latest names '${got:-nothing}', expected $last"
done
ref_ck="$REF/checkpoints/$last" run_ck="$RUN/checkpoints/$last"
# Every HDF5 file but meta.h5 (its JSON holds run paths and times): byte for byte by h5diff.
n_h5=0
for f in "$ref_ck"/*.h5; do
    [ -f "$f" ] || continue
    b="$(basename "$f")"
    [ "$b" = meta.h5 ] && continue
    n_h5=$((n_h5 + 1))
    if ! command -v h5diff >/dev/null 2>&1; then
        continue
    elif [ ! -f "$run_ck/$b" ]; then
        fail "final checkpoint: $b is in the reference but not in the resumed run"
    elif ! h5diff -r "$f" "$run_ck/$b" >"$SCR/h5diff.out" 2>&1; then
        fail "final checkpoint: $b differs between the reference and the resumed run (h5diff -r):"
        # "dataset: <a> and <b>" ... "N differences found": the objects that differ
        awk '/^(dataset|attribute):/ { obj = $0 } /^[1-9][0-9]* differences? found/ { print obj ": " $0 }' \
            "$SCR/h5diff.out" | head -12 | sed 's/^/    /' >&2
    fi
done
[ "$n_h5" -gt 0 ] || fail "final checkpoint: no shard files (*.h5 besides meta.h5) in $ref_ck"
# The model's tensors, consolidated: same names, shapes, dtypes and bytes.
for w in ref run; do
    ck="$ref_ck"; [ "$w" = run ] && ck="$run_ck"
    "$BIN_DIR/zt-consolidate" "$ck" --output "$SCR/$w.safetensors" >"$SCR/$w.consolidate" 2>&1 ||
        fail "zt-consolidate $ck failed: $(tail -3 "$SCR/$w.consolidate")"
done
if [ -f "$SCR/ref.safetensors" ] && [ -f "$SCR/run.safetensors" ]; then
    if ! cmp_out="$(/usr/bin/python3 - "$SCR/ref.safetensors" "$SCR/run.safetensors" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return h, b[8 + n:]
(ha, da), (hb, db) = load(sys.argv[1]), load(sys.argv[2])
bad = []
if sorted(ha) != sorted(hb):
    bad.append("tensor names differ: %s" % sorted(set(ha) ^ set(hb)))
for name in sorted(set(ha) & set(hb)):
    a, b = ha[name], hb[name]
    if (a["dtype"], a["shape"]) != (b["dtype"], b["shape"]):
        bad.append("%s: %s%s vs %s%s" % (name, a["dtype"], a["shape"], b["dtype"], b["shape"]))
    elif da[slice(*a["data_offsets"])] != db[slice(*b["data_offsets"])]:
        bad.append("%s: the bytes differ" % name)
print("%d tensors, %d bytes" % (len(ha), len(da)) if not bad else "\n".join(bad[:10]))
sys.exit(1 if bad else 0)
PY
)"; then
        fail "final model (zt-consolidate): the resumed run differs from the reference:"
        sed 's/^/    /' <<<"$cmp_out" >&2
    fi
fi

# --- 5. A link cut between the nodes -------------------------------------------------------
# While a job trains, node2's link to the bridge goes down (its veth end in this sandbox).
# Every rank must end within parallel.timeout_s plus a margin (the watchdog's poll, the
# processes' exit) with a message naming the other node's ranks; `latest` must name a
# complete checkpoint; once the link is back up, a job resumes from it.
CUT="$SCR/cut"
cut_out="$SCR/cut.out"
CUT_TIMEOUT=10
cut_ok=""
ranks_gone() { ! pgrep -x ztrain >/dev/null; }
has_checkpoint() { [ -s "$CUT/checkpoints/latest" ] && grep -qE '^step +25/' "$cut_out" 2>/dev/null; }
ZT_REQUEUE_ON_SIGNAL=0 submit_bg cut 240 "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "--data.train=$SCR/data/train_*.bin" \
    --train.max_steps=1000000 --train.log_every=1 --checkpoint.every=10 --parallel.zero_stage=3 \
    --parallel.shard_group=2 --parallel.timeout_s="$CUT_TIMEOUT" --run.dir="$CUT"
sb="$SUBMIT_PID"
if ! wait_until 90 has_checkpoint; then
    fail "cut: the job wrote no checkpoint and reached no step 25 within 90 s"
    show_debug cut
else
    ip link set ztv2 down || fail "cut: cannot take node2's link (ztv2) down"
    t_cut=$SECONDS
    if ! wait_until $((CUT_TIMEOUT + 30)) ranks_gone; then
        fail "cut: ztrain ranks still alive $((SECONDS - t_cut)) s after the link went down (parallel.timeout_s = $CUT_TIMEOUT): $(pgrep -ax ztrain | tr '\n' ';')"
    else
        cut_s=$((SECONDS - t_cut))
        echo "slurm 2-node test: link to node2 cut; every rank ended ${cut_s} s later (parallel.timeout_s = $CUT_TIMEOUT)"
        cut_ok=1
    fi
    ip link set ztv2 up || fail "cut: cannot bring node2's link (ztv2) back up"
fi
# Once every rank has ended, what is left is Slurm's own bookkeeping of a step whose node was
# unreachable: srun and slurmctld may wait for node2's messages that were lost while the
# link was down. That is Slurm's, not ztrain's: if the job is still there 60 s after the
# link came back, say so with Slurm's view of it, cancel it and judge ztrain by its output.
sb_done() { ! kill -0 "$sb" 2>/dev/null; }
rc=""
if [ -n "$cut_ok" ] && ! wait_until 60 sb_done; then
    echo "slurm 2-node test: note: Slurm still holds the cut job 60 s after every rank ended; cancelling it" >&2
    show_debug cut
    timeout 10 scontrol show job "$JOB" >&2 2>&1
    timeout 10 scancel "$JOB" 2>/dev/null
    rc=cancelled
fi
wait "$sb"
sb_rc=$?
bg_pids=()
if [ -z "$rc" ]; then
    rc=$sb_rc
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
        fail "cut: the job's exit code is $rc, expected a failure (not 0, not a timeout)"
    fi
fi
# srun's status as the batch script saw it, when srun returned before the cancel
if grep -qE '^ztrain-slurm: ztrain exited with status 0 ' "$cut_out"; then
    fail "cut: srun reported ztrain's exit status as 0 after the link cut, expected a failure"
fi
if [ -n "$cut_ok" ]; then
    expect_lines cut 2 "^ztrain: rank [01]: collective .* has waited [0-9]+ s in step [0-9]+ \(parallel.timeout_s = $CUT_TIMEOUT\): .*the ranks on other hosts: node2 \(ranks 2, 3\)" \
        "the watchdog of both ranks on node1 naming node2's ranks"
    kc="$(tr -d '[:space:]' <"$CUT/checkpoints/latest" 2>/dev/null)"
    if [ -z "$kc" ] || [ ! -f "$CUT/checkpoints/$kc/meta.h5" ] || [ ! -f "$CUT/checkpoints/$kc/CHECKSUM" ]; then
        fail "cut: latest names '${kc:-nothing}', not a complete checkpoint"
    else
        kstep=$((10#${kc#step_}))
        timeout 150 sbatch --wait --job-name=zt-cut2 --output="$SCR/cut2.out" "${sbatch_opts[@]}" "$SBATCH_SCRIPT" \
            "--data.train=$SCR/data/train_*.bin" --train.max_steps=$((kstep + 5)) --train.log_every=1 \
            --checkpoint.every=10 --parallel.zero_stage=3 --parallel.shard_group=2 --run.dir="$CUT" \
            >"$SCR/cut2.sbatch" 2>&1
        rc=$?
        if check_status cut2 "$rc"; then
            expect_lines cut2 1 "resumed from .*$kc at step $kstep" "the resume from the checkpoint before the cut"
            expect_lines cut2 1 "^step +$((kstep + 5))/$((kstep + 5)) " "the last step after the resume"
            echo "slurm 2-node test: after the cut, resumed from $kc with the link back"
        fi
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "test_slurm_2node: $failures failure(s)" >&2
    exit 1
fi
echo "test_slurm_2node: all checks passed in $((SECONDS - t0)) s (preempted at step $k of $STEPS;" \
     "$STEPS step records, $n_h5 shard file(s) and the consolidated model ($cmp_out) bit-identical)"
