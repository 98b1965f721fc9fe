// What a valid task is, checked as delayd's Python Client checks it (delayd/model/task.py,
// delayd/client/base.py: Task.new and build), with the same one-line messages, and the spec
// JSON it stores, written as Task.spec_json writes it. The add script refuses what would make
// the daemon misread a record whatever a producer checks; these checks give the friendly
// message first.
import { cronProblem } from './cron.js';
import { NotJson, compactJson, jsonString, pyNumber, pyRepr } from './json.js';

export class TaskError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TaskError';
  }
}

export const TASK_FIELDS = new Set(['call', 'url', 'push', 'method', 'body', 'params', 'intervals', 'persistent',
  'priority', 'callback', 'timeout', 'every', 'cron', 'tz', 'retries', 'signing_key', 'traceparent', 'tracestate']);
const METHODS = ['GET', 'POST'];
const BODIES = ['form', 'json'];
export const DEFAULT_PARAMS_LIMIT = 64 * 1024;
export const DEFAULT_RETRIES = 20;
const MAX_RETRIES = 10000;
const MAX_NAME = 512;
const TEN_YEARS = 10 * 365 * 86400;
const DOTTED = '[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*';
const TARGET_RE = new RegExp(`^${DOTTED}:${DOTTED}$`);
const BAD_NAME_CHARS = /[\x00-\x20\x7f]/;
const KEY_NAME = /^[A-Za-z0-9_.:-]{1,128}$/; // a signing key's name (delayd.model.task.KEY_NAME_RE)
// W3C trace context (delayd.model.task.TRACEPARENT_RE): a traceparent of version 00, a tracestate kept with it.
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;
const TRACESTATE = /^[!-~](?:[ -~]{0,510}[!-~])?$/;
// Python's \s (str.isspace) and control characters, Unicode's too.
const BAD_URL_CHARS = /[\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
// Names that are no place (a host's own zone; tzdata's `Factory`), as delayd.model.schedule refuses them.
const NOT_PLACES = new Set(['localtime', 'Factory']);

const isNumber = (v) => typeof v === 'number';
export const isUtf8 = (text) => !LONE_SURROGATE.test(text);
const wellFormed = (value) => (typeof value === 'string' ? isUtf8(value) : value === null || typeof value !== 'object'
  || Object.entries(value).every(([k, v]) => isUtf8(k) && wellFormed(v)));

/** Python's float() of a string: surrounding whitespace allowed, `inf`/`nan` and `1_000` too. */
function parseFloatPy(text) {
  const t = text.trim().replace(/(?<=\d)_(?=\d)/g, '');
  if (/^[+-]?(inf|infinity)$/i.test(t)) return t.startsWith('-') ? -Infinity : Infinity;
  if (/^[+-]?nan$/i.test(t)) return NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i.test(t)) return undefined;
  return Number(t);
}

export function parseIntervals(value) {
  if (value === null || value === undefined) return [0];
  let items;
  if (typeof value === 'boolean') throw new TaskError("intervals must be seconds: a number, a list, or '0,30,60'");
  if (isNumber(value)) items = [value];
  else if (typeof value === 'string') items = value.split(',').map((p) => p.trim());
  else if (Array.isArray(value)) items = [...value];
  else throw new TaskError("intervals must be seconds: a number, a list, or '0,30,60'");
  if (!items.length) throw new TaskError('intervals must not be empty');
  if (items.length > 1000) throw new TaskError('intervals may hold at most 1000 entries');
  return items.map((item) => {
    const number = isNumber(item) ? item : typeof item === 'string' ? parseFloatPy(item) : undefined;
    if (number === undefined) throw new TaskError(`interval ${pyRepr(item)} is not a number of seconds`);
    if (!Number.isFinite(number) || number < 0) throw new TaskError(`interval ${pyRepr(item)} must be a finite number >= 0`);
    if (number > TEN_YEARS) throw new TaskError(`interval ${pyRepr(item)} is longer than ten years`);
    return number;
  });
}

function checkName(what, value) {
  if ((isNumber(value) && Number.isInteger(value)) || typeof value === 'bigint') {
    const text = isNumber(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : String(value);
    if (text.length > MAX_NAME) throw new TaskError(`${what} is longer than ${MAX_NAME} characters`);
    return text;
  }
  if (typeof value !== 'string') throw new TaskError(`${what} must be a string or an integer`);
  if (!value) throw new TaskError(`${what} must not be empty`);
  if ([...value].length > MAX_NAME) throw new TaskError(`${what} is longer than ${MAX_NAME} characters`);
  if (BAD_NAME_CHARS.test(value)) throw new TaskError(`${what} must not contain spaces or control characters`);
  if (!isUtf8(value)) throw new TaskError(`${what} is not valid UTF-8 text`);
  return value;
}

export const checkTopic = (value) => checkName('topic', value);

function checkTarget(what, value) {
  if (typeof value !== 'string' || !TARGET_RE.test(value)) {
    throw new TaskError(`${what} must look like package.module:function, got ${pyRepr(value)}`);
  }
  return value;
}

/** The host of an http(s) URL as Python's urlsplit(url).hostname finds it; null for none or a bad URL. */
function urlHost(url) {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]*)/.exec(url.replace(/^[\x00-\x20]+/, '').replace(/[\t\r\n]/g, ''));
  if (!m || !['http', 'https'].includes(m[1].toLowerCase())) return null;
  const netloc = m[2];
  if (netloc.includes('[') !== netloc.includes(']')) return null; // Python: "Invalid IPv6 URL"
  const hostport = netloc.slice(netloc.lastIndexOf('@') + 1);
  const host = hostport.startsWith('[') ? hostport.slice(1, hostport.indexOf(']')) : hostport.split(':')[0];
  return host || null;
}

// Why the URL's authority cannot be sent to, or null: an empty host, a port that is not a number from 1 to
// 65535, a host that is not ASCII (given in its xn-- form); as delayd.model.checks.url_authority_error.
function authorityError(url) {
  const authority = (/^[A-Za-z][A-Za-z0-9+.-]*:\/\/([^/?#]*)/.exec(url) || ['', ''])[1];
  const m = /^(\[[^\]]+\]|[^:[\]]*)(?::([0-9]*))?$/.exec(authority.slice(authority.lastIndexOf('@') + 1));
  if (!m) return 'has a port that is not a number from 1 to 65535';
  if (m[1] === '') return 'has no host';
  const port = m[2] ?? '';
  if (port !== '' && (port.length > 5 || Number(port) < 1 || Number(port) > 65535)) {
    return `has the port ${port}, not a number from 1 to 65535`;
  }
  if (/[^\x00-\x7f]/.test(m[1])) {
    return 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)';
  }
  return null;
}

function checkEvery(value) {
  if (!isNumber(value)) throw new TaskError(`every must be a number of seconds, got ${pyRepr(value)}`);
  if (!Number.isFinite(value) || !(value >= 1 && value <= TEN_YEARS)) {
    throw new TaskError(`every must be between 1 s and ten years, got ${pyRepr(value)}`);
  }
  return value;
}

function checkZone(name) {
  if (typeof name !== 'string' || !name) {
    throw new TaskError(`tz must be an IANA zone name like Europe/Berlin, got ${pyRepr(name)}`);
  }
  // Intl reads zone names in any case, the tz database (and the daemon) in its own: each part of a
  // name starts with a capital there (Europe/Berlin, Etc/GMT+5, EST5EDT).
  let known = !NOT_PLACES.has(name) && /^[A-Z][A-Za-z0-9_+-]*(\/[A-Z][A-Za-z0-9_+-]*)*$/.test(name);
  if (known) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: name });
    } catch {
      known = false;
    }
  }
  if (!known) throw new TaskError(`unknown time zone ${pyRepr(name)} (an IANA name like Europe/Berlin or UTC)`);
  return name;
}

function checkCronShape(expr) {
  if (typeof expr !== 'string') throw new TaskError(`cron must be a string like '0 3 * * *', got ${pyRepr(expr)}`);
  const fields = expr.split(/\s+/).filter(Boolean);
  if (fields.length !== 5) {
    throw new TaskError(`cron needs five fields (minute hour day-of-month month day-of-week), got ${pyRepr(expr)}`);
  }
  const problem = cronProblem(expr);
  if (problem) throw new TaskError(`invalid cron expression ${pyRepr(expr)}: ${problem}`);
  return fields.join(' ');
}

function checkSchedule(intervals, every, cron, tz) {
  const given = [['intervals', intervals], ['every', every], ['cron', cron]].filter(([, v]) => v != null).map(([n]) => n);
  if (given.length > 1) throw new TaskError(`give one of intervals, every or cron, not ${given.join(' and ')}`);
  if (cron == null && tz != null) throw new TaskError('tz is the zone of a cron schedule: give it with cron');
  if (every != null) return [checkEvery(every), null, null];
  const zone = checkZone(tz == null ? 'UTC' : tz);
  return [null, checkCronShape(cron), zone];
}

const MAX_PARAMS_DEPTH = 64; // the params object is level 1 (delayd.model.checks, add.lua)

/** True if the arrays and objects of JSON `text` nest more than `limit` deep, counted as
 * delayd.model.checks.nested_deeper counts: escapes dropped, then strings, then brackets. */
function nestedDeeper(text, limit) {
  if ((text.match(/[[{]/g) || []).length <= limit) return false;
  let depth = 0;
  for (const bracket of text.replace(/\\./g, '').replace(/"[^"]*"/g, '').match(/[[\]{}]/g)) {
    depth += bracket === '[' || bracket === '{' ? 1 : -1;
    if (depth > limit) return true;
  }
  return false;
}

function checkParams(params, limit) {
  if (params != null && (typeof params !== 'object' || Array.isArray(params))) {
    throw new TaskError('params must be a JSON object (a dict)');
  }
  if (!params || !Object.keys(params).length) return null;
  let encoded;
  try {
    encoded = compactJson(params);
  } catch (exc) {
    if (exc instanceof NotJson) throw new TaskError(`params are not JSON-serialisable: ${exc.message}`);
    throw exc;
  }
  if (encoded.length > limit) throw new TaskError(`params are ${encoded.length} bytes, more than the limit of ${limit}`);
  if (nestedDeeper(encoded, MAX_PARAMS_DEPTH)) {
    throw new TaskError(`params are nested more than ${MAX_PARAMS_DEPTH} levels deep`);
  }
  // (compactJson escapes surrogates as \udXXX: the strings are looked at only when one is there.)
  if (encoded.includes('\\ud') && !wellFormed(params)) {
    throw new TaskError('params are not valid UTF-8 text');
  }
  return encoded;
}

/** The stored `trace` (delayd.model.task.trace_of): the traceparent, then a space and a well-formed tracestate. */
function traceOf(traceparent, tracestate) {
  if (traceparent === null) return null;
  if (typeof traceparent !== 'string' || !TRACEPARENT.test(traceparent)) {
    throw new TaskError(`traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex> (lowercase, ids not all zero), got ${pyRepr(traceparent)}`);
  }
  const state = typeof tracestate === 'string' ? tracestate.trim() : '';
  return TRACESTATE.test(state) ? `${traceparent} ${state}` : traceparent;
}

/** A validated task: Task.new's checks, in its order; returns what the add script stores. `stored`: a
 * record read back, whose params are not re-encoded and whose URL is not held to the add-time rules. */
export function newTask(input, paramsLimit = DEFAULT_PARAMS_LIMIT, stored = false) {
  const { call = null, url = null, push = null, method = 'GET', body = 'form', params = null, intervals = null,
    persistent = true, priority = 2, callback = null, timeout = null, retries = null, signing_key = null,
    traceparent = null, tracestate = null } = input;
  let { every = null, cron = null, tz = null } = input;
  const topic = checkTopic(input.topic ?? null);
  const id = checkName('id', input.id ?? null);
  if (id.includes(':')) throw new TaskError("id must not contain ':' (the key is topic:id)");
  if (!call + !url + !push !== 2) throw new TaskError('give exactly one of call, url or push');
  if (call !== null) checkTarget('call', call);
  if (url !== null) {
    if (typeof url !== 'string' || !urlHost(url)) {
      throw new TaskError(`url must be an http:// or https:// URL with a host, got ${pyRepr(url)}`);
    }
    const why = stored ? null : authorityError(url);
    if (why !== null) throw new TaskError(`url ${why}, got ${pyRepr(url)}`);
    if (!stored && BAD_URL_CHARS.test(url)) {
      throw new TaskError(`url must not contain spaces or control characters (percent-encode them), got ${pyRepr(url)}`);
    }
    if (!stored && !isUtf8(url)) throw new TaskError('url is not valid UTF-8 text');
  }
  const pushList = push !== null ? checkName('push list', push) : null;
  if (signing_key !== null) {
    if (typeof signing_key !== 'string' || !KEY_NAME.test(signing_key)) {
      throw new TaskError(`signing_key must be 1-128 letters, digits, '_', '.', ':' or '-', got ${pyRepr(signing_key)}`);
    }
    if (url === null) throw new TaskError('signing_key is for a url task: only URL requests are signed');
  }
  if (method !== 'GET' && (typeof method !== 'string' || !METHODS.includes(method.toUpperCase()))) {
    throw new TaskError(`method must be GET or POST, got ${pyRepr(method)}`);
  }
  if (!BODIES.includes(body)) throw new TaskError(`body must be 'form' or 'json', got ${pyRepr(body)}`);
  const paramsJson = checkParams(params, stored ? Infinity : paramsLimit);
  if (persistent !== true && persistent !== false) throw new TaskError('persistent must be true or false');
  if (priority !== 1 && priority !== 2 && priority !== 3) throw new TaskError(`priority must be 1, 2 or 3, got ${pyRepr(priority)}`);
  if (callback !== null) checkTarget('callback', callback);
  if (timeout !== null && (!isNumber(timeout) || !(timeout > 0 && timeout <= 86400))) {
    throw new TaskError(`timeout must be a number of seconds in (0, 86400], got ${pyRepr(timeout)}`);
  }
  if (every != null || cron != null || tz != null) [every, cron, tz] = checkSchedule(intervals, every, cron, tz);
  const backoff = intervals == null && every == null && cron == null;
  if (retries !== null) {
    if (!Number.isInteger(retries) || !(retries >= 0 && retries <= MAX_RETRIES)) {
      throw new TaskError(`retries must be an integer from 0 to ${MAX_RETRIES}, got ${pyRepr(retries)}`);
    }
    if (!backoff) {
      const named = intervals != null ? 'intervals' : every != null ? 'every' : 'cron';
      throw new TaskError(`retries is for a task without a schedule: give retries or ${named}, not both`);
    }
    if (persistent === false) throw new TaskError('give retries or persistent=False (one run, no retries), not both');
  }
  const trace = stored ? null : traceOf(traceparent, tracestate); // (a stored one: taskDict reads the spec's)
  const task = {
    topic, id, key: `${topic}:${id}`, call, url, push: pushList, method: method.toUpperCase(), body, paramsJson,
    intervals: parseIntervals(intervals), persistent, priority, callback, timeout, every, cron, tz, backoff, retries,
    recurring: every != null || cron != null, signing_key, trace,
  };
  task.spec = specJson(task);
  return task;
}

/** The immutable part of the task as stored (Task.spec_json: the same text, defaults left out). */
function specJson(t) {
  const spec = [];
  for (const name of ['call', 'url', 'push', 'callback']) if (t[name] !== null) spec.push(`"${name}":${jsonString(t[name])}`);
  if (t.timeout !== null) spec.push(`"timeout":${pyNumber(t.timeout)}`);
  if (t.every !== null) spec.push(`"every":${pyNumber(t.every)}`);
  if (t.cron !== null) spec.push(`"cron":${jsonString(t.cron)}`);
  if (t.url || t.method !== 'GET') spec.push(`"method":${jsonString(t.method)}`);
  if (t.body !== 'form') spec.push(`"body":${jsonString(t.body)}`);
  if (t.paramsJson) spec.push(`"params":${t.paramsJson}`);
  if (!(t.backoff || t.recurring)) spec.push(`"intervals":${compactJson(t.intervals)}`);
  if (!t.persistent) spec.push('"persistent":false');
  if (t.retries !== null) spec.push(`"retries":${t.retries}`);
  if (t.tz !== null && t.tz !== 'UTC') spec.push(`"tz":${jsonString(t.tz)}`);
  if (t.signing_key !== null) spec.push(`"signing_key":${jsonString(t.signing_key)}`);
  if (t.trace !== null) spec.push(`"trace":${jsonString(t.trace)}`);
  return '{' + spec.join(',') + '}';
}

const AT_ERROR = 'at must be Unix seconds or an ISO 8601 time';

/** An absolute time (Unix seconds, a Date, or an ISO 8601 string) in ms (base.to_ms). */
export function toMs(at) {
  if (typeof at === 'boolean') throw new TaskError(AT_ERROR);
  if (at instanceof Date) {
    if (Number.isNaN(at.getTime())) throw new TaskError(`${AT_ERROR}, got ${pyRepr(String(at))}`);
    return at.getTime();
  }
  if (isNumber(at)) {
    if (!(at >= 0 && at < 1e11)) throw new TaskError(`at must be Unix seconds, got ${pyRepr(at)}`);
    return Math.trunc(at * 1000);
  }
  if (typeof at === 'string') {
    const number = parseFloatPy(at);
    if (number !== undefined) return toMs(number);
    // ISO 8601 as datetime.fromisoformat reads it; without an offset it is local time.
    const m = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2})(?::(\d{2})(?::(\d{2})(?:[.,](\d{1,6}))?)?)?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/.exec(at);
    if (m) {
      const [, y, mo, d, h = '0', mi = '0', s = '0', frac = '', zone] = m;
      const ms = Number(frac.padEnd(3, '0').slice(0, 3));
      const local = new Date(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms);
      let time = local.getTime();
      if (zone) {
        const sign = zone === 'Z' ? 1 : zone[0] === '-' ? -1 : 1;
        const digits = zone === 'Z' ? '0000' : zone.slice(1).replace(':', '').padEnd(4, '0');
        const offset = sign * (Number(digits.slice(0, 2)) * 60 + Number(digits.slice(2))) * 60000;
        time = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s), ms) - offset;
      }
      if (local.getMonth() === Number(mo) - 1 && Number(h) < 24 && Number(mi) < 60 && Number(s) < 60) return toMs(time / 1000);
    }
    throw new TaskError(`${AT_ERROR}, got ${pyRepr(at)}`);
  }
  throw new TaskError(`${AT_ERROR}, got ${pyRepr(at)}`);
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
const ARGUMENTS = new Set(['topic', 'id', 'delay', 'at', 'nx', 'debounce', 'max_wait']); // add()'s besides TASK_FIELDS

/** One add's task object validated (BaseClient.build): { task, mode: 'delay'|'at'|'next'|'debounce', value (ms,
 * or a debounce's 'WAIT:MOST'), nx }.
 * camelCase names (maxWait) are read as the Python ones (max_wait). */
export function build(input, { paramsLimit = DEFAULT_PARAMS_LIMIT, allowedModules = null } = {}) {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new TaskError('a task is an object of add() arguments');
  }
  // (One pass, no object rest or spread: build runs per task of an addMany.)
  const fields = {};
  let unknown = null;
  for (const name of Object.keys(input)) {
    const value = input[name];
    if (value === undefined) continue;
    const python = snake(name);
    if (!TASK_FIELDS.has(python) && !ARGUMENTS.has(python)) (unknown ??= []).push(python);
    fields[python] = value;
  }
  if (unknown) throw new TaskError(`unknown task field(s): ${unknown.sort().join(', ')}`);
  const delay = fields.delay ?? null;
  const at = fields.at ?? null;
  const nx = fields.nx;
  const task = newTask(fields, paramsLimit);
  if (allowedModules) {
    for (const target of [task.call, task.callback]) {
      const module = target && target.split(':')[0];
      if (module && !allowedModules.some((p) => module === p || module.startsWith(p + '.'))) {
        throw new TaskError(`${target} is not in the allowed modules (${allowedModules.join(', ') || 'none'}); add its `
          + 'module to allowed_modules or DELAYD_ALLOWED_MODULES');
      }
    }
  }
  if (delay !== null && at !== null) throw new TaskError('give delay or at, not both');
  const debounce = fields.debounce ?? null;
  const maxWait = fields.max_wait ?? null;
  if (debounce !== null || maxWait !== null) {
    return { task, mode: 'debounce', value: debounced(task, debounce, maxWait, delay, at), nx };
  }
  if (at !== null) return { task, mode: 'at', value: toMs(at), nx };
  // A cron task's first due time comes from delayd's one cron implementation: the daemon resolves `next`.
  if (delay === null && task.cron !== null) return { task, mode: 'next', value: 0, nx };
  const seconds = delay ?? task.every ?? task.intervals[0];
  if (!isNumber(seconds) || !(seconds >= 0 && seconds <= TEN_YEARS)) {
    throw new TaskError(`delay must be a number of seconds from 0 to ten years, got ${pyRepr(seconds)}`);
  }
  return { task, mode: 'delay', value: Math.trunc(seconds * 1000), nx };
}

/** add.lua's value of a debounced add, 'WAIT:MOST' in ms (delayd.client.base.debounced). */
function debounced(task, debounce, maxWait, delay, at) {
  if (debounce === null) throw new TaskError('max_wait is the most a debounce may put a task off: give debounce too');
  if (delay !== null || at !== null) throw new TaskError('give debounce or delay/at, not both');
  if (task.recurring) throw new TaskError('debounce is for a task without every or cron');
  for (const [name, value] of [['debounce', debounce], ['max_wait', maxWait]]) {
    if (value !== null && (!isNumber(value) || !(value >= 0 && value <= TEN_YEARS))) {
      throw new TaskError(`${name} must be a number of seconds from 0 to ten years, got ${pyRepr(value)}`);
    }
  }
  const g = (n) => String(Number(n.toPrecision(6))); // Python's {:g} for the usual values
  if (maxWait !== null && maxWait < debounce) {
    throw new TaskError(`max_wait (${g(maxWait)} s) must be at least debounce (${g(debounce)} s)`);
  }
  return `${Math.trunc(debounce * 1000)}:${maxWait === null ? '' : Math.trunc(maxWait * 1000)}`;
}
