// Reads the results of one `conformance server --requirements REV -o DIR` run and prints, per check, what
// failed and whether the expected-failures file allows it; then one stable summary line:
//
//   conformance 2026-07-28: N passed, M failed (K expected)
//
// Counts are of the checks of the scenarios the revision scores (duplicates of a check id within a
// scenario collapsed, most severe first, as the suite does); a WARNING counts as failed, as in the suite's
// baseline. Scenarios the revision only reports (not scored) get a line of their own and never fail the run.
// Exits 1 when a check failed that the file does not list, a listed check passed (stale entry), or a
// scored scenario left no results.
//
// Usage: node conformance-report.mjs --revision REV --results DIR --expected-failures FILE --requirements FILE

import { readdirSync, readFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';

const { values: args } = parseArgs({
  options: {
    revision: { type: 'string' },
    results: { type: 'string' },
    'expected-failures': { type: 'string' },
    requirements: { type: 'string' }
  }
});
for (const name of ['revision', 'results', 'expected-failures', 'requirements']) {
  if (!args[name]) {
    console.error(`conformance-report: --${name} is required`);
    process.exit(2);
  }
}

// The scenarios the revision scores, and those it runs only for the record.
const requirements = parseYaml(readFileSync(args.requirements, 'utf8'));
const scored = new Set(requirements.server ?? []);
const notScored = new Set(
  (requirements.not_scored ?? []).filter((e) => e.leg === 'server').map((e) => e.scenario)
);

// The expected failures, with the reason written after each entry.
const baseline = new Map(); // "scenario" or "scenario:check" -> reason
for (const line of readFileSync(args['expected-failures'], 'utf8').split('\n')) {
  const match = /^\s*-\s*([^\s#]+)\s*(?:#\s*(.*))?$/.exec(line);
  if (match) baseline.set(match[1], match[2]?.trim() || '(no reason given)');
}

// Results: one directory per scenario, `server-<scenario>-<ISO timestamp>/checks.json`.
const results = new Map();
if (existsSync(args.results)) {
  for (const dir of readdirSync(args.results)) {
    const match = /^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/.exec(dir);
    const file = path.join(args.results, dir, 'checks.json');
    if (match && existsSync(file)) results.set(match[1], JSON.parse(readFileSync(file, 'utf8')));
  }
}

const severity = (status) => ({ FAILURE: 3, WARNING: 2, SUCCESS: 1 })[status] ?? 0;
function collapse(checks) {
  const byId = new Map();
  for (const check of checks) {
    if (check.status === 'INFO') continue;
    const seen = byId.get(check.id);
    if (!seen || severity(check.status) >= severity(seen.status)) byId.set(check.id, check);
  }
  return [...byId.values()];
}
const isFailed = (check) => check.status === 'FAILURE' || check.status === 'WARNING';

let passed = 0;
let failed = 0;
let expectedCount = 0;
const unexpected = [];
const stale = [];
const missing = [];
const expectedLines = [];

for (const scenario of scored) {
  const checks = results.get(scenario);
  if (!checks) {
    missing.push(scenario);
    continue;
  }
  const collapsed = collapse(checks);
  const wholeReason = baseline.get(scenario);
  for (const check of collapsed) {
    if (check.status === 'SUCCESS') passed++;
    if (!isFailed(check)) continue;
    failed++;
    const entry = `${scenario}:${check.id}`;
    const reason = wholeReason ?? baseline.get(entry);
    if (reason !== undefined) {
      expectedCount++;
      expectedLines.push(`  expected  ${entry} [${check.status}] (${reason})`);
    } else {
      unexpected.push({ entry, check });
    }
  }
  if (wholeReason !== undefined && !collapsed.some(isFailed)) stale.push(scenario);
  for (const check of collapsed) {
    if (check.status === 'SUCCESS' && baseline.has(`${scenario}:${check.id}`)) stale.push(`${scenario}:${check.id}`);
  }
}

let notScoredPassed = 0;
let notScoredFailed = 0;
for (const scenario of notScored) {
  for (const check of collapse(results.get(scenario) ?? [])) {
    if (check.status === 'SUCCESS') notScoredPassed++;
    if (isFailed(check)) notScoredFailed++;
  }
}

const rev = args.revision;
for (const line of expectedLines) console.log(line);
for (const { entry, check } of unexpected) {
  console.log(`  FAILED    ${entry} [${check.status}]: ${(check.errorMessage ?? check.description ?? '').slice(0, 600)}`);
}
for (const entry of stale) {
  console.log(`  PASSES    ${entry}: listed in expected-failures/${rev}.yaml but passes now; remove the entry`);
}
for (const scenario of missing) {
  console.log(`  MISSING   ${scenario}: required by ${rev} but left no results (did the run stop early?)`);
}
console.log(
  `conformance ${rev} not scored (reported only): ${notScoredPassed} passed, ${notScoredFailed} failed`
);
console.log(`conformance ${rev}: ${passed} passed, ${failed} failed (${expectedCount} expected)`);

process.exit(unexpected.length === 0 && stale.length === 0 && missing.length === 0 ? 0 : 1);
