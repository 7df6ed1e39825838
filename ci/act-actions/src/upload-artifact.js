// Offline stand-in for actions/upload-artifact@v4 (logic ported from v4.6.2 src/shared/search.ts + src/upload/*).
const path = require('path');
const fs = require('fs');
const core = require('@actions/core');
const glob = require('@actions/glob');
const { DefaultArtifactClient, ArtifactNotFoundError } = require('@actions/artifact');

function lca(searchPaths) {
  const split = searchPaths.map(p => path.normalize(p).split(path.sep));
  const min = Math.min(...split.map(s => s.length));
  const common = searchPaths[0].startsWith(path.sep) ? [path.sep] : [];
  for (let i = 0; i < min; i++) {
    const c = split[0][i];
    if (!split.every(s => s[i] === c)) break;
    common.push(c);
  }
  return path.join(...common);
}

async function findFiles(searchPath, includeHidden) {
  const globber = await glob.create(searchPath, {
    followSymbolicLinks: true, implicitDescendants: true,
    omitBrokenSymbolicLinks: true, excludeHiddenFiles: !includeHidden,
  });
  const files = [];
  for (const f of await globber.glob()) {
    if (!fs.statSync(f).isDirectory()) files.push(f);
  }
  const searchPaths = globber.getSearchPaths();
  if (searchPaths.length > 1) return { files, root: lca(searchPaths) };
  if (files.length === 1 && searchPaths[0] === files[0]) return { files, root: path.dirname(files[0]) };
  return { files, root: searchPaths[0] };
}

async function run() {
  const name = core.getInput('name') || 'artifact';
  const searchPath = core.getInput('path', { required: true });
  const ifNone = core.getInput('if-no-files-found') || 'warn';
  if (!['warn', 'error', 'ignore'].includes(ifNone)) {
    throw new Error(`Unrecognized if-no-files-found input. Provided: ${ifNone}. Available options: warn,error,ignore`);
  }
  const overwrite = core.getBooleanInput('overwrite');
  const includeHidden = core.getBooleanInput('include-hidden-files');
  const { files, root } = await findFiles(searchPath, includeHidden);
  if (files.length === 0) {
    const msg = `No files were found with the provided path: ${searchPath}. No artifacts will be uploaded.`;
    if (ifNone === 'error') core.setFailed(msg);
    else if (ifNone === 'warn') core.warning(msg);
    else core.info(msg);
    return;
  }
  core.info(`With the provided path, there will be ${files.length} file${files.length === 1 ? '' : 's'} uploaded`);
  core.info(`Root artifact directory is ${root}`);
  const client = new DefaultArtifactClient();
  if (overwrite) {
    try { await client.deleteArtifact(name); } catch (e) {
      if (!(e instanceof ArtifactNotFoundError)) core.debug(`Unable to delete artifact: ${e.message}`);
    }
  }
  const options = {};
  const rd = core.getInput('retention-days');
  if (rd) options.retentionDays = parseInt(rd, 10);
  const cl = core.getInput('compression-level');
  if (cl) {
    options.compressionLevel = parseInt(cl, 10);
    if (isNaN(options.compressionLevel) || options.compressionLevel < 0 || options.compressionLevel > 9) {
      throw new Error('Invalid compression-level. Valid values are 0-9');
    }
  }
  const res = await client.uploadArtifact(name, files, root, options);
  core.info(`Artifact ${name} has been successfully uploaded! Final size is ${res.size} bytes. Artifact ID is ${res.id}`);
  core.setOutput('artifact-id', res.id);
  core.setOutput('artifact-digest', res.digest || '');
  const url = `${process.env.GITHUB_SERVER_URL}/${process.env.GITHUB_REPOSITORY}/actions/runs/${process.env.GITHUB_RUN_ID}/artifacts/${res.id}`;
  core.setOutput('artifact-url', url);
}

run().catch(err => core.setFailed(err.message));
