// Bundles each stand-in action into one self-contained file under OUT (argument 1), beside
// a copy of its action.yml: `act --local-repository actions/<name>@<ref>=OUT/<name>` then
// runs it with no node_modules. keepNames: @actions/artifact checks `instanceof AbortSignal`
// by constructor name, which minified names break.
const fs = require('fs');
const path = require('path');
const esbuild = require('esbuild');

const out = path.resolve(process.argv[2] || path.join(__dirname, 'out'));
const entries = {
  'upload-artifact/dist/index.js': 'src/upload-artifact.js',
  'download-artifact/dist/index.js': 'src/download-artifact.js',
  'cache/dist/restore.js': 'src/cache-restore.js',
  'cache/dist/save.js': 'src/cache-save.js',
};
(async () => {
  for (const name of ['setup-python', 'upload-artifact', 'download-artifact', 'cache']) {
    fs.mkdirSync(path.join(out, name), { recursive: true });
    fs.copyFileSync(path.join(__dirname, name, 'action.yml'), path.join(out, name, 'action.yml'));
  }
  for (const [o, i] of Object.entries(entries)) {
    await esbuild.build({
      entryPoints: [path.join(__dirname, i)], outfile: path.join(out, o),
      bundle: true, platform: 'node', target: 'node20', format: 'cjs',
      minify: false, keepNames: true, legalComments: 'none', logLevel: 'warning',
    });
  }
  console.log(`stand-in actions built in ${out}`);
})().catch(e => { console.error(e); process.exit(1); });
