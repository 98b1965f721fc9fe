// delayd-client: add, delete and read delayd tasks from Node with an ioredis connection.
// Each call runs the Lua scripts shipped in the package (../lua, written by delayd's own linker:
// ./lua.js reads them), as functions of delayd's library (FCALL) or by EVALSHA as the server allows
// (./dialect.js), after the checks of delayd's Python Client (./task.js), so a task
// added from here is stored as the same task added from Python. The key layout, the meta hash
// and each script's KEYS/ARGV are those of docs/redis-layout.md.
import { pyRepr } from './json.js';
import { choose } from './dialect.js';
import { bulk, packedCallClass, scriptCall } from './packed.js';
import { SHOWN } from './fields.js';
import { DEFAULT_PARAMS_LIMIT, DEFAULT_RETRIES, TaskError, build, newTask } from './task.js';
import { LAYOUT, PROTOCOL } from './version.js';

export { TaskError } from './task.js';
export { PROTOCOL, VERSION } from './version.js';

/** The store's metadata in Redis is unreadable, or from another version of delayd (one line). */
export class StoreError extends Error {
  constructor(message) {
    super(message);
    this.name = 'StoreError';
  }
}

/** What delete() resolves to for a task deleted too late: a run of it had already been claimed. */
export const CLAIMED = 'claimed';

// The meta hash's versions this client follows (delayd.store.keys.LAYOUT and PROTOCOL; docs/protocol.md).
const VERSIONS = { layout: String(LAYOUT), protocol: String(PROTOCOL) };
const MAX_BUCKETS = 1024;
// add.lua's leading KEYS: the bucket's keys it may touch, after its tag.
const ADD_BATCH = 200; // tasks per add.lua call, as the Python client sends them
const STATUSES = ['delayed', 'running', 'ok', 'failed', 'deleted'];
const ATTEMPT_FIELDS = ['run', 'at', 'ms', 'outcome', 'status', 'error'];

// CRC-32 (zlib's): a task's bucket is crc32(`topic:id` as UTF-8) % buckets.
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

export function bucketOf(member, buckets) {
  let crc = 0xffffffff;
  for (let i = 0; i < member.length; i++) {
    const code = member.charCodeAt(i);
    if (code >= 0x80) { // not ASCII: over its UTF-8 bytes
      crc = 0xffffffff;
      for (const byte of Buffer.from(member, 'utf8')) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
      break;
    }
    crc = CRC_TABLE[(crc ^ code) & 0xff] ^ (crc >>> 8);
  }
  return ((crc ^ 0xffffffff) >>> 0) % buckets;
}

const shown = (text) => pyRepr(text.slice(0, 40)) + (text.length > 40 ? '...' : '');

/** StoreError when the meta hash's [layout, protocol] are another version's (a missing one too, unless `absentOk`). */
function refuseOtherVersions(key, versions, absentOk) {
  for (const [field, value] of [['layout', versions[0]], ['protocol', versions[1]]]) {
    if (value !== VERSIONS[field] && !(absentOk && value === null)) {
      throw new StoreError(`${key} in Redis says ${field} = ${shown(value)}; this client reads ${field} `
        + `${VERSIONS[field]} (a store written by another version of delayd: use a client of that version, or another prefix)`);
    }
  }
}

/** TaskError for nx with a debounced add (a debounce replaces the task it finds). */
function refuseNx(built, nx) {
  if (nx && built.some((entry) => entry.mode === 'debounce')) throw new TaskError('give debounce or nx, not both');
}

export class Client {
  /**
   * @param redis an ioredis instance (connected or lazily connecting)
   * @param options prefix ('delayd:'), buckets (recorded on first use of a store: 4),
   *   paramsLimit (65536), retries (the daemon's default for `get`: 20), retention (s, 604800),
   *   allowedModules (null: any module)
   */
  constructor(redis, { prefix = 'delayd:', buckets = 4, paramsLimit = DEFAULT_PARAMS_LIMIT, retries = DEFAULT_RETRIES,
    retention = 604800, allowedModules = null } = {}) {
    if (typeof prefix !== 'string' || !prefix || /[{}]/.test(prefix)) {
      throw new TypeError("prefix must be non-empty and must not contain '{' or '}'");
    }
    this.redis = redis;
    this.prefix = prefix;
    this.options = { paramsLimit, allowedModules };
    this.defaultBuckets = buckets;
    this.defaultRetries = retries;
    this.retentionMs = Math.trunc(retention * 1000);
    this.buckets = null; // read from the meta hash on first use
    this.PackedCall = packedCallClass(redis);
    this.addHeads = new Map(); // bucket -> add.lua's packed fixed keys, its wake channel, its first key
    this.dialect = null; // EVALSHA or FCALL (./dialect.js), chosen with the bucket count
    this.leads = null; // script name -> its calls' verb and name, packed
  }

  /** The bucket count recorded in Redis (recorded on first use, as the Python client does), after
   * checking the layout and protocol versions (docs/protocol.md section 1); then how scripts are called. */
  async store() {
    if (this.buckets !== null) return this.buckets;
    const key = `${this.prefix}meta`;
    const fields = ['buckets', 'layout', 'protocol'];
    let stored;
    let versions;
    try {
      [stored, ...versions] = await this.redis.hmget(key, ...fields);
      refuseOtherVersions(key, versions, true); // before writing anything into another version's store
      if (stored === null || versions.includes(null)) { // first use
        if (stored === null) await this.redis.hsetnx(key, 'buckets', this.defaultBuckets);
        if (versions[0] === null) await this.redis.hsetnx(key, 'layout', VERSIONS.layout);
        await this.redis.hsetnx(key, 'protocol', VERSIONS.protocol);
        [stored, ...versions] = await this.redis.hmget(key, ...fields);
      }
    } catch (exc) {
      if (!/WRONGTYPE/.test(exc.message)) throw exc;
      throw new StoreError(`${key} in Redis is not a hash; it should hold the bucket count (buckets ${this.defaultBuckets}?)`);
    }
    refuseOtherVersions(key, versions, false);
    const count = /^\d{1,5}$/.test(stored) ? Number(stored) : 0;
    if (!(count > 0 && count <= MAX_BUCKETS)) {
      throw new StoreError(`${key} in Redis holds buckets = ${shown(stored)}, not a bucket count (1-${MAX_BUCKETS}); `
        + `set it right (HSET ${key} buckets N) before using this store`);
    }
    this.dialect = await choose(this.redis);
    this.leads = { add: this.dialect.lead('add'), delete: this.dialect.lead('delete') };
    this.buckets = count;
    return count;
  }

  tag(bucket) {
    return `${this.prefix}{${bucket}}:`;
  }

  /** Send packed script calls ([name, text, firstKey], see ./packed.js), each written as soon as it is taken from
   * `calls` (an iterable: Redis runs the first while the rest are packed), and resolve their replies in order
   * (an Error in place of a refused one); those refused because the server lacks their script (NOSCRIPT: Redis
   * lost its script cache; `Function not found`: FUNCTION FLUSH) are sent again once after its load (SCRIPT
   * LOAD; FUNCTION LOAD of the library). */
  async send(calls) {
    const made = [];
    const sent = [];
    for (const call of calls) {
      made.push(call);
      sent.push(this.sendPacked(call));
    }
    const replies = await Promise.all(sent);
    const lost = made.flatMap((call, n) => (replies[n] instanceof Error && this.dialect.missing(replies[n]) ? [n] : []));
    if (lost.length) {
      await this.dialect.load(this.redis, lost.map((n) => made[n][0]));
      const again = await Promise.all(lost.map((n) => this.sendPacked(made[n])));
      lost.forEach((n, i) => { replies[n] = again[i]; });
    }
    return replies;
  }

  /** One packed call, written to the connection now (no pipeline to wait for): its reply, or Redis's Error. */
  sendPacked([, text, firstKey]) {
    return this.redis.sendCommand(new this.PackedCall(text, firstKey)).catch((error) => error);
  }

  /** One script call's reply; rejects with Redis's error. */
  async run(name, keys, args) {
    const packed = scriptCall(this.leads[name], keys.map(bulk).join(''), keys.length, args.map(bulk).join(''), args.length);
    const [reply] = await this.send([[name, packed, keys[0]]]);
    if (reply instanceof Error) throw reply;
    return reply;
  }

  /** One add.lua call writing `entries` (built tasks) of one bucket, packed (docs/protocol.md section 3):
   * KEYS in the short form, the bucket's `delayed` then each task's record (the script names the bucket's other
   * keys from the tag); ARGV the flags (nx, and 'c': this
   * client checked every task, section 7), the wake channel, then each task's spec, priority, mode and value.
   * Its reply: how many it wrote. */
  addCall(bucket, entries, nx) {
    const tag = this.tag(bucket);
    let head = this.addHeads.get(bucket);
    if (head === undefined) {
      head = [bulk(`${tag}delayed`), bulk(`${this.prefix}wake:${bucket}`), `${tag}delayed`];
      this.addHeads.set(bucket, head);
    }
    let keys = head[0];
    let args = (nx ? '$2\r\n1c\r\n' : '$2\r\n0c\r\n') + head[1];
    for (const { task, mode, value } of entries) {
      keys += bulk(`${tag}t:${task.key}`);
      args += bulk(task.spec) + bulk(task.priority) + bulk(task.recurring ? mode + '*' : mode) + bulk(value);
    }
    const count = entries.length;
    return ['add', scriptCall(this.leads.add, keys, 1 + count, args, 2 + 4 * count), head[2]];
  }

  /**
   * Add (or replace) a task: an object of add()'s arguments (topic, id, call|url|push, delay|at, ...,
   * nx); camelCase names are read as the Python ones. Resolves true if written, false if `nx`
   * found the task; rejects with TaskError for invalid input (nothing written).
   */
  async add(task, { nx = false } = {}) {
    const built = build(task, this.options);
    refuseNx([built], nx || built.nx);
    const buckets = await this.store();
    const [reply] = await this.send([this.addCall(bucketOf(built.task.key, buckets), [built], Boolean(nx || built.nx))]);
    if (reply instanceof Error) throw refusal(reply);
    return reply === 1;
  }

  /**
   * Add many tasks (objects as add() takes), every one validated before anything is written;
   * ADD_BATCH tasks of one bucket per add.lua call, each call written as soon as it is packed, none waiting for
   * another's reply (one round trip for all). Resolves how many were written.
   */
  async addMany(tasks, { nx = false } = {}) {
    if (!Array.isArray(tasks)) throw new TaskError('addMany takes an array of tasks');
    const built = tasks.map((item, n) => {
      try {
        const entry = build(item, this.options);
        if (entry.nx !== undefined) throw new TaskError('unknown task field(s): nx'); // (addMany's own option)
        return entry;
      } catch (exc) {
        if (exc instanceof TaskError) throw new TaskError(`item ${n}: ${exc.message}`);
        throw exc;
      }
    });
    refuseNx(built, nx);
    const buckets = await this.store();
    const byBucket = new Map();
    for (const entry of built) {
      const bucket = bucketOf(entry.task.key, buckets);
      if (!byBucket.has(bucket)) byBucket.set(bucket, []);
      byBucket.get(bucket).push(entry);
    }
    return this.pipelined(this.addCalls(byBucket, nx), built.length);
  }

  /** The add.lua calls of `byBucket` (bucket -> built tasks), ADD_BATCH tasks each, packed one at a time as send()
   * takes them. */
  *addCalls(byBucket, nx) {
    for (const [bucket, list] of byBucket) {
      for (let i = 0; i < list.length; i += ADD_BATCH) yield this.addCall(bucket, list.slice(i, i + ADD_BATCH), nx);
    }
  }

  /** Send add.lua calls (send()); resolves how many tasks they wrote. If Redis refused a call (none
   * of its tasks written), rejects with the first refusal, saying how many of the others were written. */
  async pipelined(calls, total) {
    let written = 0;
    let refused = null;
    for (const reply of await this.send(calls)) {
      if (reply instanceof Error) refused ??= refusal(reply);
      else written += reply;
    }
    if (refused) {
      refused.message = `${refused.message} (${written} of ${total} task(s) were written)`;
      throw refused;
    }
    return written;
  }

  /**
   * Mark a task deleted (it never runs again); hard=true removes every trace. Resolves true: deleted in time, no
   * run of it starts after this resolved; false: there was no such task; CLAIMED ('claimed'): deleted, but too
   * late for a run already claimed, whose handler may be starting or running. 'claimed' is truthy: compare with
   * `=== true` to know it was cancelled in time.
   */
  async delete(topic, id, hard = false) {
    const member = `${topic}:${id}`;
    const tag = this.tag(bucketOf(member, await this.store()));
    const parked = member.slice(0, member.lastIndexOf(':')); // the topic as the scripts read it: up to the last ':'
    const keys = [`${tag}t:${member}`, ...['delayed', 'leases', 'done:ok', 'done:failed', 'done:deleted', 'quarantine',
      'counts', 'recurring', `paused:${parked}`, 'corrupt'].map((k) => tag + k)];
    const answer = await this.run('delete', keys, [member, hard ? 1 : 0, this.retentionMs]);
    return answer === 2 ? CLAIMED : answer === 1;
  }

  /** The task as `delayd get --json` prints it, or null; rejects with TaskError if its record is corrupt. */
  async get(topic, id) {
    const member = `${topic}:${id}`;
    const key = `${this.tag(bucketOf(member, await this.store()))}t:${member}`;
    let record;
    try {
      record = await this.redis.hgetall(key);
    } catch (exc) {
      if (!/WRONGTYPE/.test(exc.message)) throw exc;
      throw new TaskError(`${member}: corrupt record: its key is not a hash`);
    }
    if (!Object.keys(record).length) return null;
    try {
      return this.taskDict(member, record);
    } catch (exc) {
      if (exc instanceof TaskError || exc instanceof SyntaxError) {
        throw new TaskError(`${member}: corrupt record: ${exc.message}`);
      }
      throw exc;
    }
  }

  /** A record read back (Task.from_record, then to_dict: the fields the table shows, ./fields.js). */
  taskDict(member, record) {
    if (record.spec === undefined) throw new TaskError("record has no 'spec' field");
    const spec = JSON.parse(record.spec);
    if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw new TaskError('spec is not a JSON object');
    const split = member.lastIndexOf(':');
    const priority = Number(record.priority ?? 2);
    const t = newTask({ ...spec, topic: member.slice(0, split), id: member.slice(split + 1), priority }, Infinity, true);
    const status = record.status ?? 'delayed';
    if (!STATUSES.includes(status)) throw new TaskError(`unknown status '${status}'`);
    const seconds = (ms) => (ms === undefined || ms === '' ? null : Number(ms) / 1000);
    let retries = null;
    if (t.backoff) retries = !t.persistent ? 0 : t.retries ?? this.defaultRetries;
    return Object.assign(Object.fromEntries(Object.keys(SHOWN).map((name) => [name, t[name] ?? null])), {
      params: spec.params ?? {}, retries, status, created_at: seconds(record.created), due_at: seconds(record.due),
      last_run_at: seconds(record.last_run), last_due_at: seconds(record.last_due), runs: Number(record.runs ?? 0),
      last_error: record.error || null, attempts: attempts(record.attempts),
      traceparent: typeof spec.trace === 'string' ? spec.trace.slice(0, 55) : null,
    });
  }
}

/** add.lua's refusal of an invalid task (`ERR delayd:bad-task ...`: a check this client missed) as a
 * TaskError; any other error as it is. */
function refusal(error) {
  const message = String(error.message);
  return message.includes('delayd:bad-task') ? new TaskError(message.replace(/^ERR /, '')) : error;
}

/** The delivery log (delayd.model.attempts.decode): one JSON array per line; lines that do not parse are skipped. */
function attempts(text) {
  const out = [];
  for (const line of text ? text.split('\n') : []) {
    let values;
    try {
      values = JSON.parse(line);
    } catch {
      continue;
    }
    if (Array.isArray(values) && values.length === ATTEMPT_FIELDS.length) {
      const entry = Object.fromEntries(ATTEMPT_FIELDS.map((f, i) => [f, values[i]]));
      if (typeof entry.at === 'number') entry.at = Math.abs(entry.at) < 2 ** 53 ? entry.at / 1000 : null;
      out.push(entry);
    }
  }
  return out;
}
