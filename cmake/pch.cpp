// Empty unit: the target hla_pch exists to build the precompiled header that
// every other C++ target reuses (top-level CMakeLists.txt, HLA_PCH).
