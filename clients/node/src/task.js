// A task checked as delayd's Python Client checks it (Task.new and build), with the same one-line messages,
// and the spec JSON it stores, written as Python's spec_json writes it. What each field may hold is the table
// of fields (./fields.js, written from delayd/model/fields.py); here is what no table says: names, URLs,
// params, intervals, cron and zones, the rules between fields, and when a task first runs. The add script
// refuses what would make the daemon misread a record whatever a producer checks.
import { cronProblem } from './cron.js';
import { ARGUMENTS, CHECKS, SPEC } from './fields.js';
import { NotJson, compactJson, pyRepr } from './json.js';

export class TaskError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TaskError';
  }
}

export const DEFAULT_PARAMS_LIMIT = 64 * 1024;
export const DEFAULT_RETRIES = 20;
const TEN_YEARS = CHECKS.delay.high;
const MAX_DEPTH = 64; // params nest at most this deep, the params object being level 1
const OPTIONS = new Set(['topic', 'id', 'delay', 'at', 'nx', 'debounce', 'max_wait']); // add()'s besides ARGUMENTS
// Python's \s (str.isspace) and control characters, Unicode's too.
const BAD_URL_CHARS = /[\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const TRACESTATE = /^[!-~](?:[ -~]{0,510}[!-~])?$/;
const NOT_PLACES = new Set(['localtime', 'Factory']); // zone names that are no place (delayd.model.schedule)
const PATTERNS = new Map(); // the table's patterns, made once

const isUtf8 = (text) => !LONE_SURROGATE.test(text);
const wellFormed = (value) => (typeof value === 'string' ? isUtf8(value) : value === null || typeof value !== 'object'
  || Object.entries(value).every(([k, v]) => isUtf8(k) && wellFormed(v)));
const fail = (message) => { throw new TaskError(message); };

const DECIMAL = new RegExp(CHECKS.intervals.pattern); // a number written as text (as Python reads one)
const decimal = (text) => (DECIMAL.test(text) ? Number(text) : undefined);

function parseIntervals(value) {
  const items = typeof value === 'number' ? [value] : typeof value === 'string' ? value.split(',').map((p) => p.trim())
    : Array.isArray(value) ? value : fail("intervals must be seconds: a number, a list, or '0,30,60'");
  if (!items.length) fail('intervals must not be empty');
  if (items.length > 1000) fail('intervals may hold at most 1000 entries');
  return items.map((item) => {
    const number = typeof item === 'number' ? item : typeof item === 'string' ? decimal(item) : undefined;
    if (number === undefined) fail(`interval ${pyRepr(item)} is not a number of seconds`);
    if (!Number.isFinite(number) || number < 0) fail(`interval ${pyRepr(item)} must be a finite number >= 0`);
    return number > TEN_YEARS ? fail(`interval ${pyRepr(item)} is longer than ten years`) : number;
  });
}

/** A topic, id or list name: a string or an integer, 1-512 characters of UTF-8, no space or control character. */
function checkName(what, value) {
  if (Number.isInteger(value) || typeof value === 'bigint') {
    const text = typeof value === 'number' && !Number.isSafeInteger(value) ? BigInt(value).toString() : String(value);
    return text.length > 512 ? fail(`${what} is longer than 512 characters`) : text;
  }
  if (typeof value !== 'string') fail(`${what} must be a string or an integer`);
  if (!value) fail(`${what} must not be empty`);
  if ([...value].length > 512) fail(`${what} is longer than 512 characters`);
  if (/[\x00-\x20\x7f]/.test(value)) fail(`${what} must not contain spaces or control characters`);
  return isUtf8(value) ? value : fail(`${what} is not valid UTF-8 text`);
}

/** An http(s) URL with a host (urlsplit's), and at add a port from 1 to 65535, an ASCII host, no whitespace or
 * control character (as delayd.model.checks.check_url). */
function checkUrl(url, stored) {
  const m = typeof url === 'string'
    && /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(url.replace(/^[\x00-\x20]+/, '').replace(/[\t\r\n]/g, ''));
  const hostport = m && ['http', 'https'].includes(m[1].toLowerCase()) && m[2].includes('[') === m[2].includes(']')
    && m[2].slice(m[2].lastIndexOf('@') + 1);
  if (!hostport || !(hostport.startsWith('[') ? hostport.slice(1, hostport.indexOf(']')) : hostport.split(':')[0])) {
    fail(`url must be an http:// or https:// URL with a host, got ${pyRepr(url)}`);
  }
  if (stored) return url;
  const authority = (/^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)/.exec(url) || ['', ''])[1];
  const a = /^(\[[^\]]+\]|[^:[\]]*)(?::([0-9]*))?$/.exec(authority.slice(authority.lastIndexOf('@') + 1));
  const port = a ? a[2] ?? '' : '';
  let why = null;
  if (!a) why = 'has a port that is not a number from 1 to 65535';
  else if (a[1] === '') why = 'has no host';
  else if (port && (port.length > 5 || !(Number(port) >= 1 && Number(port) <= 65535))) {
    why = `has the port ${port}, not a number from 1 to 65535`;
  } else if (/[^\x00-\x7f]/.test(a[1])) why = 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)';
  else if (BAD_URL_CHARS.test(url)) why = 'must not contain spaces or control characters (percent-encode them)';
  if (why !== null) fail(`url ${why}, got ${pyRepr(url)}`);
  return isUtf8(url) ? url : fail('url is not valid UTF-8 text');
}

/** The params' compact JSON (what the spec stores; null for none), within `limit` bytes and 64 levels deep. */
function checkParams(params, limit) {
  if (typeof params !== 'object' || Array.isArray(params)) fail('params must be a JSON object (a dict)');
  if (!Object.keys(params).length) return null;
  let encoded;
  try {
    encoded = compactJson(params);
  } catch (exc) {
    throw exc instanceof NotJson ? new TaskError(`params are not JSON-serialisable: ${exc.message}`) : exc;
  }
  if (encoded.length > limit) fail(`params are ${encoded.length} bytes, more than the limit of ${limit}`);
  let depth = 0; // (delayd.model.checks.nested_deeper's count: escapes dropped, then strings, then brackets)
  const brackets = (encoded.match(/[[{]/g) || []).length > MAX_DEPTH ? encoded.replace(/\\./g, '') : '{}';
  for (const bracket of brackets.replace(/"[^"]*"/g, '').match(/[[\]{}]/g)) {
    depth += bracket === '[' || bracket === '{' ? 1 : -1;
    if (depth > MAX_DEPTH) fail(`params are nested more than ${MAX_DEPTH} levels deep`);
  }
  return encoded.includes('\\ud') && !wellFormed(params) ? fail('params are not valid UTF-8 text') : encoded;
}

function checkZone(name) {
  if (typeof name !== 'string' || !name) fail(`tz must be an IANA zone name like Europe/Berlin, got ${pyRepr(name)}`);
  // Intl reads zone names in any case, the tz database (and the daemon) in its own: each part of a
  // name starts with a capital there (Europe/Berlin, Etc/GMT+5, EST5EDT).
  let known = !NOT_PLACES.has(name) && /^[A-Z][A-Za-z0-9_+-]*(\/[A-Z][A-Za-z0-9_+-]*)*$/.test(name);
  try {
    if (known) new Intl.DateTimeFormat('en-US', { timeZone: name });
  } catch {
    known = false;
  }
  return known ? name : fail(`unknown time zone ${pyRepr(name)} (an IANA name like Europe/Berlin or UTC)`);
}

function checkCron(expr) {
  if (typeof expr !== 'string') fail(`cron must be a string like '0 3 * * *', got ${pyRepr(expr)}`);
  const fields = expr.split(/\s+/).filter(Boolean);
  if (fields.length !== 5) {
    fail(`cron needs five fields (minute hour day-of-month month day-of-week), got ${pyRepr(expr)}`);
  }
  const problem = cronProblem(expr);
  return problem ? fail(`invalid cron expression ${pyRepr(expr)}: ${problem}`) : fields.join(' ');
}

/** Field `name`'s value as kept, checked by its kind of the table (./fields.js), or a TaskError: its line. */
function checked(name, value, limit = DEFAULT_PARAMS_LIMIT, stored = false) {
  const c = CHECKS[name];
  const refuse = (message = c.message) => fail(`${name} ${message}${c.got === false ? '' : `, got ${pyRepr(value)}`}`);
  switch (c.kind) {
    case 'name': return checkName(c.label ?? name, value);
    case 'text':
      if (!PATTERNS.has(name)) PATTERNS.set(name, new RegExp(c.pattern, 'u'));
      return typeof value === 'string' && PATTERNS.get(name).test(value) && isUtf8(value) ? value : refuse();
    case 'enum': return c.values.includes(c.fold && typeof value === 'string' ? value.toUpperCase() : value)
      ? (c.fold ? value.toUpperCase() : value) : refuse();
    case 'bool': return value === true || value === false ? value : refuse();
    case 'int': return Number.isInteger(value) && value >= c.low && value <= c.high ? value : refuse();
    case 'number': return typeof value !== 'number' ? refuse(c.typeMessage)
      : (c.lowOpen ? value > c.low : value >= c.low) && value <= c.high ? value : refuse();
    case 'url': return checkUrl(value, stored);
    case 'params': return checkParams(value, limit);
    case 'intervals': return parseIntervals(value);
    case 'cron': return checkCron(value);
    case 'zone': return checkZone(value);
    default: return value;
  }
}

/** A validated task: Task.new's checks, in its order; returns what the add script stores. `stored`: a
 * record read back, whose params are not re-encoded and whose URL is not held to the add-time rules. */
export function newTask(input, paramsLimit = DEFAULT_PARAMS_LIMIT, stored = false) {
  const topic = checkName('topic', input.topic ?? null);
  const id = checkName('id', input.id ?? null);
  if (id.includes(':')) fail("id must not contain ':' (the key is topic:id)");
  if (!input.call + !input.url + !input.push !== 2) fail('give exactly one of call, url or push');
  const t = { topic, id, key: `${topic}:${id}` };
  for (const [name, absent] of Object.entries(ARGUMENTS)) { // (null is "not given" where the default is null)
    const value = input[name];
    t[name] = value === undefined || (value === null && absent === null) ? absent
      : checked(name, value, stored ? Infinity : paramsLimit, stored);
  }
  for (const [name, { requires, alone }] of Object.entries(CHECKS)) {
    if (requires && t[name] !== null && requires.every((other) => t[other] === null)) fail(`${name} ${alone}`);
  }
  const given = ['intervals', 'every', 'cron'].filter((name) => t[name] !== null); // the rules between fields
  if (given.length > 1) fail(`give one of intervals, every or cron, not ${given.join(' and ')}`);
  if (t.retries !== null && given.length) {
    fail(`retries is for a task without a schedule: give retries or ${given[0]}, not both`);
  }
  if (t.retries !== null && !t.persistent) fail('give retries or persistent=False (one run, no retries), not both');
  const state = typeof t.tracestate === 'string' ? t.tracestate.trim() : '';
  Object.assign(t, { tz: t.cron === null ? null : t.tz ?? 'UTC', backoff: !given.length, intervals: t.intervals ?? [0],
    recurring: t.every !== null || t.cron !== null, trace: stored || t.traceparent === null ? null
      : t.traceparent + (TRACESTATE.test(state) ? ` ${state}` : '') });
  const spec = SPEC.filter(([name, written, omit]) => { // as Python's spec_json writes it: order, rules, JSON text
    if (written === 'set') return t[name] !== null;
    if (written === 'scheduled') return !t.backoff && !t.recurring;
    return !omit.includes(t[name]) || (written === 'with-url' && t.url !== null);
  });
  t.spec = `{${spec.map(([name]) => `"${name}":${name === 'params' ? t.params : compactJson(t[name])}`).join(',')}}`;
  return t;
}

const AT_ERROR = 'at must be Unix seconds or an ISO 8601 time';
const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d{1,6}))?)?)?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/** An absolute time (Unix seconds, a Date, or an ISO 8601 string) in ms (base.to_ms). */
export function toMs(at) {
  if (typeof at === 'number') {
    return at >= 0 && at < 1e11 ? Math.trunc(at * 1000) : fail(`at must be Unix seconds, got ${pyRepr(at)}`);
  }
  if (at instanceof Date) return Number.isNaN(at.getTime()) ? fail(`${AT_ERROR}, got ${pyRepr(String(at))}`) : at.getTime();
  if (typeof at !== 'string') fail(typeof at === 'boolean' ? AT_ERROR : `${AT_ERROR}, got ${pyRepr(at)}`);
  const number = decimal(at);
  if (number !== undefined) return toMs(number);
  // ISO 8601 as datetime.fromisoformat reads it; without an offset it is local time.
  const m = ISO_TIME.exec(at);
  const [y, mo, d, h, mi, s] = (m || []).slice(1, 7).map((part) => Number(part ?? 0));
  const ms = m && Number((m[7] ?? '').padEnd(3, '0').slice(0, 3));
  if (!m || new Date(y, mo - 1, d).getMonth() !== mo - 1 || h > 23 || mi > 59 || s > 59) {
    fail(`${AT_ERROR}, got ${pyRepr(at)}`);
  }
  if (!m[8]) return toMs(new Date(y, mo - 1, d, h, mi, s, ms).getTime() / 1000);
  const digits = m[8] === 'Z' ? '0000' : m[8].slice(1).replace(':', '').padEnd(4, '0');
  const offset = (m[8][0] === '-' ? -1 : 1) * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60000;
  return toMs((Date.UTC(y, mo - 1, d, h, mi, s, ms) - offset) / 1000);
}

// A name as the Python client spells it (maxWait -> max_wait), remembered: tasks repeat a few names.
const SNAKE = new Map();
function snake(name) {
  let python = SNAKE.get(name);
  if (python === undefined) {
    python = name.replace(/(?<=[a-z0-9])[A-Z]/g, (c) => '_' + c.toLowerCase());
    if (SNAKE.size < 1024) SNAKE.set(name, python);
  }
  return python;
}

/** One add's task object validated (BaseClient.build): { task, mode: 'delay'|'at'|'next'|'debounce', value (ms,
 * or a debounce's 'WAIT:MOST'), nx }. camelCase names (maxWait) are read as the Python ones (max_wait). */
export function build(input, { paramsLimit = DEFAULT_PARAMS_LIMIT, allowedModules = null } = {}) {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    fail('a task is an object of add() arguments');
  }
  const fields = {}; // (one pass, no object rest or spread: build runs per task of an addMany)
  let unknown = null;
  for (const name of Object.keys(input)) {
    if (input[name] === undefined) continue;
    const python = snake(name);
    if (!(python in ARGUMENTS) && !OPTIONS.has(python)) (unknown ??= []).push(python);
    fields[python] = input[name];
  }
  if (unknown) fail(`unknown task field(s): ${unknown.sort().join(', ')}`);
  const { delay = null, at = null, debounce = null, max_wait: maxWait = null, nx } = fields;
  const task = newTask(fields, paramsLimit);
  for (const target of allowedModules ? [task.call, task.callback] : []) {
    const module = target && target.split(':')[0];
    if (module && !allowedModules.some((p) => module === p || module.startsWith(p + '.'))) {
      fail(`${target} is not in the allowed modules (${allowedModules.join(', ') || 'none'}); add its module to `
        + 'allowed_modules or DELAYD_ALLOWED_MODULES');
    }
  }
  if (delay !== null && at !== null) fail('give delay or at, not both');
  if (debounce !== null || maxWait !== null) {
    if (debounce === null) fail('max_wait is the most a debounce may put a task off: give debounce too');
    if (delay !== null || at !== null) fail('give debounce or delay/at, not both');
    if (task.recurring) fail('debounce is for a task without every or cron');
    checked('debounce', debounce);
    if (maxWait !== null && checked('max_wait', maxWait) < debounce) {
      const g = (n) => String(Number(n.toPrecision(6))); // Python's {:g} for the usual values
      fail(`max_wait (${g(maxWait)} s) must be at least debounce (${g(debounce)} s)`);
    }
    const most = maxWait === null ? '' : Math.trunc(maxWait * 1000);
    return { task, mode: 'debounce', value: `${Math.trunc(debounce * 1000)}:${most}`, nx };
  }
  if (at !== null) return { task, mode: 'at', value: toMs(at), nx };
  // A cron task's first due time comes from delayd's one cron implementation: the daemon resolves `next`.
  if (delay === null && task.cron !== null) return { task, mode: 'next', value: 0, nx };
  const seconds = checked('delay', delay ?? task.every ?? task.intervals[0]);
  return { task, mode: 'delay', value: Math.trunc(seconds * 1000), nx };
}
