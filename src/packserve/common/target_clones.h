// PACKSERVE_AVX2_CLONES, written before a function's definition: GCC (and Clang) on x86-64
// compile an AVX2 clone beside the default one and pick one at load time through an ifunc.
// Empty under ThreadSanitizer: the loader runs ifunc resolvers before TSan's runtime is set up,
// and the instrumented resolver crashes the process before main (scripts/sanitize-check.sh).
#pragma once

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PACKSERVE_NO_TARGET_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PACKSERVE_NO_TARGET_CLONES 1
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(PACKSERVE_NO_TARGET_CLONES)
#define PACKSERVE_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PACKSERVE_AVX2_CLONES
#endif
