#!/usr/bin/env bash
# Runs the client-server sample (samples/client_server.cu) as two real processes on loopback,
# one case per call (tests/CMakeLists.txt registers each with ctest):
#
#   client_server_test.sh BINARY CASE
#
#   loopback       --gpu -1 (CPU threads) on both sides: both exit 0 and print "Validation
#                  successful"; twice, with the default size and with an odd one
#   gpu            the same with --gpu 0 on both sides; exit 77 (a skip) when the sample says
#                  the GPU does not exist; stops the MPS daemon afterwards if the run started it
#   two-gpu        the server with --gpu 0, the client with --gpu 1 (QPs across two GPUs of
#                  this host), both with --no-mps and off any running MPS daemon (one process
#                  per GPU needs none); exit 77 (a skip), saying why, with fewer than two GPUs
#   no-server      a client with nobody listening exits non-zero within its --timeout-ms,
#                  naming host:port, and says once what it waits for
#   bad-clients    the server survives, one after the other, a client that connects and
#                  closes, one that sends garbage, one that stays silent (rejected after
#                  --timeout-ms), a real client with other --rounds (which exits 1 saying so):
#                  each is rejected with its reason, then a well-formed client is served
#   not-gpuverbs   a client that reaches an HTTP server, or a server that closes without a
#                  word, exits 1: "the peer at HOST:PORT does not speak the gpuverbs exchange
#                  protocol" (fake servers in python3; a skip without python3)
#   port-in-use    a second server on a port already taken exits non-zero: "already in use"
#   server-killed  the server is SIGKILLed mid-run: the client exits non-zero at once, saying so
#   client-killed  the same the other way round
#   rxe-hosts      --gpu -1 on a real RDMA stack: inside the Soft-RoCE VM, as root, two rxe
#                  "hosts" joined by a veth pair (tests/verbs/rxe_hosts.sh), the server on
#                  rxe_b (10.1.0.2), the client on rxe_a, through the verbs backend: three
#                  sizes validate, the packets crossed the wire both ways, and a killed server,
#                  then a killed client, ends the other side at once with the reason
#                  (RdmaVm.client_server). Exit 77 (a skip) when not root or without rdma
#   netns          --gpu -1, the server in one network namespace and the client in another,
#                  joined by a veth pair: the exchange crosses the veth (the server must see
#                  the client's veth address), the software device still crosses processes
#                  (same host, same PID namespace: /proc and pidfd work). Exit 77 (a skip),
#                  with the reason, when not root, without `ip`, or when namespaces or a veth
#                  pair cannot be created here
#
# Every process has a deadline: past it the case fails (and the process is killed).
set -u

bin=$1
case_name=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
server_host=127.0.0.1  # where clients connect (the rxe-hosts case: host B's address)
tmp=$(mktemp -d)
netns=()  # network namespaces this run created (the netns case)
veth=""   # its veth pair's first end, deleted in case it never moved into a namespace

cleanup() {
    local f n
    for f in "$tmp"/*.pid; do
        [ -f "$f" ] || continue
        [ -f "${f%.pid}.rc" ] || kill -9 "$(cat "$f")" 2>/dev/null
    done
    wait 2>/dev/null
    # After the processes: a namespace deleted under a process lives on until it exits. Each
    # namespace takes its veth end with it.
    for n in ${netns[@]+"${netns[@]}"}; do ip netns del "$n" 2>/dev/null; done
    [ -n "$veth" ] && ip link del "$veth" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP  # (exit runs the EXIT trap)

show() {
    local f
    for f in "$tmp"/*.out; do
        [ -f "$f" ] && { echo "--- $(basename "$f" .out)"; cat "$f"; }
    done
}
fail() {
    echo "FAIL ($case_name): $*"
    show
    [ -f "$tmp/setup.log" ] && { echo "--- setup"; cat "$tmp/setup.log"; }
    exit 1
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# start NAME ARGS...: runs the sample in the background; its output goes to NAME.out, its
# pid to NAME.pid and, once it exits, its exit status to NAME.rc (both appear whole, by rename).
start() {
    local name=$1
    shift
    local extra=()
    case "$name" in
        server*) extra=("${server_extra[@]}") ;;
        client*) extra=("${client_extra[@]}") ;;
    esac
    start_cmd "$name" "$bin" "$@" "${extra[@]}"
}
# Arguments only the server, or only the client, of `pair` gets (the two-gpu case).
server_extra=()
client_extra=()

# start_cmd NAME COMMAND...: start with a whole command line (one that execs the sample,
# like `ip netns exec NS BINARY ...`, so the pid is the sample's).
start_cmd() {
    local name=$1
    shift
    ("$@" >"$tmp/$name.out" 2>&1 &
     echo $! >"$tmp/$name.pid.tmp"
     mv "$tmp/$name.pid.tmp" "$tmp/$name.pid"
     wait $!
     # Written whole, then renamed: a reader that sees NAME.rc must never find it empty.
     echo $? >"$tmp/$name.rc.tmp"
     mv "$tmp/$name.rc.tmp" "$tmp/$name.rc") 2>/dev/null &  # (no "Killed" notice from this shell)
    local t=0
    until [ -f "$tmp/$name.pid" ]; do
        sleep 0.01
        t=$((t + 1))
        [ $t -lt 1000 ] || fail "$name did not start"
    done
}
pid_of() { cat "$tmp/$1.pid"; }

# wait_exit NAME SECONDS: waits for NAME to exit and sets $status to its exit status; past
# SECONDS the case fails. (The helpers set variables rather than print: `fail` must run in
# this shell, not in a command substitution.)
wait_exit() {
    local deadline=$(($(now_ms) + $2 * 1000))
    until [ -f "$tmp/$1.rc" ]; do
        if [ "$(now_ms)" -gt "$deadline" ]; then
            kill -9 "$(pid_of "$1")" 2>/dev/null
            fail "$1 did not exit within $2 s"
        fi
        sleep 0.02
    done
    status=$(cat "$tmp/$1.rc")
}

# port_of NAME: waits for the server's "listening on ADDR:PORT" line and sets $port; returns
# 1 if the server exited first.
port_of() {
    local deadline=$(($(now_ms) + 60000))
    while [ "$(now_ms)" -le "$deadline" ]; do
        port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$tmp/$1.out" | head -n 1)
        [ -n "$port" ] && return 0
        [ -f "$tmp/$1.rc" ] && return 1
        sleep 0.02
    done
    fail "$1 printed no port within 60 s"
}

# wait_for NAME TEXT SECONDS: waits until NAME's output holds TEXT.
wait_for() {
    local deadline=$(($(now_ms) + $3 * 1000))
    until grep -q "$2" "$tmp/$1.out"; do
        [ "$(now_ms)" -le "$deadline" ] || fail "$1 did not print '$2' within $3 s"
        [ -f "$tmp/$1.rc" ] && fail "$1 exited (status $(cat "$tmp/$1.rc")) before printing '$2'"
        sleep 0.02
    done
}

# pair TAG SECONDS ARGS...: a server and a client with ARGS; both must validate. Returns 77
# when the server says the GPU asked for does not exist (it exits 1, pointing to --gpu -1).
pair() {
    local tag=$1 secs=$2
    shift 2
    start "server$tag" --server --port 0 "$@"
    if ! port_of "server$tag"; then
        local rc
        rc=$(cat "$tmp/server$tag.rc")
        if [ "$rc" = 1 ] && grep -q "use --gpu -1" "$tmp/server$tag.out"; then
            echo "SKIP: $(cat "$tmp/server$tag.out")"
            return 77
        fi
        fail "server$tag exited with status $rc before listening"
    fi
    start "client$tag" --client "$server_host" --port "$port" "$@"
    local crc src
    wait_exit "client$tag" "$secs"
    crc=$status
    wait_exit "server$tag" "$secs"
    src=$status
    [ "$crc" = 0 ] || fail "client$tag exited with status $crc"
    [ "$src" = 0 ] || fail "server$tag exited with status $src"
    local side
    for side in client server; do
        grep -q "Validation successful" "$tmp/$side$tag.out" ||
            fail "$side$tag did not print Validation successful"
    done
    return 0
}

# killed VICTIM: a long run on CPU threads, VICTIM (server or client) SIGKILLed mid-run; the
# other side must exit 1 soon, with an error naming the victim.
killed() {
    local victim=$1 other
    [ "$victim" = server ] && other=client || other=server
    local args=(--gpu -1 --rounds 100000 --delay-ms 20 --timeout-ms 3000)
    start server --server --port 0 "${args[@]}"
    port_of server || fail "server exited with status $(cat "$tmp/server.rc") before listening"
    start client --client "$server_host" --port "$port" "${args[@]}"
    wait_for "$victim" "round 3 verified" 30
    kill -9 "$(pid_of "$victim")"
    local t0 rc took
    t0=$(now_ms)
    wait_exit "$other" 20
    rc=$status
    took=$(($(now_ms) - t0))
    [ "$rc" = 1 ] || fail "$other exited with status $rc (expected 1) after the $victim was killed"
    grep -q "error: .*$victim" "$tmp/$other.out" || fail "$other gave no error naming the $victim"
    grep -q "Validation successful" "$tmp/$other.out" && fail "$other printed Validation successful"
    [ "$took" -lt 10000 ] || fail "$other took $took ms to give up (its waits are bounded by 3000 ms)"
    echo "$other exited $took ms after the $victim was killed:"
    tail -n 1 "$tmp/$other.out"
}

skip() {
    echo "SKIP: $*"
    exit 77
}

# quiet COMMAND...: runs it, its output to setup.log (shown when the case fails).
quiet() {
    echo "+ $*" >>"$tmp/setup.log"
    "$@" >>"$tmp/setup.log" 2>&1
}

# veth_end NAMESPACE DEV ADDRESS: moves DEV into NAMESPACE, gives it ADDRESS/24, brings it
# and the namespace's loopback up.
veth_end() {
    quiet ip link set "$2" netns "$1" &&
        quiet ip -n "$1" addr add "$3/24" dev "$2" &&
        quiet ip -n "$1" link set "$2" up &&
        quiet ip -n "$1" link set lo up ||
        fail "setting up $2 ($3) in namespace $1 failed"
}

# in_namespaces: a server in one network namespace, a client in another, joined by a veth
# pair (as OobNetns.ExchangeAcrossAVethPair in tests/unit/oob_test.cpp); both must validate.
in_namespaces() {
    [ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
    command -v ip >/dev/null 2>&1 || skip "the ip tool (iproute2) is not installed"
    # Unique per run (pid and a random byte), so parallel runs never meet; <= 15 characters.
    local id ns_s ns_c veth_s veth_c
    id=$(printf '%d%02x' $$ $((RANDOM % 256)))
    ns_s=gvcs${id}s ns_c=gvcs${id}c veth_s=gvcs${id}s veth_c=gvcs${id}c
    quiet ip netns add "$ns_s" ||
        skip "cannot create network namespaces here (ip netns add: $(tail -n 1 "$tmp/setup.log"))"
    netns+=("$ns_s")
    quiet ip netns add "$ns_c" || fail "ip netns add $ns_c failed after $ns_s worked"
    netns+=("$ns_c")
    veth=$veth_s
    quiet ip link add "$veth_s" type veth peer name "$veth_c" ||
        skip "cannot create a veth pair here (ip link add ... type veth: $(tail -n 1 "$tmp/setup.log"))"
    local addr_s=10.200.1.1 addr_c=10.200.1.2
    veth_end "$ns_s" "$veth_s" "$addr_s"
    veth_end "$ns_c" "$veth_c" "$addr_c"
    veth=""  # both ends are in the namespaces now: deleting those deletes the pair
    echo "namespaces $ns_s ($addr_s) and $ns_c ($addr_c), veth $veth_s <-> $veth_c"

    start_cmd server ip netns exec "$ns_s" "$bin" --server --bind "$addr_s" --port 0 --gpu -1
    port_of server || fail "server exited with status $(cat "$tmp/server.rc") before listening"
    start_cmd client ip netns exec "$ns_c" "$bin" --client "$addr_s" --port "$port" --gpu -1
    local crc src side
    # Deadlines well inside ctest's TIMEOUT: the EXIT trap must get to delete the namespaces.
    wait_exit client 45
    crc=$status
    wait_exit server 45
    src=$status
    [ "$crc" = 0 ] || fail "client exited with status $crc"
    [ "$src" = 0 ] || fail "server exited with status $src"
    for side in client server; do
        grep -q "Validation successful" "$tmp/$side.out" || fail "$side did not print Validation successful"
    done
    # The exchange went over the veth: the server saw the client's address in its namespace.
    grep -q "client $addr_c:[0-9]* connected" "$tmp/server.out" ||
        fail "the server did not see the client at $addr_c (the veth address)"
}

# count NAME TEXT: sets $n to the number of NAME's output lines that hold TEXT.
count() { n=$(grep -c -- "$2" "$tmp/$1.out"); }

# wait_count NAME TEXT N SECONDS: waits until N lines of NAME's output hold TEXT.
wait_count() {
    local deadline=$(($(now_ms) + $4 * 1000))
    count "$1" "$2"
    until [ "$n" -ge "$3" ]; do
        [ "$(now_ms)" -le "$deadline" ] || fail "$1 printed $n, not $3, lines with '$2' within $4 s"
        [ -f "$tmp/$1.rc" ] && fail "$1 exited (status $(cat "$tmp/$1.rc")) before $3 lines with '$2'"
        sleep 0.02
        count "$1" "$2"
    done
}

# bad_clients: the server survives bad clients (see the case list at the top).
bad_clients() {
    start server --server --port 0 --gpu -1 --timeout-ms 1500
    port_of server || fail "server exited with status $(cat "$tmp/server.rc") before listening"
    local r="rejected the client at 127.0.0.1:[0-9]*: "
    # 1. connects and closes at once (bash's /dev/tcp).
    (exec 3<>"/dev/tcp/127.0.0.1/$port") || fail "cannot connect to the server"
    wait_count server "$r.*the connection without sending the gpuverbs greeting; still listening" 1 10
    # 2. garbage: an HTTP request.
    (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >&3 && sleep 1)
    wait_count server "$r.*does not speak the gpuverbs exchange protocol: it sent \"GET / HTTP/1.1" 1 10
    # 3. silent: connects and says nothing for longer than the server's --timeout-ms.
    (exec 3<>"/dev/tcp/127.0.0.1/$port" && sleep 4) &
    wait_count server "${r}timed out after 1500 ms waiting for a message" 1 10
    # 4. a real client asking for other rounds: rejected on both sides, with the reason.
    start mismatch --client 127.0.0.1 --port "$port" --gpu -1 --rounds 3 --timeout-ms 10000
    wait_exit mismatch 20
    [ "$status" = 1 ] || fail "the client with other --rounds exited with status $status (expected 1)"
    grep -q "error: the server runs 10 rounds of 65536 bytes, we were asked for 3 rounds" "$tmp/mismatch.out" ||
        fail "the client with other --rounds did not say why it was refused"
    wait_count server "${r}the client runs 3 rounds of 65536 bytes, we were asked for 10 rounds" 1 10
    # The server still listens: a well-formed client is served, and both validate.
    start client --client 127.0.0.1 --port "$port" --gpu -1
    wait_exit client 60
    [ "$status" = 0 ] || fail "the well-formed client exited with status $status"
    wait_exit server 60
    [ "$status" = 0 ] || fail "the server exited with status $status"
    local side
    for side in client server; do
        grep -q "Validation successful" "$tmp/$side.out" || fail "$side did not print Validation successful"
    done
    count server "rejected the client"
    [ "$n" = 4 ] || fail "the server rejected $n clients, expected 4"
}

# fake_server MODE: a TCP server that is not gpuverbs (python3) on a free port, in the
# background; sets $port. MODE http: answers what it reads with an HTTP/0.9-style HTML page
# (as Python's http.server answers a request it cannot parse); mute: accepts and closes.
fake_server() {
    command -v python3 >/dev/null 2>&1 || skip "python3 is not installed (the fake servers need it)"
    start_cmd "fake-$1" python3 -c '
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4)
print("listening on 127.0.0.1:%d" % s.getsockname()[1], flush=True)
s.settimeout(30)
c, _ = s.accept()
if sys.argv[1] == "http":
    c.settimeout(5)
    c.recv(256)
    c.sendall(b"<!DOCTYPE HTML>\n<html lang=\"en\">\n<head>\n<title>Error response</title>\n")
c.close()
' "$1"
    port_of "fake-$1" || fail "the fake $1 server exited before listening"
}

# not_gpuverbs MODE: the sample's client against a fake server of MODE.
not_gpuverbs() {
    fake_server "$1"
    start "client-$1" --client 127.0.0.1 --port "$port" --gpu -1 --timeout-ms 5000
    wait_exit "client-$1" 20
    [ "$status" = 1 ] || fail "the client exited with status $status against the $1 server (expected 1)"
    grep -q "error: the peer at 127.0.0.1:$port does not speak the gpuverbs exchange protocol" \
        "$tmp/client-$1.out" || fail "the client did not say that the $1 server does not speak the protocol"
    grep -q "frame of" "$tmp/client-$1.out" && fail "the client misread the $1 server's bytes as a frame"
    return 0
}

mps_running() {
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || return 1
    local out
    out=$(echo get_server_list | timeout 5 nvidia-cuda-mps-control 2>&1) || return 1
    case "$out" in *"Cannot find"*) return 1 ;; esac
    return 0
}

case "$case_name" in
    loopback)
        pair 1 60 --gpu -1
        pair 2 60 --gpu -1 --size 12345 --rounds 3
        show
        ;;
    gpu)
        mps_before=0
        mps_running && mps_before=1
        rc=0
        pair 1 120 --gpu 0 --timeout-ms 30000 || rc=$?
        [ $rc = 0 ] && { pair 2 120 --gpu 0 --size 1M --rounds 3 --timeout-ms 30000 || rc=$?; }
        if [ $mps_before = 0 ] && mps_running; then
            echo "stopping the MPS daemon this test started"
            echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
        fi
        [ $rc = 0 ] && show
        exit $rc
        ;;
    two-gpu)
        ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
        if [ "${ngpu:-0}" -lt 2 ]; then
            echo "SKIP: the two-gpu case needs two GPUs of one host (nvidia-smi lists ${ngpu:-0})"
            exit 77
        fi
        # An empty control directory: no daemon there, so both are plain CUDA processes.
        mkdir -p "$tmp/no-mps"
        export CUDA_MPS_PIPE_DIRECTORY="$tmp/no-mps"
        server_extra=(--gpu 0)
        client_extra=(--gpu 1)
        pair 1 120 --no-mps --timeout-ms 30000
        pair 2 120 --no-mps --size 1M --rounds 3 --timeout-ms 30000
        show
        ;;
    no-server)
        # Port 1 (tcpmux): nothing listens there on any machine we run on.
        t0=$(now_ms)
        start client --client 127.0.0.1 --port 1 --gpu -1 --timeout-ms 1000
        wait_exit client 20
        rc=$status
        took=$(($(now_ms) - t0))
        [ "$rc" = 1 ] || fail "client exited with status $rc (expected 1)"
        grep -q "error: .*127.0.0.1:1" "$tmp/client.out" || fail "the error does not name 127.0.0.1:1"
        [ "$took" -lt 10000 ] || fail "the client took $took ms (--timeout-ms 1000)"
        count client "waiting for a server at 127.0.0.1:1 (up to 1 s)"
        [ "$n" = 1 ] || fail "the client said $n times (not once) that it waits for a server"
        show
        ;;
    bad-clients)
        bad_clients
        show
        ;;
    not-gpuverbs)
        not_gpuverbs http
        not_gpuverbs mute
        show
        ;;
    port-in-use)
        start first --server --port 0 --gpu -1
        port_of first || fail "the first server exited with status $(cat "$tmp/first.rc")"
        start second --server --port "$port" --gpu -1
        wait_exit second 20
        rc=$status
        [ "$rc" = 1 ] || fail "the second server exited with status $rc (expected 1)"
        grep -q "error: port $port already in use" "$tmp/second.out" ||
            fail "no 'port $port already in use' error"
        show
        ;;
    server-killed) killed server ;;
    client-killed) killed client ;;
    netns)
        in_namespaces
        show
        ;;
    rxe-hosts)
        [ "$(id -u)" = 0 ] || skip "needs root: it makes two rxe devices (RdmaVm.client_server runs it in the VM)"
        command -v rdma >/dev/null 2>&1 || skip "the rdma tool (iproute2) is not installed"
        . "$here/verbs/rxe_hosts.sh"
        rxe_hosts_up >"$tmp/setup.log" 2>&1 || fail "two rxe hosts could not be made"
        cat "$tmp/setup.log"
        server_host=10.1.0.2
        server_extra=(--device rxe_b --bind 10.1.0.2)
        client_extra=(--device rxe_a)
        a0=$(rxe_rcvd rxe_a) b0=$(rxe_rcvd rxe_b)
        pair 1 60 --gpu -1
        pair 2 60 --gpu -1 --size 1M --rounds 3
        pair 3 60 --gpu -1 --size 12345 --rounds 3
        grep -q "rxe_a, data path in a CPU thread" "$tmp/client1.out" || fail "the client did not run on rxe_a"
        grep -q "rxe_b, data path in a CPU thread" "$tmp/server1.out" || fail "the server did not run on rxe_b"
        # The exchange's TCP stays inside the VM's one kernel (it goes through lo), but the RDMA
        # traffic went over the wire: each device received packets from the other.
        [ "$(rxe_rcvd rxe_a)" -gt "$a0" ] || fail "rxe_a received no packets"
        [ "$(rxe_rcvd rxe_b)" -gt "$b0" ] || fail "rxe_b received no packets"
        echo "rxe_a received $(($(rxe_rcvd rxe_a) - a0)) packets, rxe_b $(($(rxe_rcvd rxe_b) - b0))"
        show
        rm -f "$tmp"/*.out
        killed server
        rm -f "$tmp"/server.* "$tmp"/client.*
        killed client
        ;;
    *)
        echo "unknown case $case_name"
        exit 2
        ;;
esac
exit 0
