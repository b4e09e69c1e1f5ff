// main() of gv_write_bw, gv_read_bw, gv_send_bw and gv_write_lat: one benchmark (gv_bench.cu,
// compiled once for all four), each tool with its own default operation.
#ifndef GV_BENCH_DEFAULT_OP
#define GV_BENCH_DEFAULT_OP "write"
#endif
#ifndef GV_BENCH_DEFAULT_LAT
#define GV_BENCH_DEFAULT_LAT 0
#endif

int gv_bench_tool_main(int argc, char** argv, const char* default_op, bool default_lat);

int main(int argc, char** argv) {
    return gv_bench_tool_main(argc, argv, GV_BENCH_DEFAULT_OP, GV_BENCH_DEFAULT_LAT != 0);
}
