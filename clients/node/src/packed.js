// Script calls written as Redis's wire format (RESP) by this package, sent through ioredis as
// one prepared command: an add.lua call carries 6 arguments per task, and ioredis's own
// per-argument handling cost ~3 us each (an addMany of 50,000 tasks spent ~1 s in it), three
// times the cost of writing them here. The command's first key is given to ioredis, so that a
// Cluster client still routes it by its slot; ioredis's `keyPrefix` option is not applied to
// these calls (give the store's prefix to Client instead).
import { Command } from 'ioredis';

const ASCII = /^[\x00-\x7f]*$/;

/** One RESP bulk string. */
export function bulk(value) {
  const text = typeof value === 'string' ? value : String(value);
  return `$${ASCII.test(text) ? text.length : Buffer.byteLength(text)}\r\n${text}\r\n`;
}

/** A whole script call: `lead` its verb and name (EVALSHA and a SHA1, FCALL and a function: ./dialect.js), `keys`
 * and `args` already written with bulk(), `keyCount` and `argCount` of them. */
export function scriptCall(lead, keys, keyCount, args, argCount) {
  return `*${3 + keyCount + argCount}\r\n${lead}${bulk(keyCount)}${keys}${args}`;
}

const CLASSES = new WeakMap();

/** The `Command` class of the application's own ioredis (its copy and version may not be this
 * package's: ioredis 6 beside this package's 5): that of a command it queues in a pipeline that is
 * never sent. This package's own when that cannot be read. */
function commandOf(redis) {
  try {
    const pipeline = redis.pipeline();
    pipeline.ping();
    const made = pipeline._queue?.[0]?.constructor;
    if (typeof made === 'function' && typeof made.prototype.toWritable === 'function') return made;
  } catch {
    // (a client without pipelines: this package's Command)
  }
  return Command;
}

/** The class of ioredis commands for `redis` whose wire form is given (a scriptCall(): EVALSHA or FCALL, both
 * `VERB NAME numkeys keys...`; ioredis reads its first key, for a Cluster's routing, as an EVALSHA's). */
export function packedCallClass(redis) {
  const Base = commandOf(redis);
  if (!CLASSES.has(Base)) {
    CLASSES.set(Base, class PackedCall extends Base {
      constructor(text, firstKey) {
        super('evalsha', ['-', 1, firstKey], { replyEncoding: 'utf8' });
        this.text = text;
      }

      toWritable() {
        return this.text;
      }
    });
  }
  return CLASSES.get(Base);
}
