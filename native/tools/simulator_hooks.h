// Where the perf check's simulated CPU counts (docs/perf.md). callgrind runs the bench tool
// with --instr-atstart=no: the process start, the library's load and the model's load run
// at valgrind's uninstrumented speed (several times faster than with the cache simulation),
// and counting starts once the context exists. Only the stream calls are judged, so nothing
// judged is lost. Outside valgrind a client request is a handful of no-op instructions.
//
// The requests come from valgrind's own header where the build finds it (the valgrind
// package installs it); a build without it has no hooks, and the orchestrator says so when
// a simulated run counts nothing.
#pragma once

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define ELIZA_SIMULATOR_HOOKS 1
#endif
#endif

namespace simulator {

inline void start_counting() {
#ifdef ELIZA_SIMULATOR_HOOKS
    CALLGRIND_START_INSTRUMENTATION;
#endif
}

inline void stop_counting() {
#ifdef ELIZA_SIMULATOR_HOOKS
    CALLGRIND_STOP_INSTRUMENTATION;
#endif
}

}  // namespace simulator
