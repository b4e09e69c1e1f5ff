// gv_header_check (tests/headers/CMakeLists.txt): the program the per-header translation
// units are linked into. Building it is the check; running it does nothing.
int main() { return 0; }
