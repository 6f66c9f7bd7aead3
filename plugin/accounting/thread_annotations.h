// plugin/accounting/thread_annotations.h — internal: Clang's thread-safety annotations
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html) as FLOPMETER_ macros. Clang checks them with
// -Wthread-safety (the clang build of scripts/fuzz.sh makes a violation an error: fuzz/CMakeLists.txt); every
// other compiler sees nothing, so GCC builds ignore them.
// What they say: a mutex type is a CAPABILITY; a member that only its owner's mutex may touch is GUARDED_BY it;
// a function that must be called with the mutex held REQUIRES it; ASSERT_CAPABILITY marks a function after
// which the analysis takes the mutex as held (owned_mutex::assume_held: the calling thread holds it already,
// inside one of the owner's call-outs).
#pragma once

#if defined(__clang__)
#define FLOPMETER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FLOPMETER_THREAD_ANNOTATION(x)
#endif

#define FLOPMETER_CAPABILITY(x) FLOPMETER_THREAD_ANNOTATION(capability(x))
#define FLOPMETER_SCOPED_CAPABILITY FLOPMETER_THREAD_ANNOTATION(scoped_lockable)
#define FLOPMETER_GUARDED_BY(x) FLOPMETER_THREAD_ANNOTATION(guarded_by(x))
#define FLOPMETER_PT_GUARDED_BY(x) FLOPMETER_THREAD_ANNOTATION(pt_guarded_by(x))
#define FLOPMETER_REQUIRES(...) FLOPMETER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FLOPMETER_EXCLUDES(...) FLOPMETER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FLOPMETER_ACQUIRE(...) FLOPMETER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FLOPMETER_RELEASE(...) FLOPMETER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FLOPMETER_ASSERT_CAPABILITY(x) FLOPMETER_THREAD_ANNOTATION(assert_capability(x))
#define FLOPMETER_NO_THREAD_SAFETY_ANALYSIS FLOPMETER_THREAD_ANNOTATION(no_thread_safety_analysis)
