# Sourced by bench/run_two_process.sh and bench/run_two_gpu.sh: one benchmark case as two
# processes, bounded in time, every log kept.
#
#   run_pair JSONL BENCH ARGS...
# starts `BENCH --server PAIR_SERVER_ARGS... --port PORT --timeout 60` in the background, waits
# (up to 30 s) until it says it is listening, then runs the client in front:
# `BENCH ARGS... PAIR_CLIENT_ARGS... --port PORT --timeout 60 --json 127.0.0.1`, and appends the
# client's JSON lines to JSONL. Logs: $LOGS/NN-BENCH.{server,client}.log.
# Uses the caller's BIN, LOGS, PORT, LIMIT (seconds per process) and the arrays
# PAIR_SERVER_ARGS and PAIR_CLIENT_ARGS; counts cases in `n` and failures in `failed`.
# shellcheck shell=bash

run_pair() {
    local jsonl=$1
    shift
    n=$((n + 1))
    local tag slog clog spid crc src
    tag=$(printf '%02d-%s' "$n" "$1")
    slog="$LOGS/$tag.server.log"
    clog="$LOGS/$tag.client.log"
    echo "+ $1 --server ${PAIR_SERVER_ARGS[*]} --port $PORT --timeout 60" > "$slog"
    echo "+ $* ${PAIR_CLIENT_ARGS[*]} --port $PORT --timeout 60 --json 127.0.0.1" > "$clog"
    timeout -k 10 "$LIMIT" "$BIN/$1" --server "${PAIR_SERVER_ARGS[@]}" --port "$PORT" --timeout 60 >> "$slog" 2>&1 &
    spid=$!
    # The server listens (after gv::mps::ensure, where it starts MPS) once it says so.
    for _ in $(seq 300); do
        grep -q 'waiting up to' "$slog" && break
        kill -0 "$spid" 2> /dev/null || break
        sleep 0.1
    done
    if ! grep -q 'waiting up to' "$slog"; then
        kill "$spid" 2> /dev/null
        wait "$spid"
        echo "FAILED: $tag: the server did not start (see $slog)"
        failed=$((failed + 1))
        return
    fi
    timeout -k 10 "$LIMIT" "$BIN/$1" "${@:2}" "${PAIR_CLIENT_ARGS[@]}" --port "$PORT" --timeout 60 --json \
        127.0.0.1 >> "$clog" 2>&1
    crc=$?
    wait "$spid"
    src=$?
    grep '^{' "$clog" >> "$jsonl"
    if ((crc || src)); then
        echo "FAILED: $tag (client exit $crc, server exit $src): see $clog and $slog"
        failed=$((failed + 1))
    else
        echo "ok: $tag $*"
    fi
}
