// Empty program: the targets hla_pch_exe and hla_test_pch_exe exist to build the
// precompiled headers that executables reuse when everything is built
// position-independent (top-level CMakeLists.txt, HLA_PCH with the Python module).
int main() { return 0; }
