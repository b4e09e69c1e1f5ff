#!/usr/bin/env bash
# The command-line convention of every tool and sample (tools/cli.hpp), checked for every
# program the build made (tests/CMakeLists.txt registers each case with ctest):
#
#   cli_test.sh BUILD_DIR CASE
#
#   convention    for every executable in BUILD_DIR/tools and BUILD_DIR/samples (one without a
#                 row in the table below fails the case): --help and -h print the usage on
#                 stdout and exit 0, also next to a bad option; an unknown option, a bad value
#                 and a missing value exit 2 with one line on stderr naming the option; a runtime
#                 failure exits 1 with the reason on stderr, out of memory too (gv_demo under
#                 a 3 GB address-space limit). Every program runs with no GPU
#                 visible (CUDA_VISIBLE_DEVICES=""), so an answer that needs one shows: the
#                 usage answers come before any GPU is touched.
#   bench-early   the benchmarks' two-process mode with GPU initiators, without a GPU (none
#                 visible), fails at once (exit 1, the reason), before listening or connecting:
#                 --server prints no "waiting" line; the client does not retry for its
#                 --timeout. (A build without CUDA has CPU initiators only: nothing to check.)
#   bench-cpu-two-process  the two-process mode with CPU initiators: its usage mistakes (a
#                 client without a HOST or with an empty one, --bind where no verbs server
#                 listens, --inline-size outside the CPU latency test or out of range) exit 2
#                 naming the mistake; a device that does not exist fails at once (exit 1, the
#                 reason) before the server listens or the client connects, for the latency and
#                 the bandwidth tests. Its runs: tests/verbs/bench_two_process.sh
#   bench-server  (needs a GPU; exit 77, a skip, without one) gv_send_bw in one process refuses
#                 a grid the GPU cannot run whole (exit 2, what fits); gv_send_bw --rx-rounds 1 (late
#                 receivers) completes; a gv_write_bw client with nobody
#                 listening says once what it waits for; gv_write_bw --server survives a client
#                 that connects and closes, one that sends garbage and one that asks for another
#                 test: each rejected with its reason; then a real client is served.
#
# Every program has a deadline: past it the case fails (and the program is killed).
set -u

build=$1
case_name=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
die() {
    echo "FAIL: $*"
    exit 1
}

# run SECONDS PROGRAM ARGS...: runs it with no GPU visible; sets $rc, $out, $err.
run() {
    local secs=$1
    shift
    run_gpu "$secs" env CUDA_VISIBLE_DEVICES= "$@"
}

# run_gpu SECS CMD...: as run, with the machine's GPUs visible (the bench-server case).
run_gpu() {
    local secs=$1
    shift
    timeout -k 2 "$secs" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    out=$(cat "$tmp/out")
    err=$(cat "$tmp/err")
    checks=$((checks + 1))
}

# expect WHAT RC STREAM TEXT: after run, the exit status must be RC and STREAM (out or err)
# must hold TEXT (a fixed string); the other stream must be empty for usage answers.
expect() {
    local what=$1 want_rc=$2 stream=$3 text=$4
    local got=$out
    [ "$stream" = err ] && got=$err
    if [ "$rc" != "$want_rc" ]; then
        fail "$what: exit status $rc, expected $want_rc (stdout: '${out:0:200}', stderr: '${err:0:300}')"
    elif [[ "$got" != *"$text"* ]]; then
        fail "$what: std$stream does not hold '$text' (stdout: '${out:0:200}', stderr: '${err:0:300}')"
    fi
}

# Per program: a bad value, an option whose value is missing (given last), a command line that
# fails at run time, and what that failure says. "-" where a program has no such option ("says"
# "-": no runtime failure can be provoked on every machine).
#   name             bad value          missing   runtime failure                                  says
table=(
    "gv_demo         --qps_0            --iters   --gpu_63                                         --gpu_63:"
    "client_server   --size_0           --rounds  --client_127.0.0.1_--port_1_--gpu_-1_--timeout-ms_200 127.0.0.1:1"
    "hello_rdma      -                  -         -                                                GPU"
    "gv_write_bw     -s_0               --iters   --device_nosuchdev_-n_10                         RDMA_device"
    "gv_read_bw      --qps_5000         -n        --device_nosuchdev_-n_10                         RDMA_device"
    "gv_send_bw      --op_atomic        -t        --device_nosuchdev_-n_10                         RDMA_device"
    "gv_write_lat    --timeout_0        --port    --device_nosuchdev_-n_10                         RDMA_device"
    "gv_post_rate    -t_0               -q        -n_10                                            GPU"
    "gv_compute_send -n_0               -s        -n_10                                            GPU"
    "gv_probe_costs  -                  -         -                                                GPU"
    "gv_probe_path   -                  -         -                                                GPU"
    "gpuverbs_info   --gpu_5000         --device  -                                                -"
    "gv_selftest     --handler_maybe    --size    -                                                -"
    "gv_proxy_rate   --qps_0            --qps     --posters_gpu                                    --posters_gpu:"
)

row_of() {
    local r
    for r in "${table[@]}"; do
        # shellcheck disable=SC2086  # the row's words
        set -- $r
        if [ "$1" = "$prog" ]; then
            row=("$@")
            return 0
        fi
    done
    return 1
}

convention() {
    local bins=() f prog row
    for f in "$build"/tools/* "$build"/samples/*; do
        [ -f "$f" ] && [ -x "$f" ] && bins+=("$f")
    done
    [ ${#bins[@]} -gt 0 ] || die "no programs in $build/tools or $build/samples: is the tree built?"
    for f in "${bins[@]}"; do
        prog=$(basename "$f")
        row_of || {
            fail "$prog has no row in the table of tests/cli_test.sh: add one (its bad value, missing value, runtime failure)"
            continue
        }
        local bad=${row[1]//_/ } missing=${row[2]} failing=${row[3]//_/ } says=${row[4]//_/ }
        echo "== $prog"
        run 20 "$f" --help
        expect "$prog --help" 0 out "usage:"
        [ -z "$err" ] || fail "$prog --help wrote to stderr: $err"
        run 20 "$f" -h
        expect "$prog -h" 0 out "usage:"
        run 20 "$f" --no-such-option --help
        expect "$prog --no-such-option --help" 0 out "usage:"
        run 20 "$f" --no-such-option
        expect "$prog --no-such-option" 2 err "unknown option --no-such-option"
        [ -z "$out" ] || fail "$prog --no-such-option wrote to stdout: $out"
        run 20 "$f" stray-argument
        if [[ "$prog" == gv_*_bw || "$prog" == gv_*_lat ]]; then
            :  # a bare word is a HOST there; covered below
        else
            expect "$prog stray-argument" 2 err "unexpected argument 'stray-argument'"
        fi
        if [ "$bad" != - ]; then
            # shellcheck disable=SC2086  # the row's words
            run 20 "$f" $bad
            expect "$prog $bad" 2 err "${bad%% *} ${bad#* }: expected"
            [ -z "$out" ] || fail "$prog $bad wrote to stdout: $out"
        fi
        if [ "$missing" != - ]; then
            run 20 "$f" "$missing"
            expect "$prog $missing" 2 err "$missing needs a value"
        fi
        if [ "$says" = - ]; then
            # No runtime failure to provoke on every machine: gpuverbs_info reports what is
            # missing and exits 0; gv_selftest says SKIP and exits 77 without a ConnectX
            # (tests/mlx5/*_test.sh check those).
            continue
        fi
        if [ "$failing" != - ]; then
            # shellcheck disable=SC2086
            run 60 "$f" $failing
        else
            run 60 "$f"
        fi
        expect "$prog ${failing/#-/} (runtime failure)" 1 err "$says"
        [ "$(printf '%s\n' "$err" | grep -c .)" -ge 1 ] || fail "$prog: no reason on stderr"
    done
    # gv_probe_path --commit probes the direct path, which takes one WRITE of at most 128 bytes on
    # one GPU: anything else is a usage error that says so, before any GPU is needed.
    if [ -x "$build/tools/gv_probe_path" ]; then
        for bad in "--op send" "--batch 2" "--size 129"; do
            # shellcheck disable=SC2086  # the words of the case
            run 20 "$build/tools/gv_probe_path" --commit $bad
            expect "gv_probe_path --commit $bad" 2 err "--commit probes the direct path"
        done
    fi
    # Out of memory is a clear error (exit 1), not an uncaught std::bad_alloc (abort, 134):
    # gv_demo on CPU threads with more QPs than 3 GB of address space holds.
    if [ -x "$build/tools/gv_demo" ]; then
        if grep -q __asan_init "$build/tools/gv_demo"; then
            echo "(gv_demo is built with AddressSanitizer, which cannot run under an address-space limit:"
            echo " the out-of-memory check runs in the other trees)"
        else
            run 60 bash -c 'ulimit -v 3000000 && exec "$0" --gpu -1 --qps 200' "$build/tools/gv_demo"
            expect "gv_demo --gpu -1 --qps 200 in 3 GB" 1 err "out of memory"
        fi
    fi
    # gv_demo on a named RDMA device: the verbs backend, opened first; where the host has no such
    # device, the reason and exit 1. An empty name is a usage error.
    if [ -x "$build/tools/gv_demo" ]; then
        run 20 "$build/tools/gv_demo" --cpu --device nosuchdev
        expect "gv_demo --device nosuchdev" 1 err "--device nosuchdev: "
        run 20 "$build/tools/gv_demo" --device=
        expect "gv_demo --device=" 2 err "--device: expected soft, mlx5, mlx5_N, verbs or a device name"
    fi
    # Usage mistakes of the two-process programs.
    if [ -x "$build/samples/client_server" ]; then
        run 20 "$build/samples/client_server" --gpu -1
        expect "client_server without --server or --client" 2 err "give --server or --client HOST"
        run 20 "$build/samples/client_server" --client 127.0.0.1 --port 0
        expect "client_server --client --port 0" 2 err "--port 0: the client needs the server's port"
        run 20 "$build/samples/client_server" --server --gid-index 1
        expect "client_server --gid-index on the software device" 2 err "--gid-index: for the verbs backend"
        # A named RDMA device goes to the verbs backend, which is opened before listening: where
        # the host has no such device, the reason, exit 1.
        run 20 "$build/samples/client_server" --server --device nosuchdev --gpu -1 --port 0
        expect "client_server --device nosuchdev" 1 err "nosuchdev"
    fi
    if [ -x "$build/tools/gv_write_bw" ]; then
        run 20 "$build/tools/gv_write_bw" --server 127.0.0.1
        expect "gv_write_bw --server HOST" 2 err "--server takes no HOST"
        run 20 "$build/tools/gv_write_bw" --qps=0
        expect "gv_write_bw --qps=0" 2 err "--qps 0: expected an integer in 1 .. 4096"
        # A verbs device's two-process mode (CPU initiators, every test) opens the device first.
        run 20 "$build/tools/gv_write_bw" --device nosuchdev --server --port 0
        expect "gv_write_bw --device nosuchdev --server" 1 err "Backend::Verbs needs an RDMA device"
        [[ "$out" == *"waiting up to"* ]] && fail "gv_write_bw --device nosuchdev --server listened: $out"
        run 20 "$build/tools/gv_write_bw" --device=
        expect "gv_write_bw --device=" 2 err "--device: expected soft, mlx5, mlx5_N, verbs or a device name"
        if bench_has_cuda; then
            run 20 "$build/tools/gv_write_bw" --device mlx5_0 --server
            expect "gv_write_bw --device mlx5_0 --server" 2 err "two-process runs with GPU initiators are the software device's"
            run 20 "$build/tools/gv_write_bw" --server --mem host
            expect "gv_write_bw --server --mem host" 2 err "--mem host: two-process buffers are GPU memory"
            run 20 "$build/tools/gv_send_bw" --initiator cpu
            expect "gv_send_bw --initiator cpu" 2 err "--initiator cpu: supported by write_bw and read_bw only"
        else
            run 20 "$build/tools/gv_write_bw" --initiator gpu
            expect "gv_write_bw --initiator gpu (no CUDA)" 2 err "--initiator gpu: this build has no CUDA"
            # Without CUDA the benchmarks run: CPU initiators on the software device.
            local b
            for b in write_bw read_bw send_bw; do
                run 60 "$build/tools/gv_$b" -s 64 -n 200 -l 16 --reps 1
                expect "gv_$b -s 64 -n 200 (no CUDA: CPU initiators, software device)" 0 out "MsgRate[Mpps]"
            done
            run 60 "$build/tools/gv_write_lat" -n 200
            expect "gv_write_lat -n 200 (no CUDA)" 0 out "t_typical"
        fi
    fi
}

bench_early() {
    local bw=$build/tools/gv_write_bw
    [ -x "$bw" ] || {
        echo "no gv_write_bw in $build: nothing to check"
        return 0
    }
    bench_has_cuda || {
        echo "a build without CUDA: its two-process mode is CPU initiators, which need no GPU (bench-cpu-two-process)"
        return 0
    }
    local t0 took
    t0=$(date +%s%N)
    run 30 "$bw" --server --port 0 --timeout 20
    took=$((($(date +%s%N) - t0) / 1000000))
    expect "gv_write_bw --server without a GPU" 1 err "GPU"
    [[ "$out" == *waiting* ]] && fail "gv_write_bw --server listened without a GPU: $out"
    [ "$took" -lt 10000 ] || fail "gv_write_bw --server took $took ms to give up without a GPU"
    t0=$(date +%s%N)
    run 30 "$bw" 127.0.0.1 --port 1 --timeout 20
    took=$((($(date +%s%N) - t0) / 1000000))
    expect "gv_write_bw HOST without a GPU" 1 err "GPU"
    [[ "$err" == *"waiting for a server"* ]] && fail "gv_write_bw HOST waited for a server without a GPU: $err"
    [ "$took" -lt 10000 ] || fail "gv_write_bw HOST took $took ms to give up without a GPU"
}

bench_cpu_two_process() {
    local lat=$build/tools/gv_write_lat t0 took
    run 20 "$lat" --device rxe0 --client
    expect "gv_write_lat --client without a HOST" 2 err "--client needs a value"
    run 20 "$lat" --device rxe0 --client ""
    expect "gv_write_lat --client ''" 2 err "an empty HOST: expected the server's address, e.g. 127.0.0.1"
    run 20 "$lat" --device rxe0 --bind 0.0.0.0 127.0.0.1
    expect "gv_write_lat --bind on a client" 2 err "--bind 0.0.0.0: the listening address of a --server on a verbs"
    run 20 "$lat" --device soft --server --bind 0.0.0.0
    expect "gv_write_lat --bind on a software-device server" 2 err "--bind 0.0.0.0: the listening address"
    run 20 "$build/tools/gv_write_bw" --device rxe0 -I 8
    expect "gv_write_bw -I 8" 2 err "--inline-size: the latency test's option (gv_write_lat)"
    run 20 "$lat" --device rxe0 -I 913
    expect "gv_write_lat -I 913" 2 err "-I 913: expected an integer in 0 .. 912"
    # --rx-rounds: send_bw's receivers (a server's option in two processes), 1 or 2.
    run 20 "$build/tools/gv_write_bw" --rx-rounds 2
    expect "gv_write_bw --rx-rounds 2" 2 err "--rx-rounds: send_bw's receivers (--op send, bandwidth)"
    run 20 "$build/tools/gv_send_bw" --rx-rounds 2 127.0.0.1
    expect "gv_send_bw --rx-rounds 2 HOST" 2 err "--rx-rounds: the server's option"
    run 20 "$build/tools/gv_send_bw" --rx-rounds 3
    expect "gv_send_bw --rx-rounds 3" 2 err "--rx-rounds 3: expected an integer in 1 .. 2"
    if ! bench_has_cuda; then
        run 20 "$build/tools/gv_send_bw" --rx-rounds 1
        expect "gv_send_bw --rx-rounds 1 (CPU initiators)" 2 err "--rx-rounds: send_bw's GPU receivers"
    fi
    if bench_has_cuda; then
        run 20 "$lat" -I 8
        expect "gv_write_lat -I 8 (GPU initiators)" 2 err "--inline-size: CPU initiators only"
    fi
    # The device is opened before the server listens and before the client connects.
    t0=$(date +%s%N)
    run 30 "$lat" --device nosuchdev --server --port 0 --timeout 20
    took=$((($(date +%s%N) - t0) / 1000000))
    expect "gv_write_lat --device nosuchdev --server" 1 err "RDMA device"
    [[ "$out" == *"waiting up to"* ]] && fail "gv_write_lat --device nosuchdev --server listened: $out"
    [ "$took" -lt 10000 ] || fail "gv_write_lat --device nosuchdev --server took $took ms to give up"
    t0=$(date +%s%N)
    run 30 "$lat" --device nosuchdev 127.0.0.1 --port 1 --timeout 20
    took=$((($(date +%s%N) - t0) / 1000000))
    expect "gv_write_lat --device nosuchdev HOST" 1 err "RDMA device"
    [[ "$err" == *"waiting for a server"* ]] && fail "gv_write_lat --device nosuchdev HOST waited for a server: $err"
    [ "$took" -lt 10000 ] || fail "gv_write_lat --device nosuchdev HOST took $took ms to give up"
    local b
    for b in write_bw send_bw; do
        t0=$(date +%s%N)
        run 30 "$build/tools/gv_$b" --device nosuchdev 127.0.0.1 --port 1 --timeout 20
        took=$((($(date +%s%N) - t0) / 1000000))
        expect "gv_$b --device nosuchdev HOST" 1 err "RDMA device"
        [[ "$err" == *"waiting for a server"* ]] && fail "gv_$b --device nosuchdev HOST waited for a server: $err"
        [ "$took" -lt 10000 ] || fail "gv_$b --device nosuchdev HOST took $took ms to give up"
    done
}

mps_running() {
    command -v nvidia-cuda-mps-control >/dev/null 2>&1 || return 1
    local o
    o=$(echo get_server_list | timeout 5 nvidia-cuda-mps-control 2>&1) || return 1
    case "$o" in *"Cannot find"*) return 1 ;; esac
    return 0
}

# The benchmarks were built with CUDA (their --help says when not).
bench_has_cuda() { ! "$build/tools/gv_write_bw" --help 2>/dev/null | grep -q "This build has no CUDA"; }

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

# now_ms, wait_for FILE TEXT SECONDS: as in client_server_test.sh.
now_ms() { echo $(($(date +%s%N) / 1000000)); }
wait_for() {
    local deadline=$(($(now_ms) + $3 * 1000))
    until grep -q -- "$2" "$1" 2>/dev/null; do
        [ "$(now_ms)" -le "$deadline" ] || die "no '$2' in $(basename "$1") within $3 s: $(cat "$1")"
        sleep 0.05
    done
}

bench_server() {
    local bw=$build/tools/gv_write_bw
    [ -x "$bw" ] || { echo "SKIP: no gv_write_bw in $build (a build without CUDA)"; exit 77; }
    have_gpu || { echo "SKIP: no GPU here (nvidia-smi -L lists none): the benchmarks' server needs one"; exit 77; }
    # The benchmarks start the MPS daemon when it is missing: stop it again if this case did.
    mps_before=0
    mps_running && mps_before=1
    spid=""
    stop_mps() {
        if [ "$mps_before" = 0 ] && mps_running; then
            echo "stopping the MPS daemon this case started"
            echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
        fi
    }
    trap '[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null; rm -rf "$tmp"; stop_mps' EXIT
    # send_bw in one process: a grid the GPU cannot run whole (a sender and a receiver block per
    # QP, 8192 blocks of 512 threads: more than any GPU holds at once) is refused at once, saying
    # what fits, instead of failing after the senders' 20 s wait.
    run_gpu 60 "$build/tools/gv_send_bw" -q 4096 -t 512 -n 10
    expect "gv_send_bw -q 4096 -t 512 in one process" 2 err "so it needs 8192 blocks of 512 threads running at once"
    expect "gv_send_bw -q 4096 -t 512 in one process" 2 err "QPs at -t 512, fewer threads per block, or two processes"
    # Receivers that repost a round only once the last one completed (--rx-rounds 1): most
    # rounds' SENDs find no receive at first; every run completes (a group that waited in place
    # for a receive once lost its plan's verdict and never executed the SENDs it had claimed
    # receives for: a hang, session 26).
    run_gpu 60 "$build/tools/gv_send_bw" -s 4096 -q 8 -t 256 -n 2048 --rx-rounds 1 --reps 2
    expect "gv_send_bw --rx-rounds 1 (late receivers)" 0 out "4096"
    # Nobody listening on port 1: the client says once what it waits for.
    run_gpu 60 "$bw" 127.0.0.1 --port 1 --timeout 2
    expect "gv_write_bw HOST with nobody listening" 1 err "waiting for a server at 127.0.0.1:1 (up to 2 s)..."
    [ "$(grep -c "waiting for a server" "$tmp/err")" = 1 ] || fail "the client said more than once that it waits"
    "$bw" --server --port 0 --timeout 120 >"$tmp/server.out" 2>"$tmp/server.err" &
    spid=$!
    local port
    wait_for "$tmp/server.out" "waiting up to" 60
    port=$(sed -n 's/.* on 127.0.0.1:\([0-9][0-9]*\)$/\1/p' "$tmp/server.out" | head -n 1)
    [ -n "$port" ] || die "the server printed no port: $(cat "$tmp/server.out")"
    local r="rejected the client at 127.0.0.1:[0-9]*: "
    (exec 3<>"/dev/tcp/127.0.0.1/$port") || die "cannot connect to the server"
    wait_for "$tmp/server.err" "${r}.*without sending the gpuverbs greeting; still listening" 20
    (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'GET / HTTP/1.1\r\n\r\n' >&3 && sleep 1)
    wait_for "$tmp/server.err" "${r}.*does not speak the gpuverbs exchange protocol" 20
    timeout -k 2 60 "$build/tools/gv_read_bw" 127.0.0.1 --port "$port" -n 10 >"$tmp/wrong.out" 2>"$tmp/wrong.err"
    rc=$?
    [ "$rc" = 1 ] || fail "a gv_read_bw client of a gv_write_bw server exited $rc (expected 1)"
    grep -q "start the server as gv_read_bw --server" "$tmp/wrong.err" ||
        fail "the refused client did not say why: $(cat "$tmp/wrong.err")"
    wait_for "$tmp/server.err" "${r}refused: the client runs read_bw" 20
    timeout -k 2 120 "$bw" 127.0.0.1 --port "$port" -n 100 --reps 1 >"$tmp/client.out" 2>"$tmp/client.err"
    rc=$?
    [ "$rc" = 0 ] || fail "the well-formed client exited $rc: $(cat "$tmp/client.err")"
    wait "$spid"
    rc=$?
    spid=""
    [ "$rc" = 0 ] || fail "the server exited $rc: $(cat "$tmp/server.err")"
    grep -q "client 127.0.0.1:[0-9]* done" "$tmp/server.out" || fail "the server did not serve the client"
    checks=$((checks + 4))
    cat "$tmp/server.out" "$tmp/server.err"
}

case "$case_name" in
    convention) convention ;;
    bench-early) bench_early ;;
    bench-cpu-two-process) bench_cpu_two_process ;;
    bench-server) bench_server ;;
    *) die "unknown case $case_name" ;;
esac
if [ "$failures" -gt 0 ]; then
    echo "$failures of $checks checks failed"
    exit 1
fi
echo "all $checks checks passed"
exit 0
