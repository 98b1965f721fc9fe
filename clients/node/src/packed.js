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

/** The whole EVALSHA command: `keys` and `args` already written with bulk(), `keyCount` and `argCount` of them. */
export function evalsha(sha, keys, keyCount, args, argCount) {
  return `*${3 + keyCount + argCount}\r\n$7\r\nEVALSHA\r\n$40\r\n${sha}\r\n${bulk(keyCount)}${keys}${args}`;
}

/** An ioredis command whose wire form is `text` (an EVALSHA of evalsha()). */
export class PackedCall extends Command {
  constructor(text, firstKey) {
    super('evalsha', ['-', 1, firstKey], { replyEncoding: 'utf8' });
    this.text = text;
  }

  toWritable() {
    return this.text;
  }
}
