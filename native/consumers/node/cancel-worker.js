'use strict';
// The other thread of the cancel step: a worker_threads Worker that loads the library on
// its own (the same dlopen handle in this process), waits until the main thread has
// generated `after` steps, then calls eliza_inference_llm_stream_cancel on the main
// thread's stream while that thread keeps generating.
//
// progress (Int32Array over a SharedArrayBuffer), see consumer.js:
//   [0] steps the main thread finished, [1] 1 once cancel returned, [2] cancel's status,
//   [3] steps seen when cancelling, [4] 1 when the main thread is done (no cancel then).
const { workerData, parentPort } = require('worker_threads');

function main() {
    const { Library } = require('./abi');
    const lib = Library.open(workerData.library);
    const progress = new Int32Array(workerData.shared);
    parentPort.postMessage({ ready: true });
    const deadline = Date.now() + workerData.timeoutMs;
    for (;;) {
        const seen = Atomics.load(progress, 0);
        if (Atomics.load(progress, 4) === 1) {
            parentPort.postMessage({ cancelled: false, why: 'the generation ended before the cancel' });
            return;
        }
        if (seen >= workerData.after) {
            const rc = lib.fn.cancel(workerData.stream);
            Atomics.store(progress, 2, rc);
            Atomics.store(progress, 3, seen);
            Atomics.store(progress, 1, 1);
            parentPort.postMessage({ cancelled: true, status: rc, seen });
            return;
        }
        const left = deadline - Date.now();
        if (left <= 0) {
            parentPort.postMessage({ cancelled: false, why: `no ${workerData.after} steps within ${workerData.timeoutMs} ms` });
            return;
        }
        Atomics.wait(progress, 0, seen, Math.min(left, 1000));
    }
}

try {
    main();
} catch (err) {
    parentPort.postMessage({ cancelled: false, why: `worker failed: ${err.message}` });
}
