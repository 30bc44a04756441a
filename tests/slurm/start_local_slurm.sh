#!/usr/bin/env bash
# A private one-node Slurm cluster on localhost for tests: its own munged (own key and
# socket), slurmctld and slurmd, every file (config, state, spool, logs, pid files) under
# SCRATCH, and free TCP ports picked at start, so it can run beside a site's Slurm or another
# copy of itself. Needs root (slurmd launches jobs as their user) and the Debian packages
# slurm-wlm and munge (.ci/setup.sh installs them).
#
#   bash start_local_slurm.sh start SCRATCH   # then: source SCRATCH/env.sh; sbatch ...
#   bash start_local_slurm.sh stop SCRATCH    # cancels jobs, stops the daemons (idempotent)
#
# start exits 0 with the node idle, 77 when the machine cannot run it (not root, packages
# missing), 1 on any other failure (with the daemon logs printed). The daemons keep running
# after start returns: always pair it with stop (the tests do so in an EXIT trap).
set -uo pipefail

cmd="${1:-}"
SCR="${2:-}"
if [ -z "$cmd" ] || [ -z "$SCR" ]; then
    echo "usage: $0 start|stop SCRATCH_DIR" >&2
    exit 2
fi
SCR="$(mkdir -p "$SCR" && cd "$SCR" && pwd)"
CONF="$SCR/etc/slurm.conf"

log() { echo "local-slurm: $*"; }

# Prints the pid in FILE when that process is alive.
live_pid() {
    local f="$1" pid
    [ -f "$f" ] || return 1
    pid="$(cat "$f" 2>/dev/null)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# stop_pid FILE NAME: TERM, up to 10 s, then KILL.
stop_pid() {
    local f="$1" name="$2" pid
    pid="$(live_pid "$f")" || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || { log "stopped $name ($pid)"; return 0; }
        sleep 0.2
    done
    log "$name ($pid) ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null
}

# Pids of this cluster's job processes (slurmstepd, batch shells, srun, tasks): a slurmstepd
# (its environment is slurmd's) or a process with SLURM_JOB_ID, whose environment names this
# cluster's config. Nothing else matches, not even a shell that sourced env.sh.
own_processes() {
    local p
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = "$$" ] && continue
        grep -qzxF "SLURM_CONF=$CONF" "$p/environ" 2>/dev/null || continue
        if [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] ||
           grep -qz '^SLURM_JOB_ID=' "$p/environ" 2>/dev/null; then
            echo "${p#/proc/}"
        fi
    done
}

do_stop() {
    export SLURM_CONF="$CONF"
    if live_pid "$SCR/run/slurmctld.pid" >/dev/null; then
        local jobs
        jobs="$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
        if [ -n "${jobs// /}" ]; then
            log "cancelling job(s) $jobs"
            # shellcheck disable=SC2086
            timeout 10 scancel $jobs 2>/dev/null
            for _ in $(seq 50); do
                [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.2
            done
        fi
    fi
    stop_pid "$SCR/run/slurmd.pid" slurmd
    stop_pid "$SCR/run/slurmctld.pid" slurmctld
    # Whatever is left of this cluster's jobs (a slurmstepd outlives slurmd).
    local left
    left="$(own_processes | tr '\n' ' ')"
    if [ -n "${left// /}" ]; then
        log "killing leftover job processes: $left"
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null
    fi
    stop_pid "$SCR/run/munged.pid" munged
    return 0
}

# A random TCP port in 20000-59999 that nothing on 127.0.0.1 listens on.
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

show_logs() {
    local f
    for f in "$SCR"/log/*.log; do
        [ -f "$f" ] || continue
        echo "----- $f (last 30 lines) -----" >&2
        tail -30 "$f" >&2
    done
}

do_start() {
    if live_pid "$SCR/run/slurmctld.pid" >/dev/null; then
        log "already running under $SCR (stop it first to start afresh)"
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: a private slurmd must run as root (it launches jobs as their user); uid is $(id -u)"
        exit 77
    fi
    local b missing=()
    for b in munged slurmctld slurmd sbatch srun squeue scancel scontrol; do
        command -v "$b" >/dev/null 2>&1 || missing+=("$b")
    done
    if [ ${#missing[@]} -ne 0 ]; then
        echo "SKIP: not installed: ${missing[*]} (Debian packages slurm-wlm munge; bash .ci/setup.sh installs them)"
        exit 77
    fi

    # munged wants every folder above its socket searchable by all (x for others).
    local d="$SCR"
    while [ -n "$d" ] && [ "$d" != / ]; do
        d="$(dirname "$d")"
        if [ "$(( 0$(stat -c %a "$d") & 01 ))" -eq 0 ]; then
            echo "FAIL: $d is not searchable by others (mode $(stat -c %a "$d")); munged needs" \
                 "that for its socket below it: chmod o+x it or use another SCRATCH" >&2
            exit 1
        fi
    done
    mkdir -p "$SCR"/{etc,run,log,state,spool,tmp,munge}
    chmod 755 "$SCR"
    chmod 711 "$SCR/munge"   # munged refuses a socket folder others can write to
    chmod 700 "$SCR/state" "$SCR/etc"

    # --- munge: own key, own socket -----------------------------------------------------
    local key="$SCR/etc/munge.key" sock="$SCR/munge/munge.socket"
    if [ ! -s "$key" ]; then
        head -c 1024 /dev/urandom >"$key"
        chmod 400 "$key"
    fi
    if ! live_pid "$SCR/run/munged.pid" >/dev/null; then
        munged --key-file="$key" --socket="$sock" --pid-file="$SCR/run/munged.pid" \
               --log-file="$SCR/log/munged.log" --seed-file="$SCR/run/munged.seed" \
               >"$SCR/log/munged.out" 2>&1 || {
            echo "FAIL: munged did not start:" >&2
            cat "$SCR/log/munged.out" "$SCR/log/munged.log" >&2 2>/dev/null
            exit 1
        }
    fi
    if ! printf ok | munge --socket="$sock" | unmunge --socket="$sock" >/dev/null 2>&1; then
        echo "FAIL: munge/unmunge through $sock does not work" >&2
        show_logs
        exit 1
    fi

    # --- slurm.conf ------------------------------------------------------------------------
    local host node ctld_port d_port
    host="$(hostname -s)"
    # slurmd -C: "NodeName=vm CPUs=2 Boards=1 ... RealMemory=24105"; RealMemory left out so
    # a little less free memory never drains the node.
    node="$(slurmd -C 2>/dev/null | head -1 | sed 's/ RealMemory=[0-9]*//')"
    case "$node" in
        NodeName=*) ;;
        *) echo "FAIL: 'slurmd -C' printed no NodeName line" >&2; exit 1 ;;
    esac
    local nodename="${node%% *}"
    nodename="${nodename#NodeName=}"
    if ! ctld_port="$(free_port)" || ! d_port="$(free_port)"; then
        echo "FAIL: no free TCP port found" >&2
        exit 1
    fi
    [ "$ctld_port" = "$d_port" ] && d_port=$((d_port + 1))
    cat >"$CONF" <<CONF
# Generated by tests/slurm/start_local_slurm.sh: a private one-node cluster.
ClusterName=ztlocal
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again cred_expire + 1 s later (default 120).
AuthInfo=socket=$sock,cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
MailProg=/bin/true
ReturnToService=2
MinJobAge=5
KillWait=10
SchedulerParameters=bf_interval=1,sched_interval=1
StateSaveLocation=$SCR/state
SlurmdSpoolDir=$SCR/spool
SlurmctldPidFile=$SCR/run/slurmctld.pid
SlurmdPidFile=$SCR/run/slurmd.pid
SlurmctldLogFile=$SCR/log/slurmctld.log
SlurmdLogFile=$SCR/log/slurmd.log
SlurmdDebug=info
SlurmctldDebug=info
TmpFS=$SCR/tmp
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$nodename Default=YES MaxTime=INFINITE State=UP
CONF

    cat >"$SCR/env.sh" <<ENV
export SLURM_CONF=$CONF
ENV
    export SLURM_CONF="$CONF"

    # --- daemons -------------------------------------------------------------------------
    if ! live_pid "$SCR/run/slurmctld.pid" >/dev/null; then
        slurmctld -f "$CONF" -i >"$SCR/log/slurmctld.out" 2>&1 || {
            echo "FAIL: slurmctld did not start" >&2; cat "$SCR/log/slurmctld.out" >&2; show_logs; exit 1; }
    fi
    if ! live_pid "$SCR/run/slurmd.pid" >/dev/null; then
        slurmd -f "$CONF" -N "$nodename" >"$SCR/log/slurmd.out" 2>&1 || {
            echo "FAIL: slurmd did not start" >&2; cat "$SCR/log/slurmd.out" >&2; show_logs; exit 1; }
    fi

    # --- wait for the node to be idle (bounded) ------------------------------------------
    local state=""
    for _ in $(seq 100); do
        state="$(timeout 5 sinfo -h -n "$nodename" -o %t 2>/dev/null | head -1)"
        [ "$state" = idle ] && break
        sleep 0.2
    done
    if [ "$state" != idle ]; then
        echo "FAIL: node $nodename is '${state:-unknown}' 20 s after start, not idle" >&2
        timeout 5 scontrol show node "$nodename" >&2
        show_logs
        exit 1
    fi
    log "cluster up: SLURM_CONF=$CONF, node $nodename idle, ports $ctld_port/$d_port"
}

# A failed start leaves nothing running.
on_start_exit() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        do_stop >/dev/null 2>&1
    fi
    exit "$rc"
}

case "$cmd" in
    start)
        trap on_start_exit EXIT
        do_start
        ;;
    stop) do_stop ;;
    *) echo "usage: $0 start|stop SCRATCH_DIR" >&2; exit 2 ;;
esac
