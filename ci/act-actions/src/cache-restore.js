// Offline stand-in for actions/cache@v4 main step (ported from v4.3.0 src/restoreImpl.ts).
const cache = require('@actions/cache');
const core = require('@actions/core');
const { list, bool, exact } = require('./cache-common');

async function run() {
  try {
    if (!cache.isFeatureAvailable()) {
      core.warning('Cache service not available (ACTIONS_CACHE_URL unset: was act run with --no-cache-server?)');
      core.setOutput('cache-hit', 'false');
      return;
    }
    if (!process.env.GITHUB_REF) {
      core.warning(`Event Validation Error: The event type ${process.env.GITHUB_EVENT_NAME} is not supported because it's not tied to a branch or tag ref.`);
      return;
    }
    const primaryKey = core.getInput('key', { required: true });
    core.saveState('CACHE_KEY', primaryKey);
    const restoreKeys = list('restore-keys');
    const paths = list('path', { required: true });
    const key = await cache.restoreCache(paths, primaryKey, restoreKeys, { lookupOnly: bool('lookup-only') }, bool('enableCrossOsArchive'));
    if (!key) {
      if (bool('fail-on-cache-miss')) throw new Error(`Failed to restore cache entry. Exiting as fail-on-cache-miss is set. Input key: ${primaryKey}`);
      core.info(`Cache not found for input keys: ${[primaryKey, ...restoreKeys].join(', ')}`);
      return;
    }
    core.saveState('CACHE_RESULT', key);
    core.setOutput('cache-hit', exact(primaryKey, key).toString());
    core.info(`Cache restored from key: ${key}`);
  } catch (e) {
    core.setFailed(e.message);
    process.exit(1);
  }
  process.exit(0);
}
run();
