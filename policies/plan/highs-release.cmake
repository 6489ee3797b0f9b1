# CMake toolchain file for the one CMake build in tern's default binary: HiGHS, the planner's
# MILP solver, which highs-sys compiles from C++ as CMake's Release. Release means -O3 with GCC
# and Clang; -O2 (the level Linux distributions build their packages at) compiles faster.
# Setting the cache entries here, before CMake's compiler modules run, makes them the Release
# flags.
# `.cargo/config.toml` points CMAKE_TOOLCHAIN_FILE here unless the environment already sets it.
set(CMAKE_C_FLAGS_RELEASE "-O2 -DNDEBUG" CACHE STRING "Release C flags (tern)")
set(CMAKE_CXX_FLAGS_RELEASE "-O2 -DNDEBUG" CACHE STRING "Release C++ flags (tern)")
