#!/usr/bin/env bash
# A private Slurm cluster on this machine for tests: its own munged (own key and socket),
# slurmctld and slurmd(s), every file (config, state, spool, logs, pid files) under SCRATCH,
# so it can run beside a site's Slurm or another copy of itself. Needs root (slurmd launches
# jobs as their user) and the Debian packages slurm-wlm and munge (.ci/setup.sh installs them).
#
#   bash start_local_slurm.sh start SCRATCH [--nodes N]   # then: source SCRATCH/env.sh; sbatch ...
#   bash start_local_slurm.sh stop SCRATCH                # cancels jobs, stops the daemons (idempotent)
#
# One node (the default): slurmctld and slurmd on 127.0.0.1, free TCP ports picked at start.
# N >= 2 nodes: each node is a network + UTS + mount namespace of its own (host name nodeI,
# address 10.200.77.I on a veth pair to a bridge ztbr0 whose end, 10.200.77.254, is
# slurmctld's; its own TmpFS, spool, log and pid files), one slurmd in each. Processes on
# different nodes reach each other only over TCP through the bridge, as on real nodes. This
# mode changes the network, so it runs only inside the sandbox of tests/slurm/lib.sh
# (zt_enter_sandbox: private network/UTS/mount/PID namespaces) and refuses anywhere else.
# env.sh then also exports ZT_SLURM_SUBNET (for OMPI_MCA_btl_tcp_if_include) and
# ZT_SLURM_NODES.
#
# start exits 0 with every node idle, 77 when the machine cannot run it (not root, packages
# missing), 1 on any other failure (with the daemon logs printed). The daemons keep running
# after start returns: always pair it with stop (the tests do so in an EXIT trap).
set -uo pipefail

usage() { echo "usage: $0 start SCRATCH_DIR [--nodes N] | stop SCRATCH_DIR" >&2; exit 2; }
cmd="${1:-}"
SCR="${2:-}"
{ [ -z "$cmd" ] || [ -z "$SCR" ]; } && usage
NODES=1
if [ $# -gt 2 ]; then
    if [ $# -ne 4 ] || [ "$3" != --nodes ] || [ "$cmd" != start ]; then usage; fi
    NODES="$4"
    case "$NODES" in ''|*[!0-9]*) usage ;; esac
    { [ "$NODES" -ge 1 ] && [ "$NODES" -le 8 ]; } || { echo "--nodes: 1 to 8" >&2; exit 2; }
fi
SCR="$(mkdir -p "$SCR" && cd "$SCR" && pwd)"
CONF="$SCR/etc/slurm.conf"
# Multi-node network: node I is 10.200.77.I, slurmctld 10.200.77.254 on the bridge.
NET_PREFIX=10.200.77
BRIDGE=ztbr0

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
    local f
    # slurmd.pid (one node), slurmd-NODE.pid (several)
    for f in "$SCR"/run/slurmd*.pid; do
        [ -f "$f" ] && stop_pid "$f" "$(basename "$f" .pid)"
    done
    stop_pid "$SCR/run/slurmctld.pid" slurmctld
    # Whatever is left of this cluster's jobs (a slurmstepd outlives slurmd).
    local left
    left="$(own_processes | tr '\n' ' ')"
    if [ -n "${left// /}" ]; then
        log "killing leftover job processes: $left"
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null
    fi
    # The node namespaces (several nodes): their holder process keeps them; with it the
    # namespace, its veth end and so the pair go away.
    for f in "$SCR"/run/netns-*.pid; do
        [ -f "$f" ] && stop_pid "$f" "namespace holder $(basename "$f" .pid)"
    done
    if [ -f "$SCR/etc/bridge" ] && [ "$(cat "$SCR/etc/bridge")" = "$(readlink /proc/self/ns/net)" ] &&
       ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
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

# The multi-node mode changes the network: only inside the sandbox of tests/slurm/lib.sh,
# whose network namespace is ZT_SANDBOX_NETNS and holds nothing but lo and our own links.
check_sandbox() {
    local here ifs
    here="$(readlink /proc/self/ns/net)"
    if [ "${ZT_SANDBOX_NETNS:-}" != "$here" ]; then
        echo "FAIL: --nodes $NODES changes the network: run it inside the test sandbox" \
             "(tests/slurm/lib.sh zt_enter_sandbox), not in this network namespace ($here)" >&2
        exit 1
    fi
    ifs="$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' |
           grep -vxE "lo|$BRIDGE|ztv[0-9]+" | tr '\n' ' ')"
    if [ -n "${ifs// /}" ]; then
        echo "FAIL: --nodes $NODES: this network namespace has other interfaces ($ifs):" \
             "not a private sandbox, refusing to change it" >&2
        exit 1
    fi
}

# start_node_ns I: node I's namespaces (network, UTS, mount), held by a sleeping process,
# wired to the bridge; its TmpFS is its own folder bound over $SCR/tmp.
start_node_ns() {
    local i="$1" name="node$1" pid
    mkdir -p "$SCR/nodes/$name/tmp" "$SCR/spool/$name"
    unshare --net --uts --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 &
    pid=$!
    echo "$pid" >"$SCR/run/netns-$name.pid"
    # unshare execs sleep once the namespaces exist
    for _ in $(seq 50); do
        [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] &&
            [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sleep ] && break
        sleep 0.1
    done
    if ! { ip link add "ztv$i" type veth peer name eth0 netns "$pid" &&
           ip link set "ztv$i" master "$BRIDGE" up &&
           nsenter -t "$pid" --net --uts --mount -- sh -ec "
               hostname $name
               ip link set lo up
               ip addr add $NET_PREFIX.$i/24 dev eth0
               ip link set eth0 up
               mount --bind '$SCR/nodes/$name/tmp' '$SCR/tmp'"; }; then
        echo "FAIL: could not set up the namespaces of $name" >&2
        exit 1
    fi
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
    if [ "$NODES" -gt 1 ]; then
        for b in ip unshare nsenter; do
            command -v "$b" >/dev/null 2>&1 || missing+=("$b")
        done
    fi
    if [ ${#missing[@]} -ne 0 ]; then
        echo "SKIP: not installed: ${missing[*]} (Debian packages slurm-wlm munge iproute2; bash .ci/setup.sh installs them)"
        exit 77
    fi
    [ "$NODES" -gt 1 ] && check_sandbox

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

    # --- munge: own key, own socket (a unix socket: every node namespace reaches it) ------
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
    local nodename="${node%% *}" hw="${node#* }"
    nodename="${nodename#NodeName=}"
    if ! ctld_port="$(free_port)" || ! d_port="$(free_port)"; then
        echo "FAIL: no free TCP port found" >&2
        exit 1
    fi
    [ "$ctld_port" = "$d_port" ] && d_port=$((d_port + 1))
    local ctld_addr=127.0.0.1 nodes=() node_lines="" per_node="" i
    if [ "$NODES" -eq 1 ]; then
        nodes=("$nodename")
        node_lines="$node NodeAddr=127.0.0.1 State=UNKNOWN"
        per_node="SlurmdSpoolDir=$SCR/spool
SlurmdPidFile=$SCR/run/slurmd.pid
SlurmdLogFile=$SCR/log/slurmd.log"
    else
        ctld_addr="$NET_PREFIX.254"
        for i in $(seq "$NODES"); do
            nodes+=("node$i")
            node_lines+="NodeName=node$i $hw NodeAddr=$NET_PREFIX.$i State=UNKNOWN"$'\n'
        done
        # %n: the node's name, so every slurmd has its own spool, pid and log file.
        per_node="SlurmdSpoolDir=$SCR/spool/%n
SlurmdPidFile=$SCR/run/slurmd-%n.pid
SlurmdLogFile=$SCR/log/slurmd-%n.log"
    fi
    local node_list
    node_list="$(IFS=,; echo "${nodes[*]}")"
    cat >"$CONF" <<CONF
# Generated by tests/slurm/start_local_slurm.sh: a private $NODES-node cluster.
ClusterName=ztlocal
SlurmctldHost=$host($ctld_addr)
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
SlurmctldPidFile=$SCR/run/slurmctld.pid
SlurmctldLogFile=$SCR/log/slurmctld.log
$per_node
SlurmdDebug=info
SlurmctldDebug=info
# Jobs' temporary storage; with several nodes each node binds its own folder over it.
TmpFS=$SCR/tmp
$node_lines
PartitionName=debug Nodes=$node_list Default=YES MaxTime=INFINITE State=UP
CONF

    {
        echo "export SLURM_CONF=$CONF"
        if [ "$NODES" -gt 1 ]; then
            echo "export ZT_SLURM_SUBNET=$NET_PREFIX.0/24"
            echo "export ZT_SLURM_NODES=$node_list"
        fi
    } >"$SCR/env.sh"
    export SLURM_CONF="$CONF"

    # --- network (several nodes): a bridge here, one namespace set per node ----------------
    if [ "$NODES" -gt 1 ]; then
        readlink /proc/self/ns/net >"$SCR/etc/bridge"
        if ! { ip link add "$BRIDGE" type bridge && ip addr add "$ctld_addr/24" dev "$BRIDGE" &&
               ip link set "$BRIDGE" up; }; then
            echo "FAIL: could not create the bridge $BRIDGE" >&2
            exit 1
        fi
        for i in $(seq "$NODES"); do
            start_node_ns "$i"
        done
    fi

    # --- daemons -------------------------------------------------------------------------
    if ! live_pid "$SCR/run/slurmctld.pid" >/dev/null; then
        slurmctld -f "$CONF" -i >"$SCR/log/slurmctld.out" 2>&1 || {
            echo "FAIL: slurmctld did not start" >&2; cat "$SCR/log/slurmctld.out" >&2; show_logs; exit 1; }
    fi
    if [ "$NODES" -eq 1 ]; then
        if ! live_pid "$SCR/run/slurmd.pid" >/dev/null; then
            slurmd -f "$CONF" -N "$nodename" >"$SCR/log/slurmd.out" 2>&1 || {
                echo "FAIL: slurmd did not start" >&2; cat "$SCR/log/slurmd.out" >&2; show_logs; exit 1; }
        fi
    else
        local n ns
        for n in "${nodes[@]}"; do
            ns="$(cat "$SCR/run/netns-$n.pid")"
            nsenter -t "$ns" --net --uts --mount -- slurmd -f "$CONF" -N "$n" \
                >"$SCR/log/slurmd-$n.out" 2>&1 || {
                echo "FAIL: slurmd on $n did not start" >&2; cat "$SCR/log/slurmd-$n.out" >&2; show_logs; exit 1; }
        done
    fi

    # --- wait for every node to be idle (bounded) ----------------------------------------
    local states=""
    for _ in $(seq 100); do
        states="$(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u | tr '\n' ' ')"
        [ "$(grep -o ' idle' <<<"$states" | wc -l)" -eq "$NODES" ] && break
        sleep 0.2
    done
    if [ "$(grep -o ' idle' <<<"$states" | wc -l)" -ne "$NODES" ]; then
        echo "FAIL: not every node is idle 20 s after start: ${states:-no answer from sinfo}" >&2
        timeout 5 scontrol show node >&2
        show_logs
        exit 1
    fi
    if [ "$NODES" -eq 1 ]; then
        log "cluster up: SLURM_CONF=$CONF, node $nodename idle, ports $ctld_port/$d_port"
    else
        log "cluster up: SLURM_CONF=$CONF, nodes $node_list idle ($NET_PREFIX.1-$NODES," \
            "slurmctld $ctld_addr), ports $ctld_port/$d_port"
    fi
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
    *) usage ;;
esac
