"""Compiler options of every C library and program, and of the C++ tests."""

C_OPTS = [
    "-std=c11",
    "-D_GNU_SOURCE",
    "-Wall",
    "-Wextra",
    "-Werror",
    # diagnostics are truncated on purpose when they outgrow their buffer
    "-Wno-format-truncation",
    "-O3",
    # sqrtf and the like as instructions, so that loops calling them vectorise
    # (no errno is read after a math call anywhere; the results are the same
    # correctly rounded values)
    "-fno-math-errno",
]

CC_TEST_OPTS = [
    "-std=c++17",
    "-Wall",
    "-Wextra",
    "-Werror",
]
