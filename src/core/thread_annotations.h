// fabq core: thread-safety annotations for clang's -Wthread-safety analysis.
//
// The macros expand to clang's capability attributes and to nothing on other compilers, so
// annotated code builds everywhere and is checked where clang builds it with
// FABQ_THREAD_SAFETY=ON. The analysis is intra-procedural and looks at names only:
//   FABQ_CAPABILITY("mutex")     a class that is a lock (core::Mutex, core::SpinLock)
//   FABQ_SCOPED_CAPABILITY       a class that holds a lock for its lifetime (core::MutexLock)
//   FABQ_GUARDED_BY(mu)          a member read or written only with `mu` held
//   FABQ_PT_GUARDED_BY(mu)       the data a pointer member points at, likewise
//   FABQ_REQUIRES(mu)            a function called with `mu` held (the *_locked helpers)
//   FABQ_EXCLUDES(mu)            a function called without `mu` held (it takes `mu` itself)
//   FABQ_ACQUIRE(...)            a function that returns holding the lock (no argument: `this`)
//   FABQ_TRY_ACQUIRE(ok, ...)    likewise when it returns `ok`
//   FABQ_RELEASE(...)            a function that returns having released it
//   FABQ_RETURN_CAPABILITY(mu)   an accessor that returns the lock `mu` (callers lock it)
//   FABQ_NO_THREAD_SAFETY_ANALYSIS  a function the analysis skips (say why where it is used)
//
// Code without annotations (std::mutex, std::lock_guard of libstdc++) is not checked and
// raises no warnings.
#pragma once

#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(capability)
#define FABQ_THREAD_ANNOTATION(x) __attribute__((x))
#endif
#endif
#ifndef FABQ_THREAD_ANNOTATION
#define FABQ_THREAD_ANNOTATION(x)
#endif

#define FABQ_CAPABILITY(name) FABQ_THREAD_ANNOTATION(capability(name))
#define FABQ_SCOPED_CAPABILITY FABQ_THREAD_ANNOTATION(scoped_lockable)
#define FABQ_GUARDED_BY(x) FABQ_THREAD_ANNOTATION(guarded_by(x))
#define FABQ_PT_GUARDED_BY(x) FABQ_THREAD_ANNOTATION(pt_guarded_by(x))
#define FABQ_REQUIRES(...) FABQ_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FABQ_EXCLUDES(...) FABQ_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FABQ_ACQUIRE(...) FABQ_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FABQ_TRY_ACQUIRE(...) FABQ_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define FABQ_RELEASE(...) FABQ_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FABQ_RETURN_CAPABILITY(x) FABQ_THREAD_ANNOTATION(lock_returned(x))
#define FABQ_NO_THREAD_SAFETY_ANALYSIS FABQ_THREAD_ANNOTATION(no_thread_safety_analysis)
