#!/bin/bash
# gv_write_bw, gv_read_bw and gv_send_bw in two processes with CPU initiators
# (tools/gv_bench_cpu_two_process.hpp), run as perftest runs them: a server in the
# background, a client against 127.0.0.1.
#
#   bw_two_process.sh TOOLS_DIR DEVICE [ARGS...]
#
# DEVICE: rxe0 inside the Soft-RoCE VM (RdmaVm.bw_two_process: the verbs backend; ARGS -x 1),
# or soft in a build without CUDA (Bench.bw_two_process: the software device on CPU threads,
# the server's buffer shared between the processes). Exits 77 (a skip, with the reason) for
# soft in a build with CUDA, where two processes on the software device are the GPU mode.
# Checks, for each of write_bw, read_bw, send_bw:
#   run      a run of 2 QPs x 8-WQE post lists, 300 messages of 4000 bytes each (not a
#            multiple of 8), two repetitions after the warm-up, --json: both processes exit 0;
#            the client's JSON line says two-process, cpu, 2 QPs, 8 threads, 4000 bytes, 300
#            iterations, a message rate above 0; the server's last line says its client is
#            done after 3 runs of 1 size, 2 QPs x 8 threads, without a failed work request or
#            wait. Each run checks on the side the data lands on that the first and the last
#            message of every QP arrived whole (a run that lost them fails: exit 1).
#   refused  a server given --qps 3 refuses a client that asks for 2 (the client exits 1 with
#            the reason) and serves the next client (-q 3).
#   duration (write_bw only) -D 0.3 with -n 100: the client scales the count after its warm-up
#            (the JSON line's iterations above 100) and the server follows it (exit 0).
# Then, once (send_bw):
#   gone     a server killed during a long run: the client exits 1 within 30 s, saying the
#            server went away; and a client killed during a long run: the server exits 1
#            within 30 s, saying the client went away.
# Every program runs under a deadline; past it the check fails.
set -u
tools=$1 dev=$2
shift 2
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

if [ "$dev" = soft ] && ! "$tools/gv_write_bw" --help | grep -q "This build has no CUDA"; then
    echo "SKIP: this build has CUDA: the bandwidth tools with --device soft in two processes are the GPU-initiated mode"
    echo "(the CPU mode runs on a verbs device: RdmaVm.bw_two_process, on rxe0 in the Soft-RoCE VM)"
    exit 77
fi

# server TOOL NAME ARGS...: starts a server (--port 0) in the background; sets $port, $srv_pid.
server() {
    local tool=$1 name=$2 w
    shift 2
    "$tools/$tool" -d "$dev" "$@" --server --port 0 --timeout 30 >"$tmp/$name.srv" 2>"$tmp/$name.srv.err" &
    srv_pid=$!
    port=
    for w in $(seq 200); do
        port=$(sed -n 's/.*waiting up to .* on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/$name.srv")
        [ -n "$port" ] && return 0
        kill -0 $srv_pid 2>/dev/null || break
        sleep 0.05
    done
    fail "$name: the server did not say where it listens (stdout: $(cat "$tmp/$name.srv"); stderr: $(cat "$tmp/$name.srv.err"))"
    return 1
}

# client TOOL NAME ARGS...: one client run against the server's port; sets $rc, $out, $err.
client() {
    local tool=$1 name=$2
    shift 2
    timeout -k 2 90 "$tools/$tool" -d "$dev" "$@" --port "$port" 127.0.0.1 >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
    out=$(cat "$tmp/$name.out")
    err=$(cat "$tmp/$name.err")
}

# server_wait NAME SECONDS: waits for the server to exit (killed past SECONDS); sets $src.
server_wait() {
    local name=$1 limit=$2 w
    for w in $(seq $((limit * 20))); do
        kill -0 $srv_pid 2>/dev/null || break
        sleep 0.05
    done
    kill -0 $srv_pid 2>/dev/null && { kill -9 $srv_pid; fail "$name: the server still ran after $limit s"; }
    wait $srv_pid
    src=$?
}

json_field() { grep -o "\"$1\":[^,}]*" <<<"$out" | head -1 | cut -d: -f2 | tr -d '"'; }

for t in write_bw read_bw send_bw; do
    what="$t ($dev)"
    if server "gv_$t" "$t" "$@"; then
        client "gv_$t" "$t" -s 4000 -n 300 -q 2 -l 8 --reps 2 --json "$@"
        [ $rc = 0 ] || fail "$what: the client exited $rc (stdout: $out; stderr: $err)"
        server_wait "$t" 30
        [ $src = 0 ] || fail "$what: the server exited $src ($(cat "$tmp/$t.srv" "$tmp/$t.srv.err"))"
        mode=$(json_field mode) ini=$(json_field initiator) qps=$(json_field qps) thr=$(json_field threads)
        bytes=$(json_field bytes) iters=$(json_field iterations) rate=$(json_field msg_rate_Mpps)
        [ "$mode" = two-process ] && [ "$ini" = cpu ] && [ "$qps" = 2 ] && [ "$thr" = 8 ] && [ "$bytes" = 4000 ] &&
            [ "$iters" = 300 ] || fail "$what: expected two-process, cpu, 2 QPs x 8, 4000 bytes, 300 iterations: $out"
        awk -v r="$rate" 'BEGIN { exit !(r > 0) }' || fail "$what: message rate $rate, expected above 0: $out"
        tail -1 "$tmp/$t.srv" | grep -Eq "client 127\.0\.0\.1:[0-9]+ done: $t, 3 runs of 1 sizes, 2 QPs x 8 threads on [^ ]+ \([a-z]+\), no failed work request or wait" ||
            fail "$what: the server's last line is not its summary: $(cat "$tmp/$t.srv")"
        [ $failures = 0 ] && echo "ok: $what: $rate M messages/s over 2 QPs"
    fi
    if server "gv_$t" "$t-refused" -q 3 "$@"; then
        client "gv_$t" "$t-refused-bad" -s 64 -n 50 -q 2 -l 8 --reps 1 "$@"
        [ $rc = 1 ] && [[ "$err" == *"refused: --qps is 3 here, 2 on the client"* ]] ||
            fail "$what refused: a client asking for -q 2: exit $rc, expected 1 with the reason (stderr: $err)"
        client "gv_$t" "$t-refused-good" -s 64 -n 50 -q 3 -l 8 --reps 1 "$@"
        [ $rc = 0 ] || fail "$what refused: the next client (-q 3) exited $rc (stderr: $err)"
        server_wait "$t-refused" 30
        [ $src = 0 ] || fail "$what refused: the server exited $src: $(cat "$tmp/$t-refused.srv.err")"
    fi
done

# duration: -D scales the iterations after the warm-up, and the server runs what each Run asks.
if server gv_write_bw duration "$@"; then
    client gv_write_bw duration -s 64 -n 100 -l 8 -D 0.3 --reps 1 --json "$@"
    [ $rc = 0 ] || fail "duration ($dev): the client exited $rc (stdout: $out; stderr: $err)"
    server_wait duration 30
    [ $src = 0 ] || fail "duration ($dev): the server exited $src: $(cat "$tmp/duration.srv.err")"
    iters=$(json_field iterations)
    [ -n "$iters" ] && [ "$iters" -gt 100 ] ||
        fail "duration ($dev): -D 0.3 -n 100 ran $iters iterations, expected more than 100 (scaled): $out"
    [ $failures = 0 ] && echo "ok: duration ($dev): -D 0.3 scaled -n 100 to $iters iterations"
fi

# gone: one side killed during a long run (the other's waits end on the closed connection).
if server gv_send_bw gone-srv "$@"; then
    "$tools/gv_send_bw" -d "$dev" -s 64 -n 100000000 -l 8 --reps 1 "$@" --port "$port" 127.0.0.1 \
        >"$tmp/gone-srv.out" 2>"$tmp/gone-srv.err" &
    cpid=$!
    sleep 2
    kill -9 $srv_pid
    wait $srv_pid 2>/dev/null
    for w in $(seq 600); do kill -0 $cpid 2>/dev/null || break; sleep 0.05; done
    if kill -0 $cpid 2>/dev/null; then
        kill -9 $cpid
        fail "gone ($dev): the client still ran 30 s after its server was killed"
    else
        wait $cpid
        crc=$?
        [ $crc = 1 ] && grep -q "server" "$tmp/gone-srv.err" ||
            fail "gone ($dev): the client exited $crc after its server was killed, expected 1 naming the server: $(cat "$tmp/gone-srv.err")"
    fi
fi
if server gv_send_bw gone-cli "$@"; then
    "$tools/gv_send_bw" -d "$dev" -s 64 -n 100000000 -l 8 --reps 1 "$@" --port "$port" 127.0.0.1 \
        >"$tmp/gone-cli.out" 2>"$tmp/gone-cli.err" &
    cpid=$!
    sleep 2
    kill -9 $cpid
    wait $cpid 2>/dev/null
    server_wait gone-cli 30
    [ $src = 1 ] && grep -q "the client went away" "$tmp/gone-cli.srv.err" ||
        fail "gone ($dev): the server exited $src after its client was killed, expected 1 saying the client went away: $(cat "$tmp/gone-cli.srv.err")"
fi
[ $failures = 0 ] && echo "ok: gone ($dev): a killed server or client ends the other side's run with the reason"

[ $failures = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
