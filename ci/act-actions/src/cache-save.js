// Offline stand-in for actions/cache@v4 post step (ported from v4.3.0 src/saveImpl.ts).
const cache = require('@actions/cache');
const core = require('@actions/core');
const { list, bool, exact } = require('./cache-common');

process.on('uncaughtException', e => core.warning(e.message));

async function run() {
  try {
    if (!cache.isFeatureAvailable() || !process.env.GITHUB_REF) return;
    const primaryKey = core.getState('CACHE_KEY') || core.getInput('key');
    if (!primaryKey) { core.warning('Key is not specified.'); return; }
    const restored = core.getState('CACHE_RESULT');
    if (exact(primaryKey, restored)) {
      core.info(`Cache hit occurred on the primary key ${primaryKey}, not saving cache.`);
      return;
    }
    const chunk = parseInt(core.getInput('upload-chunk-size'), 10);
    const id = await cache.saveCache(list('path', { required: true }), primaryKey,
      { uploadChunkSize: isNaN(chunk) ? undefined : chunk }, bool('enableCrossOsArchive'));
    if (id != -1) core.info(`Cache saved with key: ${primaryKey}`);
  } catch (e) {
    core.warning(e.message);
  }
  process.exit(0);
}
run();
