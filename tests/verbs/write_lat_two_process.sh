#!/bin/bash
# gv_write_lat in two processes with CPU initiators (tools/gv_bench_cpu_two_process.hpp), run
# as perftest's ib_write_lat runs: a server in the background, a client against 127.0.0.1.
#
#   write_lat_two_process.sh GV_WRITE_LAT DEVICE [ARGS...]
#
# DEVICE: rxe0 inside the Soft-RoCE VM (RdmaVm.write_lat_two_process: the verbs backend; ARGS
# -x 1), or soft in a build without CUDA (Bench.write_lat_two_process: the software device on
# CPU threads, its buffers shared between the processes). Exits 77 (a skip, with the reason)
# for soft in a build with CUDA, where two processes on the software device are the GPU mode.
# Checks:
#   plain    a run of 300 round trips completes: both processes exit 0; the client's header
#            says two processes and not inline, its JSON line "two-process", 8 bytes, 270
#            iterations (the first 30 are warm-up), t_min <= t_typical <= t_max, t_typical
#            above 0 and below 1 s; the server says its client is done without a failed work
#            request or wait
#   inline   the same with -I 8: the header says inline, the JSON line "inline_size":8
#   refused  a server given --iters 100 refuses a client that asks for -n 200 (the client exits
#            1 with "refused: --iters is 100 here, 200 on the client"), says so, keeps
#            listening and serves the next client (-n 100)
# Every program runs under a deadline; past it the check fails.
set -u
lat=$1 dev=$2
shift 2
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

if [ "$dev" = soft ] && ! "$lat" --help | grep -q "This build has no CUDA"; then
    echo "SKIP: this build has CUDA: gv_write_lat --device soft in two processes is the GPU-initiated mode"
    echo "(the CPU mode runs on a verbs device: RdmaVm.write_lat_two_process, on rxe0 in the Soft-RoCE VM)"
    exit 77
fi

# server NAME ARGS...: starts a server (--port 0) in the background; sets $port, $srv_pid.
server() {
    local name=$1 w
    shift
    timeout -k 2 60 "$lat" -d "$dev" "$@" --server --port 0 --timeout 30 >"$tmp/$name.srv" 2>"$tmp/$name.srv.err" &
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

# client NAME ARGS...: one client run against the server's port; sets $rc, $out, $err.
client() {
    local name=$1
    shift
    timeout -k 2 60 "$lat" -d "$dev" "$@" --port "$port" 127.0.0.1 >"$tmp/$name.out" 2>"$tmp/$name.err"
    rc=$?
    out=$(cat "$tmp/$name.out")
    err=$(cat "$tmp/$name.err")
}

# json_field NAME: the value of "NAME" in the client's JSON line.
json_field() { grep -o "\"$1\":[^,}]*" <<<"$out" | head -1 | cut -d: -f2 | tr -d '"'; }

# measured NAME INLINE ARGS...: a server and a client; checks what both say.
measured() {
    local name=$1 inl=$2
    shift 2
    server "$name" "$@" || return
    client "$name" -n 300 "$@"
    local what="$name ($dev)"
    [ $rc = 0 ] || fail "$what: the client exited $rc (stdout: $out; stderr: $err)"
    [[ "$out" == *"two processes (server 127.0.0.1:$port)"* ]] || fail "$what: the header does not say two processes: $out"
    if [ "$inl" = 0 ]; then
        [[ "$out" == *"WRITEs not inline (-I 0)"* ]] || fail "$what: the header does not say not inline: $out"
    else
        [[ "$out" == *"WRITEs of up to $inl B inline (-I $inl)"* ]] || fail "$what: the header does not say inline: $out"
    fi
    wait $srv_pid
    local src=$?
    [ $src = 0 ] || fail "$what: the server exited $src ($(cat "$tmp/$name.srv" "$tmp/$name.srv.err"))"
    grep -Eq "client 127\.0\.0\.1:[0-9]+ done: write_lat, 1 runs of 1 sizes on [^ ]+ \([a-z]+\).*no failed work request or wait" \
        "$tmp/$name.srv" || fail "$what: the server's last line is not its summary: $(cat "$tmp/$name.srv")"
    # The JSON form: a second pair (a server serves one client).
    server "$name-json" "$@" || return
    client "$name-json" -n 300 --json "$@"
    [ $rc = 0 ] || fail "$what --json: the client exited $rc (stdout: $out; stderr: $err)"
    wait $srv_pid || fail "$what --json: the server failed: $(cat "$tmp/$name-json.srv" "$tmp/$name-json.srv.err")"
    local mode bytes iters tmin tmax ttyp inline_size
    mode=$(json_field mode) bytes=$(json_field bytes) iters=$(json_field iterations)
    tmin=$(json_field t_min) tmax=$(json_field t_max) ttyp=$(json_field t_typical) inline_size=$(json_field inline_size)
    [ "$mode" = two-process ] && [ "$bytes" = 8 ] && [ "$iters" = 270 ] && [ "$inline_size" = "$inl" ] ||
        fail "$what --json: expected mode two-process, 8 bytes, 270 iterations, inline_size $inl: $out"
    awk -v a="$tmin" -v t="$ttyp" -v b="$tmax" 'BEGIN { exit !(a > 0 && a <= t && t <= b && t < 1e6) }' ||
        fail "$what --json: t_min $tmin, t_typical $ttyp, t_max $tmax: expected 0 < t_min <= t_typical <= t_max, t_typical < 1 s"
    echo "ok: $what: one-way t_typical $ttyp us over $iters round trips"
}

measured plain 0 "$@"
measured inline 8 -I 8 "$@"

# A refused client, then a good one.
if server refused --iters 100 "$@"; then
    client refused-bad -n 200 "$@"
    [ $rc = 1 ] && [[ "$err" == *"refused: --iters is 100 here, 200 on the client"* ]] ||
        fail "refused ($dev): a client asking for -n 200: exit $rc, expected 1 with the reason (stderr: $err)"
    client refused-good -n 100 "$@"
    [ $rc = 0 ] || fail "refused ($dev): the next client (-n 100) exited $rc (stderr: $err)"
    wait $srv_pid || fail "refused ($dev): the server failed: $(cat "$tmp/refused.srv.err")"
    grep -q "rejected the client at 127.0.0.1:[0-9]*: refused: --iters is 100 here, 200 on the client; still listening" \
        "$tmp/refused.srv.err" || fail "refused ($dev): the server did not say it rejected the client: $(cat "$tmp/refused.srv.err")"
    [ $failures = 0 ] && echo "ok: refused ($dev): the client asking for -n 200 was told why; the next one was served"
fi

[ $failures = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
