// Offline stand-in for actions/download-artifact@v4 (logic ported from v4.3.0 src/download-artifact.ts).
const os = require('os');
const path = require('path');
const core = require('@actions/core');
const { DefaultArtifactClient } = require('@actions/artifact');
const { Minimatch } = require('minimatch');

async function run() {
  const inputs = {
    name: core.getInput('name'),
    path: core.getInput('path'),
    pattern: core.getInput('pattern'),
    mergeMultiple: core.getBooleanInput('merge-multiple'),
    artifactIds: core.getInput('artifact-ids'),
  };
  if (core.getInput('github-token')) core.warning('github-token given: cross-run/cross-repo download is not supported by this stand-in; using the current run');
  if (!inputs.path) inputs.path = process.env.GITHUB_WORKSPACE || process.cwd();
  if (inputs.path.startsWith('~')) inputs.path = inputs.path.replace('~', os.homedir());
  if (inputs.name && inputs.artifactIds) throw new Error(`Inputs 'name' and 'artifact-ids' cannot be used together. Please specify only one.`);
  const single = !!inputs.name;
  const resolvedPath = path.resolve(inputs.path);
  const client = new DefaultArtifactClient();
  let artifacts = [];
  if (single) {
    core.info('Downloading single artifact');
    const { artifact } = await client.getArtifact(inputs.name);
    if (!artifact) throw new Error(`Artifact '${inputs.name}' not found`);
    artifacts = [artifact];
  } else {
    const all = (await client.listArtifacts({ latest: true })).artifacts;
    artifacts = all;
    if (inputs.artifactIds) {
      const ids = inputs.artifactIds.split(',').map(s => s.trim()).filter(Boolean).map(s => {
        const n = parseInt(s, 10); if (isNaN(n)) throw new Error(`Invalid artifact ID: '${s}'. Must be a number.`); return n;
      });
      artifacts = all.filter(a => ids.includes(a.id));
      if (artifacts.length === 0) throw new Error('None of the provided artifact IDs were found');
    } else if (inputs.pattern) {
      core.info(`Filtering artifacts by pattern '${inputs.pattern}'`);
      const m = new Minimatch(inputs.pattern);
      artifacts = all.filter(a => m.match(a.name));
    } else {
      core.info('No input name, artifact-ids or pattern filtered specified, downloading all artifacts');
    }
  }
  if (artifacts.length) {
    core.info('Preparing to download the following artifacts:');
    for (const a of artifacts) core.info(`- ${a.name} (ID: ${a.id}, Size: ${a.size})`);
  }
  // same parallelism as the real action (chunks of 5)
  for (let i = 0; i < artifacts.length; i += 5) {
    await Promise.all(artifacts.slice(i, i + 5).map(a => client.downloadArtifact(a.id, {
      path: single || inputs.mergeMultiple ? resolvedPath : path.join(resolvedPath, a.name),
    })));
  }
  core.info(`Total of ${artifacts.length} artifact(s) downloaded`);
  core.setOutput('download-path', resolvedPath);
  core.info('Download artifact has finished successfully');
}

run().catch(err => core.setFailed(`Unable to download artifact(s): ${err.message}`));
