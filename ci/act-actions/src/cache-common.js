const core = require('@actions/core');
exports.list = (name, opts) => core.getInput(name, opts).split('\n').map(s => s.trim()).filter(Boolean);
exports.bool = name => (core.getInput(name) || '').toLowerCase() === 'true';
exports.exact = (key, k) => !!k && k.localeCompare(key, undefined, { sensitivity: 'accent' }) === 0;
