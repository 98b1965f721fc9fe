// The tests' way into delayd-client (tests/node_helper.py): one JSON request per stdin line,
// `{"op": "add"|"addMany"|"delete"|"get", "args": [...]}`, answered by one JSON line on stdout,
// `{"ok": result}` or `{"error": {"name": ..., "message": ...}}`, in order. A number JSON's values cannot
// carry (NaN, Infinity, 1e400) comes as `{"$number": "<its JSON text>"}`: JavaScript's Number of it.
// Usage: node test/driver.mjs REDIS_URL PREFIX [CLIENT_OPTIONS_JSON] (REDIS_URL: redis:// or redis+cluster://)
import { createInterface } from 'node:readline';
import Redis from 'ioredis';
import { Client } from 'delayd-client';

const [url, prefix, options = '{}'] = process.argv.slice(2);
// A Redis Cluster's URL (tests/cluster_helper.py's redis+cluster://h:p,h:p/) makes an ioredis Cluster.
const seeds = url.startsWith('redis+cluster://') ? url.slice(16).replace(/\/$/, '').split(',') : null;
const redis = seeds
  ? new Redis.Cluster(seeds.map((seed) => ({ host: seed.split(':')[0], port: Number(seed.split(':')[1]) })),
    { redisOptions: { maxRetriesPerRequest: 1 } })
  : new Redis(url, { maxRetriesPerRequest: 1 });
const client = new Client(redis, { ...JSON.parse(options), prefix });

for await (const line of createInterface({ input: process.stdin })) {
  const { op, args } = JSON.parse(line, (key, value) => (
    value !== null && typeof value === 'object' && Object.keys(value).length === 1 && '$number' in value
      ? Number(value.$number) : value));
  let answer;
  try {
    answer = { ok: await client[op](...args) };
  } catch (exc) {
    answer = { error: { name: exc.name, message: exc.message } };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
redis.disconnect();
process.exit(0); // (not waiting for ioredis's timers)
