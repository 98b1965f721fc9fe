// How a script call is spelled on the server at hand, as delayd.store.dialect chooses for Python: FCALL of
// the script's function in delayd's library where the server has functions (Redis >= 7.0, Valkey), EVALSHA
// of its linked source elsewhere (Redis 6.2). Chosen once per Client, at its first use of the store.
import { library, script } from './lua.js';
import { bulk } from './packed.js';

/** The connections a load goes to: every master of an ioredis Cluster (a call may be routed to any of them), else
 * `redis` itself. */
const masters = (redis) => (typeof redis.nodes === 'function' ? redis.nodes('master') : [redis]);

/** EVALSHA; a missing script (NOSCRIPT: a restart, SCRIPT FLUSH) is given by SCRIPT LOAD (to every master). */
export const EVALSHA = {
  name: 'EVALSHA',
  /** The call's verb and name, packed (RESP). */
  lead: (name) => bulk('EVALSHA') + bulk(script(name).sha),
  missing: (error) => String(error?.message).startsWith('NOSCRIPT'),
  /** Give the server the scripts `names`. */
  async load(redis, names) {
    for (const name of new Set(names)) {
      await Promise.all(masters(redis).map((node) => node.script('LOAD', script(name).source)));
    }
  },
};

/** FCALL; a missing function (`Function not found`: FUNCTION FLUSH, a fresh server) loads the whole library,
 * on every master of a Cluster (REPLACE: clients that load it at the same time all succeed). */
export const FCALL = {
  name: 'FCALL',
  lead: (name) => bulk('FCALL') + bulk(library().functions[name]),
  missing: (error) => /^(ERR )?Function not found/.test(String(error?.message)),
  async load(redis) {
    await Promise.all(masters(redis).map((node) => node.call('FUNCTION', 'LOAD', 'REPLACE', library().code)));
  },
};

/** Redis's version (major, minor) from an INFO reply's redis_version (Valkey pins it at 7.2.4: it has functions). */
function version(info) {
  const found = /^redis_version:(\d+)\.(\d+)/m.exec(info);
  return found ? [Number(found[1]), Number(found[2])] : [0, 0];
}

/** The dialect of `redis`'s server (every master's, on a Cluster): FCALL where INFO names a version with
 * functions and an FCALL_RO of a function no library defines answers `Function not found` (a
 * Redis-compatible server or a proxy without functions, or an ACL refusing FCALL, answers otherwise);
 * EVALSHA otherwise, and when INFO is refused. */
export async function choose(redis) {
  const { since, probe } = library();
  try {
    const versions = (await Promise.all(masters(redis).map((node) => node.info('server')))).map(version);
    if (!versions.every(([major, minor]) => major > since[0] || (major === since[0] && minor >= since[1]))) {
      return EVALSHA;
    }
    await redis.call('FCALL_RO', probe, 0);
  } catch (error) {
    if (error?.name !== 'ReplyError') throw error;
    return FCALL.missing(error) ? FCALL : EVALSHA;
  }
  return EVALSHA; // (the probe was answered: not a server whose functions delayd can call)
}
