// delayd-client's throughput beside its ceiling, in one run (the Node rows of BENCHMARKS.md):
// single adds awaited one at a time vs the same ioredis connection's round trip for a trivial
// EVALSHA (`return 1`), in alternating rounds; then addMany in batches.
//
//   node bench/bench.mjs REDIS_URL [--rounds 5] [--n 3000] [--many 100000] [--json]
// --json: one JSON object of medians instead of the lines (./scripts/bench's part `node`).
// The store under the prefix `bench:` is flushed first (FLUSHDB): use a Redis of its own.
import Redis from 'ioredis';
import { Client } from 'delayd-client';

const [url, ...rest] = process.argv.slice(2);
const option = (name, fallback) => (rest.includes(name) ? Number(rest[rest.indexOf(name) + 1]) : fallback);
const rounds = option('--rounds', 5);
const n = option('--n', 3000);
const many = option('--many', 100000);
const redis = new Redis(url);
await redis.flushdb();
const client = new Client(redis, { prefix: 'bench:' });
const trivial = await redis.script('LOAD', 'return 1');
await client.add({ topic: 'warm', id: 0, push: 'q' });

async function rate(count, one) {
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) await one(i);
  return count / (Number(process.hrtime.bigint() - start) / 1e9);
}

// Redis's own time in script calls (EVALSHA on Redis 6.2, FCALL on Redis >= 7) since the last call (INFO
// commandstats), in us.
async function redisMicros() {
  const stats = await redis.info('commandstats');
  const usec = ['evalsha', 'fcall'].reduce((sum, name) =>
    sum + Number(stats.match(new RegExp(`cmdstat_${name}:calls=\\d+,usec=(\\d+)`))?.[1] ?? 0), 0);
  await redis.config('RESETSTAT');
  return usec;
}

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const rows = { evalsha: [], add: [], ratio: [], addMany: [], addRedis: [], manyRedis: [] };
for (let round = 0; round < rounds; round++) {
  const ceiling = await rate(n, () => redis.evalsha(trivial, 0));
  await redisMicros();
  const adds = await rate(n, (i) => client.add({ topic: 'single', id: `${round}-${i}`, call: 'shop.tasks:run', delay: 60 }));
  rows.addRedis.push((await redisMicros()) / n);
  rows.evalsha.push(ceiling);
  rows.add.push(adds);
  rows.ratio.push((100 * adds) / ceiling);
}
for (let round = 0; round < rounds; round++) {
  const tasks = Array.from({ length: many }, (_, i) => ({ topic: 'many', id: `${round}-${i}`, call: 'shop.tasks:run', delay: 60 }));
  await redisMicros();
  const start = process.hrtime.bigint();
  const written = await client.addMany(tasks);
  rows.addMany.push(written / (Number(process.hrtime.bigint() - start) / 1e9));
  rows.manyRedis.push((await redisMicros()) / many);
}
if (rest.includes('--json')) {
  console.log(JSON.stringify({ rt: median(rows.evalsha), add: median(rows.add), pct: median(rows.ratio),
    many: median(rows.addMany), add_us: median(rows.addRedis), many_us: median(rows.manyRedis) }));
  process.exit(0);
}
const show = (values, digits = 0) => `${median(values).toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`;
console.log(`node ${process.version}, Redis ${(await redis.info('server')).match(/redis_version:(\S+)/)[1]}, ${rounds} rounds`);
console.log(`trivial EVALSHA round trip, ioredis, awaited one at a time: ${show(rows.evalsha)} calls/s`);
console.log(`add, awaited one at a time: ${show(rows.add)} tasks/s`);
console.log(`add as % of that round trip (per round): ${show(rows.ratio, 1)} %`);
console.log(`Redis time in add.lua per single add: ${show(rows.addRedis, 1)} us`);
console.log(`addMany of ${many}: ${show(rows.addMany)} tasks/s`);
console.log(`Redis time in add.lua per task of addMany: ${show(rows.manyRedis, 1)} us`);
await redis.flushdb();
redis.disconnect();
